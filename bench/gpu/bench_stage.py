"""The staged decode GEMM (mx_matmul_stage.hip) beside the fragment GEMM it would replace and
cuBLAS bf16, timed as bench.py times (CUDA-graph replay of 200 back-to-back launches, median of 15,
us per call, PDL launches as the Rust runtime makes them on sm_90); weights rotate over >= 400 MB of
copies so the L2 holds none of them. For each (N, K) of MiniMax-M3 TP4 and M it sweeps the staged
kernel over (W, S, R) and prints the best, the fragment GEMM at its runtime choice, cuBLAS, and
the % of the read-only HBM ceiling measured in the same call (weight bytes incl. scales).
    python3 bench_stage.py            # STAGE_MS (env, default 1,4,8,12,16) rows
Writes $OUT/bench_stage.json."""
import json, os
import torch
from bench import graph_time
from mxgpu import STAGE_RS, STAGE_SMEM_MAX, STAGE_SS, STAGE_WS, Module, Ops, frag_choice, pack_frag, stage_smem

OUT = os.environ.get("OUT", ".")
dev = "cuda"
mod = Module(); ops = Ops(mod)
mod.pdl = os.environ.get("MXFUSE_BENCH_PDL", "1") == "1"
x = torch.empty(1024**3, dtype=torch.bfloat16, device=dev).normal_()
read_bw = x.numel() * 2 / (graph_time(lambda: x.sum(), iters=5) * 1e-6)
del x
print(f"read-only HBM {read_bw / 1e12:.2f} TB/s; PDL {mod.pdl}")
res = []
for N, K in ((1536, 6144), (6144, 768), (6144, 6144)):
    copies = max(2, -(-400_000_000 // (N * K)))
    packs = []
    for _ in range(copies):
        w = torch.randint(0, 126, (N, K), dtype=torch.uint8, device=dev)
        s = torch.randint(118, 128, (N, K // 32), dtype=torch.uint8, device=dev)
        packs.append(pack_frag(w, s))
    wb = [torch.randn(K, N, device=dev).bfloat16() for _ in range(max(2, -(-400_000_000 // (2 * N * K))))]
    wbytes = N * K + N * K // 32
    it = {"i": 0}

    def nxt(lst):
        it["i"] = (it["i"] + 1) % len(lst)
        return lst[it["i"]]

    for M in [int(m) for m in os.environ.get("STAGE_MS", "1,4,8,12,16").split(",")]:
        a = torch.randn(M, K, device=dev).bfloat16()
        aq, as_ = ops.quantize(a, 0)
        y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
        frag = graph_time(lambda: ops.matmul_frag(*nxt(packs), N, K, M, aq, as_, y=y))
        cublas = graph_time(lambda: torch.matmul(a, nxt(wb)))
        sweep = {}
        for W in STAGE_WS:
            for S in STAGE_SS:
                for R in STAGE_RS:
                    G = K // 128
                    if R > -(-(-(-G // S)) // W) or stage_smem(W, 1 if M <= 8 else 2, R, G, S) > STAGE_SMEM_MAX:
                        continue
                    sweep[(W, S, R)] = graph_time(lambda: ops.matmul_stage(*nxt(packs), N, K, M, aq, as_, W=W, S=S, R=R, y=y))
        best = min(sweep, key=sweep.get)
        tb = sweep[best]
        top = sorted(sweep.items(), key=lambda kv: kv[1])[:5]
        print(f"{N}x{K} M={M}: stage best w{best[0]} s{best[1]} r{best[2]} {tb:.2f} us ({cublas / tb:.2f}x cuBLAS, "
              f"{100 * wbytes / (tb * 1e-6) / read_bw:.0f}% HBM) | frag {frag:.2f} ({cublas / frag:.2f}x, "
              f"{100 * wbytes / (frag * 1e-6) / read_bw:.0f}%) | cuBLAS {cublas:.2f} | top5 "
              + " ".join(f"w{k[0]}s{k[1]}r{k[2]}={v:.2f}" for k, v in top), flush=True)
        res.append(dict(N=N, K=K, M=M, frag=frag, cublas=cublas, stage={f"w{k[0]}s{k[1]}r{k[2]}": v for k, v in sweep.items()}))
    del packs, wb
    torch.cuda.empty_cache()
json.dump(dict(read_bw=read_bw, rows=res), open(os.path.join(OUT, "bench_stage.json"), "w"), indent=1)
