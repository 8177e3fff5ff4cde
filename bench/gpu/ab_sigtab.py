"""The SwiGLU logistic table against the certified fast sigma, in one process (BENCHMARKS.md, issue 6
follow-ups 7 and 8): at I = 768, split halves, gate_up ~ N(0, 8^2) (the bench's data), rounded
activation, OAI and SiLU, per M the launch table's choice ("host": from SWIGLU_TABLE_FROM outputs
the table kernel, 256 lanes, grid capped at SMs x the occupancy query's resident blocks), the
choice before the table kernel ("prev": outputs per lane, block, pinned logistic below
SWIGLU_PINNED_BELOW), the default kernel at 8 per lane with the certified sigma ("e8c"), the lean
packed kernels with the certified sigma ("pk") and with the table ("st"), each with 128- and
256-lane blocks, both with the grid capped at 6 blocks of 256 per SM ("cap"), and the
access-pattern floor ("floor", OAI only: the same grids, loads and stores, no arithmetic).
SIGWIRE=1 keeps host, prev, st256 (full grid) and st256cap (the quick A/B of the default).
Variants alternate within each of 3 rounds (CUDA graphs of 200 launches, median of 15 replays
each; the median round is printed); PDL as MXFUSE_BENCH_PDL says. Prints µs per launch and
host / best, then one compact table."""
import os
import sys
import torch
from bench import graph_time
from mxgpu import Module, Ops, F_OAI

I = 768


SWLANE_OPTS = ("table8", "tsr", "tsr8", "tpipe", "ttwo")


def variants(sms, ops=None, act="a1"):
    cap = sms * 6  # the e8 kernels' occupancy: 6 blocks of <= 256 lanes per SM
    if os.environ.get("SWLANE") == "1":
        # follow-up 9: host (the table kernel, occupancy-capped) against its split-halves loops,
        # each capped at the SMs x its own resident blocks (the runtime's rule), tsr also uncapped
        occ = {o: sms * ops.m.resident_blocks(f"mx_swiglu_quant_bf16_e8_{act}_{o}", 256) for o in SWLANE_OPTS}
        return [("host", dict())] + [(o, dict(e=8, block=256, opt="_" + o, grid=occ[o])) for o in SWLANE_OPTS] + [
            ("tsrfull", dict(e=8, block=256, opt="_tsr"))]
    if os.environ.get("SIGWIRE") == "1":
        return [("host", dict()), ("prev", dict(table=False)), ("st256", dict(e=8, block=256, opt="_table")),
                ("st256cap", dict(e=8, block=256, opt="_table", grid=cap))]
    return [("host", dict()), ("prev", dict(table=False)), ("e8c", dict(e=8, block=128, pinned=False)),
            ("pk128", dict(e=8, block=128, opt="_pk")), ("pk256", dict(e=8, block=256, opt="_pk")),
            ("st128", dict(e=8, block=128, opt="_table")), ("st256", dict(e=8, block=256, opt="_table")),
            ("pk256cap", dict(e=8, block=256, opt="_pk", grid=cap)), ("st256cap", dict(e=8, block=256, opt="_table", grid=cap)),
            ("floor128", dict(e=8, block=128, opt="_floor")), ("floor256", dict(e=8, block=256, opt="_floor")),
            ("floorcap", dict(e=8, block=256, opt="_floor", grid=cap))]


def main():
    ops = Ops(Module())
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ms = [int(a) for a in sys.argv[1:]] or [8, 192, 2048, 4096, 8192]
    for flags, mode in ((F_OAI, "a1"), (0, "a0")):
        for opt in ("_table",) + (tuple("_" + o for o in SWLANE_OPTS) if os.environ.get("SWLANE") == "1" else ()):
            name = f"mx_swiglu_quant_bf16_e8_{mode}{opt}"
            print(f"{name}: regs/shared/local {ops.m.attrs(name)}, resident blocks of 256 per SM "
                  f"{ops.m.resident_blocks(name, 256)} ({sms} SMs)", flush=True)
    names = [n for n, _ in variants(sms, ops)]
    print(f"{'mode':6s} {'M':>5s} " + " ".join(f"{n:>8s}" for n in names) + "  host/best(pk,st)", flush=True)
    rows = []
    for M in ms:
        gu = (torch.randn(M, 2 * I, device="cuda") * 8).bfloat16()
        outs = (torch.empty(M, I, dtype=torch.uint8, device="cuda"), torch.empty(M, I // 32, dtype=torch.uint8, device="cuda"))
        for mode, flags in (("oai", F_OAI), ("silu", 0)):
            run = [(n, kw) for n, kw in variants(sms, ops, "a1" if flags & F_OAI else "a0")
                   if not (n.startswith("floor") and not flags & F_OAI)]
            t = {n: [] for n, _ in run}
            for _ in range(3):
                for n, kw in run:
                    t[n].append(graph_time(lambda: ops.swiglu_quant(gu, None, I, "split_halves", flags, outs=outs, **kw)))
            med = {n: sorted(v)[1] for n, v in t.items()}
            best = min(v for n, v in med.items() if n != "host" and not n.startswith("floor"))
            rows.append((mode, M, med, best))
            print(f"{mode:6s} {M:5d} " + " ".join(f"{med[n]:8.2f}" if n in med else f"{'-':>8s}" for n in names)
                  + f"  {med['host'] / best:6.2f}", flush=True)
    if os.environ.get("SWLANE") == "1":  # the compact table: each loop / host
        cols = ("host",) + SWLANE_OPTS + ("tsrfull",)
        print("\nmode       M " + " ".join(f"{n:>7s}" for n in cols) + "  " + " ".join(f"{n + '/h':>9s}" for n in cols[1:]))
        for mode, M, med, _ in rows:
            print(f"{mode:6s} {M:5d} " + " ".join(f"{med[n]:7.2f}" for n in cols)
                  + "  " + " ".join(f"{med[n] / med['host']:9.3f}" for n in cols[1:]))
        return
    # The compact table: host choice, best certified lean, best table, floor, and table vs certified.
    print("\nmode       M    host    prev  host/prev  best_pk  best_st  st/pk  floor  st/floor")
    nan = float("nan")
    for mode, M, med, _ in rows:
        pk = min([v for n, v in med.items() if n.startswith("pk")] or [nan])
        st = min(v for n, v in med.items() if n.startswith("st"))
        fl = min([v for n, v in med.items() if n.startswith("floor")] or [nan])
        print(f"{mode:6s} {M:5d} {med['host']:7.2f} {med['prev']:7.2f} {med['host'] / med['prev']:10.3f} "
              f"{pk:8.2f} {st:8.2f} {st / pk:6.3f} {fl:6.2f} {st / fl:8.2f}")


if __name__ == "__main__":
    main()
