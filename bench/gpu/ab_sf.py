"""Issue 6 follow-up 30: the decode GEMM with each batch's scale words requested before its
weights (frag_sf.hip, appended to the GEMM module's text here; mx_matmul_frag.hip
MxFragWeightsT<true>): `_t2s` against `_t2`, `_fss` against `_fs`.
Bits: every variant == `_t2` / `_fs` at the same (W, S), random and edge weights, plain and PDL.
Time: the runtime's choice against each variant at the runtime's (W, S, pre) and cuBLAS bf16;
PDL, CUDA-graph replay of 200 launches, weights rotating over >= 400 MB, median of REPS,
alternating. Usage: python3 ab_sf.py [REPS]   (AB_SHAPES "NxK,...", AB_MS "1,8,12,16")"""
import ctypes, faulthandler, json, os, statistics, sys
import numpy as np
import torch
import mxgpu
from program import program_text

HERE = os.path.dirname(os.path.abspath(__file__))
faulthandler.dump_traceback_later(int(os.environ.get("AB_WATCHDOG", "300")), exit=False)
T2_WS = [(2, 1), (4, 1), (8, 1), (4, 2), (8, 2)]
FS_WS = [(2, 1), (4, 1), (8, 1)]


def sf_text():
    t = program_text(files=["mx_quantize.hip", "mx_matmul_pipe.hip", "mx_matmul_frag.hip"])
    return t + '#line 1 "frag_sf.hip"\n' + open(os.path.join(HERE, "frag_sf.hip")).read() + "\n"


mxgpu.program_text = sf_text  # compile_program (and its cubin cache key) sees this text
from mxgpu import Module, Ops, epilogue, frag_kernel, pack_frag  # noqa: E402
from bench import graph_time  # noqa: E402
from bench_frag_pdl import rotation, weight_copies  # noqa: E402

OUT = os.environ.get("OUT", ".")
dev = "cuda"


def launch(mod, sfx, W, S, wf, wsf, N, K, M, aq, as_, y, pre=1):
    two = sfx.startswith("_t2")
    name = f"mx_matmul_frag_m{8 if two else 16}_bf16_w{W}_s{S}{sfx}"
    tiles = -(-N // 16)
    grid = (-(-M // (8 if two else 16)) * S, -(-tiles // 2) if two else tiles)
    mod.launch(name, grid, (32 * W,), [aq, as_, wf, wsf, y, ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K),
                                       ctypes.c_int(pre), epilogue()])
    return y


def check(mod, ops):
    n, fails = 0, []
    rng = np.random.default_rng(30)
    for N, K in ((6144, 768), (100, 2688), (40, 1152)):
        w = torch.from_numpy(rng.integers(0, 256, (N, K), dtype=np.uint8))
        w[(w & 0x7F) == 0x7F] = 0x38
        ws = torch.from_numpy(rng.integers(112, 132, (N, K // 32), dtype=np.uint8))
        if N == 100:
            w[0, :32] = 0x7F; w[2, :] = 0x7E; w[3, :] = 0x01
            ws[5, :] = 0; ws[6, :] = 255; ws[7, :] = 1; ws[8, :] = 254
        wf, wsf = pack_frag(w.to(dev), ws.to(dev))
        for M in (1, 5, 8, 12, 16):
            aq, as_ = ops.quantize((torch.randn(M, K, device=dev) * 2).bfloat16(), 0)
            if N == 100 and M >= 5:
                as_[1, 0] = 0; as_[2, 1] = 255; aq[3, :32] = 0x7F; aq[4, 32:64] = 0x7E
            for base, var, WS in (("_t2", "_t2s", T2_WS), ("_fs", "_fss", FS_WS)):
                if base == "_t2" and M > 8:
                    continue
                for W, S in WS:
                    if K // 128 < W * S:
                        continue
                    ref = launch(mod, base, W, S, wf, wsf, N, K, M, aq, as_, torch.empty(M, N, dtype=torch.bfloat16, device=dev))
                    torch.cuda.synchronize()
                    ref = ref.view(torch.int16).cpu()
                    for pdl in (False, True):
                        mod.pdl = pdl
                        y = torch.full((M, N), 7.0, dtype=torch.bfloat16, device=dev)
                        got = launch(mod, var, W, S, wf, wsf, N, K, M, aq, as_, y, pre=3 if pdl else 1)
                        torch.cuda.synchronize()
                        mod.pdl = False
                        n += 1
                        if not torch.equal(got.view(torch.int16).cpu(), ref):
                            fails.append(f"{N}x{K} M={M} w{W}s{S} {var} pdl={pdl}")
        print(f"checked {N}x{K}: {n} so far, {len(fails)} failed", flush=True)
    print(f"bits: {n - len(fails)} PASS / {len(fails)} FAIL", flush=True)
    for f in fails[:20]:
        print("  FAIL", f, flush=True)
    return n, fails


def timing(mod, ops, reps):
    mod.pdl = True
    rows = []
    shapes = os.environ.get("AB_SHAPES", "6144x6144,6144x768,1536x6144,4096x4096")
    for N, K in (tuple(int(v) for v in sh.split("x")) for sh in shapes.split(",")):
        copies, _, _, P, Wb = weight_copies(N, K)
        nxt = rotation()
        for M in [int(m) for m in os.environ.get("AB_MS", "1,4,8,12,16").split(",")]:
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            rt = frag_kernel(N, K, M)
            rows_, W, S, sfx, pf = rt
            pre = 3 if pf else 1
            fns = {"rt": lambda: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, y=y),
                   "cublas": lambda: A @ Wb[nxt(len(Wb))].t()}
            if sfx == "_t2" and (W, S) in T2_WS:
                fns["t2s"] = lambda: launch(mod, "_t2s", W, S, *P[nxt(copies)], N, K, M, aq, as_, y, pre)
            if sfx == "_fs" and (W, S) in FS_WS:
                fns["fss"] = lambda: launch(mod, "_fss", W, S, *P[nxt(copies)], N, K, M, aq, as_, y, pre)
            t = {k: [] for k in fns}
            for _ in range(reps):
                for k, fn in fns.items():
                    t[k].append(graph_time(fn))
            med = {k: statistics.median(v) for k, v in t.items()}
            rows.append(dict(N=N, K=K, M=M, rt=list(rt), med=med))
            gb = (N * K + N * K // 32) / 1e9
            print(f"{N:5d}x{K:<5d} M={M:2d}: rt {sfx or 'm'+str(rows_)} w{W}s{S} " + " | ".join(
                f"{k} {v:6.2f}" + (f" ({gb / (v * 1e-6) / 1e3:.2f} TB/s)" if k != "cublas" else "") for k, v in med.items())
                + f" | cublas/rt {med['cublas'] / med['rt']:.2f}x", flush=True)
        del P, Wb
    mod.pdl = False
    return rows


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    mod = Module(); ops = Ops(mod)
    print("module loaded", flush=True)
    from bench import read_bandwidth
    read_bandwidth(dev)  # prints the read-only HBM rate the TB/s columns compare with
    n, fails = check(mod, ops)
    rows = timing(mod, ops, reps)
    json.dump(dict(checks=n, fails=fails, rows=rows), open(os.path.join(OUT, "ab_sf.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
