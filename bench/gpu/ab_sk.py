"""Issue 6 follow-up 35: the stream-K form of `_t2` (frag_sk.hip, appended to the GEMM module's text
here) against the runtime's kernel and cuBLAS bf16. Each variant runs B blocks (a multiple of the
SM count, kept within pairs <= B <= pairs x K / 128) of W warps on one 8-row tile, so at M <= 8
(call 1's 16-row instances spilled and were dropped; at M > 8 only the runtime and cuBLAS run).
Check: each variant's output against the runtime kernel's (another summation order: max relative
difference, and max absolute difference over max |output|), and bit-equal across two launches
before and one after the timing (deterministic; the counters and FIX 4's sentinel slots reset
themselves). Time: PDL, CUDA-graph replay of 200 launches, weights rotating over >= 400 MB,
median of REPS, alternating.
The cluster form (clusters of CL blocks own P whole pairs, split pairs reduced through
distributed shared memory) runs at M <= 8 for every compiled CL at its best P (cluster_pairs);
AB_SKC=0 leaves it out (as the next call should: BENCHMARKS.md "Session 31").
Usage: python3 ab_sk.py [REPS]   (AB_CASES "NxK:M,M;..."; AB_SK "rows:W:minb:mult:fix,...");
on the device: AB=ab_sk OUT=$OUT bash bench/gpu/device_ab.sh"""
import ctypes, faulthandler, json, os, sys
import torch
import mxgpu
from program import gemm_text_with

HERE = os.path.dirname(os.path.abspath(__file__))
faulthandler.dump_traceback_later(int(os.environ.get("AB_WATCHDOG", "300")), exit=False)
mxgpu.program_text = lambda: gemm_text_with(os.path.join(HERE, "frag_sk.hip"))
from mxgpu import frag_kernel  # noqa: E402
from bench_frag_pdl import ab_cases, ab_line, ab_module, ab_variants, launch_frag  # noqa: E402

OUT = os.environ.get("OUT", ".")
dev = "cuda"
# (rows a block, warps, the kernel's min blocks an SM, B as a multiple of the SM count (0: B =
# the pair count, one whole pair a block, no fix-up: the control for the code's own cost), the
# fix-up of frag_sk.hip (1 counters; 2 none, 3 relaxed counts: bench-only probes; 4 early
# per-warp stores and sentinel slots, no counters));
# kernel mx_matmul_frag_m<rows>_bf16_w<W>_sk<minb>_f<fix>.
DEFAULT_SK = "8:4:2:2:1,8:4:2:2:2,8:4:2:2:4,8:4:2:1:4"


def variants(spec):
    for v in spec.split(","):
        yield tuple(int(x) for x in v.split(":"))


CLUSTERS = (2, 3, 4, 5, 8)  # the cluster sizes frag_sk.hip compiles (mx_matmul_frag_m8_bf16_w4_sk2_c<CL>)


def cluster_pairs(pairs, G, sms, CL, per_sm=2):
    """P, the pairs a cluster of CL blocks takes (P <= CL), for the least work on the busiest SM:
    ceil(blocks / (sms)) blocks of P G / CL items each, blocks = ceil(pairs / P) CL <= per_sm sms;
    None where no P fits one wave."""
    best = None
    for P in range(1, CL + 1):
        B = -(-pairs // P) * CL
        if B > per_sm * sms:
            continue
        load = -(-B // sms) * P * G / CL
        if best is None or load < best[0] - 1e-9:
            best = (load, P)
    return best and best[1]


class Skc:
    """The cluster form at one (N, K, M): clusters of CL blocks (4 warps) on P pairs each."""

    def __init__(self, mod, CL, P, N, K, M):
        self.mod, self.CL, self.P = mod, CL, P
        self.mtiles = -(-M // 8)
        self.B = -(-(-(-N // 32)) // P) * CL
        self.name = f"mx_matmul_frag_m8_bf16_w4_sk2_c{CL}"
        self.label = f"c{CL}p{P}x{self.B}"

    def __call__(self, wf, wsf, N, K, M, aq, as_, y, pre=1):
        return launch_frag(self.mod, self.name, (self.B, self.mtiles), 4, wf, wsf, N, K, M, aq, as_, y, pre,
                           extra=(None, None, ctypes.c_int(self.P)))


class Sk:
    """One stream-K variant at one (N, K, M): its grid, workspace and counters."""

    def __init__(self, mod, sms, rows, W, minb, mult, fix, N, K, M):
        self.mod, self.rows, self.W = mod, rows, W
        pairs = -(-N // 32)
        self.mtiles = -(-M // rows)
        self.B = max(pairs, min(pairs * (K // 128), mult * sms))
        self.name = f"mx_matmul_frag_m{rows}_bf16_w{W}_sk{minb}_f{fix}"
        self.label = f"sk{rows}w{W}x{self.B}f{fix}"
        E = 2 * (rows // 8) * 4 * 32
        if fix == 4:  # [m-tiles][B][W][E] slots holding frag_sk.hip's MX_SK_SENTINEL
            self.ws = torch.full((self.mtiles * self.B * W * E,), 0x7FBAD00D, dtype=torch.int32, device=dev).view(torch.float32)
        else:
            self.ws = torch.zeros(self.mtiles * self.B * 2 * E, dtype=torch.float32, device=dev)
        self.cnt = torch.zeros(self.mtiles * pairs, dtype=torch.int32, device=dev)

    def __call__(self, wf, wsf, N, K, M, aq, as_, y, pre=1):
        return launch_frag(self.mod, self.name, (self.B, self.mtiles), self.W, wf, wsf, N, K, M, aq, as_, y, pre,
                           extra=(self.ws, self.cnt, ctypes.c_int(0)))


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    mod, ops = ab_module()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    spec = os.environ.get("AB_SK", DEFAULT_SK)
    rows_out = []
    cases = os.environ.get("AB_CASES", "6144x6144:1,8;1536x6144:1;6160x6144:5;4096x4096:1;3072x6144:1;6144x768:1")
    for c in ab_cases(ops, frag_kernel, cases):
        N, K, M = c.N, c.K, c.M
        sks = []
        for rows, W, minb, mult, fix in variants(spec):
            if (rows == 16) != (M > 8):
                continue  # 16-row kernels above 8 rows
            sks.append(Sk(mod, sms, rows, W, minb, mult, fix, N, K, M))
        if M <= 8:
            pairs, G = -(-N // 32), K // 128
            for CL in CLUSTERS if os.environ.get("AB_SKC", "1") != "0" else ():
                cp = cluster_pairs(pairs, G, sms, CL)
                if cp:
                    sks.append(Skc(mod, CL, cp, N, K, M))
        scale = c.ref.abs().max().item()
        times, med, diffs, bits = ab_variants(
            c, sks, reps, lambda sk, a: {sk.label + "_abs": (a - c.ref).abs().max().item() / scale})
        rows_out.append(dict(N=N, K=K, M=M, rt=list(c.rt), med=med, times=times, diffs=diffs, bits=bits))
        print(ab_line(c, med, diffs, rate=True), flush=True)
        print("    deterministic: " + " ".join(f"{k} {'yes' if v else 'NO'}" for k, v in bits.items()), flush=True)
    json.dump(dict(rows=rows_out), open(os.path.join(OUT, "ab_sk.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
