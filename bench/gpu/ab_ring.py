"""Issue 6 follow-up 22: the bench-only ring kernels (mx_matmul_frag_ring.hip: weights through a
per-warp cp.async shared-memory ring of D groups, Ops.matmul_ring) against the runtime's decode
GEMM (mxgpu.frag_kernel) and cuBLAS bf16; PDL, CUDA-graph replay of 200 launches, weights rotating
over >= 400 MB (ab_t2.py's method), the kinds timed alternately, median of REPS.

Variants at each (N, K, M), at their plausible shapes: the two-tile loop `t2c` (bits of `_t2`;
at 9-16 rows on two 8-row tiles) and, at M = 9-16, the 16-row loop `fsc` (bits of `_fs`); W, S:
the rule's (`_t2`) / the runtime's (`_fs`) for that loop and the other (W, S) with the same
number of K splits W S; every D compiled for that W
(mxgpu.RING_KERNELS), with the 128-register cap and without ("r"); pre = 3 (L2 prefetch) for
`fsc` where the runtime prefetches (grids that leave SMs idle), else 1. Each variant's bits are
checked against `_fs` / `_t2` at its (W, S) before it is timed. AB_SHAPES ("NxK:M.M,...") and
AB_BUDGET (seconds, default 100: shapes not started by then are skipped) override.
Usage: python3 ab_ring.py [REPS]"""
import json, os, statistics, sys, time
import torch
from bench import graph_time, read_bandwidth
from bench_frag_pdl import rotation, weight_copies
from mxgpu import (FRAG_SS, RING_KERNELS, T2_RESIDENT_WARPS, Module, Ops, frag_choice, frag_kernel)

OUT = os.environ.get("OUT", ".")
dev = "cuda"
SHAPES = os.environ.get("AB_SHAPES", "6144x768:1.8.12.16,6144x6144:1.8.12.16,1536x6144:1.8.12.16,4096x4096:8")
BUDGET = float(os.environ.get("AB_BUDGET", "100"))


def variants(N, K, M):
    """[(loop, W, S, D, capped, pre)] of the ring kernels to time at (N, K, M)."""
    tiles = -(-N // 16)
    # The two-tile loop: the rule's (W, S) for its blocks (half the tiles, 8-row tiles; the ring
    # kernels' 16 warps an SM at 9-16 rows, where `_t2`'s 10 left two waves on the MiniMax shapes).
    pairs = -(-tiles // 2) * -(-M // 8)
    shapes = [("t2c", 1) + frag_choice(N, K, M, measured=False, tiles=pairs,
                                       resident=T2_RESIDENT_WARPS if M <= 8 else 16)]
    if M > 8:  # the 16-row loop: the runtime's `_fs` shape, its L2 prefetch where SMs idle
        shapes.append(("fsc", 3 if frag_kernel(N, K, M)[4] else 1) + frag_choice(N, K, max(M, 9)))
    out = []
    for loop, pre, W0, S0 in shapes:
        for lp, w, d in RING_KERNELS:
            for s in FRAG_SS if lp == loop else ():
                if w * s == W0 * S0 or (w, s) == (W0, S0):
                    out += [(loop, w, s, d, cap, pre) for cap in (True, False)]
    return out


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    t_start = time.time()
    mod = Module(); ops = Ops(mod)
    read_bw = read_bandwidth(dev)
    mod.pdl = True
    rows = []
    for spec in SHAPES.split(","):
        if time.time() - t_start > BUDGET:
            print(f"{spec}: skipped (AB_BUDGET {BUDGET:.0f} s spent)", flush=True)
            continue
        (N, K), ms = (int(v) for v in spec.split(":")[0].split("x")), [int(m) for m in spec.split(":")[1].split(".")]
        copies, _, _, P, Wb = weight_copies(N, K)
        nxt = rotation()
        wbytes = N * K * (1 + 1 / 32)
        for M in ms:
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            rt = frag_kernel(N, K, M)
            fns = {"rt": lambda: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, y=y),
                   "cublas": lambda: A @ Wb[nxt(len(Wb))].t()}
            bad = []
            for loop, w, s, d, cap, pre in variants(N, K, M):
                sfx = f"{loop}{'' if cap else 'r'}{d}"
                ref_sfx = "_fs" if loop == "fsc" else "_t2"
                got = ops.matmul_ring(*P[0], N, K, M, aq, as_, w, s, sfx, y=torch.empty_like(y), pre=pre)
                ref = ops.matmul_frag(*P[0], N, K, M, aq, as_, W=w, S=s, sfx=ref_sfx, y=torch.empty_like(y))
                torch.cuda.synchronize()
                if not torch.equal(got, ref):
                    bad.append(f"{sfx} w{w}s{s}")
                fns[f"{sfx} w{w}s{s}" + (" pf" if pre & 2 else "")] = (
                    lambda w=w, s=s, sfx=sfx, pre=pre: ops.matmul_ring(*P[nxt(copies)], N, K, M, aq, as_, w, s, sfx, y=y, pre=pre))
            t = {k: [] for k in fns}
            for _ in range(reps):
                for k, fn in fns.items():
                    t[k].append(graph_time(fn))
            med = {k: statistics.median(v) for k, v in t.items()}
            ring = {k: v for k, v in med.items() if k not in ("rt", "cublas")}
            best = min(ring, key=ring.get) if ring else "rt"
            rows.append(dict(N=N, K=K, M=M, med=med, rt=rt, bad=bad))
            print(f"{N:5d}x{K:<5d} M={M:2d}: rt {rt[3] or 'm' + str(rt[0])} w{rt[1]}s{rt[2]}{' pf' if rt[4] else ''} "
                  f"{med['rt']:6.2f} ({med['cublas'] / med['rt']:.2f}x, {wbytes / (med['rt'] * 1e-6) / read_bw:.0%} HBM) | "
                  f"best ring {best} {med[best]:6.2f} ({med['cublas'] / med[best]:.2f}x, "
                  f"{wbytes / (med[best] * 1e-6) / read_bw:.0%} HBM, ring/rt {med[best] / med['rt']:.3f}) | "
                  f"cublas {med['cublas']:6.2f} | bits differ: {bad}", flush=True)
            print("   " + " | ".join(f"{k} {v:.2f}" for k, v in sorted(med.items(), key=lambda kv: kv[1])), flush=True)
        del P, Wb
    names = sorted({f"mx_matmul_ring_m{16 if lp == 'fsc' else 8}_bf16_w{w}_s1_{lp}{c}{d}"
                    for lp, w, d in RING_KERNELS for c in ("", "r")})
    for k in names:
        print(f"  {k}: regs/shared/local = {mod.attrs(k)}")
    print(f"ab_ring: {time.time() - t_start:.0f} s")
    json.dump(dict(read_bw=read_bw, rows=rows), open(os.path.join(OUT, "ab_ring.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
