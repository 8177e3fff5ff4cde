"""A/B of the split-8 norm kernel against its lean variant (issue 6 follow-up 10), one process,
one cubin: mx_add_rmsnorm_quant_bf16_c1_s8 (the runtime's M = 8 kernel, flags at run time) vs
_c1_s8_lean (H = 6144, Gemma + gamma_in_f32, residual / residual_out / normed as compile-time
constants), bench.py's norm data and outputs (bf16, H = 6144), CUDA-graph replay of 200 launches
under PDL (MXFUSE_BENCH_PDL=1), alternating base / lean per measurement, median of ROUNDS
measurements (each itself a median of 15 replays). argv: the M values (default 1 8 16 32)."""
import os, statistics, sys
import torch
from bench import graph_time
from mxgpu import Module, Ops, F_GEMMA, F_GAMMA_F32

H, NF = 6144, F_GEMMA | F_GAMMA_F32
ROUNDS = int(os.environ.get("ROUNDS", "5"))


def main():
    ops = Ops(Module())
    ms = [int(a) for a in sys.argv[1:]] or [1, 8, 16, 32]
    print(f"norm A/B (us; bf16, H = {H}, Gemma + gamma_in_f32, residual, normed; PDL={os.environ.get('MXFUSE_BENCH_PDL', '')}, "
          f"median of {ROUNDS} alternating rounds)")
    print(f"{'M':>4s} {'base _c1_s8':>12s} {'lean':>8s} {'base/lean':>9s}   all base | all lean")
    for M in ms:
        x = (torch.randn(M, H, device="cuda") * 3).bfloat16(); r = torch.randn(M, H, device="cuda").bfloat16()
        w = (torch.randn(H, device="cuda") * 0.1).bfloat16()
        outs = (torch.empty(M, H, dtype=torch.uint8, device="cuda"), torch.empty(M, H // 32, dtype=torch.uint8, device="cuda"),
                torch.empty_like(x), torch.empty_like(x))
        tb, tl = [], []
        for _ in range(ROUNDS):
            tb.append(graph_time(lambda: ops.norm_quant(x, r, w, NF, outs=outs, split=8)))
            tl.append(graph_time(lambda: ops.norm_quant(x, r, w, NF, outs=outs, split=8, opt="_lean")))
        b, l = statistics.median(tb), statistics.median(tl)
        print(f"{M:4d} {b:12.3f} {l:8.3f} {b / l:9.3f}   {' '.join(f'{t:.3f}' for t in tb)} | {' '.join(f'{t:.3f}' for t in tl)}", flush=True)


if __name__ == "__main__":
    main()
