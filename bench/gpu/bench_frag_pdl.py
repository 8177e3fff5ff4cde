"""Issue 6, decode GEMM on fragment-packed weights and programmatic dependent launch (PDL), timed
the way bench.py times (CUDA-graph replay of 200 back-to-back launches, median of 15, us per call):

  gemm: the runtime's current GEMM (pipeline kernel / first kernel), the fragment-packed kernel at
        its host choice and over all (W, S), each without and with PDL, and cuBLAS bf16; weights
        rotate over >= 400 MB of copies so the L2 holds none of them;
  ops:  the norm, SwiGLU and quantize kernels at their host choice without and with PDL.

With PDL each launch may begin while the previous one still runs; every kernel waits
(MX_PDL_WAIT) before it reads what another kernel writes, so only launch latency and, for the
packed GEMM, the first weight loads overlap the previous kernel. Writes $OUT/bench_frag_pdl.json.
  prefill: the frag GEMM at M = 64 / 256 / 2048 in both block orders, and cuBLAS bf16.
FRAG_MS (env, e.g. "12,16"): the gemm section's activation rows (default 1,2,4,8,12,16).
Usage: python3 bench_frag_pdl.py [gemm] [ops] [prefill] (default: gemm ops)"""
import ctypes, itertools, json, os, sys
import torch
from bench import graph_time
from mxgpu import (FRAG_SS, FRAG_WS, F_FP32_ACT, F_GAMMA_F32, F_GEMMA, F_OAI, Module, Ops, frag_choice,
                   pack_frag, pipe_choice)

OUT = os.environ.get("OUT", ".")
dev = "cuda"


def both(mod, fn, **kw):
    """(plain, pdl) times of fn."""
    mod.pdl = False
    t0 = graph_time(fn, **kw)
    mod.pdl = True
    try:
        return t0, graph_time(fn, **kw)
    finally:
        mod.pdl = False


def weight_copies(N, K):
    """Enough copies of random e4m3 weights [N, K] (no NaN codes) with scales, their frag packing,
    and of bf16 weights, that rotating over them (>= 400 MB) leaves none in the L2:
    (copies, Wt, St, P, Wb)."""
    copies = max(2, int(400e6 // (N * K)))
    Wt = [torch.randint(0, 256, (N, K), dtype=torch.uint8, device=dev) for _ in range(copies)]
    for t in Wt:
        t[(t & 0x7F) == 0x7F] = 0x38  # no NaN codes
    St = [torch.randint(118, 128, (N, K // 32), dtype=torch.uint8, device=dev) for _ in range(copies)]
    P = [pack_frag(w, s) for w, s in zip(Wt, St)]
    Wb = [torch.randn(N, K, device=dev, dtype=torch.bfloat16) for _ in range(max(2, int(400e6 // (N * K * 2))))]
    return copies, Wt, St, P, Wb


def rotation():
    """nxt(n): 1, 2, ..., n - 1, 0, 1, ... on successive calls, the index of the next copy, so
    back-to-back launches each read another copy of the weights (weight_copies)."""
    calls = itertools.count(1)
    return lambda n: next(calls) % n


def ab_cases(ops, frag_kernel, cases):
    """The A/B scripts' cases ("NxK:M,M;..."): per (N, K, M) a namespace with the weight copies P
    (`c.next()`: the index of the next copy, so back-to-back launches read another copy), bf16
    activations A quantized to (aq, as_), a bf16 output y, the runtime's kernel choice rt and its
    output ref (copy 0), and fns = {"rt", "cublas"}: the baseline calls as timing closures."""
    import types
    for case in cases.split(";"):
        sh, ms = case.split(":")
        N, K = (int(v) for v in sh.split("x"))
        copies, _, _, P, Wb = weight_copies(N, K)
        nxt = rotation()
        for M in (int(m) for m in ms.split(",")):
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            ref = ops.matmul_frag(*P[0], N, K, M, aq, as_, y=torch.empty_like(y)).float()
            c = types.SimpleNamespace(N=N, K=K, M=M, P=P, next=lambda: nxt(copies), A=A, aq=aq, as_=as_, y=y,
                                      rt=frag_kernel(N, K, M), ref=ref)
            c.fns = {"rt": lambda c=c: ops.matmul_frag(*P[c.next()], N, K, M, aq, as_, y=y),
                     "cublas": lambda: A @ Wb[nxt(len(Wb))].t()}
            yield c
        del P, Wb


def ab_module():
    """The A/B scripts' start: the module (with the script's kernel file appended, through
    mxgpu.program_text), its ops, the read-only HBM rate printed, PDL on: (mod, ops)."""
    from bench import read_bandwidth
    mod = Module(); ops = Ops(mod)
    print("module loaded", flush=True)
    read_bandwidth(dev)
    mod.pdl = True
    return mod, ops


def launch_frag(mod, name, grid, W, wf, wsf, N, K, M, aq, as_, y, pre=1, extra=()):
    """One launch of a fragment GEMM kernel by name (the A/B scripts' bench kernels: the
    runtime's argument list, bf16 out, no epilogue, then `extra` arguments) on `grid`, 32 W lanes
    a block; returns y."""
    from mxgpu import epilogue
    mod.launch(name, grid, (32 * W,),
               [aq, as_, wf, wsf, y, ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K), ctypes.c_int(pre), epilogue(),
                *extra])
    return y


def medians_text(med, N=None, K=None):
    """Each call's median (us) of an A/B case, " | "-separated; with N, K also the rate of an
    N x K MXFP8 weight's bytes (values + E8M0 scales) in TB/s for every call but cuBLAS's."""
    gb = (N * K + N * K // 32) / 1e9 if N else None
    return " | ".join(f"{k} {v:6.2f}" + (f" ({gb / (v * 1e-6) / 1e3:.2f} TB/s)" if gb and k != "cublas" else "")
                      for k, v in med.items())


def ab_line(c, med, diffs, diff_label="max rel diff vs rt", rate=False):
    """One A/B case's line: the runtime's choice, each call's median (us; with `rate` also the
    weight bytes' TB/s), cuBLAS / each, and each variant's difference from the runtime kernel's
    output (`diffs`, named by `diff_label`)."""
    rt = c.rt
    return (f"{c.N:5d}x{c.K:<5d} M={c.M:2d}: rt {rt[3] or 'm' + str(rt[0])} w{rt[1]}s{rt[2]} "
            + medians_text(med, *((c.N, c.K) if rate else ()))
            + " | cublas/x " + " ".join(f"{k} {med['cublas'] / v:.3f}" for k, v in med.items() if k != "cublas")
            + f" | {diff_label} " + " ".join(f"{k} {v:.1e}" for k, v in diffs.items()))


def ab_variants(c, variants, reps, extra=lambda v, a: {}, finite=False):
    """An A/B case's bench variants (each with a .label, called as v(wf, wsf, N, K, M, aq, as_, y)),
    launched on copy 0 twice before and once after timing them beside c.fns: (times, medians,
    diffs, bits). diffs: each one's max relative difference to c.ref, plus extra(v, output)'s
    entries; bits: the three launches bit-equal (and, with `finite`, the output free of NaN). A label
    seen before is skipped."""
    P, N, K, M = c.P, c.N, c.K, c.M
    diffs, bits, run = {}, {}, []
    for v in variants:
        if v.label in diffs:
            continue
        a = v(*P[0], N, K, M, c.aq, c.as_, torch.empty_like(c.y)).float()
        b = v(*P[0], N, K, M, c.aq, c.as_, torch.empty_like(c.y)).float()
        torch.cuda.synchronize()
        diffs[v.label] = ((a - c.ref).abs() / c.ref.abs().clamp_min(1e-3)).max().item()
        diffs.update(extra(v, a))
        bits[v.label] = bool(torch.equal(a, b)) and not (finite and torch.isnan(a).any().item())
        c.fns[v.label] = (lambda v=v: v(*P[c.next()], N, K, M, c.aq, c.as_, c.y))
        run.append((v, a))
    times, med = time_alternating(c.fns, reps)
    for v, a in run:
        again = v(*P[0], N, K, M, c.aq, c.as_, torch.empty_like(c.y)).float()
        torch.cuda.synchronize()
        bits[v.label] = bits[v.label] and bool(torch.equal(a, again))
    return times, med, diffs, bits


def time_alternating(fns, reps):
    """Each call of fns timed by graph_time, the calls alternating, reps rounds: (times, medians)."""
    import statistics
    t = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            t[k].append(graph_time(fn))
    return t, {k: statistics.median(v) for k, v in t.items()}


def bench_gemm(mod, ops, read_bw, rows):
    for N, K in ((1536, 6144), (6144, 768), (6144, 6144)):
        copies, Wt, St, P, Wb = weight_copies(N, K)
        nxt = rotation()
        for M in [int(m) for m in os.environ.get("FRAG_MS", "1,2,4,8,12,16").split(",")]:
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)

            def current():
                j = nxt(copies); ops.matmul_default(Wt[j], St[j], M, aq, as_, y=y)

            def frag(W=None, S=None):
                j = nxt(copies); ops.matmul_frag(P[j][0], P[j][1], N, K, M, aq, as_, W=W, S=S, y=y)
            t_cur, t_cur_pdl = both(mod, current)
            t_frag, t_frag_pdl = both(mod, frag)
            sweep, sweep_pdl = {}, {}
            for W in FRAG_WS:
                for S in FRAG_SS:
                    if (K // 128) < S * W:
                        continue
                    a, b = both(mod, lambda W=W, S=S: frag(W, S))
                    sweep[f"w{W}s{S}"], sweep_pdl[f"w{W}s{S}"] = a, b
            t_bf = graph_time(lambda: A @ Wb[nxt(len(Wb))].t(), iters=100)
            wbytes = N * K * (1 + 1 / 32)
            best = min(sweep, key=sweep.get)
            best_pdl = min(sweep_pdl, key=sweep_pdl.get)
            row = dict(N=N, K=K, M=M, current=t_cur, current_pdl=t_cur_pdl, current_choice=pipe_choice(N, K, M),
                       frag=t_frag, frag_pdl=t_frag_pdl, frag_choice=frag_choice(N, K, M), best=best,
                       best_t=sweep[best], best_pdl=best_pdl, best_pdl_t=sweep_pdl[best_pdl], cublas_bf16=t_bf,
                       sweep=sweep, sweep_pdl=sweep_pdl,
                       hbm_frac=wbytes / (t_frag * 1e-6) / read_bw, hbm_frac_pdl=wbytes / (t_frag_pdl * 1e-6) / read_bw)
            rows.append(row)
            print(f"gemm {N}x{K} M={M:2d}: current {t_cur:6.2f} (pdl {t_cur_pdl:6.2f}) frag {t_frag:6.2f} "
                  f"(pdl {t_frag_pdl:6.2f}) {row['frag_choice']} best {best} {sweep[best]:6.2f} best pdl {best_pdl} "
                  f"{sweep_pdl[best_pdl]:6.2f} cublas {t_bf:6.2f} x_cublas {t_bf / t_frag:4.2f} / pdl {t_bf / t_frag_pdl:4.2f} "
                  f"hbm {100 * row['hbm_frac']:4.1f}% / pdl {100 * row['hbm_frac_pdl']:4.1f}%", flush=True)
            print("    " + " ".join(f"{k}={v:.2f}/{sweep_pdl[k]:.2f}" for k, v in sweep.items()), flush=True)
        del Wt, St, P, Wb


def bench_prefill(mod, ops, rows):
    """The frag GEMM at prefill sizes (W = 4 and 8, S = 1) against cuBLAS bf16. (Its block order,
    the m-tiles of one weight tile together, was measured here against tiles along x: BENCHMARKS.md.)"""
    for N, K in ((1536, 6144), (6144, 6144)):
        w = torch.randint(0, 256, (N, K), dtype=torch.uint8, device=dev)
        w[(w & 0x7F) == 0x7F] = 0x38
        wf, wsf = pack_frag(w, torch.randint(118, 128, (N, K // 32), dtype=torch.uint8, device=dev))
        Wb = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
        for M in (64, 256, 2048):
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            new = {W: graph_time(lambda W=W: ops.matmul_frag(wf, wsf, N, K, M, aq, as_, W=W, S=1, y=y), iters=20) for W in (4, 8)}
            t_bf = graph_time(lambda: A @ Wb.t(), iters=20)
            rows.append(dict(N=N, K=K, M=M, new=new, cublas_bf16=t_bf))
            print(f"prefill {N}x{K} M={M:5d}: frag w4 {new[4]:8.1f} w8 {new[8]:8.1f} | cublas bf16 {t_bf:8.1f}", flush=True)


def bench_ops(mod, ops, rows):
    H, I = 6144, 768
    for M in (8, 16, 64, 192, 8192):
        x = (torch.randn(M, H, device=dev) * 3).bfloat16(); r = torch.randn(M, H, device=dev).bfloat16()
        g = (torch.randn(H, device=dev) * 0.1).bfloat16()
        outs = (torch.empty(M, H, dtype=torch.uint8, device=dev), torch.empty(M, H // 32, dtype=torch.uint8, device=dev),
                torch.empty_like(x), torch.empty_like(x))
        gu = (torch.randn(M, 2 * I, device=dev) * 8).bfloat16()
        sq = (torch.empty(M, I, dtype=torch.uint8, device=dev), torch.empty(M, I // 32, dtype=torch.uint8, device=dev))
        qo = (torch.empty(M, H, dtype=torch.uint8, device=dev), torch.empty(M, H // 32, dtype=torch.uint8, device=dev))
        norm = both(mod, lambda: ops.norm_quant(x, r, g, F_GEMMA | F_GAMMA_F32, outs=outs))
        swiglu = both(mod, lambda: ops.swiglu_quant(gu, None, I, "split_halves", F_OAI | F_FP32_ACT, outs=sq))
        quant = both(mod, lambda: ops.quantize(x, 0, outs=qo))
        row = dict(M=M, norm=norm, swiglu=swiglu, quantize=quant)
        rows.append(row)
        print(f"ops M={M:5d}: norm {norm[0]:7.2f} pdl {norm[1]:7.2f} | swiglu {swiglu[0]:6.2f} pdl {swiglu[1]:6.2f} | "
              f"quantize {quant[0]:6.2f} pdl {quant[1]:6.2f}", flush=True)


def main():
    sections = sys.argv[1:] or ["gemm", "ops"]
    mod = Module(); ops = Ops(mod)
    x = torch.empty(1024**3, dtype=torch.bfloat16, device=dev).normal_()
    read_bw = x.numel() * 2 / (graph_time(lambda: x.sum(), iters=5) * 1e-6)
    del x
    empty = torch.empty(1, device=dev)
    floor = graph_time(lambda: empty.add_(0))
    print(f"read-only HBM bandwidth {read_bw / 1e12:.2f} TB/s; launch floor {floor:.2f} us", flush=True)
    res = dict(read_bw=read_bw, floor=floor, gemm=[], ops=[], prefill=[])
    try:
        if "ops" in sections:
            bench_ops(mod, ops, res["ops"])
        if "gemm" in sections:
            bench_gemm(mod, ops, read_bw, res["gemm"])
        if "prefill" in sections:
            bench_prefill(mod, ops, res["prefill"])
    finally:
        json.dump(res, open(os.path.join(OUT, "bench_frag_pdl.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
