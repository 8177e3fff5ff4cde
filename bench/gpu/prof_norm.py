"""The split-row norm kernel at M = 8 for `ncu` and a SASS dump (issue 6, norm latency at M = 8).
    python3 prof_norm.py CUBIN_OUT   # writes the program's cubin, then launches the M = 8 kernel
Used by device_norm_sass.sh."""
import sys
import torch
from mxgpu import Module, Ops, F_GEMMA, F_GAMMA_F32

m = Module()
if len(sys.argv) > 1:
    open(sys.argv[1], "wb").write(m.cubin)
ops = Ops(m)
M, H = 8, 6144
x = torch.randn(M, H, device="cuda").bfloat16(); r = torch.randn(M, H, device="cuda").bfloat16()
w = (torch.randn(H, device="cuda") * 0.1).bfloat16()
for _ in range(6):
    ops.norm_quant(x, r, w, F_GEMMA | F_GAMMA_F32)
torch.cuda.synchronize()
print("prof_norm done")
