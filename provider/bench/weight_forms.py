#!/usr/bin/env python3
"""How the plugin EP's decoder step depends on the weights' form (session 18's probes).

Generates three f32-activation decoders of the same shapes with `mxfuse-gen-model` and times one
step (batch 1, seq `--seq`) of each through the mxfuse plugin EP, interleaved in one process:

* `mxfp8`: MXFP8 activations and random MX weights: the fused path (the baseline of the ratios);
* `weight_only`: the same MX weights with float activations (no activation quantization): each
  MatMul runs as `MxMatMul` with a float `a` (rule `mx_weight_matmul`, BENCHMARKS.md session 19;
  before it, each weight's E8M0 DequantizeLinear ran as `MxDequantize` on every step);
* `placeholder`: as `mxfp8` but with `--sparse-weights` (all-zero weights, scale byte 0): the
  MX GEMM's fast route refuses scales that small and takes the exact row path.

Usage: python3 provider/bench/weight_forms.py [--hidden 1024] [--layers 2] [--seq 1] [--runs 20]
"""

import argparse
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[2]
EP = "MxFuseExecutionProvider"
FORMS = {
    "mxfp8": ["--quant", "std-floor", "--weights", "std-mx"],
    "weight_only": ["--quant", "none", "--weights", "std-mx"],
    "placeholder": ["--quant", "std-floor", "--weights", "std-mx", "--sparse-weights"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--work", default="/tmp/mxfuse_weight_forms")
    a = ap.parse_args()
    gen = ROOT / "target" / "release" / "mxfuse-gen-model"
    lib = ROOT / "target" / "release" / "libmxfuse_ep.so"
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    ort.register_execution_provider_library(EP, str(lib))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP and d.device.type == ort.OrtHardwareDeviceType.CPU]
    sessions = {}
    for tag, args in FORMS.items():
        path = work / f"h{a.hidden}_l{a.layers}_{tag}.onnx"
        subprocess.run([str(gen), "--hidden", str(a.hidden), "--intermediate", str(a.hidden // 2),
                        "--layers", str(a.layers), "--dtype", "f32", "--batch", "1", "--seq", str(a.seq),
                        *args, "-o", str(path)], check=True, capture_output=True)
        so = ort.SessionOptions()
        so.add_provider_for_devices(devices, {})
        so.log_severity_level = 3
        sessions[tag] = ort.InferenceSession(str(path), sess_options=so)
    x = {"hidden_states": np.random.default_rng(0).standard_normal((1, a.seq, a.hidden)).astype(np.float32)}
    for s in sessions.values():
        for _ in range(3):
            s.run(None, x)
    times = {tag: [] for tag in sessions}
    for _ in range(a.runs):
        for tag, s in sessions.items():
            t = time.perf_counter()
            s.run(None, x)
            times[tag].append(time.perf_counter() - t)
    med = {tag: statistics.median(v) * 1e3 for tag, v in times.items()}
    print(f"hidden {a.hidden}, {a.layers} layers, seq {a.seq}, median of {a.runs} interleaved steps")
    print("| weights | ms / step | × mxfp8 |\n|---|---:|---:|")
    for tag, ms in med.items():
        print(f"| {tag} | {ms:.2f} | {ms / med['mxfp8']:.1f} |")


if __name__ == "__main__":
    main()
