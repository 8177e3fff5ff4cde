"""The split-row norm with gamma read before the PDL wait (`_g` kernels, for a constant gamma)
against the same kernel reading it after, alternating in one process (CUDA-graph replay of 200
back-to-back launches under PDL, median of 15, us per call), H = 6144 bf16, Gemma + fp32 gamma,
residual_out + normed, at the runtime's split for each M. Three rounds; prints each and the
medians.   MXFUSE_BENCH_PDL=1 python3 ab_norm_gpre.py"""
import statistics
import torch
from bench import graph_time
from mxgpu import F_GAMMA_F32, F_GEMMA, Module, Ops, norm_choice

mod = Module(); ops = Ops(mod)
mod.pdl = True
H, NF, dev = 6144, F_GEMMA | F_GAMMA_F32, "cuda"
for M in (8, 16, 32, 64):
    x = (torch.randn(M, H, device=dev) * 3).bfloat16(); r = torch.randn(M, H, device=dev).bfloat16()
    w = (torch.randn(H, device=dev) * 0.1).bfloat16()
    outs = (torch.empty(M, H, dtype=torch.uint8, device=dev), torch.empty(M, H // 32, dtype=torch.uint8, device=dev),
            torch.empty_like(x), torch.empty_like(x))
    split, _ = norm_choice(M, H)
    t = {False: [], True: []}
    for _ in range(3):
        for gc in (False, True):
            t[gc].append(graph_time(lambda: ops.norm_quant(x, r, w, NF, outs=outs, split=split, gamma_const=gc)))
    print(f"M={M} split={split}: after wait {' '.join(f'{v:.3f}' for v in t[False])} (median {statistics.median(t[False]):.3f}) | "
          f"before wait {' '.join(f'{v:.3f}' for v in t[True])} (median {statistics.median(t[True]):.3f})", flush=True)
