"""Issue 6 follow-up 23: the fragment GEMM with the e4m3 -> f16 conversion of the weights (cv1)
and also of the activations (cv2) done by integer ops instead of F2FP (mx_matmul_frag.hip
mx_frag_mma_cv; kernels in frag_cv.hip, appended to the GEMM module's text here).
1. probe: conversions a clock an SM of F2FP and of the integer form (mx_cv_probe);
2. bits: every cv kernel == the runtime's `_fs` / `_t2` at the same (W, S), on random weights and
   on edge blocks (weight scale bytes 0 / 1 / 26 / 27 / 231 / 232 / 246 / 247 / 254 / 255, NaN /
   448 / subnormal weights with pre & 4, activation scale bytes 0 / 1 / 246 / 247 / 254 / 255,
   NaN activation codes), plain and under PDL;
3. time: the runtime's choice (frag_kernel) against the same kernel with cv1 / cv2 and cuBLAS
   bf16; PDL, CUDA-graph replay of 200 launches, weights rotating over >= 400 MB, median of REPS.
Usage: python3 ab_cv.py [REPS]   (AB_SHAPES "NxK,...", AB_MS "1,8,...")"""
import ctypes, json, os, statistics, sys
import numpy as np
import torch
import mxgpu
from program import program_text

HERE = os.path.dirname(os.path.abspath(__file__))


def cv_text():
    t = program_text(files=["mx_quantize.hip", "mx_matmul_pipe.hip", "mx_matmul_frag.hip"])
    return t + '#line 1 "frag_cv.hip"\n' + open(os.path.join(HERE, "frag_cv.hip")).read() + "\n"


mxgpu.program_text = cv_text  # compile_program (and its cubin cache key) sees the cv text
from mxgpu import Module, Ops, epilogue, frag_kernel, pack_frag  # noqa: E402
from bench import graph_time  # noqa: E402
from bench_frag_pdl import rotation, weight_copies  # noqa: E402

OUT = os.environ.get("OUT", ".")
dev = "cuda"
rng = np.random.default_rng(23)
FS = [(2, 1), (4, 1), (8, 1), (4, 2)]
T2 = [(4, 1), (8, 1), (4, 2), (8, 2)]


def launch(mod, sfx, W, S, wf, wsf, N, K, M, aq, as_, y, pre):
    t2 = sfx.startswith("_t2")
    mt = 1 if t2 else 2
    name = f"mx_matmul_frag_m{8 * mt}_bf16_w{W}_s{S}{sfx}"
    grid = (-(-M // (8 * mt)) * S, -(-(-(-N // 16)) // (2 if t2 else 1)))
    mod.launch(name, grid, (32 * W,), [aq, as_, wf, wsf, y, ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K),
                                       ctypes.c_int(pre), epilogue()])
    return y


def probe(mod):
    out = torch.empty(132 * 8 * 256, dtype=torch.int32, device=dev)
    clk = ctypes.c_int()
    mxgpu.cuda.cuDeviceGetAttribute(ctypes.byref(clk), 13, 0)  # CU_DEVICE_ATTRIBUTE_CLOCK_RATE, kHz
    res = {}
    for mode in (0, 1):
        iters = 4096
        f = lambda: mod.launch("mx_cv_probe", (132 * 8,), (256,), [out, ctypes.c_int(iters), ctypes.c_int(mode)])
        f(); torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for _ in range(5):
            e0.record(); f(); e1.record(); torch.cuda.synchronize()
            ts.append(e0.elapsed_time(e1) * 1e-3)
        t = min(ts)
        conv = 132 * 8 * 256 * iters * 16
        res[mode] = conv / t / (clk.value * 1e3) / 132
        print(f"probe mode {mode} ({'F2FP' if mode == 0 else 'PRMT+SHL+AND'}): {t * 1e6:.1f} us, "
              f"{res[mode]:.1f} conversions a clock an SM (clock {clk.value / 1e6:.2f} GHz)", flush=True)
    return res


def bits(y):
    return y.view(torch.int16).cpu()


def check(mod):
    fails, n = [], 0

    def cmp(tag, wf, wsf, N, K, M, aq, as_, pre):
        nonlocal n
        for sfxb, shapes in (("_fs", FS), ("_t2", T2)):
            for W, S in shapes:
                if K // 128 < W * S:
                    continue
                ref = bits(launch(mod, sfxb, W, S, wf, wsf, N, K, M, aq, as_, torch.empty(M, N, dtype=torch.bfloat16, device=dev), 1))
                for cv in (1, 2):
                    for pdl in (False, True):
                        mod.pdl = pdl
                        y = torch.full((M, N), 7.0, dtype=torch.bfloat16, device=dev)
                        got = bits(launch(mod, f"{sfxb}_cv{cv}", W, S, wf, wsf, N, K, M, aq, as_, y, pre))
                        mod.pdl = False
                        n += 1
                        if not torch.equal(got, ref):
                            d = (got != ref).sum().item()
                            fails.append(f"{tag} {sfxb}_cv{cv} w{W}s{S} M={M} pdl={pdl}: {d} differ")
    # random
    for N, K in ((6144, 768), (1536, 6144), (100, 1152), (40, 384)):
        w = torch.randint(0, 256, (N, K), dtype=torch.uint8)
        w[(w & 0x7F) == 0x7F] = 0x38
        ws = torch.randint(112, 132, (N, K // 32), dtype=torch.uint8)
        wf, wsf = pack_frag(w.to(dev), ws.to(dev))
        for M in (1, 5, 8, 12, 16):
            A = (torch.randn(M, K, device=dev) * 2).bfloat16()
            aq, as_ = Ops(mod).quantize(A, 0)
            cmp(f"rand {N}x{K}", wf, wsf, N, K, M, aq, as_, 1)
    # edges
    for N, K in ((48, 128), (40, 384), (64, 1152), (100, 2688)):
        w = torch.from_numpy(rng.integers(0, 256, (N, K), dtype=np.uint8))
        w[(w & 0x7F) == 0x7F] = 0x38
        w[2, :] = 0x7E; w[3, :] = 0x01; w[4, 64:96] = 0xFE; w[13, :] = 0x80; w[14, :8] = 0x07
        ws = torch.from_numpy(rng.integers(100, 151, (N, K // 32), dtype=np.uint8))
        ws[5, :] = 0; ws[6, :] = 255; ws[7, :] = 1; ws[8, :] = 254; ws[9, 0] = 100; ws[10, -1] = 150
        ws[11, ::2] = 0; ws[12, 1::3] = 255
        ws[15, :] = 246; ws[16, :] = 247; ws[17, :] = 26; ws[18, :] = 27; ws[19, :] = 231; ws[20, :] = 232
        ws[21, ::3] = 247; ws[22, 1::2] = 26
        for nan in (False, True):
            w2 = w.clone()
            if nan:
                w2[0, :32] = 0x7F; w2[1, 5] = 0xFF; w2[23, -1] = 0x7F
            wf, wsf = pack_frag(w2.to(dev), ws.to(dev))
            for M in (6, 12, 16):
                A = (torch.randn(M, K, device=dev) * 2).bfloat16()
                aq, as_ = Ops(mod).quantize(A, 0)
                as_[1, 0] = 0; as_[2, :] = 255; as_[3, -1] = 1; as_[4, :] = 254; as_[5, ::2] = 0
                if M > 8:
                    as_[9, :] = 246; as_[10, :] = 247; as_[11, 1::2] = 247
                    aq[8, 3] = 0x7F; aq[7, 40:44] = 0xFF
                cmp(f"edge {N}x{K} nan={nan}", wf, wsf, N, K, M, aq, as_, 5 if nan else 1)
    print(f"bits: {n - len(fails)} PASS / {len(fails)} FAIL", flush=True)
    for f in fails[:40]:
        print("  FAIL", f, flush=True)
    return n, fails


def timing(mod, reps):
    ops = Ops(mod)
    mod.pdl = True
    rows = []
    shapes = os.environ.get("AB_SHAPES", "6144x768,6144x6144,1536x6144")
    for N, K in (tuple(int(v) for v in sh.split("x")) for sh in shapes.split(",")):
        copies, _, _, P, Wb = weight_copies(N, K)
        nxt = rotation()
        for M in [int(m) for m in os.environ.get("AB_MS", "1,8,12,16").split(",")]:
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            rows_, W, S, sfx, pf = frag_kernel(N, K, M)
            base = "_t2" if sfx == "_t2" else "_fs"
            pre = 3 if pf else 1
            fns = {"rt": lambda: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, y=y),
                   "cublas": lambda: A @ Wb[nxt(len(Wb))].t()}
            if (W, S) in (T2 if base == "_t2" else FS):
                fns[f"{base} w{W}s{S}"] = lambda: launch(mod, base, W, S, *P[nxt(copies)], N, K, M, aq, as_, y, pre)
                for cv in (1, 2):
                    fns[f"cv{cv}"] = lambda cv=cv: launch(mod, f"{base}_cv{cv}", W, S, *P[nxt(copies)], N, K, M, aq, as_, y, pre)
            t = {k: [] for k in fns}
            for _ in range(reps):
                for k, fn in fns.items():
                    t[k].append(graph_time(fn))
            med = {k: statistics.median(v) for k, v in t.items()}
            rows.append(dict(N=N, K=K, M=M, rt=[rows_, W, S, sfx, pf], med=med))
            print(f"{N:5d}x{K:<5d} M={M:2d} rt {sfx or 'm' + str(rows_)} w{W}s{S}{' pf' if pf else ''}: "
                  + " | ".join(f"{k} {v:6.2f}" for k, v in med.items())
                  + f" | cv1/rt {med.get('cv1', float('nan')) / med['rt']:.3f} cv2/rt {med.get('cv2', float('nan')) / med['rt']:.3f}"
                  + f" | cublas/best {med['cublas'] / min(v for k, v in med.items() if k != 'cublas'):.2f}x", flush=True)
        del P, Wb
    mod.pdl = False
    return rows


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    mod = Module()
    res = dict(probe=probe(mod))
    n, fails = check(mod)
    res.update(checks=n, fails=fails)
    res["rows"] = timing(mod, reps)
    json.dump(res, open(os.path.join(OUT, "ab_cv.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
