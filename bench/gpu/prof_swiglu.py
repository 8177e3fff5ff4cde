"""The SwiGLU kernels for `ncu` (bench/gpu/device_explore.sh NCU_SWIGLU=1): one launch each of the
rounded-activation (OAI) and the fp32-activation (OAI) kernel at M = 8192, I = 768, split halves,
on the bench's data (gate_up ~ N(0, 8^2)), to count executed instructions per element; with an old
cubin as argv[1] (ab_swiglu.py's), the same launches of its kernels first."""
import sys
import torch
from mxgpu import Module, Ops, F_OAI, F_FP32_ACT

mods = ([__import__("ab_swiglu").module_from_cubin(sys.argv[1])] if sys.argv[1:] else []) + [Module()]
M, I = 8192, 768
gu = (torch.randn(M, 2 * I, device="cuda") * 8).bfloat16()
for i, m in enumerate(mods):
    for e in ((8,) if i == len(mods) - 1 else (None,)):
        for flags in (F_OAI, F_OAI | F_FP32_ACT):
            Ops(m).swiglu_quant(gu, None, I, "split_halves", flags, e=e, block=256 if e else None)
torch.cuda.synchronize()
print("prof done; elements", M * I)
