"""Issue 6 follow-up 34: is 6144^2 at 74 % of HBM the grid's imbalance? The runtime's `_t2` w4 s1
grid at 6144^2 is 192 blocks (tile pairs) on 132 SMs: 60 SMs hold two blocks, 72 one, so the
doubly loaded SMs carry 192 / 139.6 = 1.38x the mean work. Here the same kernel (`_t2` w4 s1, and
the m8 kernel w4 s1: one tile a block, 2.9 blocks an SM) at K = 6144 on N = 132 k tile pairs
(every SM the same share) and in between, M = 1 / 8, rate = (weights + scales) / time. Time: PDL,
CUDA-graph replay of 200 launches, weights rotating over >= 400 MB, median of REPS, alternating.
Usage: python3 ab_balance.py [REPS]   (AB_NS "N,N,...", AB_K); on the device:
AB=ab_balance OUT=$OUT bash bench/gpu/device_ab.sh"""
import json, os, sys
import torch
from bench_frag_pdl import ab_module, rotation, time_alternating, weight_copies

OUT = os.environ.get("OUT", ".")
dev = "cuda"


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    mod, ops = ab_module()
    K = int(os.environ.get("AB_K", "6144"))
    rows = []
    for N in (int(n) for n in os.environ.get("AB_NS", "2112,4224,5280,6144,8448,12672").split(",")):
        copies, _, _, P, Wb = weight_copies(N, K)
        nxt = rotation()
        gb = (N * K + N * K // 32) / 1e9
        for M in (1, 8):
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            fns = {"t2w4": lambda: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, W=4, S=1, sfx="_t2", y=y),
                   "m8w4": lambda: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, W=4, S=1, rows=8, y=y),
                   "cublas": lambda: A @ Wb[nxt(len(Wb))].t()}
            _, med = time_alternating(fns, reps)
            rows.append(dict(N=N, K=K, M=M, med=med))
            pairs = -(-N // 32)
            print(f"{N:5d}x{K} M={M}: {pairs} pairs ({pairs / 132:.2f} an SM) " + " | ".join(
                f"{k} {v:6.2f}" + (f" ({gb / (v * 1e-6) / 1e3:.2f} TB/s)" if k != "cublas" else "")
                for k, v in med.items()), flush=True)
        P = Wb = None
    json.dump(dict(rows=rows), open(os.path.join(OUT, "ab_balance.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
