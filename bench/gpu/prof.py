"""A few launches of each kernel at the benchmark shapes, for `ncu` (see docs/gpu.md): the norm and
SwiGLU at M = 8 / 8192, and the fragment-packed decode GEMM at its runtime shape for 1536 x 6144 and
6144 x 6144, M = 8 and 16 (weights rotated over copies so they come from HBM, as in the bench).
    ncu --clock-control none -k regex:mx_matmul_frag --launch-skip 4 --launch-count 4 \\
        --section SpeedOfLight --section WarpStateStats ... python3 prof.py"""
import torch
from mxgpu import Module, Ops, F_GEMMA, F_GAMMA_F32, F_OAI, F_FP32_ACT, pack_frag

ops = Ops(Module())
dev = "cuda"
H, I = 6144, 768
for M in (8, 8192):
    x = torch.randn(M, H, device=dev).bfloat16(); r = torch.randn(M, H, device=dev).bfloat16()
    w = (torch.randn(H, device=dev) * 0.1).bfloat16()
    gu = (torch.randn(M, 2 * I, device=dev) * 8).bfloat16()
    for _ in range(2):
        ops.norm_quant(x, r, w, F_GEMMA | F_GAMMA_F32)
        ops.swiglu_quant(gu, None, I, "split_halves", F_OAI | F_FP32_ACT)
for N, K in ((1536, 6144), (6144, 6144)):
    P = []
    for _ in range(8):
        W = torch.randint(0, 126, (N, K), dtype=torch.uint8, device=dev)
        S = torch.randint(118, 128, (N, K // 32), dtype=torch.uint8, device=dev)
        P.append(pack_frag(W, S))
    for M in (8, 16):
        A = torch.randn(M, K, device=dev).bfloat16()
        aq, as_ = ops.quantize(A, 0)
        for j in range(1):  # ncu flushes the caches between its replays
            ops.matmul_frag(P[j][0], P[j][1], N, K, M, aq, as_)
torch.cuda.synchronize()
print("prof done")
