#!/usr/bin/env python3
"""One MoE decoder layer whose norm reaches the quantizer through `Reshape(normed, [-1, H])`
(transformers' Mixtral / MiniMax `hidden_states.view(-1, hidden_dim)`), rewritten offline with
and without rule `add_rmsnorm_mxquant` (`--disable`: what main did before the rule read the
Reshape — the norm in ORT's ops, the quantizer fused alone by `mxquant`), timed in ONNX Runtime
with mxfuse's custom ops.

The layer is tests/python/test_moe_dispatch.py's (dense dispatch: router, shared expert and
every expert on every token, MXFP8 activations and MX weights) at --hidden / --inter / --experts.

`--make DIR` writes DIR/moe.onnx, DIR/base.onnx and DIR/new.onnx (`--shape-of-normed gather`:
the MoE output's reshape back from `Shape(normed)`, a TorchScript export's, which main refused); `--time MODEL` prints the
median and min ms of --runs session runs on batch 1 x --tokens tokens (one model a process: run
the two alternately, each under `flock /tmp/mxfuse_cpu.lock`, to interleave A/B).

Usage: python3 provider/bench/moe_flat_norm.py --make /tmp/moe
       python3 provider/bench/moe_flat_norm.py --time /tmp/moe/new.onnx --tokens 16
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "target/release/libmxfuse_ep.so"
CLI = ROOT / "target/release/mxfuse"


def make(out, hidden, inter, experts, shape_of_normed=None):
    import onnx
    from onnx import TensorProto as TP
    from onnx import helper
    sys.path.insert(0, str(ROOT / "tests/python"))
    from test_moe_dispatch import Layers
    from test_mx_dequant import save
    out.mkdir(parents=True, exist_ok=True)
    b = Layers(False, shape_of_normed=shape_of_normed)
    y = b.layer("x", "dense", "softmax", h=hidden, i=inter, e=experts)
    src = save(b.nodes, b.inits, [helper.make_tensor_value_info("x", TP.FLOAT, ["batch", "seq", hidden])],
               [helper.make_tensor_value_info(y, TP.FLOAT, None)], out / "moe.onnx")
    for name, extra in [("base", ["--disable", "add_rmsnorm_mxquant"]), ("new", [])]:
        r = subprocess.run([str(CLI), "rewrite", str(src), "-o", str(out / f"{name}.onnx"), *extra],
                           check=True, capture_output=True, text=True)
        counts = [" ".join(line.split()[:2]) for line in r.stdout.splitlines()
                  if line.split()[:1] in (["add_rmsnorm_mxquant"], ["mxquant"])]
        print(f"{name}:", ", ".join(counts))


def time_model(model, tokens, runs, hidden):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.register_custom_ops_library(str(LIB))
    s = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    feed = {"x": np.random.default_rng(0).standard_normal((1, tokens, hidden)).astype(np.float32)}
    for _ in range(10):
        s.run(None, feed)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        s.run(None, feed)
        ts.append((time.perf_counter() - t0) * 1e3)
    print(f"{Path(model).stem} tokens={tokens} median_ms={statistics.median(ts):.3f} min_ms={min(ts):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--make", type=Path)
    ap.add_argument("--time", type=Path)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--inter", type=int, default=256)
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--shape-of-normed", choices=["gather", "slice"],
                    help="a TorchScript export's reshape back from Shape(normed) (test_moe_dispatch.Layers)")
    a = ap.parse_args()
    if a.make:
        make(a.make, a.hidden, a.inter, a.experts, a.shape_of_normed)
    if a.time:
        time_model(a.time, a.tokens, a.runs, a.hidden)


if __name__ == "__main__":
    main()
