"""A few launches of the runtime's decode GEMM at one shape (default 6144 x 6144, M = 1: `_t2`),
for ncu's per-instruction stall sampling (bench/gpu/device_prof_t2.sh); weights rotate over
copies so they come from HBM. Usage: python3 prof_t2.py [N K M]"""
import sys
import torch
from mxgpu import Module, Ops, frag_kernel, pack_frag

N, K, M = (int(v) for v in sys.argv[1:4]) if len(sys.argv) >= 4 else (6144, 6144, 1)
ops = Ops(Module())
dev = "cuda"
P = []
for _ in range(4):
    W = torch.randint(0, 126, (N, K), dtype=torch.uint8, device=dev)
    S = torch.randint(118, 128, (N, K // 32), dtype=torch.uint8, device=dev)
    P.append(pack_frag(W, S))
A = torch.randn(M, K, device=dev).bfloat16()
aq, as_ = ops.quantize(A, 0)
print("kernel", frag_kernel(N, K, M), flush=True)
for j in range(4):
    ops.matmul_frag(P[j][0], P[j][1], N, K, M, aq, as_)
torch.cuda.synchronize()
print("prof done")
