#!/usr/bin/env python3
"""ORT's CPU EP vs ORT + mxfuse on a generated MiniMax-M3-shaped decoder stack.

Generates (with `mxfuse-gen-model`, once, into --work) two f32-activation models of the same
decoder (MiniMax-M3 at TP4: hidden 6144, 16 q / 2 kv heads of 128, intermediate 768):

* baseline: float weights, no activation quantization — what ORT's CPU EP can run (it has no
  kernel for MXFP8's E8M0-scaled QuantizeLinear/DequantizeLinear, so the MXFP8 model itself
  does not run on the CPU EP at all);
* mxfp8: standard opset-24 MXFP8 activations and MX weights (E4M3 + E8M0), run with the mxfuse
  plugin EP (fused norm/SwiGLU quantizers, MX GEMMs) and the CPU EP for the rest (attention).

and times a whole forward step for M = batch·seq tokens (batch 1), both sessions in the same
process, runs interleaved A/B after warm-up (median times and median per-pair speed-up).
Prints a Markdown table.

Usage: python3 provider/bench/ort_decoder.py [--layers 4] [--ms 1,8,64] [--runs 20]

`--alone float|mxfp8` creates only that session (run the two in separate processes, one after
the other): in the paired mode the idle session's ORT pool spins beside the running one, which
slows ORT's memory-bound f32 step more than the fused one, so paired ratios run above the alone
ones. `--lib` times another build of the library (interleaved A/B of two builds); `--profile`
writes ORT's profiler JSON of the timed runs.
"""

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[2]
EP = "MxFuseExecutionProvider"


def newest(name):
    """A release build of `name` (benchmarks never use a debug build)."""
    path = ROOT / "target" / "release" / name
    if not path.is_file():
        raise SystemExit(f"{name} not built: cargo build --release -p provider -p models")
    return path


def generate(work: Path, layers: int):
    gen = newest("mxfuse-gen-model")
    models = {}
    for tag, quant, weights in (("float", "none", "float"), ("mxfp8", "std-floor", "std-mx")):
        path = work / f"m3tp4_{layers}l_f32_{tag}.onnx"
        if not path.exists():
            subprocess.run(
                [str(gen), "--preset", "m3-tp4", "--layers", str(layers), "--dtype", "f32", "--quant", quant,
                 "--weights", weights, "--external", "-o", str(path)],
                check=True, capture_output=True,
            )
        models[tag] = path
    return models


def timed(sess, feed):
    t = time.perf_counter()
    sess.run(None, feed)
    return time.perf_counter() - t


def time_pair(base, fused, x, runs):
    """Interleaved A/B timing: on a shared machine the load drifts, so each fused run is
    compared with the baseline run just before it. Returns (median base s, median fused s,
    median of per-pair speed-ups)."""
    feed = {"hidden_states": x}
    for _ in range(3):
        base.run(None, feed)
        fused.run(None, feed)
    pairs = [(timed(base, feed), timed(fused, feed)) for _ in range(runs)]
    return (
        statistics.median(b for b, _ in pairs),
        statistics.median(f for _, f in pairs),
        statistics.median(b / f for b, f in pairs),
    )


def time_alone(sess, x, runs):
    """Median seconds of `runs` steps after 3 warm-ups, and the fastest."""
    feed = {"hidden_states": x}
    for _ in range(3):
        sess.run(None, feed)
    times = [timed(sess, feed) for _ in range(runs)]
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--ms", default="1,8,64")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0, help="ORT intra-op threads (0 = ORT default)")
    ap.add_argument("--ep-threads", default="0", help="the EP's `threads` option (0 = ORT's pool)")
    ap.add_argument("--work", default="/tmp/mxfuse_bench")
    ap.add_argument("--alone", choices=("float", "mxfp8"), help="time only this session")
    ap.add_argument("--lib", help="the library to register (default: target/release's)")
    ap.add_argument("--profile", help="ORT profiler JSON prefix (the timed session(s))")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    models = generate(work, args.layers)

    ort.register_execution_provider_library(EP, args.lib or str(newest("libmxfuse_ep.so")))
    devices = [d for d in ort.get_ep_devices()
               if d.ep_name == EP and d.device.type == ort.OrtHardwareDeviceType.CPU]

    def options():
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        if args.profile:
            so.enable_profiling = True
            so.profile_file_prefix = args.profile
        return so

    def float_session():
        return ort.InferenceSession(str(models["float"]), options(), providers=["CPUExecutionProvider"])

    def fused_session():
        so = options()
        so.add_provider_for_devices(devices, {"threads": args.ep_threads})
        return ort.InferenceSession(str(models["mxfp8"]), so)

    rng = np.random.default_rng(0)
    if args.alone:
        sess = float_session() if args.alone == "float" else fused_session()
        print(f"{args.alone} alone, {args.layers} layers, intra_op_num_threads="
              f"{args.threads or 'default'}, EP threads={args.ep_threads}, lib={args.lib or 'target/release'}")
        for m in (int(v) for v in args.ms.split(",")):
            x = rng.standard_normal((1, m, 6144)).astype(np.float32)
            med, best = time_alone(sess, x, args.runs)
            print(f"M={m} median {med * 1e3:.2f} ms min {best * 1e3:.2f} ms")
        if args.profile:
            print("profile:", sess.end_profiling())
        return

    base = float_session()
    fused = fused_session()

    print(f"decoder: MiniMax-M3 TP4 shapes, {args.layers} layers, f32 activations; "
          f"ORT {ort.__version__}, {os.cpu_count()} CPUs, intra_op_num_threads={args.threads or 'default'}, "
          f"EP threads={args.ep_threads}")
    print()
    print("| M (tokens) | CPU EP, float weights (ms) | CPU EP + mxfuse, MXFP8 (ms) | speed-up |")
    print("|---:|---:|---:|---:|")
    for m in (int(v) for v in args.ms.split(",")):
        x = rng.standard_normal((1, m, 6144)).astype(np.float32)
        t_base, t_fused, speedup = time_pair(base, fused, x, args.runs)
        print(f"| {m} | {t_base * 1e3:.2f} | {t_fused * 1e3:.2f} | {speedup:.2f}× |")


if __name__ == "__main__":
    main()
