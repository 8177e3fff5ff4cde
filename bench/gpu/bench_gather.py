"""MxGatherMatMul on the GPU (kernels/gpu/mx_gather.hip): a MoE decode step's stacked MXFP8
experts selected per token, against what a user gets without it, in the same call.

Shapes: MiniMax-M3-like experts, E = 32 stacked, top-8 routing, T = 1..16 tokens (S = 8 T
samples): gate_up W1 [E, 1536, 6144] with the weight first (y [S, N, 1] = W1[ids] @ x[S, K, 1]),
down W2 [E, 6144, 768] likewise. Columns (µs, CUDA-graph replay of 200 back-to-back launches,
median of 15 replays; each launch reads another of 16 random id sets, so replays do not live in
L2):
  ours       mx_gather_matmul_nk (bf16 x, E4M3 experts read in place, bf16 y)
  bf16_bmm   torch: bf16 experts, `torch.bmm(W[ids], x)` (the gather materialises S copies)
  deq_all    the EP's device path before these kernels, minus its host copy: our MxDequantize
             of all E experts to bf16, then torch's gather + bmm
  floor      the selected experts' distinct FP8 bytes at the read-only HBM bandwidth
Also checks ours against torch's f32 product of the dequantized experts (relative error).
Usage: python3 bench_gather.py            (OUT=dir for bench_gather.json)"""
import ctypes, json, os, statistics
import torch
from bench import graph_time, read_bandwidth
from mxgpu import Module

OUT = os.environ.get("OUT", ".")
dev = "cuda"
E, TOPK, IDSETS = 32, 8, 16


def experts(n, k):
    """E4M3 experts [E, n, k] (finite), E8M0 scales [E, n, k/32] near 1, their f32 values."""
    q = (torch.randn(E, n, k, device=dev) * 2).to(torch.float8_e4m3fn)
    s = torch.randint(120, 128, (E, n, k // 32), dtype=torch.uint8, device=dev)
    return q, s


def dequant_f32(q, s):
    return q.float() * torch.exp2(s.float() - 127).repeat_interleave(32, dim=-1)


def main():
    mod = Module()
    read_bw = read_bandwidth(dev)
    mod.pdl = True
    rows = []
    for name, (N, K) in (("gate_up", (1536, 6144)), ("down", (6144, 768))):
        q, s = experts(N, K)
        wb = dequant_f32(q, s).bfloat16()  # torch's bf16 experts (same values)
        deq = torch.empty(E, N, K, dtype=torch.bfloat16, device=dev)
        err = torch.zeros(2, dtype=torch.int64, device=dev)
        for T in (1, 2, 4, 8, 16):
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

            def bf16_bmm():
                return torch.bmm(wb[nxt()], x.unsqueeze(-1))

            def deq_all():
                mod.launch("mx_dequantize_e4m3_bf16", (min(-(-E * N * K // 256), 1 << 16),), (256,),
                           [q, s, deq, ctypes.c_longlong(E * N * K), ctypes.c_longlong(K), ctypes.c_longlong(1), ctypes.c_longlong(32),
                            ctypes.c_longlong(K // 32), ctypes.c_longlong(1), ctypes.c_longlong(0)])
                return torch.bmm(deq[nxt()], x.unsqueeze(-1))

            got = ours(ids[0]).float()
            want = torch.bmm(dequant_f32(q, s)[ids[0]], x.float().unsqueeze(-1)).squeeze(-1)
            torch.cuda.synchronize()
            rel = ((got - want).norm() / want.norm()).item()
            assert err.sum().item() == 0
            distinct = statistics.mean(len(torch.unique(i)) for i in ids)
            floor = distinct * N * K * (1 + 1 / 32) / read_bw * 1e6
            t = {k: graph_time(f) for k, f in (("ours", ours), ("bf16_bmm", bf16_bmm), ("deq_all", deq_all))}
            rows.append(dict(shape=name, N=N, K=K, T=T, S=S, rel=rel, floor=floor, **t))
            print(f"{name:7s} N={N} K={K} T={T:2d} S={S:3d}: ours {t['ours']:8.2f} | bf16 bmm {t['bf16_bmm']:8.2f} "
                  f"({t['bf16_bmm'] / t['ours']:.1f}x) | deq_all {t['deq_all']:8.2f} ({t['deq_all'] / t['ours']:.1f}x) | "
                  f"floor {floor:6.2f} ({100 * floor / t['ours']:.0f}% of HBM) | rel err {rel:.1e}", flush=True)
        del q, s, wb, deq
    json.dump(dict(read_bw=read_bw, rows=rows), open(os.path.join(OUT, "bench_gather.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
