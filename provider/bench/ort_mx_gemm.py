#!/usr/bin/env python3
"""One MX GEMM through ORT: MLAS f32 MatMul (CPU EP) vs com.mxfuse MxQuantize → MxMatMul with MX
weights, via the custom-op library and via the plugin EP with each `threads` setting.

Usage: python3 provider/bench/ort_mx_gemm.py [--k 6144] [--n 2560] [--ms 1,8,64] [--trans-b 0|1]
"""

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
EP = "MxFuseExecutionProvider"


def newest_lib():
    """The release library (benchmarks never use a debug build)."""
    lib = ROOT / "target" / "release" / "libmxfuse_ep.so"
    if not lib.is_file():
        raise SystemExit("build it first: cargo build --release -p provider")
    return str(lib)


def models(k, n, trans_b):
    rng = np.random.default_rng(0)
    shape_q, shape_s = ((n, k), (n, k // 32)) if trans_b else ((k, n), (k // 32, n))
    wq = rng.integers(0, 0x7E, shape_q, dtype=np.uint8)
    ws = np.full(shape_s, 120, np.uint8)
    x = helper.make_tensor_value_info("x", TP.FLOAT, ["M", k])
    y = helper.make_tensor_value_info("y", TP.FLOAT, None)
    mx = helper.make_graph(
        [
            helper.make_node("MxQuantize", ["x"], ["q", "s"], domain="com.mxfuse"),
            helper.make_node("MxMatMul", ["q", "s", "wq", "ws"], ["y"], domain="com.mxfuse", trans_b=trans_b),
        ],
        "mx", [x], [y],
        initializer=[
            helper.make_tensor("wq", TP.FLOAT8E4M3FN, shape_q, wq.tobytes(), raw=True),
            helper.make_tensor("ws", TP.FLOAT8E8M0, shape_s, ws.tobytes(), raw=True),
        ],
    )
    f32 = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "f32", [x], [y],
        initializer=[numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w")],
    )
    opsets = [helper.make_opsetid("", 24), helper.make_opsetid("com.mxfuse", 1)]
    make = lambda g: helper.make_model(g, opset_imports=opsets, ir_version=11).SerializeToString()
    return make(mx), make(f32)


def median_ms(sess, x, runs):
    for _ in range(3):
        sess.run(None, {"x": x})
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, {"x": x})
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=6144)
    ap.add_argument("--n", type=int, default=2560)
    ap.add_argument("--ms", default="1,8,64")
    ap.add_argument("--trans-b", type=int, default=0)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    lib = newest_lib()
    mx, f32 = models(args.k, args.n, args.trans_b)
    ort.register_execution_provider_library(EP, lib)
    devices = [d for d in ort.get_ep_devices()
               if d.ep_name == EP and d.device.type == ort.OrtHardwareDeviceType.CPU]
    sessions = {"CPU EP f32 MatMul (MLAS)": ort.InferenceSession(f32, providers=["CPUExecutionProvider"])}
    so = ort.SessionOptions()
    so.register_custom_ops_library(lib)
    sessions["custom-op library"] = ort.InferenceSession(mx, so, providers=["CPUExecutionProvider"])
    for threads in ("0", "1", "2"):
        so = ort.SessionOptions()
        so.add_provider_for_devices(devices, {"threads": threads})
        sessions[f"EP threads={threads}"] = ort.InferenceSession(mx, so)
    print(f"K={args.k} N={args.n} trans_b={args.trans_b}; median ms of {args.runs}")
    print("| M | " + " | ".join(sessions) + " |")
    print("|---:|" + "---:|" * len(sessions))
    rng = np.random.default_rng(1)
    for m in (int(v) for v in args.ms.split(",")):
        x = rng.standard_normal((m, args.k)).astype(np.float32)
        print(f"| {m} | " + " | ".join(f"{median_ms(s, x, args.runs):.2f}" for s in sessions.values()) + " |")


if __name__ == "__main__":
    main()
