"""Where a back-to-back decode GEMM's time goes (issue 6: why the small shapes sit at 30-40 % of
HBM). Timed as bench.py times (CUDA-graph replay of 200 back-to-back launches, median of 15, us per
call, PDL launches as the Rust runtime makes them on sm_90), the fragment GEMM at its runtime
choice, M = 1 / 8 / 16:
  rotating  weights rotate over >= 400 MB of copies (the L2 holds none: bench_frag_pdl.py's method);
  resident  one weight copy every launch (it stays in the 50 MB L2 where it fits: no DRAM reads);
  k128      the same N with K = 128 (one group per warp: the kernel's fixed chain);
and two floors: an MxQuantize launch of one 32-element row (a minimal kernel of ours, PDL) and
torch's empty `add_` (no PDL). If rotating ~ resident, DRAM bandwidth is not what bounds a shape.
    python3 bench_gemm_floor.py"""
import torch
from bench import graph_time
from mxgpu import Module, Ops, frag_choice, pack_frag

mod = Module(); ops = Ops(mod); mod.pdl = True
dev = "cuda"
tiny = torch.randn(1, 32, device=dev).bfloat16()
qo = (torch.empty(1, 32, dtype=torch.uint8, device=dev), torch.empty(1, 1, dtype=torch.uint8, device=dev))
empty = torch.empty(1, device=dev)
print(f"floors: MxQuantize 1x32 (PDL) {graph_time(lambda: ops.quantize(tiny, 0, outs=qo)):.2f} us, "
      f"torch add_ (no PDL) {graph_time(lambda: empty.add_(0)):.2f} us", flush=True)


def packs_of(N, K, copies):
    return [pack_frag(torch.randint(0, 126, (N, K), dtype=torch.uint8, device=dev),
                      torch.randint(118, 128, (N, K // 32), dtype=torch.uint8, device=dev)) for _ in range(copies)]


for N, K in ((1536, 6144), (6144, 768), (6144, 6144)):
    packs = packs_of(N, K, max(2, -(-400_000_000 // (N * K))))
    small = packs_of(N, 128, 1)[0]
    it = {"i": 0}

    def nxt():
        it["i"] = (it["i"] + 1) % len(packs)
        return packs[it["i"]]
    for M in (1, 8, 16):
        a = torch.randn(M, K, device=dev).bfloat16()
        aq, as_ = ops.quantize(a, 0)
        a1 = torch.randn(M, 128, device=dev).bfloat16()
        aq1, as1 = ops.quantize(a1, 0)
        y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
        rot = graph_time(lambda: ops.matmul_frag(*nxt(), N, K, M, aq, as_, y=y))
        res = graph_time(lambda: ops.matmul_frag(*packs[0], N, K, M, aq, as_, y=y))
        k128 = graph_time(lambda: ops.matmul_frag(*small, N, 128, M, aq1, as1, y=y))
        print(f"{N}x{K} M={M} {frag_choice(N, K, M)}: rotating {rot:.2f} | resident {res:.2f} | K=128 {k128:.2f} us", flush=True)
    del packs
    torch.cuda.empty_cache()
