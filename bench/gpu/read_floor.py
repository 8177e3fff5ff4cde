"""What a plain read of the decode GEMM's weight bytes reaches back to back (issue 6's >= 80 % of
HBM goal, BENCHMARKS.md follow-up 19): torch's sum over a tensor of the packed weights' size
(values + scales) and a Triton kernel that reads every word once (int32 xor-sum per program, block of
1-8 K words), rotating over about 400 MB of copies like the GEMM bench (no L2 hits), under
CUDA-graph replay (bench.py's graph_time: 200 back-to-back calls, median), against the read-only
bandwidth of a 2 GiB sum.
Prints µs and % of that bandwidth per size. Usage: python3 read_floor.py"""
import torch
import triton
import triton.language as tl
from bench import graph_time
from bench_frag_pdl import rotation


@triton.jit
def _read_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """One program reads BLOCK int32 words (masked at the end) and writes their xor-sum: the least
    a kernel that must touch every weight byte once can do."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + tl.program_id(0), tl.reduce(v, 0, _xor))


@triton.jit
def _xor(a, b):
    return a ^ b


@triton.jit
def _read_streams_kernel(x_ptr, out_ptr, streams, chunks, CHUNK: tl.constexpr):
    """The fragment GEMM's access order with the read kernel's work: `streams` contiguous ranges
    of `chunks` CHUNK-word pieces (a warp's share of a tile), program p reading piece p // streams
    of range p % streams, so the programs in flight at any time touch every range at about the
    same depth, as the GEMM's 1536 warps do."""
    p = tl.program_id(0)
    offs = ((p % streams) * chunks + p // streams) * CHUNK + tl.arange(0, CHUNK)
    v = tl.load(x_ptr + offs)
    tl.store(out_ptr + p, tl.reduce(v, 0, _xor))

dev = "cuda"


def main():
    x = torch.empty(1024**3, dtype=torch.bfloat16, device=dev).normal_()
    read_bw = x.numel() * 2 / (graph_time(lambda: x.sum(), iters=5) * 1e-6)
    del x
    print(f"read-only HBM {read_bw / 1e12:.2f} TB/s (2 GiB sum)", flush=True)
    for N, K in ((6144, 768), (1536, 6144), (6144, 6144)):
        nbytes = N * K + N * K // 32
        copies = max(2, int(400e6 // nbytes))
        bufs = [torch.randint(0, 120, (nbytes // 2,), dtype=torch.int16, device=dev).view(torch.bfloat16)
                for _ in range(copies)]
        nxt = rotation()
        t_sum = graph_time(lambda: bufs[nxt(copies)].sum())
        words = [b.view(torch.int32) for b in bufs]
        n = words[0].numel()
        res = {}
        for blk in (1024, 2048, 4096, 8192):
            out = torch.empty(triton.cdiv(n, blk), dtype=torch.int32, device=dev)
            fn = lambda blk=blk, out=out: _read_kernel[(triton.cdiv(n, blk),)](words[nxt(copies)], out, n, BLOCK=blk)
            fn(); torch.cuda.synchronize()
            res[blk] = graph_time(fn)
        # The GEMM's order (6144^2: 1536 warp streams of 12 groups of 2 KB) against the same
        # 2 KB pieces read in address order (streams = 1).
        G, streams = K // 128, (N // 16) * 4
        if G % 4 == 0:
            chunks = G // 4
            outp = torch.empty(streams * chunks, dtype=torch.int32, device=dev)
            for name, st, ch in (("2KB in order", 1, streams * chunks), ("2KB GEMM order", streams, chunks)):
                fn = lambda st=st, ch=ch: _read_streams_kernel[(streams * chunks,)](words[nxt(copies)], outp, st, ch, CHUNK=512)
                fn(); torch.cuda.synchronize()
                res[name] = graph_time(fn)
        best = min(res, key=res.get)
        pct = lambda t: 100 * nbytes / (t * 1e-6) / read_bw
        print(f"{N}x{K}: {nbytes / 1e6:6.2f} MB  torch sum {t_sum:6.2f} us ({pct(t_sum):4.1f} %) | read kernel "
              + " ".join(f"{b} {t:5.2f}" for b, t in res.items()) + f" | best {res[best]:5.2f} us = {pct(res[best]):4.1f} % "
              f"of the 2 GiB read", flush=True)
        del bufs


if __name__ == "__main__":
    main()
