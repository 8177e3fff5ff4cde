"""Old-vs-new A/B of the SwiGLU kernels in one process: the cubin of another checkout's kernels/gpu
(argv[1]; `MXFUSE_KERNEL_DIR=<old kernels/gpu> python3 bench/gpu/offline_compile.py --out DIR` on
the development machine; launched with that commit's table, OLD_TABLE) against the working
tree's, alternating old / new per measurement (CUDA
graphs of 200 launches, median of reps; PDL as MXFUSE_BENCH_PDL says), at I = 768, split halves,
gate_up ~ N(0, 8^2) (the bench's data). Prints a table of µs and old / new per mode and M."""
import ctypes, sys
import torch
from bench import graph_time
import mxgpu
from mxgpu import Module, Ops, F_OAI, F_FP32_ACT

MODES = {"oai rounded": F_OAI, "oai fp32": F_OAI | F_FP32_ACT, "silu rounded": 0, "silu fp32": F_FP32_ACT}


def module_from_cubin(path):
    m = Module.__new__(Module)
    torch.empty(1, device="cuda")
    m.arch, m.log, m.funcs = "", "(old cubin)", {}
    import lzma
    m.cubin = (lzma.open if path.endswith(".xz") else open)(path, "rb").read()
    m.mod = ctypes.c_void_p()
    mxgpu._ck(mxgpu.cuda.cuModuleLoadData(ctypes.byref(m.mod), m.cubin), "cuModuleLoadData")
    return m


# The launch table of the session's starting commit (7350a83), for the old cubin.
OLD_TABLE = [(1 << 14, 1, 256), (1 << 15, 2, 256), (1 << 16, 1, 512), (1 << 21, 2, 256)]


def old_choice(n):
    return next(((e, b) for below, e, b in OLD_TABLE if n < below), (8, 256))


def main():
    old, new = Ops(module_from_cubin(sys.argv[1])), Ops(Module())
    I = 768
    # The old cubin at its host choice against the new kernels at the host choice and at fixed
    # shapes (outputs per lane, lanes per block, pinned logistic or certified fast one; the last
    # field, a kernel name suffix, is empty now that the bench-only kernels are gone).
    shapes = [("new", None, None, None, ""), ("e2", 2, 256, None, ""), ("e8pin", 8, 128, True, ""),
              ("e8cert", 8, 128, False, ""), ("e8b256", 8, 256, False, "")]
    print(f"{'mode':14s} {'M':>5s} {'old us':>8s} " + " ".join(f"{n:>8s}" for n, *_ in shapes) + "  old/best")
    for M in (8, 192, 384, 1024, 2048, 4096, 8192):
        gu = (torch.randn(M, 2 * I, device="cuda") * 8).bfloat16()
        outs = (torch.empty(M, I, dtype=torch.uint8, device="cuda"), torch.empty(M, I // 32, dtype=torch.uint8, device="cuda"))
        for name, flags in MODES.items():
            run = [r for r in shapes if not r[4] or flags & F_OAI]
            t = {k: [] for k in ["old"] + [n for n, *_ in run]}
            for _ in range(3):
                oe, ob = old_choice(M * I)
                t["old"].append(graph_time(lambda: old.swiglu_quant(gu, None, I, "split_halves", flags, outs=outs, e=oe, block=ob, pinned=False)))
                for n, e, b, o, opt in run:
                    t[n].append(graph_time(lambda: new.swiglu_quant(gu, None, I, "split_halves", flags, outs=outs, e=e, block=b, pinned=o, opt=opt)))
            med = {k: sorted(v)[1] for k, v in t.items()}
            best = min(med[n] for n, *_ in run)
            print(f"{name:14s} {M:5d} {med['old']:8.2f} " + " ".join(f"{med[n]:8.2f}" if n in med else f"{'-':>8s}" for n, *_ in shapes)
                  + f"  {med['old'] / best:6.2f}", flush=True)


if __name__ == "__main__":
    main()
