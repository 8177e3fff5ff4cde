"""The SwiGLU logistic-table kernels for `ncu` (bench/gpu/device_sigtab.sh NCU=1): one launch each, at
M = 8192, I = 768, split halves, gate_up ~ N(0, 8^2), rounded activation, of ab_sigtab.py's
variants (OAI: the default kernel at the host's choice, the lean certified-sigma and table kernels
at 128 / 256 lanes a block, the table with a capped grid, the access-pattern floor; SiLU: the
default kernel and the table at 128 lanes), in that order, to count executed instructions per
output. SWLANE=1 (follow-up 9): ab_sigtab.py's SWLANE variants, OAI then SiLU."""
import os
import torch
from ab_sigtab import I, variants
from mxgpu import Module, Ops, F_OAI

ops = Ops(Module())
M = 8192
sms = torch.cuda.get_device_properties(0).multi_processor_count
gu = (torch.randn(M, 2 * I, device="cuda") * 8).bfloat16()
if os.environ.get("SWLANE") == "1":
    for flags, act in ((F_OAI, "a1"), (0, "a0")):
        for name, kw in variants(sms, ops, act):
            ops.swiglu_quant(gu, None, I, "split_halves", flags, **kw)
    torch.cuda.synchronize()
    print("prof done; outputs per launch", M * I)
    raise SystemExit(0)
for name, kw in variants(sms):
    if name != "e8c":
        ops.swiglu_quant(gu, None, I, "split_halves", F_OAI, **kw)
for name, kw in variants(sms):
    if name in ("host", "st128"):
        ops.swiglu_quant(gu, None, I, "split_halves", 0, **kw)
torch.cuda.synchronize()
print("prof done; outputs per launch", M * I)
