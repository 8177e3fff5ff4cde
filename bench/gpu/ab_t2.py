"""Issue 6 follow-up 20: the runtime's decode GEMM with the two-tile `_t2` loop at M <= 8 (bf16
out; mxgpu.frag_kernel, as kernels/src/gpu/shapes.rs) against the choice without it
(MXFUSE_GPU_FRAG_T2=0: the m8 kernel, `_fs` where SMs idle) and cuBLAS bf16, PDL, CUDA-graph
replay of 200 launches, weights rotating over >= 400 MB (ab_l2pf.py's method), the MiniMax-M3 TP4
shapes and others the rule sizes without a measured row. Bits: `_t2` must equal the m8 kernel
at its own (W, S). AB_SHAPES ("NxK,...") / AB_MS ("1,2,..") override the lists.
Usage: python3 ab_t2.py [REPS]"""
import json, os, statistics, sys
import torch
from bench import graph_time, read_bandwidth
from bench_frag_pdl import rotation, weight_copies
from mxgpu import Module, Ops, frag_kernel

OUT = os.environ.get("OUT", ".")
dev = "cuda"
MS = [int(m) for m in os.environ.get("AB_MS", "1,4,8").split(",")]
SHAPES = os.environ.get("AB_SHAPES", "6144x768,6144x6144,1536x6144,4096x1152,4096x640,3072x768,"
                                     "12288x768,2048x6144,4096x4096,768x6144,1024x3072,8192x2048")


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    mod = Module(); ops = Ops(mod)
    read_bw = read_bandwidth(dev)
    mod.pdl = True
    rows = []
    for N, K in (tuple(int(v) for v in sh.split("x")) for sh in SHAPES.split(",")):
        copies, _, _, P, Wb = weight_copies(N, K)
        nxt = rotation()
        for M in MS:
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            new = frag_kernel(N, K, M)
            old = frag_kernel(N, K, M, t2=False)

            def launch(kern, j=None, y=y):
                rows_, W, S, sfx, pf = kern
                return ops.matmul_frag(*P[nxt(copies) if j is None else j], N, K, M, aq, as_, W=W, S=S, y=y,
                                       pre=3 if pf else 1, sfx=sfx)
            got = launch(new, j=0, y=torch.empty_like(y))
            ref = ops.matmul_frag(*P[0], N, K, M, aq, as_, W=new[1], S=new[2], y=torch.empty_like(y))
            torch.cuda.synchronize()
            same = bool(torch.equal(got, ref))
            fns = {"new": lambda: launch(new), "old": lambda: launch(old),
                   "cublas": lambda: A @ Wb[nxt(len(Wb))].t()}
            t = {k: [] for k in fns}
            for _ in range(reps):
                for k, fn in fns.items():
                    t[k].append(graph_time(fn))
            med = {k: statistics.median(v) for k, v in t.items()}
            rows.append(dict(N=N, K=K, M=M, med=med, new=new, old=old, same=same))
            print(f"{N:5d}x{K:<5d} M={M}: new {new[3] or 'm8'} w{new[1]}s{new[2]} {med['new']:6.2f} | "
                  f"old {old[3] or 'm8'} w{old[1]}s{old[2]} {med['old']:6.2f} | new/old {med['new'] / med['old']:.3f} | "
                  f"cublas {med['cublas']:6.2f} ({med['cublas'] / med['new']:.2f}x new, {med['cublas'] / med['old']:.2f}x old) | "
                  f"bits == m8: {same}", flush=True)
        del P, Wb
    ratios = [r["med"]["new"] / r["med"]["old"] for r in rows]
    print(f"new/old: median {statistics.median(ratios):.3f}, worst {max(ratios):.3f}, best {min(ratios):.3f}")
    json.dump(dict(read_bw=read_bw, rows=rows), open(os.path.join(OUT, "ab_t2.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
