"""Issue 6 follow-up 32: one group of 4 k-blocks per warp (frag_g1.hip, appended to the GEMM
module's text here) against the runtime's kernel and cuBLAS bf16 at small K (G = K / 128 <= W).
Check: each kernel's output against the runtime kernel's (bf16 outputs of another summation
order: max relative difference printed, must stay within a few bf16 ulps). Time: PDL,
CUDA-graph replay of 200 launches, weights rotating over >= 400 MB, median of REPS, alternating.
Usage: python3 ab_g1.py [REPS]   (AB_CASES "NxK:M,M;..."; AB_RULE "NxK[f]:M,M;...": rule_ab)
Bench kernel files (one flag at a time; each runs only its own variants beside the runtime's):
AB_G1C=1 frag_g1c.hip (follow-up 38), AB_G1S=1 frag_g1s.hip (39), AB_G1R=1 frag_g1r.hip (41).
Session 34's other bench kernels are in git history, with the template arguments they used:
frag_g1x.hip (follow-up 40, AB_G1X=1) in commit 8dfb663, frag_g2.hip (42, AB_G2=1) and
frag_g1h.hip (43, AB_G1H=1) in commit ff18ea6."""
import faulthandler, json, os, sys
import torch
import mxgpu
from program import gemm_text_with

HERE = os.path.dirname(os.path.abspath(__file__))
faulthandler.dump_traceback_later(int(os.environ.get("AB_WATCHDOG", "300")), exit=False)


def g1_text():
    t = gemm_text_with(os.path.join(HERE, "frag_g1.hip"))
    for env, name in (("AB_G1C", "frag_g1c.hip"), ("AB_G1S", "frag_g1s.hip"), ("AB_G1R", "frag_g1r.hip")):  # follow-ups 38-41
        if os.environ.get(env) == "1":
            t += f'#line 1 "{name}"\n' + open(os.path.join(HERE, name)).read() + "\n"
    return t


mxgpu.program_text = g1_text  # compile_program (and its cubin cache key) sees this text
from mxgpu import frag_kernel  # noqa: E402
from bench_frag_pdl import ab_cases, ab_line, ab_module, launch_frag, time_alternating  # noqa: E402

OUT = os.environ.get("OUT", ".")
dev = "cuda"
# (label, rows a block, warps, tiles a warp, kernel suffix, applies(N, K, M)); kernel
# mx_matmul_frag_m<rows>_bf16_w<W>_s1_<suffix>. The g1 kernels need K / 128 <= W.
G = lambda K: K // 128
C = os.environ.get("AB_G1C") == "1"
CS = os.environ.get("AB_G1S") == "1"
R = os.environ.get("AB_G1R") == "1"
VARIANTS = [
    ("m16g1", 16, 6, 1, "g1", lambda N, K, M: M > 8 and G(K) == 6),
    ("m16g1t2", 16, 6, 2, "g1t2", lambda N, K, M: M > 8 and G(K) == 6),
    ("m8g1", 8, 6, 1, "g1t1", lambda N, K, M: M <= 8 and G(K) == 6),
    ("m8g1t2", 8, 6, 2, "g1", lambda N, K, M: G(K) == 6),  # the runtime's `_g1`
    ("m8g1t3", 8, 6, 3, "g1t3", lambda N, K, M: M <= 8 and G(K) == 6),
    ("m8g1t4", 8, 6, 4, "g1t4", lambda N, K, M: M <= 8 and G(K) == 6),
    ("m8g1t2w8", 8, 8, 2, "g1", lambda N, K, M: G(K) in (7, 8)),
    ("m8g1t2w4", 8, 4, 2, "g1", lambda N, K, M: G(K) in (3, 4)),
    # W = K / 128 (None): frag_g1c.hip's two-tile forms (AB_G1C=1) and the runtime's `_g1c`
    ("m16g1c", 16, None, 2, "g1c2", lambda N, K, M: C and M > 8 and 3 <= G(K) <= 8),
    ("m16g1ct1", 16, None, 1, "g1c", lambda N, K, M: C and M > 8 and 3 <= G(K) <= 8),
    ("m16g1s", 16, None, 1, "g1s", lambda N, K, M: CS and M > 8 and 3 <= G(K) <= 8),  # frag_g1s.hip (AB_G1S=1)
    ("m16g1cr", 16, None, 1, "g1c", lambda N, K, M: CS and not C and M > 8 and 3 <= G(K) <= 8),  # the runtime's `_g1c`
    # frag_g1r.hip (AB_G1R=1): `_g1c` / `_g1` on 16 rows capped at B blocks an SM
    *[(f"m16{f}b{B}", 16, W, 1, f"{f}b{B}", lambda N, K, M, W=W: R and M > 8 and G(K) == W)
      for W, Bs in ((6, (3, 4, 5)), (4, (6, 7)), (8, (3, 4))) for B in Bs for f in ("g1c", "g1n")],
    ("m8g1c", 8, None, 2, "g1c2", lambda N, K, M: C and M <= 8 and 3 <= G(K) <= 8),
    ("t2w6b2", 8, 6, 2, "t2b2", lambda N, K, M: M <= 8 and G(K) >= 12),
    ("t2w6b1", 8, 6, 2, "t2b1", lambda N, K, M: M <= 8 and G(K) >= 12),
]


def rule_ab(mod, ops, reps, cases):
    """AB_RULE: the runtime's choice (`_g1` / `_g1c` where frag_kernel takes it) against the choice
    with MXFUSE_GPU_FRAG_G1=0 (frag_kernel(g1=False); AB_RULE_OFF=g1c: MXFUSE_GPU_FRAG_G1C=0) and cuBLAS bf16, per case "NxK[f]:M,M" (f: f32
    output, as the plugin EP's f32 models; cuBLAS stays bf16)."""
    from bench_frag_pdl import rotation, weight_copies
    from mxgpu import frag_kernel
    rows_out = []
    for case in cases.split(";"):
        sh, ms = case.split(":")
        f32 = sh.endswith("f")
        N, K = (int(v) for v in sh.rstrip("f").split("x"))
        dt = torch.float32 if f32 else torch.bfloat16
        copies, _, _, P, Wb = weight_copies(N, K)
        nxt = rotation()
        for M in (int(m) for m in ms.split(",")):
            A = torch.randn(M, K, device=dev).bfloat16()
            aq, as_ = ops.quantize(A, 0)
            y = torch.empty(M, N, dtype=dt, device=dev)
            # AB_RULE_OFF: the switch the "before" choice turns off (g1: MXFUSE_GPU_FRAG_G1=0,
            # g1c: MXFUSE_GPU_FRAG_G1C=0).
            new, old = frag_kernel(N, K, M, dt), frag_kernel(N, K, M, dt, **{os.environ.get("AB_RULE_OFF", "g1"): False})

            def run(ch, j):
                r, W, S, sfx, pf = ch
                return ops.matmul_frag(*P[j], N, K, M, aq, as_, out_dtype=dt, W=W, S=S, sfx=sfx, rows=r, pre=3 if pf else 1, y=y)
            a = run(new, 0).float().clone(); b = run(old, 0).float()
            torch.cuda.synchronize()
            diff = ((a - b).abs() / b.abs().clamp_min(1e-3)).max().item()
            fns = {"rt": lambda: run(new, nxt(copies)), "no_g1": lambda: run(old, nxt(copies)),
                   "cublas": lambda: A @ Wb[nxt(len(Wb))].t()}
            times, med = time_alternating(fns, reps)
            rows_out.append(dict(N=N, K=K, M=M, f32=f32, rt=list(new), no_g1=list(old), med=med, times=times, diff=diff))
            print(f"{N:5d}x{K:<5d}{' f32' if f32 else '    '} M={M:2d}: rt {new[3] or 'm' + str(new[0])} w{new[1]}s{new[2]} {med['rt']:6.2f}"
                  f" | no_g1 {old[3] or 'm' + str(old[0])} w{old[1]}s{old[2]} {med['no_g1']:6.2f} | cublas {med['cublas']:6.2f}"
                  f" | no_g1/rt {med['no_g1'] / med['rt']:.3f} cublas/rt {med['cublas'] / med['rt']:.3f} | max rel diff {diff:.1e}", flush=True)
        P = Wb = None  # free the copies before the next shape
    json.dump(dict(rows=rows_out), open(os.path.join(OUT, "ab_g1_rule.json"), "w"), indent=1)


def launch(mod, rows, sfx, W, NT, wf, wsf, N, K, M, aq, as_, y, pre=1):
    return launch_frag(mod, f"mx_matmul_frag_m{rows}_bf16_w{W}_s1_{sfx}", (-(-M // rows), -(-N // (16 * NT))),
                       W, wf, wsf, N, K, M, aq, as_, y, pre)


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    mod, ops = ab_module()
    if os.environ.get("AB_RULE"):
        return rule_ab(mod, ops, reps, os.environ["AB_RULE"])
    rows = []
    cases = os.environ.get("AB_CASES", "6144x768:1,4,8,12,16;4096x1024:1,8,16;4096x512:1,8;6144x6144:1,8;8192x2048:1")
    for c in ab_cases(ops, frag_kernel, cases):
        N, K, M, P, rt, fns = c.N, c.K, c.M, c.P, c.rt, c.fns
        diffs = {}
        for name, r, W, NT, sfx, applies in VARIANTS:
            if not applies(N, K, M) or ((C or CS) and sfx not in ("g1c", "g1c2", "g1s")) or (R and not sfx[-2:-1] == "b"):
                continue
            W = W or G(K)
            got = launch(mod, r, sfx, W, NT, *P[0], N, K, M, c.aq, c.as_, torch.empty_like(c.y)).float()
            torch.cuda.synchronize()
            diffs[name] = ((got - c.ref).abs() / c.ref.abs().clamp_min(1e-3)).max().item()
            fns[name] = (lambda r=r, sfx=sfx, W=W, NT=NT: launch(mod, r, sfx, W, NT, *P[c.next()], N, K, M, c.aq, c.as_, c.y))
        times, med = time_alternating(fns, reps)
        rows.append(dict(N=N, K=K, M=M, rt=list(rt), med=med, times=times, diffs=diffs))
        print(ab_line(c, med, diffs), flush=True)
    json.dump(dict(rows=rows), open(os.path.join(OUT, "ab_g1.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
