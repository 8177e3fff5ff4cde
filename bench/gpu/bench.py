"""Timing of kernels/gpu/* on the device: CUDA-graph replay of 200 back-to-back launches, median of
15 replays, us per call (the method of torch_baseline.py, which runs in the same device call and
whose $OUT/gpu_anchor.json gives the Inductor columns). Writes $OUT/bench.json; prints tables."""
import json, os, sys
import torch
from mxgpu import Module, Ops, F_RCEIL, F_GEMMA, F_GAMMA_F32, F_OAI, F_FP32_ACT

OUT = os.environ.get("OUT", ".")
dev = "cuda"
torch.manual_seed(0)


def graph_time(fn, iters=200, reps=15):
    fn(); torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(iters): fn()
    for _ in range(3): g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1000 / iters)
    ts.sort(); return ts[len(ts) // 2]


def gemma_add_rmsnorm(x, r, w, eps=1e-6):  # as torch_baseline.py
    res = x + r
    rf = res.float()
    n = rf * torch.rsqrt(rf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())
    return n.to(x.dtype), res


def swiglu_bf16(gu, alpha=1.702, beta=1.0, limit=7.0):
    I = gu.shape[-1] // 2
    g = gu[:, :I].float().clamp(max=limit); u = gu[:, I:].float().clamp(-limit, limit)
    return (g * torch.sigmoid(alpha * g) * (u + beta)).to(torch.bfloat16)


def main():
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

    H, I = 6144, 768
    c_norm = torch.compile(gemma_add_rmsnorm, dynamic=False)
    c_sw = torch.compile(swiglu_bf16, dynamic=False)
    NF = F_GEMMA | F_GAMMA_F32  # floor rule, like the baseline's mx_quant
    for M in [8, 16, 32, 64, 128, 192, 8192]:
        x = (torch.randn(M, H, device=dev) * 3).bfloat16(); r = torch.randn(M, H, device=dev).bfloat16()
        w = (torch.randn(H, device=dev) * 0.1).bfloat16()
        outs = (torch.empty(M, H, dtype=torch.uint8, device=dev), torch.empty(M, H // 32, dtype=torch.uint8, device=dev),
                torch.empty_like(x), torch.empty_like(x))
        qouts = (torch.empty(M, H, dtype=torch.uint8, device=dev), torch.empty(M, H // 32, dtype=torch.uint8, device=dev))
        t_fused = graph_time(lambda: ops.norm_quant(x, r, w, NF, outs=outs))
        t_fused_q = graph_time(lambda: ops.norm_quant(x, r, w, NF, outs=outs[:2] + (None, None)))
        by_nch = {c: graph_time(lambda c=c: ops.norm_quant(x, r, w, NF, outs=outs, nch=c)) for c in (1, 2, 3)
                  if (6144 // 8) <= c * (256 if c == 3 else 1024)}
        t_unf = graph_time(lambda: ops.quantize(c_norm(x, r, w)[0], NF, outs=qouts))
        b = M * H * (2 + 2 + 2 + 2 + 1 + 1 / 32) + H * 2
        a = anchor.get(M, {})
        row = dict(M=M, unfused=t_unf, fused=t_fused, fused_q_only=t_fused_q, saved=t_unf - t_fused,
                   by_nch=by_nch, inductor_fused=a.get("compiled_fused_norm_quant_bf16"), inductor_unfused=a.get("compiled_norm_then_quant"),
                   bw_frac=b / (t_fused * 1e-6) / read_bw)
        res["norm"].append(row); print("norm", json.dumps(row), flush=True)

        gu = (torch.randn(M, 2 * I, device=dev) * 8).bfloat16()
        sq = (torch.empty(M, I, dtype=torch.uint8, device=dev), torch.empty(M, I // 32, dtype=torch.uint8, device=dev))
        t_sw = graph_time(lambda: ops.swiglu_quant(gu, None, I, "split_halves", F_OAI | F_FP32_ACT, outs=sq))
        t_sw_exact = graph_time(lambda: ops.swiglu_quant(gu, None, I, "split_halves", F_OAI, outs=sq))
        t_sw_unf = graph_time(lambda: ops.quantize(c_sw(gu), 0, outs=sq))
        row = dict(M=M, unfused=t_sw_unf, fused=t_sw, fused_bf16_intermediates=t_sw_exact, saved=t_sw_unf - t_sw,
                   inductor_fused=a.get("compiled_fused_swiglu_quant"), inductor_unfused=a.get("compiled_swiglu_then_quant"),
                   bw_frac=M * (2 * I * 2 + I * (1 + 1 / 32)) / (t_sw * 1e-6) / read_bw)
        res["swiglu"].append(row); print("swiglu", json.dumps(row), flush=True)
        del x, r, gu, outs, qouts

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

    for N, K in ((1536, 6144), (6144, 768), (6144, 6144)):
        W, S = weights(N, K)
        idx = rot(list(range(len(W))))
        nbf = max(2, int(400e6 // (N * K * 2)))
        Wb = [torch.randn(N, K, device=dev, dtype=torch.bfloat16) for _ in range(nbf)]
        nb = rot(Wb)
        best = {}
        for M in (1, 2, 4, 8, 12, 16):
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            tw = {}
            for warps in (4, 8, 16):
                def f(warps=warps):
                    j = idx(); ops.matmul_tc(W[j], S[j], M, aq=aq, as_=as_, warps=warps, y=y)
                tw[warps] = graph_time(f)
            wbest = min(tw, key=tw.get)
            def pre():
                j = idx(); ops.matmul_tc(W[j], S[j], M, aq=aq, as_=as_, warps=wbest, y=y)
            def ing():
                j = idx(); ops.matmul_tc(W[j], S[j], M, af=A, warps=wbest, y=y)
            def sep():
                ops.quantize(A, 0, outs=(aq, as_)); j = idx(); ops.matmul_tc(W[j], S[j], M, aq=aq, as_=as_, warps=wbest, y=y)
            t_pre, t_in, t_sep = graph_time(pre), graph_time(ing), graph_time(sep)
            t_bf = graph_time(lambda: A @ nb().t(), iters=100)
            wbytes = N * K * (1 + 1 / 32)
            row = dict(N=N, K=K, M=M, warps=wbest, by_warps=tw, mx_prequant=t_pre, mx_in_gemm_quant=t_in, mx_separate_quant=t_sep,
                       cublas_bf16=t_bf, speedup_vs_cublas=t_bf / t_pre, bw_frac=wbytes / (t_pre * 1e-6) / read_bw)
            res["gemm"].append(row); print("gemm", json.dumps(row), flush=True)
        del W, S, Wb

    # Where does in-GEMM quantization beat a separate quantize launch? (N = 6144 and 1536)
    for N in (6144, 1536):
        for K in (768, 2048, 6144):
            W, S = weights(N, K)
            idx = rot(list(range(len(W))))
            for M in (1, 2, 4, 8, 12, 16):
                A = torch.randn(M, K, device=dev).bfloat16()
                aq, as_ = ops.quantize(A, 0)
                y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
                def ing():
                    j = idx(); ops.matmul_tc(W[j], S[j], M, af=A, y=y)
                def sep():
                    ops.quantize(A, 0, outs=(aq, as_)); j = idx(); ops.matmul_tc(W[j], S[j], M, aq=aq, as_=as_, y=y)
                row = dict(N=N, K=K, M=M, in_gemm=graph_time(ing), separate=graph_time(sep))
                res["thresholds"].append(row); print("thr", json.dumps(row), flush=True)
            del W, S

    json.dump(res, open(os.path.join(OUT, "bench.json"), "w"), indent=1)
    print("\nnorm (us): M unfused fused saved inductor_fused fused_q_only %bw")
    for r in res["norm"]:
        print(f"  {r['M']:5d} {r['unfused']:7.2f} {r['fused']:7.2f} {r['saved']:6.2f} {r['inductor_fused'] or float('nan'):7.2f} {r['fused_q_only']:7.2f} {100*r['bw_frac']:5.1f}")
    print("swiglu-oai (us): M unfused fused saved inductor_fused fused_bf16_intermediates %bw")
    for r in res["swiglu"]:
        print(f"  {r['M']:5d} {r['unfused']:7.2f} {r['fused']:7.2f} {r['saved']:6.2f} {r['inductor_fused'] or float('nan'):7.2f} {r['fused_bf16_intermediates']:7.2f} {100*r['bw_frac']:5.1f}")
    print("gemm (us): N K M warps prequant in_gemm separate cublas_bf16 speedup %bw")
    for r in res["gemm"]:
        print(f"  {r['N']} {r['K']} {r['M']:2d} {r['warps']:2d} {r['mx_prequant']:6.2f} {r['mx_in_gemm_quant']:6.2f} {r['mx_separate_quant']:6.2f} {r['cublas_bf16']:6.2f} {r['speedup_vs_cublas']:5.2f} {100*r['bw_frac']:5.1f}")
    print("in-gemm vs separate quant (us): N K M in_gemm separate")
    for r in res["thresholds"]:
        print(f"  {r['N']} {r['K']} {r['M']:2d} {r['in_gemm']:6.2f} {r['separate']:6.2f} {'IN' if r['in_gemm'] < r['separate'] else 'SEP'}")


if __name__ == "__main__":
    main()
