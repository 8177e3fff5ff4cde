"""Issue 6 follow-up 31: the persistent warp-specialised decode GEMM (frag_ws.hip, appended to the
GEMM module's text here) against the runtime's choice and cuBLAS bf16 at M <= 8. Check: each
variant's output against the runtime kernel's (bf16 outputs of different summation orders: max
|diff| / max |ref| printed, a few bf16 ulps expected). Time: PDL, CUDA-graph replay of 200
launches, weights rotating over >= 400 MB, median of REPS, alternating.
Usage: python3 ab_ws.py [REPS]   (AB_CASES "NxK:M,M;...")"""
import ctypes, faulthandler, json, os, re, statistics, sys
import torch
import mxgpu
from program import gemm_text_with

HERE = os.path.dirname(os.path.abspath(__file__))
faulthandler.dump_traceback_later(int(os.environ.get("AB_WATCHDOG", "400")), exit=False)
MAXR = 96


def ws_text():
    return gemm_text_with(os.path.join(HERE, "frag_ws.hip"))


mxgpu.program_text = ws_text  # compile_program (and its cubin cache key) sees this text
from mxgpu import Module, Ops, epilogue, frag_kernel  # noqa: E402
from bench import read_bandwidth  # noqa: E402
from bench_frag_pdl import ab_cases, time_alternating  # noqa: E402

OUT = os.environ.get("OUT", ".")
dev = "cuda"


def smem_bytes(C, Q, R, M, K):
    rows = min(M, 8)
    return R * Q * 2112 + rows * (K + 32) + rows * (K // 128) * 4 + 2 * C * 512


def slots_for(C, Q, M, K, budget):
    """Most ring slots (<= MAXR, a multiple of C) within `budget` bytes of dynamic shared memory."""
    rest = smem_bytes(C, Q, 0, M, K)
    return max(C, min(MAXR, (budget - rest) // (Q * 2112)) // C * C)  # a multiple of C (frag_ws.hip)


class Ws:
    def __init__(self, mod):
        self.mod = mod
        self.sized = set()

    def __call__(self, C, Q, late, R, P, wf, wsf, N, K, M, aq, as_, y):
        name = f"mx_matmul_ws_c{C}_q{Q}" + ("_l" if late else "")
        sm = smem_bytes(C, Q, R, M, K)
        if (name, sm) not in self.sized:
            f = self.mod.func(name)
            rc = mxgpu.cuda.cuFuncSetAttribute(f, ctypes.c_int(8), ctypes.c_int(sm))
            assert rc == 0, f"cuFuncSetAttribute {name} {sm}: {rc}"
            self.sized.add((name, sm))
        self.mod.launch(name, (P,), (32 * (C + 1),),
                        [aq, as_, wf, wsf, y, ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K), ctypes.c_int(R),
                         epilogue()], shmem=sm)
        return y


# Variants "<C>q<Q>[l]" (l: the late-release loop, mx_matmul_ws_*_l) and the dynamic shared memory
# budgets the ring is sized to: 114176 bytes lets two blocks share an SM (233472 bytes less 1 KB
# reserved and 1.5 KB static a block), so the next launch's blocks stream their first chunks in
# beside this one's under PDL.
SPECS = [(int(m.group(1)), int(m.group(2)), m.group(3) == "l")
         for m in (re.fullmatch(r"(\d+)q(\d+)(l?)", v) for v in
                   os.environ.get("WS_V", "6q8,4q4,6q8l,3q8l,4q12l,3q16l,4q6l,6q4l,4q2l").split(",") if v)]
BUDGETS = [int(b) for b in os.environ.get("WS_BUDGETS", "114176").split(",")]


def variants(N, K, M, sms):
    tiles = -(-N // 16)
    G = K // 128
    out = []
    for C, Q, late in SPECS:
        if -(-G // Q) < C:  # fewer chunks a tile than consumers: idle warps
            continue
        for budget in BUDGETS:
            out.append((C, Q, late, slots_for(C, Q, M, K, budget), min(tiles, sms)))
    return out


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    mod = Module(); ops = Ops(mod); ws = Ws(mod)
    print("module loaded", flush=True)
    for name in ("mx_matmul_ws_c6_q8", "mx_matmul_ws_c6_q8_l", "mx_matmul_ws_c3_q16_l"):
        print(name, "registers / static shared / local:", mod.attrs(name), flush=True)
    bw = read_bandwidth(dev)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    mod.pdl = True
    rows = []
    cases = os.environ.get("AB_CASES", "6144x6144:1,8;6144x768:1,8;4096x4096:1,8;8192x2048:1;1536x6144:1")
    for c in ab_cases(ops, frag_kernel, cases):
        N, K, M, P, rt, fns = c.N, c.K, c.M, c.P, c.rt, c.fns
        diffs = {}
        for C, Q, late, R, Pb in variants(N, K, M, sms):
            key = f"c{C}q{Q}{'l' if late else ''}r{R}p{Pb}"
            got = ws(C, Q, late, R, Pb, *P[0], N, K, M, c.aq, c.as_, torch.full_like(c.y, float("nan"))).float()
            torch.cuda.synchronize()
            diffs[key] = ((got - c.ref).abs().max() / c.ref.abs().max()).item()
            fns[key] = (lambda C=C, Q=Q, late=late, R=R, Pb=Pb: ws(C, Q, late, R, Pb, *P[c.next()], N, K, M, c.aq,
                                                                   c.as_, c.y))
        t, med = time_alternating(fns, reps)
        rows.append(dict(N=N, K=K, M=M, rt=list(rt), med=med, diffs=diffs))
        gb = (N * K + N * K // 32) / 1e9
        print(f"{N:5d}x{K:<5d} M={M:2d}: rt {rt[3] or 'm' + str(rt[0])} w{rt[1]}s{rt[2]}", flush=True)
        for k, v in sorted(med.items(), key=lambda kv: kv[1]):
            frac = f" {gb / (v * 1e-6) / (bw / 1e9) * 100:5.1f} % of read-only HBM" if k != "cublas" else ""
            print(f"   {k:16s} {v:7.2f} us{frac}" + (f"  diff {diffs[k]:.1e}" if k in diffs else ""), flush=True)
        ratios = sorted(a / b for a, b in zip(t["cublas"], t["rt"]))
        print(f"   cuBLAS / rt per repetition: min {ratios[0]:.3f} median {statistics.median(ratios):.3f} "
              f"max {ratios[-1]:.3f} ({len(ratios)} reps)", flush=True)
    json.dump(dict(rows=rows, read_bw=bw), open(os.path.join(OUT, "ab_ws.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
