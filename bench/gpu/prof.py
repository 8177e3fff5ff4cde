"""A few launches of each kernel at the benchmark shapes, for `ncu` (see docs/gpu.md)."""
import torch
from mxgpu import Module, Ops, F_GEMMA, F_GAMMA_F32, F_OAI, F_FP32_ACT

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
    W = torch.randint(0, 126, (N, K), dtype=torch.uint8, device=dev)
    S = torch.randint(118, 128, (N, K // 32), dtype=torch.uint8, device=dev)
    A = torch.randn(8, K, device=dev).bfloat16()
    aq, as_ = ops.quantize(A, 0)
    for _ in range(2):
        ops.matmul_tc(W, S, 8, aq=aq, as_=as_, warps=16 if N < 4096 else 8)
        ops.matmul_tc(W, S, 8, af=A, warps=16 if N < 4096 else 8)
torch.cuda.synchronize()
print("prof done")
