"""The SwiGLU logistic-table kernels for `ncu` (bench/gpu/device_sigtab.sh NCU=1): one launch each, at
M = 8192, I = 768, split halves, gate_up ~ N(0, 8^2), rounded activation, of ab_sigtab.py's
variants but e8c (OAI: the launch table's choice, the choice before the table kernel, the table
kernel at 128 / 256 lanes a block and with a capped grid; SiLU: the launch table's choice and the
table at 128 lanes), in that order, to count executed instructions per output."""
import torch
from ab_sigtab import I, variants
from mxgpu import Module, Ops, F_OAI

ops = Ops(Module())
M = 8192
sms = torch.cuda.get_device_properties(0).multi_processor_count
gu = (torch.randn(M, 2 * I, device="cuda") * 8).bfloat16()
for name, kw in variants(sms):
    if name != "e8c":
        ops.swiglu_quant(gu, None, I, "split_halves", F_OAI, **kw)
for name, kw in variants(sms):
    if name in ("host", "st128"):
        ops.swiglu_quant(gu, None, I, "split_halves", 0, **kw)
torch.cuda.synchronize()
print("prof done; outputs per launch", M * I)
