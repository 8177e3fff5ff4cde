"""The four `MxGatherMatMul` forms (weight first / second, E4M3 / MXFP4 experts) against the same
model with rule `mx_gather_dequant` off (every expert dequantized every step, ORT's Gather and
f32 bmm), same process, same feeds: E = 64, N = 768, K = 2048, 4 ids, median of 20 runs after one
warm-up. Models: tests/python/test_gather_dequant.py's `bmm_model`.
Usage: python3 provider/bench/gather_matmul_forms.py   (build: cargo build --release -p provider)"""
import os
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import test_gather_dequant as t  # noqa: E402

EP = "MxFuseExecutionProvider"


def median_ms(sess, feed, runs=20):
    sess.run(None, feed)
    ts = []
    for _ in range(runs):
        a = time.perf_counter()
        sess.run(None, feed)
        ts.append(time.perf_counter() - a)
    return np.median(ts) * 1e3


def main():
    t.E, t.N, t.K = 64, 768, 2048
    ort.register_execution_provider_library(EP, os.path.join(ROOT, "target/release/libmxfuse_ep.so"))
    devs = [d for d in ort.get_ep_devices() if d.ep_name == EP and d.device.type == ort.OrtHardwareDeviceType.CPU]
    feed = {"x": np.random.default_rng(0).standard_normal((4, t.K)).astype(np.float32),
            "ids": np.array([3, 17, 40, 63], np.int64)}
    for weight_first in (True, False):
        for fp4 in (False, True):
            src, _ = t.bmm_model(f"/tmp/mxfuse_gmm_{weight_first}_{fp4}.onnx", weight_first, fp4, onnx.TensorProto.FLOAT)
            ms = {}
            for label, opts in (("fused", {}), ("rule off", {"disable_rules": "mx_gather_dequant"})):
                so = ort.SessionOptions()
                so.add_provider_for_devices(devs, opts)
                ms[label] = median_ms(ort.InferenceSession(src, so), feed)
            print(f"weight {'first ' if weight_first else 'second'} {'MXFP4' if fp4 else 'E4M3 '}: "
                  f"fused {ms['fused']:.2f} ms, rule off {ms['rule off']:.2f} ms, "
                  f"{ms['rule off'] / ms['fused']:.0f}x")


if __name__ == "__main__":
    main()
