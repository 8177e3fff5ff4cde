"""Timing of kernels/gpu/* on the device: CUDA-graph replay of 200 back-to-back launches, median of
15 replays, us per call (the method of torch_baseline.py, which runs in the same device call and
whose $OUT/gpu_anchor.json gives the Inductor columns). Writes $OUT/bench_<sections>.json; prints
tables. Sections (argv, default all): norm swiglu gemm thr. Old and new kernel variants are timed
side by side in the same process (norm: one block per row vs rows split over clusters; GEMM: the
first tensor-core kernel vs the runtime's default (the cp.async pipeline kernel, or the first kernel
where thresholds.rs says so) and the pipeline kernel over all its (warps, cluster split) shapes, plus
quantize + default, the first kernel's in-GEMM quantization and cuBLAS bf16)."""
import ast, json, os, sys
import torch
from mxgpu import CLUSTERS, PIPE_SS, PIPE_WS, pipe_choice, Module, Ops, F_RCEIL, F_GEMMA, F_GAMMA_F32, F_OAI, F_FP32_ACT, norm_choice, sk_choice, swiglu_choice, swiglu_uses_table

OUT = os.environ.get("OUT", ".")
dev = "cuda"
torch.manual_seed(0)


def _baseline_graph_time():
    """`graph_time` of torch_baseline.py, so both files time the same way. That file is a verbatim
    copy of a shared script that measures on import, so only its `def graph_time` is run here."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_baseline.py")
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "graph_time")
    scope = {"torch": torch}
    exec(compile(ast.Module([fn], type_ignores=[]), path, "exec"), scope)
    return scope["graph_time"]


# CUDA-graph replay of `iters` back-to-back calls of fn, median of `reps` replays: us per call.
graph_time = _baseline_graph_time()


def read_bandwidth(dev="cuda"):
    """Read-only HBM bandwidth in bytes/s: torch's sum over 2 GiB of bf16 (CUDA-graph replay);
    the ceiling the GEMM A/B scripts print their weight-byte rates against."""
    x = torch.empty(1024**3, dtype=torch.bfloat16, device=dev).normal_()
    bw = x.numel() * 2 / (graph_time(lambda: x.sum(), iters=5) * 1e-6)
    del x
    print(f"read-only HBM {bw / 1e12:.2f} TB/s", flush=True)
    return bw


def main():
    sections = sys.argv[1:] or ["norm", "swiglu", "gemm", "thr"]
    mod = Module(); ops = Ops(mod)
    anchor = {}
    try:
        anchor = {r["M"]: r for r in json.load(open(os.path.join(OUT, "gpu_anchor.json")))}
    except OSError:
        print("no gpu_anchor.json: Inductor columns empty")
    x = torch.empty(1024**3, dtype=torch.bfloat16, device=dev).normal_()
    t_sum = graph_time(lambda: x.sum(), iters=5)
    read_bw = x.numel() * 2 / (t_sum * 1e-6)
    del x
    empty = torch.empty(1, device=dev)
    floor = graph_time(lambda: empty.add_(0))
    print(f"read-only HBM bandwidth {read_bw/1e12:.2f} TB/s; launch floor {floor:.2f} us")
    res = dict(read_bw=read_bw, floor=floor, norm=[], swiglu=[], gemm=[], thresholds=[])
    try:
        run_sections(ops, sections, res, anchor, read_bw)
    finally:
        json.dump(res, open(os.path.join(OUT, "bench_" + "_".join(sections) + ".json"), "w"), indent=1)
    print_tables(res)


def run_sections(ops, sections, res, anchor, read_bw):
    H, I = 6144, 768
    NF = F_GEMMA | F_GAMMA_F32  # floor rule, like the baseline's mx_quant
    for M in [8, 16, 32, 64, 128, 192, 8192] if ("norm" in sections or "swiglu" in sections) else []:
        x = (torch.randn(M, H, device=dev) * 3).bfloat16(); r = torch.randn(M, H, device=dev).bfloat16()
        w = (torch.randn(H, device=dev) * 0.1).bfloat16()
        outs = (torch.empty(M, H, dtype=torch.uint8, device=dev), torch.empty(M, H // 32, dtype=torch.uint8, device=dev),
                torch.empty_like(x), torch.empty_like(x))
        a = anchor.get(M, {})
        if "norm" in sections:
            t_fused = graph_time(lambda: ops.norm_quant(x, r, w, NF, outs=outs))
            t_fused_q = graph_time(lambda: ops.norm_quant(x, r, w, NF, outs=outs[:2] + (None, None)))
            # one block per row with 1-4 chunks per lane (B = H / 8 / nch); rows split over clusters
            by_nch = {c: graph_time(lambda c=c: ops.norm_quant(x, r, w, NF, outs=outs, nch=c, split=1)) for c in (1, 2, 3, 4)}
            by_split = {c: graph_time(lambda c=c: ops.norm_quant(x, r, w, NF, outs=outs, split=c)) for c in (2, 4, 8)} if M < 1024 and CLUSTERS else {}
            b = M * H * (2 + 2 + 2 + 2 + 1 + 1 / 32) + H * 2
            choice = norm_choice(M, H)
            row = dict(M=M, fused=t_fused, choice=choice, fused_q_only=t_fused_q,
                       by_nch=by_nch, by_split=by_split, inductor_fused=a.get("compiled_fused_norm_quant_bf16"),
                       inductor_unfused=a.get("compiled_norm_then_quant"), bw_frac=b / (t_fused * 1e-6) / read_bw)
            res["norm"].append(row); print("norm", json.dumps(row), flush=True)
        if "swiglu" not in sections:
            continue

        gu = (torch.randn(M, 2 * I, device=dev) * 8).bfloat16()
        sq = (torch.empty(M, I, dtype=torch.uint8, device=dev), torch.empty(M, I // 32, dtype=torch.uint8, device=dev))
        t_sw = graph_time(lambda: ops.swiglu_quant(gu, None, I, "split_halves", F_OAI | F_FP32_ACT, outs=sq))
        t_sw_exact = graph_time(lambda: ops.swiglu_quant(gu, None, I, "split_halves", F_OAI, outs=sq))
        # elements per lane x block size
        sweep = {f"e{e}b{bl}": graph_time(lambda e=e, bl=bl: ops.swiglu_quant(gu, None, I, "split_halves", F_OAI | F_FP32_ACT, outs=sq, e=e, block=bl))
                 for e in (1, 2, 8) for bl in (32, 64, 128, 256, 512)
                 if e != 8 or bl <= 256} if M in (8, 64, 192, 8192) else {}  # bf16 e8: launch bounds 256
        row = dict(M=M, fused=t_sw, choice=swiglu_choice(M * I), fused_bf16_intermediates=t_sw_exact,
                   bf16_intermediates_table_kernel=swiglu_uses_table(M * I, torch.bfloat16, F_OAI), sweep=sweep,
                   inductor_fused=a.get("compiled_fused_swiglu_quant"), inductor_unfused=a.get("compiled_swiglu_then_quant"),
                   bw_frac=M * (2 * I * 2 + I * (1 + 1 / 32)) / (t_sw * 1e-6) / read_bw)
        res["swiglu"].append(row); print("swiglu", json.dumps(row), flush=True)

    # Decode GEMM: rotate among weight copies (>= 400 MB) so the 60 MB L2 holds none of them.
    def weights(N, K):
        nw = max(2, int(400e6 // (N * K)))
        W = [torch.randint(0, 256, (N, K), dtype=torch.uint8, device=dev) for _ in range(nw)]
        for t in W: t[(t & 0x7F) == 0x7F] = 0x38
        S = [torch.randint(118, 128, (N, K // 32), dtype=torch.uint8, device=dev) for _ in range(nw)]
        return W, S

    def rot(lst):
        i = [0]
        def nxt():
            i[0] = (i[0] + 1) % len(lst); return lst[i[0]]
        return nxt

    for N, K in ((1536, 6144), (6144, 768), (6144, 6144)) if "gemm" in sections and CLUSTERS else ():
        W, S = weights(N, K)
        idx = rot(list(range(len(W))))
        nbf = max(2, int(400e6 // (N * K * 2)))
        Wb = [torch.randn(N, K, device=dev, dtype=torch.bfloat16) for _ in range(nbf)]
        nb = rot(Wb)
        for M in (1, 2, 4, 8, 12, 16):
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            def old():  # the first tensor-core kernel at its host choice of warps / prefetch
                j = idx(); ops.matmul_tc(W[j], S[j], M, aq=aq, as_=as_, warps=16 if -(-N // 16) < 132 else 8, y=y)
            def old_in():  # the first kernel quantizing A inside (the runtime's in-GEMM path)
                j = idx(); ops.matmul_tc(W[j], S[j], M, af=A, warps=16 if -(-N // 16) < 132 else 8, y=y)
            def pipe(W_=None, S_=None, var=""):
                j = idx(); ops.matmul_pipe(W[j], S[j], M, aq, as_, W=W_, S=S_, y=y, var=var)
            def default():  # the runtime's choice: pipeline GEMM or (table) the first kernel
                j = idx(); ops.matmul_default(W[j], S[j], M, aq, as_, y=y)
            def pipe_sep():
                ops.quantize(A, 0, outs=(aq, as_)); j = idx(); ops.matmul_default(W[j], S[j], M, aq, as_, y=y)
            t_old, t_pipe = graph_time(old), graph_time(default)
            variants = [(W_, S_, "") for W_ in PIPE_WS for S_ in PIPE_SS]
            sweep = {f"w{W_}s{S_}{v}": graph_time(lambda W_=W_, S_=S_, v=v: pipe(W_, S_, v)) for W_, S_, v in variants}
            t_sep = graph_time(pipe_sep)
            t_old_in = graph_time(old_in) if K <= 1024 else None
            t_bf = graph_time(lambda: A @ nb().t(), iters=100)
            wbytes = N * K * (1 + 1 / 32)
            best_shape = min(sweep, key=sweep.get)
            # pipe_prequant: the runtime's default (the pipeline GEMM, or the first kernel where
            # the table says so: choice (0, 0)); separate: quantize + that default.
            row = dict(N=N, K=K, M=M, choice=pipe_choice(N, K, M), old_prequant=t_old, pipe_prequant=t_pipe,
                       pipe_best=sweep[best_shape], pipe_best_shape=best_shape, sweep=sweep,
                       pipe_separate_quant=t_sep, old_in_gemm_quant=t_old_in, cublas_bf16=t_bf,
                       speedup_vs_cublas=t_bf / t_pipe, speedup_vs_old=t_old / t_pipe, bw_frac=wbytes / (t_pipe * 1e-6) / read_bw,
                       bw_frac_best=wbytes / (sweep[best_shape] * 1e-6) / read_bw)
            res["gemm"].append(row); print("gemm", json.dumps(row), flush=True)
        del W, S, Wb

    # Where does in-GEMM quantization beat a separate quantize launch? (split-K kernel)
    for N in (6144, 1536) if "thr" in sections and CLUSTERS else ():
        for K in (768, 2048, 6144):
            W, S = weights(N, K)
            idx = rot(list(range(len(W))))
            for M in (1, 2, 4, 8, 12, 16):
                A = torch.randn(M, K, device=dev).bfloat16()
                aq, as_ = ops.quantize(A, 0)
                y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
                def ing():
                    j = idx(); ops.matmul_sk(W[j], S[j], M, af=A, y=y)
                def sep():
                    ops.quantize(A, 0, outs=(aq, as_)); j = idx(); ops.matmul_sk(W[j], S[j], M, aq=aq, as_=as_, y=y)
                row = dict(N=N, K=K, M=M, in_gemm=graph_time(ing), separate=graph_time(sep))
                res["thresholds"].append(row); print("thr", json.dumps(row), flush=True)
            del W, S


def print_tables(res):
    print("\nnorm (us): M fused (split,nch) inductor_fused fused_q_only %bw | one block per row, 1/2/3/4 chunks | split 2/4/8")
    for r in res["norm"]:
        old = " ".join(f"{v:6.2f}" for v in r["by_nch"].values())
        new = " ".join(f"{v:6.2f}" for v in r["by_split"].values())
        print(f"  {r['M']:5d} {r['fused']:7.2f} {str(tuple(r['choice'])):7s} {r['inductor_fused'] or float('nan'):7.2f} {r['fused_q_only']:7.2f} {100*r['bw_frac']:5.1f} | {old} | {new}")
    print("swiglu-oai (us): M fused (e,block) inductor_fused fused_bf16_intermediates %bw | sweep best")
    for r in res["swiglu"]:
        best = min(r["sweep"], key=r["sweep"].get) if r["sweep"] else ""
        print(f"  {r['M']:5d} {r['fused']:7.2f} {str(tuple(r['choice'])):8s} {r['inductor_fused'] or float('nan'):7.2f} {r['fused_bf16_intermediates']:7.2f} {100*r['bw_frac']:5.1f} | {best} {r['sweep'].get(best, float('nan')):.2f}")
        if r["sweep"]:
            print("        " + " ".join(f"{k}={v:.2f}" for k, v in r["sweep"].items()))
    print("gemm (us): N K M (W,S) old default pipe_best(shape) separate(quant+default) old_in_gemm cublas_bf16 x_cublas x_old %bw %bw_best")
    for r in res["gemm"]:
        oi = r["old_in_gemm_quant"]
        print(f"  {r['N']} {r['K']} {r['M']:2d} {str(tuple(r['choice'])):8s} {r['old_prequant']:6.2f} {r['pipe_prequant']:6.2f} {r['pipe_best']:6.2f}({r['pipe_best_shape']}) "
              f"{r['pipe_separate_quant']:6.2f} {oi if oi is None else round(oi, 2)} {r['cublas_bf16']:6.2f} {r['speedup_vs_cublas']:5.2f} {r['speedup_vs_old']:5.2f} {100*r['bw_frac']:5.1f} {100*r['bw_frac_best']:5.1f}")
        print("        " + " ".join(f"{k}={v:.2f}" for k, v in r["sweep"].items()))
    print("in-gemm vs separate quant, split-K kernel (us): N K M in_gemm separate")
    for r in res["thresholds"]:
        print(f"  {r['N']} {r['K']} {r['M']:2d} {r['in_gemm']:6.2f} {r['separate']:6.2f} {'IN' if r['in_gemm'] < r['separate'] else 'SEP'}")


if __name__ == "__main__":
    main()
