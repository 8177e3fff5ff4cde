"""Issue 6 follow-up 11: the m16 fragment GEMM (current) against its SASS-walk variant
(mx_matmul_frag.hip: `_fs` capped at 168 registers, `_fsr` uncapped) and cuBLAS bf16 (torch), all under CUDA-graph replay with PDL on (bench.py's
graph_time: 200 back-to-back launches a replay, median of the replays, us per call), weights
rotating over >= 400 MB of copies (bench_frag_pdl.py's set-up), each at its host (W, S)
(frag_choice). The kernels alternate for REPS rounds; the table gives per-round medians
and the variant / current and cuBLAS / kernel ratios. M = 8 runs the m16 kernels on half a tile
(the runtime launches mx_matmul_frag_m8 there; shown as `m8`). Writes $OUT/ab_fragsass.json.
Usage: python3 ab_fragsass.py [REPS] (default 3)"""
import json, os, statistics, sys
import torch
from bench import graph_time
from bench_frag_pdl import rotation, weight_copies
from mxgpu import Module, Ops, frag_choice

OUT = os.environ.get("OUT", ".")
dev = "cuda"


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    mod = Module(); ops = Ops(mod)
    mod.pdl = True
    rows = []
    for N, K in ((1536, 6144), (6144, 768), (6144, 6144)):
        copies, _, _, P, Wb = weight_copies(N, K)
        nxt = rotation()
        for M in (12, 16, 8):
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            W, S = frag_choice(N, K, M)
            if M <= 8:  # the variant's W, S: the m16 choice of this shape
                W, S = frag_choice(N, K, 16)
            fns = {
                "current": lambda: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, y=y, pre=1),
                "fs": lambda: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, W=W, S=S, y=y, sfx="_fs"),
                "fsr": lambda: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, W=W, S=S, y=y, sfx="_fsr"),
                "cublas": lambda: A @ Wb[nxt(len(Wb))].t(),
            }
            if M > 8:  # the current m16 kernel at the variant's (W, S)
                fns["current"] = lambda: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, W=W, S=S, y=y)
            t = {k: [] for k in fns}
            for _ in range(reps):
                for k, fn in fns.items():
                    t[k].append(graph_time(fn))
            med = {k: statistics.median(v) for k, v in t.items()}
            row = dict(N=N, K=K, M=M, W=W, S=S, med=med, all=t)
            rows.append(row)
            cur = "current(m8)" if M <= 8 else "current"
            print(f"{N}x{K} M={M:2d} w{W}s{S}: {cur} {med['current']:6.2f} fs {med['fs']:6.2f} fsr {med['fsr']:6.2f} "
                  f"cublas {med['cublas']:6.2f} us | /current fs {med['fs'] / med['current']:5.3f} fsr "
                  f"{med['fsr'] / med['current']:5.3f} | x cublas current {med['cublas'] / med['current']:4.2f} "
                  f"fs {med['cublas'] / med['fs']:4.2f} fsr {med['cublas'] / med['fsr']:4.2f}", flush=True)
        del P, Wb
    json.dump(rows, open(os.path.join(OUT, "ab_fragsass.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
