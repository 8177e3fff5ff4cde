"""MxGatherMatMul on the GPU (kernels/gpu/mx_gather.hip): a MoE decode step's stacked MXFP8
experts selected per token, against what a user gets without it, in the same call.

Shapes: MiniMax-M3-like experts, E = 32 stacked, top-8 routing, T = 1..16 tokens (S = 8 T
samples): gate_up W1 [E, 1536, 6144] with the weight first (y [S, N, 1] = W1[ids] @ x[S, K, 1]),
down W2 [E, 6144, 768] likewise. Columns (µs, CUDA-graph replay of 200 back-to-back launches,
median of 15 replays; each launch reads another of 16 random id sets, so replays do not live in
L2):
  grouped    mx_matmul_frag_wo_ggroup (the runtime's kernel for f16 / bf16 x on sm_90 with an
             index a sample: the samples grouped by expert on the device, each selected expert's
             tile read once per 16 of its samples; bits checked equal to tc's)
  tc         mx_matmul_frag_wo_gather (the per-sample tensor-core kernel: each expert packed for
             the fragment GEMM, read once per sample)
  ours       mx_gather_matmul_nk (the GEMV: E4M3 experts read in place; f32 x and other devices)
  bf16_bmm   torch: bf16 experts, `torch.bmm(W[ids], x)` (the gather materialises S copies)
  deq_all    (BENCH_DEQ_ALL=1) the EP's device path before these kernels, minus its host copy:
             our MxDequantize of all E experts to bf16, then torch's gather + bmm
  floor      the selected experts' distinct FP8 bytes at the read-only HBM bandwidth
Also checks ours against torch's f32 product of the dequantized experts (relative error).

Second part, the weight-only MxMatMul (a bf16 activation [M, K] times one MX weight [N, K]; the
same kernel on one "expert", `mx_matmul_float_a_nk`; and the tensor-core kernel on the weight
packed for the fragment GEMM, `mx_matmul_frag_wo`, the runtime's choice for f16 / bf16 `a` on
sm_90) at the MiniMax-M3 decode shapes against
cuBLAS bf16 (`x @ W.t()`) and the EP's device path before it (our MxDequantize of the weight to
bf16 every step, then cuBLAS), weights rotating over >= 400 MB so L2 holds none.
Usage: python3 bench_gather.py            (OUT=dir for bench_gather.json)"""
import ctypes, json, os, statistics
import torch
from bench import graph_time, read_bandwidth
from mxgpu import Module, epilogue, pack_frag

OUT = os.environ.get("OUT", ".")
dev = "cuda"
E, TOPK, IDSETS = 32, 8, 16


def experts(n, k, e=E):
    """E4M3 experts [e, n, k] (finite), E8M0 scales [e, n, k/32] near 1."""
    q = (torch.randn(e, n, k, device=dev) * 2).to(torch.float8_e4m3fn)
    s = torch.randint(120, 128, (e, n, k // 32), dtype=torch.uint8, device=dev)
    return q, s


def dequant_f32(q, s):
    return q.float() * torch.exp2(s.float() - 127).repeat_interleave(32, dim=-1)


# The runtime's launch rules for the tensor-core MxGatherMatMul (kernels/src/gpu/weight_only.rs),
# mirrored so each row times what the runtime would launch.
def frag_wo_warps(blocks):
    """weight_only.rs frag_wo_warps: 8 warps a block on grids of fewer blocks than two an SM."""
    return 8 if blocks < 2 * torch.cuda.get_device_properties(0).multi_processor_count else 4


def groups_on_device(S):
    """weight_only.rs grouped_slots: grouped by expert with at least as many samples as experts."""
    return S >= E


def gather_per_sample(mod, ty, x, wf, wsf, ids, y, err, S, N, K, w=None):
    """mx_matmul_frag_wo_gather (one sample a grid z, one row a sample)."""
    w = w or frag_wo_warps(-(-N // 16) * S)
    mod.launch(f"mx_matmul_frag_wo_gather_{ty}_{ty}_w{w}", (1, -(-N // 16), S), (32 * w,),
               [x, wf, wsf, ids, ctypes.c_int(1), y, ctypes.c_int(1), ctypes.c_int(N), ctypes.c_int(K),
                ctypes.c_int(E), ctypes.c_int(0), ctypes.c_int(0), err])
    return y


def gather_grouped(mod, ty, x, wf, wsf, ids, y, err, S, N, K, nt=None, w=None):
    """mx_matmul_frag_wo_ggroup: nt tiles a block (runtime: 4 for K <= 1024, GROUP_SHORT_K)."""
    nt = nt or (4 if K <= 1024 else 1)
    slots = min(S, (S + 15 * min(E, S)) // 16)
    cols = -(-N // (16 * nt))
    w = w or frag_wo_warps(slots * cols)
    mod.launch(f"mx_matmul_frag_wo_ggroup_{ty}_{ty}_w{w}{'_t4' if nt == 4 else ''}", (slots, cols, 1), (32 * w,),
               [x, wf, wsf, ids, ctypes.c_int(1), y, ctypes.c_int(S), ctypes.c_int(N), ctypes.c_int(K),
                ctypes.c_int(E), ctypes.c_int(0), err])
    return y


def main():
    mod = Module()
    read_bw = read_bandwidth(dev)
    mod.pdl = True
    rows = []
    for name, (N, K) in (("gate_up", (1536, 6144)), ("down", (6144, 768))):
        q, s = experts(N, K)
        wb = dequant_f32(q, s).bfloat16()  # torch's bf16 experts (same values)
        packs = [pack_frag(q[x].view(torch.uint8), s[x]) for x in range(E)]
        wf = torch.cat([p[0].flatten() for p in packs])
        wsf = torch.cat([p[1].flatten() for p in packs])
        del packs
        deq = torch.empty(E, N, K, dtype=torch.bfloat16, device=dev)
        err = torch.zeros(2, dtype=torch.int64, device=dev)
        for T in (1, 2, 4, 8, 16, 32, 64):
            S = T * TOPK
            ids = [torch.stack([torch.randperm(E, device=dev)[:TOPK] for _ in range(T)]).flatten()
                   for _ in range(IDSETS)]
            x = torch.randn(S, K, device=dev).bfloat16()
            y = torch.empty(S, N, dtype=torch.bfloat16, device=dev)
            turn = [0]

            def nxt():
                turn[0] = (turn[0] + 1) % IDSETS
                return ids[turn[0]]

            def ours(i=None):
                mod.launch("mx_gather_matmul_nk_bf16_bf16", (S, -(-N // 8), 1), (256,),
                           [x, q, s, nxt() if i is None else i, ctypes.c_int(1), y, ctypes.c_int(1), ctypes.c_int(K),
                            ctypes.c_int(E), ctypes.c_int(N), ctypes.c_int(0), ctypes.c_int(0), err])
                return y

            def tc(i=None):
                return gather_per_sample(mod, "bf16", x, wf, wsf, nxt() if i is None else i, y, err, S, N, K)

            W = frag_wo_warps(-(-N // 16) * S)  # the per-sample kernel's
            rule = "grouped" if groups_on_device(S) else "tc"

            def grouped_nt(nt, i=None, w=None):
                return gather_grouped(mod, "bf16", x, wf, wsf, nxt() if i is None else i, y, err, S, N, K, nt, w)

            nt_rt = 4 if K <= 1024 else 1  # weight_only.rs GROUP_SHORT_K

            def grouped(i=None):
                return grouped_nt(nt_rt, i)

            def grouped_other(i=None):
                return grouped_nt(5 - nt_rt, i)

            def bf16_bmm():
                return torch.bmm(wb[nxt()], x.unsqueeze(-1))

            def deq_all():
                mod.launch("mx_dequantize_e4m3_bf16", (min(-(-E * N * K // 256), 1 << 16),), (256,),
                           [q, s, deq, ctypes.c_longlong(E * N * K), ctypes.c_longlong(K), ctypes.c_longlong(1), ctypes.c_longlong(32),
                            ctypes.c_longlong(K // 32), ctypes.c_longlong(1), ctypes.c_longlong(0)])
                return torch.bmm(deq[nxt()], x.unsqueeze(-1))

            want = torch.bmm(dequant_f32(q, s)[ids[0]], x.float().unsqueeze(-1)).squeeze(-1)
            got = ours(ids[0]).float()
            rel = ((got - want).norm() / want.norm()).item()
            got = tc(ids[0]).float()
            torch.cuda.synchronize()
            rel_tc = ((got - want).norm() / want.norm()).item()
            bits = []
            for i in ids[:4]:  # the grouped kernels' bits against the per-sample kernel's at its W
                a = tc(i).clone()
                bits += [torch.equal(a, grouped_nt(nt, i, W)) for nt in (1, 4)]
            torch.cuda.synchronize()
            assert err.sum().item() == 0
            distinct = statistics.mean(len(torch.unique(i)) for i in ids)
            floor = distinct * N * K * (1 + 1 / 32) / read_bw * 1e6
            fns = [("grouped", grouped), ("grouped_other", grouped_other), ("tc", tc), ("ours", ours)]
            fns += [("bf16_bmm", bf16_bmm)] if T <= 16 else []
            fns += [("deq_all", deq_all)] if os.environ.get("BENCH_DEQ_ALL") == "1" else []
            t = {k: graph_time(f) for k, f in fns}
            rows.append(dict(shape=name, N=N, K=K, T=T, S=S, rel=rel, rel_tc=rel_tc, floor=floor, bits=all(bits), **t))
            bmm = f"{t['bf16_bmm']:8.2f} ({t['bf16_bmm'] / t['grouped']:.1f}x grouped)" if "bf16_bmm" in t else "-"
            print(f"{name:7s} N={N} K={K} T={T:2d} S={S:3d}: runtime ({rule}) {t[rule]:8.2f} "
                  f"({100 * floor / t[rule]:.0f}% of HBM) | grouped {t['grouped']:8.2f} ({100 * floor / t['grouped']:.0f}% of HBM, "
                  f"bits == tc: {all(bits)}; with {5 - nt_rt} tiles a block {t['grouped_other']:8.2f}) | tensor cores per sample {t['tc']:8.2f} ({t['tc'] / t['grouped']:.2f}x grouped, "
                  f"rel err {rel_tc:.1e}) | GEMV {t['ours']:8.2f} (rel err {rel:.1e}) | bf16 bmm {bmm} | "
                  f"floor {floor:6.2f}", flush=True)
        del q, s, wb, deq, wf, wsf
    wonly = weight_only(mod, read_bw)
    f32 = f32_activations(mod, read_bw)
    json.dump(dict(read_bw=read_bw, rows=rows, weight_only=wonly, f32=f32),
              open(os.path.join(OUT, "bench_gather.json"), "w"), indent=1)


def f32_activations(mod, read_bw):
    """f32 activations (a model exported in f32): the tensor-core kernels with x split into three
    bf16 parts (`_f32_f32`) against the CUDA-core GEMV the runtime ran for f32 before, the MoE
    experts (grouped where the runtime groups, else per sample) and the weight-only MxMatMul (and
    cuBLAS f32 on f32 weights, no TF32); relative error against torch's f64 product."""
    rows = []
    for name, (N, K) in (("gate_up", (1536, 6144)), ("down", (6144, 768))):
        q, s = experts(N, K)
        packs = [pack_frag(q[x].view(torch.uint8), s[x]) for x in range(E)]
        wf = torch.cat([p[0].flatten() for p in packs])
        wsf = torch.cat([p[1].flatten() for p in packs])
        del packs
        err = torch.zeros(2, dtype=torch.int64, device=dev)
        for T in (1, 4, 16):
            S = T * TOPK
            ids = [torch.stack([torch.randperm(E, device=dev)[:TOPK] for _ in range(T)]).flatten()
                   for _ in range(IDSETS)]
            x = torch.randn(S, K, device=dev)
            y = torch.empty(S, N, dtype=torch.float32, device=dev)
            turn = [0]

            def nxt():
                turn[0] = (turn[0] + 1) % IDSETS
                return ids[turn[0]]

            def tc(i=None):
                launch = gather_grouped if groups_on_device(S) else gather_per_sample
                return launch(mod, "f32", x, wf, wsf, nxt() if i is None else i, y, err, S, N, K)

            def gemv(i=None):
                mod.launch("mx_gather_matmul_nk_f32_f32", (S, -(-N // 8), 1), (256,),
                           [x, q, s, nxt() if i is None else i, ctypes.c_int(1), y, ctypes.c_int(1), ctypes.c_int(K),
                            ctypes.c_int(E), ctypes.c_int(N), ctypes.c_int(0), ctypes.c_int(0), err])
                return y

            want = torch.bmm(dequant_f32(q, s)[ids[0]].double(), x.double().unsqueeze(-1)).squeeze(-1)
            rel = {}
            for k, f in (("tc", tc), ("gemv", gemv)):
                got = f(ids[0]).double()
                rel[k] = ((got - want).norm() / want.norm()).item()
            assert err.sum().item() == 0
            t = {k: graph_time(f) for k, f in (("tc", tc), ("gemv", gemv))}
            distinct = statistics.mean(len(torch.unique(i)) for i in ids)
            floor = distinct * N * K * (1 + 1 / 32) / read_bw * 1e6
            rows.append(dict(shape=name, N=N, K=K, T=T, S=S, floor=floor, rel=rel, **t))
            print(f"f32 {name:7s} T={T:2d} S={S:3d}: tensor cores {t['tc']:8.2f} ({t['gemv'] / t['tc']:.2f}x GEMV, "
                  f"{100 * floor / t['tc']:.0f}% of HBM, rel err {rel['tc']:.1e}) | GEMV {t['gemv']:8.2f} "
                  f"(rel err {rel['gemv']:.1e})", flush=True)
        del q, s, wf, wsf
    for N, K in ((1536, 6144), (6144, 768), (6144, 6144)):
        copies = max(2, -(-400 * 2**20 // (N * K)))
        ws = [experts_one(N, K) for _ in range(copies)]
        frags = [pack_frag(q.view(torch.uint8), s) for q, s in ws]
        wb = [dequant_f32(q, s) for q, s in ws[:max(2, copies // 8)]]  # f32 weights: 4 B an element
        turn = [0]

        def nxt(n):
            turn[0] += 1
            return turn[0] % n
        for M in (1, 4, 16):
            x = torch.randn(M, K, device=dev)
            y = torch.empty(M, N, dtype=torch.float32, device=dev)
            ep = epilogue()
            W = frag_wo_warps(-(-N // 16) * -(-M // 16))

            def tc(w=None):
                wf, wsf = frags[nxt(len(frags))] if w is None else w
                mod.launch(f"mx_matmul_frag_wo_f32_f32_w{W}", (-(-M // 16), -(-N // 16), 1), (32 * W,),
                           [x, wf, wsf, y, ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K), ep])
                return y

            def gemv():
                q, s = ws[nxt(len(ws))]
                mod.launch("mx_matmul_float_a_nk_f32_f32", (1, -(-N // 8), -(-M // 8)), (256,),
                           [x, q, s, y, ctypes.c_int(M), ctypes.c_int(K), ctypes.c_int(N), ep])
                return y

            def cublas():
                return x @ wb[nxt(len(wb))].t()

            want = x.double() @ dequant_f32(*ws[0]).double().t()
            got = tc(frags[0]).double()
            rel = ((got - want).norm() / want.norm()).item()
            t = {k: graph_time(f) for k, f in (("tc", tc), ("gemv", gemv), ("cublas_f32", cublas))}
            hbm = N * K * (1 + 1 / 32) / read_bw * 1e6
            rows.append(dict(N=N, K=K, M=M, rel=rel, floor=hbm, **t))
            print(f"f32 weight-only {N}x{K} M={M:2d}: tensor cores {t['tc']:7.2f} ({t['gemv'] / t['tc']:.2f}x GEMV, "
                  f"{t['cublas_f32'] / t['tc']:.2f}x cuBLAS f32, {100 * hbm / t['tc']:.0f}% of HBM, rel err {rel:.1e}) | "
                  f"GEMV {t['gemv']:7.2f} | cuBLAS f32 {t['cublas_f32']:7.2f}", flush=True)
        del ws, wb, frags
    return rows


def weight_only(mod, read_bw):
    rows = []
    for N, K in ((1536, 6144), (6144, 768), (6144, 6144)):
        copies = max(2, -(-400 * 2**20 // (N * K)))
        ws = [experts_one(N, K) for _ in range(copies)]
        frags = [pack_frag(q.view(torch.uint8), s) for q, s in ws]
        W = frag_wo_warps(-(-N // 16))  # M <= 16: one row tile
        wb = [dequant_f32(q, s).bfloat16() for q, s in ws[:max(2, copies // 2)]]
        deq = torch.empty(N, K, dtype=torch.bfloat16, device=dev)
        turn = [0]

        def nxt(n):
            turn[0] += 1
            return turn[0] % n
        for M in (1, 4, 8, 16):
            x = torch.randn(M, K, device=dev).bfloat16()
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            ep = epilogue()

            def ours(w=None):
                q, s = ws[nxt(len(ws))] if w is None else w
                mod.launch("mx_matmul_float_a_nk_bf16_bf16", (1, -(-N // 8), -(-M // 8)), (256,),
                           [x, q, s, y, ctypes.c_int(M), ctypes.c_int(K), ctypes.c_int(N), ep])
                return y

            def tc(w=None):
                wf, wsf = frags[nxt(len(frags))] if w is None else w
                mod.launch(f"mx_matmul_frag_wo_bf16_bf16_w{W}", (-(-M // 16), -(-N // 16), 1), (32 * W,),
                           [x, wf, wsf, y, ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K), ep])
                return y

            def cublas():
                return x @ wb[nxt(len(wb))].t()

            def deq_cublas():
                q, s = ws[nxt(len(ws))]
                mod.launch("mx_dequantize_e4m3_bf16", (min(-(-N * K // 256), 1 << 16),), (256,),
                           [q, s, deq, ctypes.c_longlong(N * K), ctypes.c_longlong(K), ctypes.c_longlong(1),
                            ctypes.c_longlong(32), ctypes.c_longlong(K // 32), ctypes.c_longlong(1),
                            ctypes.c_longlong(0)])
                return x @ deq.t()

            want = x.float() @ dequant_f32(*ws[0]).t()
            got = ours(ws[0]).float()
            rel = ((got - want).norm() / want.norm()).item()
            got = tc(frags[0]).float()
            torch.cuda.synchronize()
            rel_tc = ((got - want).norm() / want.norm()).item()
            t = {k: graph_time(f) for k, f in (("ours", ours), ("tc", tc), ("cublas_bf16", cublas),
                                               ("deq_cublas", deq_cublas))}
            hbm = N * K * (1 + 1 / 32) / read_bw * 1e6
            rows.append(dict(N=N, K=K, M=M, rel=rel, rel_tc=rel_tc, floor=hbm, **t))
            print(f"weight-only {N}x{K} M={M:2d}: tensor cores {t['tc']:7.2f} ({t['cublas_bf16'] / t['tc']:.2f}x cuBLAS, "
                  f"{100 * hbm / t['tc']:.0f}% of HBM, rel err {rel_tc:.1e}) | GEMV {t['ours']:7.2f} | cuBLAS bf16 {t['cublas_bf16']:7.2f} "
                  f"({t['cublas_bf16'] / t['ours']:.2f}x) | dequantize + cuBLAS {t['deq_cublas']:7.2f} "
                  f"({t['deq_cublas'] / t['ours']:.2f}x) | {100 * hbm / t['ours']:.0f}% of HBM | rel err {rel:.1e}",
                  flush=True)
        del ws, wb, deq, frags
    return rows


def experts_one(n, k):
    q, s = experts(n, k, e=1)
    return q[0], s[0]


if __name__ == "__main__":
    main()
