"""The SwiGLU logistic table against the certified fast sigma, in one process (BENCHMARKS.md, issue 6
follow-ups 7 and 8): at I = 768, split halves, gate_up ~ N(0, 8^2) (the bench's data), rounded
activation, OAI and SiLU, per M the launch table's choice ("host": from SWIGLU_TABLE_FROM outputs
the table kernel, 256 lanes, grid capped at SMs x the occupancy query's resident blocks), the
choice before the table kernel ("prev": outputs per lane, block, pinned logistic below
SWIGLU_PINNED_BELOW), the default kernel at 8 per lane with the certified sigma ("e8c") and the
table kernel ("st") with 128- and 256-lane blocks, the latter also with the grid capped at 6
blocks of 256 per SM ("cap"). SIGWIRE=1 keeps host, prev, st256 (full grid) and st256cap (the
quick A/B of the default). Variants alternate within each of 3 rounds (CUDA graphs of 200
launches, median of 15 replays each; the median round is printed); PDL as MXFUSE_BENCH_PDL says.
Prints µs per launch and host / best, then one compact table. (The bench-only kernels that this
script also timed in follow-ups 7 and 9 were removed in session 17; their figures stay in
BENCHMARKS.md.)"""
import os
import sys
import torch
from bench import graph_time
from mxgpu import Module, Ops, F_OAI

I = 768


def variants(sms):
    cap = sms * 6  # the e8 kernels' occupancy: 6 blocks of <= 256 lanes per SM
    if os.environ.get("SIGWIRE") == "1":
        return [("host", dict()), ("prev", dict(table=False)), ("st256", dict(e=8, block=256, opt="_table")),
                ("st256cap", dict(e=8, block=256, opt="_table", grid=cap))]
    return [("host", dict()), ("prev", dict(table=False)), ("e8c", dict(e=8, block=128, pinned=False)),
            ("st128", dict(e=8, block=128, opt="_table")), ("st256", dict(e=8, block=256, opt="_table")),
            ("st256cap", dict(e=8, block=256, opt="_table", grid=cap))]


def main():
    ops = Ops(Module())
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ms = [int(a) for a in sys.argv[1:]] or [8, 192, 2048, 4096, 8192]
    for mode in ("a1", "a0"):
        name = f"mx_swiglu_quant_bf16_e8_{mode}_table"
        print(f"{name}: regs/shared/local {ops.m.attrs(name)}, resident blocks of 256 per SM "
              f"{ops.m.resident_blocks(name, 256)} ({sms} SMs)", flush=True)
    names = [n for n, _ in variants(sms)]
    print(f"{'mode':6s} {'M':>5s} " + " ".join(f"{n:>8s}" for n in names) + "  host/best", flush=True)
    rows = []
    for M in ms:
        gu = (torch.randn(M, 2 * I, device="cuda") * 8).bfloat16()
        outs = (torch.empty(M, I, dtype=torch.uint8, device="cuda"), torch.empty(M, I // 32, dtype=torch.uint8, device="cuda"))
        for mode, flags in (("oai", F_OAI), ("silu", 0)):
            run = variants(sms)
            t = {n: [] for n, _ in run}
            for _ in range(3):
                for n, kw in run:
                    t[n].append(graph_time(lambda: ops.swiglu_quant(gu, None, I, "split_halves", flags, outs=outs, **kw)))
            med = {n: sorted(v)[1] for n, v in t.items()}
            best = min(v for n, v in med.items() if n != "host")
            rows.append((mode, M, med))
            print(f"{mode:6s} {M:5d} " + " ".join(f"{med[n]:8.2f}" for n in names)
                  + f"  {med['host'] / best:6.2f}", flush=True)
    # The compact table: host choice, the choice before the table kernel, best table kernel.
    print("\nmode       M    host    prev  host/prev  best_st  host/best_st")
    for mode, M, med in rows:
        st = min(v for n, v in med.items() if n.startswith("st"))
        print(f"{mode:6s} {M:5d} {med['host']:7.2f} {med['prev']:7.2f} {med['host'] / med['prev']:10.3f} "
              f"{st:8.2f} {med['host'] / st:13.3f}")


if __name__ == "__main__":
    main()
