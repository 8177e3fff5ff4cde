"""Issue 6 follow-up 21: at 9-16 rows, which fragment GEMM shape wins on shapes without a measured
row? Times, per (N, K, M), the runtime's choice (mxgpu.frag_kernel: `_fs` / `_fsa`), every
(W, S) of the 16-row `_fs` loop, and the two-tile m8 loop `_t2` over two 8-row tiles (grid x =
2 S; every (W, S)), against cuBLAS bf16; PDL, CUDA-graph replay of 200 launches, weights rotating
over >= 400 MB (ab_t2.py's method). Bits: `_t2` on two row tiles must equal the m8 kernel on two
row tiles at the same (W, S) (both launched by hand: the harness's matmul_frag takes 16 rows above
8). AB_SHAPES ("NxK,...") / AB_MS override the lists.
Usage: python3 ab_rows16.py [REPS]"""
import ctypes, json, os, statistics, sys
import torch
from bench import graph_time
from bench_frag_pdl import rotation, weight_copies
from mxgpu import FRAG_SS, FRAG_WS, Module, Ops, epilogue, frag_kernel

OUT = os.environ.get("OUT", ".")
dev = "cuda"
MS = [int(m) for m in os.environ.get("AB_MS", "12,16").split(",")]
SHAPES = os.environ.get("AB_SHAPES", "6144x768,6144x6144,1536x6144,4096x4096,8192x2048,2048x6144,"
                                     "4096x1152,12288x768,3072x768")


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    mod = Module(); ops = Ops(mod)
    mod.pdl = True
    rows = []
    for N, K in (tuple(int(v) for v in sh.split("x")) for sh in SHAPES.split(",")):
        copies, _, _, P, Wb = weight_copies(N, K)
        nxt = rotation()
        tiles, groups = -(-N // 16), K // 128
        for M in MS:
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)

            def m8(sfx, w, s, j=None, y=y):
                wf, wsf = P[nxt(copies) if j is None else j]
                grid = (-(-M // 8) * s, -(-tiles // (2 if sfx == "_t2" else 1)))
                mod.launch(f"mx_matmul_frag_m8_bf16_w{w}_s{s}{sfx}", grid, (32 * w,),
                           [aq, as_, wf, wsf, y, ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K),
                            ctypes.c_int(1), epilogue()])
                return y
            fns = {"rt": lambda: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, y=y),
                   "cublas": lambda: A @ Wb[nxt(len(Wb))].t()}
            bad = []
            for w in FRAG_WS:
                for s in FRAG_SS:
                    if groups < w * s:  # idle warps
                        continue
                    if tiles * 2 * s <= 132 * 8:
                        fns[f"fs w{w}s{s}"] = lambda w=w, s=s: ops.matmul_frag(
                            *P[nxt(copies)], N, K, M, aq, as_, W=w, S=s, y=y, pre=1, sfx="_fs")
                    if -(-tiles // 2) * 2 * s <= 132 * 8:
                        got = m8("_t2", w, s, j=0, y=torch.empty_like(y)).clone()
                        ref = m8("", w, s, j=0, y=torch.empty_like(y))
                        torch.cuda.synchronize()
                        if not torch.equal(got, ref):
                            bad.append(f"t2 w{w}s{s}")
                        fns[f"t2x2 w{w}s{s}"] = lambda w=w, s=s: m8("_t2", w, s)
            t = {k: [] for k in fns}
            for _ in range(reps):
                for k, fn in fns.items():
                    t[k].append(graph_time(fn))
            med = {k: statistics.median(v) for k, v in t.items()}
            best_fs = min((k for k in med if k.startswith("fs")), key=lambda k: med[k], default="rt")
            best_t2 = min((k for k in med if k.startswith("t2")), key=lambda k: med[k], default="rt")
            rt = frag_kernel(N, K, M)
            rows.append(dict(N=N, K=K, M=M, med=med, rt=rt, bad=bad))
            print(f"{N:5d}x{K:<5d} M={M}: rt {rt[3]} w{rt[1]}s{rt[2]} {med['rt']:6.2f} ({med['cublas'] / med['rt']:.2f}x) | "
                  f"best {best_fs} {med[best_fs]:6.2f} ({med['cublas'] / med[best_fs]:.2f}x) | "
                  f"best {best_t2} {med[best_t2]:6.2f} ({med['cublas'] / med[best_t2]:.2f}x) | cublas {med['cublas']:6.2f} | "
                  f"t2 bits differ: {bad}", flush=True)
            print("   " + " ".join(f"{k} {v:.2f}" for k, v in sorted(med.items(), key=lambda kv: kv[1])), flush=True)
        del P, Wb
    json.dump(dict(rows=rows), open(os.path.join(OUT, "ab_rows16.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
