#!/usr/bin/env python3
"""Single-thread CPU time per call of bench binaries' `MXFUSE_BENCH_LOOP` mode, A/B interleaved.

On a shared, loaded 2-core box two-thread wall times swing 2-3x between runs (the second thread is
preempted); the CPU time of one pinned thread (`perf stat -e task-clock`) is far steadier. Each
sample runs the loop with ITERS + 1 calls and with 1 call and divides the difference by ITERS, so
the setup (weight copies, buffers) cancels. Prints min and median per binary.

`--wall` instead reads the median wall time per call that the loop itself prints (ms), pinned
to `--cpu` or, with `--cpu all`, on every CPU: the two-thread figure, noisy on a shared box but
what a model sees; the interleaving still spreads the drift over every binary.

Usage (binaries built with `cargo bench -p kernels --bench NAME --no-run`, copied aside for A/B):
  python3 kernels/benches/ab_cpu_time.py --bins OLD,NEW --spec 1536,6144,{m},{it} --ms 1,8,16
  python3 kernels/benches/ab_cpu_time.py --bins OLD,NEW --spec {m},{it} --ms 1,8,64 --iters 2000
  python3 kernels/benches/ab_cpu_time.py --wall --cpu all --bins OLD,NEW --spec 2560,6144,{m},{it}
  (mx_matmul: N,K,M,iters[,kn]; norm_quant / swiglu_quant: M,iters)
"""

import argparse
import os
import re
import statistics
import subprocess


def cpu_ms(binary, spec, cpu):
    """CPU milliseconds (task-clock) of one run of `binary` with MXFUSE_BENCH_LOOP=spec."""
    env = dict(os.environ, MXFUSE_BENCH_LOOP=spec)
    r = subprocess.run(
        ["taskset", "-c", cpu, "perf", "stat", "-x,", "-e", "task-clock", binary],
        env=env, capture_output=True, text=True, check=True,
    )
    line = next(l for l in r.stderr.splitlines() if "task-clock" in l)
    return float(line.split(",")[0])


def wall_ms(binary, spec, cpu):
    """The loop's own median ms per call (`median X us` on stderr) of one run of `binary`."""
    env = dict(os.environ, MXFUSE_BENCH_LOOP=spec)
    cmd = [binary] if cpu == "all" else ["taskset", "-c", cpu, binary]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return float(re.search(r"median ([0-9.]+) us", r.stderr).group(1)) / 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bins", required=True, help="comma-separated bench binaries")
    ap.add_argument("--spec", required=True, help="MXFUSE_BENCH_LOOP template with {m} and {it}")
    ap.add_argument("--ms", default="1,8,16")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cpu", default="0", help="the one CPU to pin to (`all` with --wall: none)")
    ap.add_argument("--wall", action="store_true", help="the loop's median wall time per call")
    args = ap.parse_args()
    bins = args.bins.split(",")
    for m in args.ms.split(","):
        samples = {b: [] for b in bins}
        for _ in range(args.reps):
            for b in bins:  # interleaved, so drifting load hits every binary alike
                if args.wall:
                    samples[b].append(wall_ms(b, args.spec.format(m=m, it=args.iters), args.cpu))
                    continue
                long = cpu_ms(b, args.spec.format(m=m, it=args.iters + 1), args.cpu)
                short = cpu_ms(b, args.spec.format(m=m, it=1), args.cpu)
                samples[b].append((long - short) / args.iters)
        cols = "  ".join(
            f"{os.path.basename(b)}: min {min(v):.4g} med {statistics.median(v):.4g} ms"
            for b, v in samples.items()
        )
        print(f"M={m}  {cols}")


if __name__ == "__main__":
    main()
