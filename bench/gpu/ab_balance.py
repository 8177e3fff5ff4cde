"""Issue 6 follow-up 34: is 6144^2 at 74 % of HBM the grid's imbalance? The runtime's `_t2` w4 s1
grid at 6144^2 is 192 blocks (tile pairs) on 132 SMs: 60 SMs hold two blocks, 72 one, so the
doubly loaded SMs carry 192 / 139.6 = 1.38x the mean work. Here `_t2` (w4 s1, or the grids of
AB_T2) and the m8 kernel w4 s1 (one tile a block, 2.9 blocks an SM; AB_M8=0 leaves it out) at
K = 6144 on N = 132 k tile pairs (every SM the same share) and in between, rate = (weights +
scales) / time, beside cuBLAS bf16. Time: PDL, CUDA-graph replay of 200 launches, weights rotating
over >= 400 MB, median of REPS, alternating.
Usage: python3 ab_balance.py [REPS]   (AB_NS "N,N,...", AB_K, AB_MS "1,8", AB_T2 "WxS,...", AB_M8);
on the device: AB=ab_balance OUT=$OUT bash bench/gpu/device_ab.sh (session 30 call 2 with the
defaults; call 3's other `_t2` grids at 6144^2: AB_NS=6144 AB_MS=1 AB_T2=4x1,2x2,4x2,2x1,8x1 AB_M8=0)"""
import json, os, sys
import torch
from bench_frag_pdl import ab_module, medians_text, rotation, time_alternating, weight_copies

OUT = os.environ.get("OUT", ".")
dev = "cuda"


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    mod, ops = ab_module()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    K = int(os.environ.get("AB_K", "6144"))
    grids = [tuple(int(v) for v in g.split("x")) for g in os.environ.get("AB_T2", "4x1").split(",")]
    m8 = os.environ.get("AB_M8", "1") != "0"
    rows = []
    for N in (int(n) for n in os.environ.get("AB_NS", "2112,4224,5280,6144,8448,12672").split(",")):
        copies, _, _, P, Wb = weight_copies(N, K)
        nxt = rotation()
        for M in (int(m) for m in os.environ.get("AB_MS", "1,8").split(",")):
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            fns = {f"t2w{W}s{S}": (lambda W=W, S=S: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, W=W, S=S, sfx="_t2", y=y))
                   for W, S in grids}
            if m8:
                fns["m8w4"] = lambda: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, W=4, S=1, rows=8, y=y)
            fns["cublas"] = lambda: A @ Wb[nxt(len(Wb))].t()
            _, med = time_alternating(fns, reps)
            rows.append(dict(N=N, K=K, M=M, med=med))
            pairs = -(-N // 32)
            print(f"{N:5d}x{K} M={M}: {pairs} pairs ({pairs / sms:.2f} an SM) " + medians_text(med, N, K), flush=True)
        P = Wb = None
    json.dump(dict(rows=rows), open(os.path.join(OUT, "ab_balance.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
