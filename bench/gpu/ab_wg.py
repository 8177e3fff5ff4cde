"""Issue 6 follow-up 33: the decode GEMM on the fp8 tensor core with the packed weights as
wgmma's register operand (frag_wg.hip, appended to the GEMM module's text here, compiled for
sm_90a) against the runtime's kernel and cuBLAS bf16. Check: each kernel's output against the
runtime kernel's (max |diff| / max |ref|, and the relative difference). Time: PDL, CUDA-graph
replay of 200 launches, weights rotating over >= 400 MB, median of REPS, alternating.
Usage: python3 ab_wg.py [REPS]   (AB_CASES "NxK:M,M;..."); on the device:
AB=ab_wg OUT=$OUT bash bench/gpu/device_ab.sh"""
import faulthandler, json, os, sys
import torch
import mxgpu
from program import gemm_text_with

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("MXFUSE_BENCH_ARCH", "90a")  # wgmma is sm_90a PTX (mxgpu.Module compiles for it)
faulthandler.dump_traceback_later(int(os.environ.get("AB_WATCHDOG", "400")), exit=False)
mxgpu.program_text = lambda: gemm_text_with(os.path.join(HERE, "frag_wg.hip"))
from mxgpu import frag_kernel  # noqa: E402
from bench_frag_pdl import ab_cases, ab_line, ab_module, launch_frag, time_alternating  # noqa: E402

OUT = os.environ.get("OUT", ".")
# (S, k-blocks a block's range, U): kernels mx_matmul_wg_n<NB>_s<S>_kb<KBR>_u<U>, K = 32 S KBR.
SPLITS = [(1, 24, 2), (2, 12, 2), (3, 8, 2), (6, 4, 1), (3, 64, 2), (4, 48, 2), (6, 32, 2), (8, 24, 2)]


def launch(mod, S, KBR, U, wf, wsf, N, K, M, aq, as_, y):
    nb = 1 if M <= 8 else 2
    return launch_frag(mod, f"mx_matmul_wg_n{nb}_s{S}_kb{KBR}_u{U}", (S, -(-N // 64)), 4, wf, wsf, N, K, M, aq, as_, y)


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    mod, ops = ab_module()
    for S, KBR, U in SPLITS:
        for nb in (1, 2):
            name = f"mx_matmul_wg_n{nb}_s{S}_kb{KBR}_u{U}"
            print(name, "registers / smem / local", mod.attrs(name), flush=True)
    rows = []
    cases = os.environ.get("AB_CASES", "6144x768:1,8,12,16;6144x6144:1,8,16;1536x6144:1,16;1000x768:1,16")
    for c in ab_cases(ops, frag_kernel, cases):
        N, K, M, P, fns = c.N, c.K, c.M, c.P, c.fns
        diffs = {}
        for S, KBR, U in SPLITS:
            if K != 32 * S * KBR:
                continue
            nm = f"wg_s{S}"
            got = launch(mod, S, KBR, U, *P[0], N, K, M, c.aq, c.as_, torch.empty_like(c.y)).float()
            torch.cuda.synchronize()
            diffs[nm] = ((got - c.ref).abs().max() / c.ref.abs().max()).item()
            fns[nm] = (lambda S=S, KBR=KBR, U=U: launch(mod, S, KBR, U, *P[c.next()], N, K, M, c.aq, c.as_, c.y))
        times, med = time_alternating(fns, reps)
        rows.append(dict(N=N, K=K, M=M, rt=list(c.rt), med=med, times=times, diffs=diffs))
        print(ab_line(c, med, diffs, "max|d|/max|ref|", rate=True), flush=True)
    json.dump(dict(rows=rows), open(os.path.join(OUT, "ab_wg.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
