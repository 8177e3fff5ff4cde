"""A few launches of the 16-row fragment GEMM loops `_fs` and `_fsa` (mx_matmul_frag.hip) at
6144 x 768, W = 4, S = 1, M = 1 and 16, for `ncu` (device_prof_fsa.sh): why `_fsa` costs ~0.5 µs
more than `_fs` at M = 1 in the back-to-back replay (BENCHMARKS.md follow-ups 13, 16)."""
import torch
from mxgpu import Module, Ops, pack_frag

ops = Ops(Module())
dev = "cuda"
N, K = 6144, 768
W = torch.randint(0, 126, (N, K), dtype=torch.uint8, device=dev)
S = torch.randint(118, 128, (N, K // 32), dtype=torch.uint8, device=dev)
wf, wsf = pack_frag(W, S)
for M in (1, 16):
    aq, as_ = ops.quantize(torch.randn(M, K, device=dev).bfloat16(), 0)
    for sfx in ("_fs", "_fsa"):
        for _ in range(2):
            ops.matmul_frag(wf, wsf, N, K, M, aq, as_, W=4, S=1, sfx=sfx)
torch.cuda.synchronize()
