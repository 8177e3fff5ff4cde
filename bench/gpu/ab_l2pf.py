"""Issue 6 follow-up 12: the decode GEMM with the whole-range L2 prefetch (mx_matmul_frag.hip,
pre & 2, "+pf"), under CUDA-graph replay with PDL (bench.py's graph_time: 200 back-to-back launches, median of the
replays, us per call), weights rotating over >= 400 MB of copies (bench_frag_pdl.py's set-up).
Kernels at each M: the m8 kernel (M <= 8, the runtime's there), `_fs` (the runtime's at 9-16 rows;
at M <= 8 on half a tile), `_fsa` (follow-up 13: activations through shared memory), each at
pre = 1 and 3, the runtime's choice now ("rt", mxgpu.frag_kernel), and cuBLAS bf16 (torch). Every output
is compared bit for bit with the first kernel's ("not bit-identical" lists the others). % HBM =
weight bytes (values + scales) / time / read-only bandwidth measured in the same call (x.sum()
over 2 GiB). Follow-up 17: at M <= 8 also the m8 kernel on 3 warps ("m8 w3"; the runtime's choice where it
drops an idle warp, mxgpu.trim_idle_warp). AB_SHAPES="NxK,..." (default the three decode shapes),
AB_MS="1,4,..." pick the cases. Writes $OUT/ab_l2pf.json. Usage: python3 ab_l2pf.py [REPS] (default 3)"""
import json, os, statistics, sys
import torch
from bench import graph_time, read_bandwidth
from bench_frag_pdl import rotation, weight_copies
from mxgpu import FRAG_SS, FRAG_WS, Module, Ops, frag_choice

OUT = os.environ.get("OUT", ".")
dev = "cuda"
MS = [int(m) for m in os.environ.get("AB_MS", "1,4,8,12,14,16").split(",")]


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    mod = Module(); ops = Ops(mod)
    read_bw = read_bandwidth(dev)
    mod.pdl = True
    rows = []
    shapes = os.environ.get("AB_SHAPES", "1536x6144,6144x768,6144x6144")
    for N, K in (tuple(int(v) for v in sh.split("x")) for sh in shapes.split(",")):
        copies, _, _, P, Wb = weight_copies(N, K)
        wbytes = N * K * (1 + 1 / 32)
        nxt = rotation()
        for M in MS:
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            sfx = "_fs" if M > 8 else ""
            W0, S0 = frag_choice(N, K, M)

            def frag(pre, W=W0, S=S0, sfx=sfx, y=y, j=None):
                P_ = P[nxt(copies) if j is None else j]
                return ops.matmul_frag(*P_, N, K, M, aq, as_, W=W, S=S, y=y, pre=pre, sfx=sfx)
            W16, S16 = frag_choice(N, K, 16)
            # name -> (sfx, W, S, pre); the first (reference of `same`) = frag_choice's untrimmed
            # (W, S): the runtime's kernel except where it takes the m8 kernel on 3 warps ("rt")
            var = {}
            for pre, tag in ((1, ""), (3, "+pf")):
                if M <= 8:
                    var["m8" + tag] = ("", W0, S0, pre)
                var["fs" + tag] = ("_fs", W16, S16, pre)
                var["fsa" + tag] = ("_fsa", W16, S16, pre)
            if M <= 8 and S0 == 1 and W0 != 3:  # follow-up 17: the m8 kernel on 3 warps
                var["m8 w3"] = ("", 3, 1, 1)
            var = dict(sorted(var.items(), key=lambda kv: kv[1][3]))
            fns = {k: (lambda v=v: frag(v[3], v[1], v[2], v[0])) for k, v in var.items()}
            fns["rt"] = lambda: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, y=y)
            fns["cublas"] = lambda: A @ Wb[nxt(len(Wb))].t()
            first = next(iter(var.values()))
            ref = frag(first[3], first[1], first[2], first[0], y=torch.empty_like(y), j=0)
            same = {}
            for k, (sf, w, s_, pre) in var.items():
                got = frag(pre, w, s_, sf, y=torch.empty_like(y), j=0)
                same[k] = bool(torch.equal(ref, got))
                if not same[k]:  # another K split (W): summation order only
                    rel = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
                    print(f"  {k}: rel diff to {next(iter(var))} {rel:.2e}, NaN {int(got.isnan().sum())}", flush=True)
            torch.cuda.synchronize()
            t = {k: [] for k in fns}
            for _ in range(reps):
                for k, fn in fns.items():
                    try:
                        t[k].append(graph_time(fn))
                    except Exception as e:  # a (W, S) the device refuses: note and go on
                        t[k].append(float("nan")); print(f"  {k}: {e}", flush=True)
            med = {k: statistics.median(v) for k, v in t.items()}
            hbm = {k: wbytes / (v * 1e-6) / read_bw for k, v in med.items() if k != "cublas"}
            best = min((k for k in med if k != "cublas"), key=lambda k: med[k])
            rt = "rt"
            rows.append(dict(N=N, K=K, M=M, W=W0, S=S0, same=same, med=med, hbm=hbm, all=t))
            print(f"{N}x{K} M={M:2d} w{W0}s{S0}{sfx}: rt {med[rt]:6.2f} cublas {med['cublas']:6.2f} "
                  f"({med['cublas'] / med[rt]:4.2f}x, {100 * hbm[rt]:4.1f} %) | best {best} {med[best]:6.2f} "
                  f"({med['cublas'] / med[best]:4.2f}x, {100 * hbm[best]:4.1f} %) | not bit-identical: "
                  f"{[k for k, v in same.items() if not v]}", flush=True)
            print("   " + " ".join(f"{k} {v:.2f}" for k, v in sorted(med.items(), key=lambda kv: kv[1])), flush=True)
        del P, Wb
    json.dump(dict(read_bw=read_bw, rows=rows), open(os.path.join(OUT, "ab_l2pf.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
