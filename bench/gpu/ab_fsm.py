"""Issue 6 follow-up 16: the cluster-staged m16 GEMM (mx_matmul_frag.hip `_fsm<C>`: the block's
activation rows staged once by bulk copies multicast to C neighbouring tiles) against `_fs` (the
runtime's kernel at 9-16 rows), the runtime's choice ("rt") and cuBLAS bf16, under CUDA-graph
replay with PDL (bench.py's graph_time: 200 back-to-back launches, median of the replays, us per
call), weights rotating over >= 400 MB (bench_frag_pdl.py's set-up), at the K <= 1024 decode shape
6144 x 768 (+ 3072 x 768). Kernels are interleaved over REPS rounds; every output is compared bit
for bit with `_fs`'s. Writes $OUT/ab_fsm.json. Usage: python3 ab_fsm.py [REPS] (default 3)"""
import json, os, statistics, sys
import torch
from bench import graph_time
from bench_frag_pdl import rotation, weight_copies
from mxgpu import Module, Ops

OUT = os.environ.get("OUT", ".")
dev = "cuda"
MS = [int(m) for m in os.environ.get("AB_MS", "1,4,8,12,14,16").split(",")]
SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ.get("AB_SHAPES", "6144x768,3072x768").split(",")]


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    mod = Module(); ops = Ops(mod)
    x = torch.empty(1024**3, dtype=torch.bfloat16, device=dev).normal_()
    read_bw = x.numel() * 2 / (graph_time(lambda: x.sum(), iters=5) * 1e-6)
    del x
    print(f"read-only HBM {read_bw / 1e12:.2f} TB/s", flush=True)
    mod.pdl = True
    rows = []
    for N, K in SHAPES:
        copies, _, _, P, Wb = weight_copies(N, K)
        wbytes = N * K * (1 + 1 / 32)
        nxt = rotation()
        for M in MS:
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            var = {}  # name -> (W, sfx, pre)
            for W in (2, 4):
                var[f"fs w{W}"] = (W, "_fs", 1)
                for C in (1, 2, 4, 8):
                    var[f"fsm{C} w{W}"] = (W, f"_fsm{C}", 1)
            var["fsm4 w4 +pf"] = (4, "_fsm4", 3)

            def frag(W, sfx, pre, y=y, j=None):
                P_ = P[nxt(copies) if j is None else j]
                return ops.matmul_frag(*P_, N, K, M, aq, as_, W=W, S=1, y=y, pre=pre, sfx=sfx)
            fns = {k: (lambda v=v: frag(*v)) for k, v in var.items()}
            fns["rt"] = lambda: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, y=y)
            fns["cublas"] = lambda: A @ Wb[nxt(len(Wb))].t()
            ref = frag(4, "_fs", 1, y=torch.empty_like(y), j=0)
            same = {k: bool(torch.equal(ref, frag(*v, y=torch.empty_like(y), j=0))) for k, v in var.items()}
            torch.cuda.synchronize()
            t = {k: [] for k in fns}
            for _ in range(reps):
                for k, fn in fns.items():
                    try:
                        t[k].append(graph_time(fn))
                    except Exception as e:  # a kernel the device refuses: note and go on
                        t[k].append(float("nan")); print(f"  {k}: {e}", flush=True)
            med = {k: statistics.median(v) for k, v in t.items()}
            hbm = {k: wbytes / (v * 1e-6) / read_bw for k, v in med.items() if k != "cublas"}
            best = min((k for k in med if k != "cublas"), key=lambda k: med[k])
            rows.append(dict(N=N, K=K, M=M, same=same, med=med, hbm=hbm, all=t))
            print(f"{N}x{K} M={M:2d}: rt {med['rt']:6.2f} cublas {med['cublas']:6.2f} ({med['cublas'] / med['rt']:4.2f}x) "
                  f"| best {best} {med[best]:6.2f} ({med['cublas'] / med[best]:4.2f}x, {100 * hbm[best]:4.1f} %) "
                  f"| not bit-identical: {[k for k, v in same.items() if not v]}", flush=True)
            print("   " + " | ".join(f"{k} {v:.2f}" for k, v in sorted(med.items(), key=lambda kv: kv[1])), flush=True)
        del P, Wb
    json.dump(dict(read_bw=read_bw, rows=rows), open(os.path.join(OUT, "ab_fsm.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
