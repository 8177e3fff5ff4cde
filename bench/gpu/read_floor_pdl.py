"""Issue 6 follow-up 45: what a kernel that only reads the decode GEMM's weight bytes and depends on
the previous launch reaches back to back under PDL (read_floor_pdl.hip), against the runtime's GEMM
at M = 1 and cuBLAS bf16 in the same call. read_floor.py (follow-up 19) timed plain launches with no
dependency; this is the floor for a GEMM as the goal row measures it (200 launches in a CUDA graph,
PDL, each reading another copy of the bytes, rotating over >= 400 MB so L2 holds none).
Per (N, K): bytes = N K + N K / 32 (values + E8M0 scales); variants u<U>b<B>[t<T>][p|w]: U 16-byte
loads a thread unrolled (ptxas keeps about 4 in flight), B blocks of T threads (default 256) an SM,
p = every load before the PDL wait, w = after it.
Usage: python3 read_floor_pdl.py [REPS]  (RF_SHAPES "NxK,...", RF_VARIANTS "u8b4p,...")
On the device: AB=read_floor_pdl OUT=$OUT bash bench/gpu/device_ab.sh"""
import ctypes, json, os, statistics, sys
import torch
import mxgpu
from program import gemm_text_with

HERE = os.path.dirname(os.path.abspath(__file__))
mxgpu.program_text = lambda: gemm_text_with(os.path.join(HERE, "read_floor_pdl.hip"))
from mxgpu import frag_kernel  # noqa: E402
from bench import graph_time  # noqa: E402
from bench_frag_pdl import ab_cases, ab_module  # noqa: E402

OUT = os.environ.get("OUT", ".")


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    mod, ops = ab_module()
    from bench import read_bandwidth
    bw = read_bandwidth()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = os.environ.get("RF_SHAPES", "6144x768,1536x6144,6144x6144")
    variants = os.environ.get("RF_VARIANTS", "u4b2p,u8b2p,u4b4p,u8b4p,u8b8p,u8b4w").split(",")
    out = torch.zeros(1 + 8 * 8 * sms, device="cuda")
    rows = []
    for sh in shapes.split(","):
        N, K = (int(v) for v in sh.split("x"))
        nbytes = N * K + N * K // 32
        n16 = -(-nbytes // 16)
        copies = max(2, -(-400_000_000 // (16 * n16)))
        buf = torch.randint(-2**31, 2**31 - 1, (copies, 4 * n16), dtype=torch.int32, device="cuda")
        nxt = [0]

        def read(U, B, T, pre):
            def fn():
                nxt[0] = (nxt[0] + 1) % copies
                mod.launch(f"mx_read_floor_pdl_u{U}", (B * sms,), (T,),
                           [buf[nxt[0]], ctypes.c_longlong(n16), out, ctypes.c_int(pre)])
            return fn
        fns = {}
        for v in variants:
            U, rest = v[1:-1].split("b")
            B, _, T = rest.partition("t")
            fns[v] = read(int(U), int(B), int(T or 256), 1 if v.endswith("p") else 0)
        # The runtime's GEMM at M = 1 and cuBLAS bf16 on the same shape, in the same rounds.
        c = next(ab_cases(ops, frag_kernel, f"{N}x{K}:1"))
        fns["gemm_rt_m1"] = c.fns["rt"]
        fns["cublas_m1"] = c.fns["cublas"]
        t = {k: [] for k in fns}
        for _ in range(reps):
            for k, fn in fns.items():
                t[k].append(graph_time(fn))
        med = {k: statistics.median(v) for k, v in t.items()}
        pct = {k: nbytes / (v * 1e-6) / bw for k, v in med.items() if k != "cublas_m1"}
        print(f"{N}x{K} ({nbytes / 1e6:.2f} MB; 80 % of {bw / 1e12:.2f} TB/s = {nbytes / (0.8 * bw) * 1e6:.2f} us): "
              + " | ".join(f"{k} {v:6.2f}" + (f" ({100 * pct[k]:.0f} %)" if k in pct else "") for k, v in med.items()),
              flush=True)
        rows.append(dict(N=N, K=K, bytes=nbytes, read_bw=bw, med=med, times=t, frac=pct, rt=list(c.rt)))

    json.dump(dict(rows=rows), open(os.path.join(OUT, "read_floor_pdl.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
