"""Issue 6 follow-up 29: the `_t2` decode GEMM loop on grids the runtime's rule never forms
(frag_grid.hip, appended to the GEMM module's text here): W x S a tile pair with W S = 3, 6, 24,
every warp resident at once. Check: each grid's output against the runtime kernel's (bf16
outputs of different summation orders: max relative difference printed, must stay within a few
bf16 ulps). Time: the runtime's choice beside each grid and cuBLAS bf16; PDL, CUDA-graph replay
of 200 launches, weights rotating over >= 400 MB, median of REPS, alternating.
Usage: python3 ab_grid.py [REPS]   (AB_CASES "NxK:M,M;...")"""
import faulthandler, json, os, sys
import torch
import mxgpu
from program import gemm_text_with

HERE = os.path.dirname(os.path.abspath(__file__))
faulthandler.dump_traceback_later(int(os.environ.get("AB_WATCHDOG", "300")), exit=False)
GRIDS = {6144 * 6144: [(3, 2), (2, 3), (1, 6), (4, 6), (6, 4)],
         6144 * 768: [(3, 1), (1, 3), (3, 2), (2, 3), (1, 6)],
         1536 * 6144: [(3, 8), (6, 4), (4, 6)]}


def grid_text():
    return gemm_text_with(os.path.join(HERE, "frag_grid.hip"))


mxgpu.program_text = grid_text  # compile_program (and its cubin cache key) sees this text
from mxgpu import frag_kernel  # noqa: E402
from bench_frag_pdl import ab_cases, ab_line, ab_module, launch_frag, time_alternating  # noqa: E402

OUT = os.environ.get("OUT", ".")
dev = "cuda"


def launch(mod, W, S, wf, wsf, N, K, M, aq, as_, y, pre=1):
    return launch_frag(mod, f"mx_matmul_frag_m8_bf16_w{W}_s{S}_t2", (-(-M // 8) * S, -(-N // 32)),
                       W, wf, wsf, N, K, M, aq, as_, y, pre)


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    mod, ops = ab_module()
    rows = []
    cases = os.environ.get("AB_CASES", "6144x6144:1,4,8;6144x768:1,4,8;1536x6144:1,8")
    for c in ab_cases(ops, frag_kernel, cases):
        N, K, M, P, rt, fns = c.N, c.K, c.M, c.P, c.rt, c.fns
        diffs = {}
        for W, S in GRIDS.get(N * K, []):
            if K // 128 < W * S:
                continue
            got = launch(mod, W, S, *P[0], N, K, M, c.aq, c.as_, torch.empty_like(c.y)).float()
            torch.cuda.synchronize()
            diffs[f"w{W}s{S}"] = ((got - c.ref).abs() / c.ref.abs().clamp_min(1e-3)).max().item()
            fns[f"w{W}s{S}"] = (lambda W=W, S=S: launch(mod, W, S, *P[c.next()], N, K, M, c.aq, c.as_, c.y))
        _, med = time_alternating(fns, reps)
        rows.append(dict(N=N, K=K, M=M, rt=list(rt), med=med, diffs=diffs))
        print(ab_line(c, med, diffs, rate=True), flush=True)
    json.dump(dict(rows=rows), open(os.path.join(OUT, "ab_grid.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
