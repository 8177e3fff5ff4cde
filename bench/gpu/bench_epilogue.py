"""The decode GEMM with and without the MxMatMul epilogue (a Gemm's bias), beside cuBLAS bf16, timed
as bench.py times (CUDA-graph replay, PDL when MXFUSE_BENCH_PDL=1): the fragment-packed kernel at
its runtime choice for (N, K) = (1536, 6144), (6144, 768), (6144, 6144), M = 8 and 16; weights
rotate over copies (>= 400 MB) so the L2 holds none of them, as in bench_frag_pdl.py.
    python3 bench_epilogue.py [OLD_CUBIN]   # one line per shape: us plain / with bias / cuBLAS, ratios
OLD_CUBIN (an older checkout's program, as for ab_swiglu.py): its frag kernel at the same choice,
timed alternately with the tree's (two rounds each), for an old / new A/B of the plain GEMM."""
import os
import sys
import torch
from bench import graph_time
from mxgpu import Module, Ops, epilogue, pack_frag

mod = Module(); ops = Ops(mod)
mod.pdl = os.environ.get("MXFUSE_BENCH_PDL") == "1"
old = None
if len(sys.argv) > 1:
    from ab_swiglu import module_from_cubin
    old_mod = module_from_cubin(sys.argv[1]); old_mod.pdl = mod.pdl
    old = Ops(old_mod)
dev = "cuda"
print("N K M: frag us, frag+bias us, cublas bf16 us | cublas/frag, cublas/(frag+bias)" + (" | old frag us x2, new frag us x2" if old else ""))
for N, K in ((1536, 6144), (6144, 768), (6144, 6144)):
    copies = max(2, -(-400_000_000 // (N * K)))
    packs = []
    for _ in range(copies):
        w = torch.randint(0, 126, (N, K), dtype=torch.uint8, device=dev)
        s = torch.randint(118, 128, (N, K // 32), dtype=torch.uint8, device=dev)
        packs.append(pack_frag(w, s))
    wb = [torch.randn(K, N, device=dev).bfloat16() for _ in range(max(2, -(-400_000_000 // (2 * N * K))))]
    for M in (8, 16):
        a = torch.randn(M, K, device=dev).bfloat16()
        aq, as_ = ops.quantize(a, 0)
        y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
        bias = torch.randn(N, device=dev).bfloat16()
        ep = epilogue(bias, 1.0, 1.0, M, N)
        it = {"i": 0}

        def nxt(lst):
            it["i"] = (it["i"] + 1) % len(lst)
            return lst[it["i"]]

        plain = graph_time(lambda: ops.matmul_frag(*nxt(packs), N, K, M, aq, as_, y=y))
        with_bias = graph_time(lambda: ops.matmul_frag(*nxt(packs), N, K, M, aq, as_, y=y, ep=ep))
        cublas = graph_time(lambda: torch.matmul(a, nxt(wb)))
        ab = ""
        if old:  # the old kernels take no epilogue argument; the extra launch parameter is unread
            t = [graph_time(lambda o=o: o.matmul_frag(*nxt(packs), N, K, M, aq, as_, y=y)) for o in (old, ops, old, ops)]
            ab = f" | {t[0]:.2f} {t[2]:.2f}, {t[1]:.2f} {t[3]:.2f}"
        print(f"{N} {K} {M}: {plain:.2f}, {with_bias:.2f}, {cublas:.2f} | {cublas / plain:.2f}x, {cublas / with_bias:.2f}x{ab}", flush=True)
