"""Issue 6 follow-up 27: the decode GEMM's time split into its parts by taking them out
(frag_sk.hip, appended to the GEMM module's text here; mx_matmul_frag.hip template parameter SK):
K1 no arithmetic (loads only), K2 L2-hot weights, K3 both, K4 activations loaded once, K5 no
arithmetic and activations once (the weight stream alone), K6 hot weights and activations once.
Time only (the probes' outputs are meaningless): the runtime's kernel at its (W, S, pre) beside
each probe and cuBLAS bf16; PDL, CUDA-graph replay of 200 launches, weights rotating over
>= 400 MB, median of REPS, alternating. Usage: python3 ab_sk.py [REPS]"""
import ctypes, faulthandler, json, os, statistics, sys
import torch
import mxgpu
from program import program_text

HERE = os.path.dirname(os.path.abspath(__file__))
faulthandler.dump_traceback_later(int(os.environ.get("AB_WATCHDOG", "300")), exit=False)
SKS = [1, 2, 3, 4, 5, 6]
T2_WS = [(4, 1), (8, 1), (8, 2)]
FS_WS = [(4, 1), (8, 1)]


def sk_text():
    t = program_text(files=["mx_quantize.hip", "mx_matmul_pipe.hip", "mx_matmul_frag.hip"])
    return t + '#line 1 "frag_sk.hip"\n' + open(os.path.join(HERE, "frag_sk.hip")).read() + "\n"


mxgpu.program_text = sk_text  # compile_program (and its cubin cache key) sees this text
from mxgpu import Module, Ops, epilogue, frag_kernel  # noqa: E402
from bench import graph_time, read_bandwidth  # noqa: E402
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


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    mod = Module(); ops = Ops(mod)
    print("module loaded", flush=True)
    read_bandwidth(dev)
    mod.pdl = True
    rows = []
    cases = os.environ.get("AB_CASES", "6144x6144:1,8,16;6144x768:1,8,12,16;1536x6144:1,12;4096x4096:1")
    for case in cases.split(";"):
        sh, ms = case.split(":")
        N, K = (int(v) for v in sh.split("x"))
        copies, _, _, P, Wb = weight_copies(N, K)
        nxt = rotation()
        for M in (int(m) for m in ms.split(",")):
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
            rt = frag_kernel(N, K, M)
            rows_, W, S, sfx, pf = rt
            pre = 3 if pf else 1
            fns = {"rt": lambda: ops.matmul_frag(*P[nxt(copies)], N, K, M, aq, as_, y=y),
                   "cublas": lambda: A @ Wb[nxt(len(Wb))].t()}
            if (sfx == "_t2" and (W, S) in T2_WS) or (sfx == "_fs" and (W, S) in FS_WS):
                for sk in SKS:
                    fns[f"K{sk}"] = (lambda sk=sk: launch(mod, f"{sfx}K{sk}", W, S, *P[nxt(copies)], N, K, M, aq, as_, y, pre))
            t = {k: [] for k in fns}
            for _ in range(reps):
                for k, fn in fns.items():
                    t[k].append(graph_time(fn))
            med = {k: statistics.median(v) for k, v in t.items()}
            rows.append(dict(N=N, K=K, M=M, rt=list(rt), med=med))
            print(f"{N:5d}x{K:<5d} M={M:2d}: rt {sfx or 'm'+str(rows_)} w{W}s{S} " + " | ".join(
                f"{k} {v:6.2f}" for k, v in med.items()), flush=True)
        del P, Wb
    json.dump(dict(rows=rows), open(os.path.join(OUT, "ab_sk.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
