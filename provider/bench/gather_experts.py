"""Stacked MX experts selected per token (rule `mx_gather_dequant`): the plugin EP with the rule
on against the rule off (MxDequantize of all E experts, then ORT's Gather and f32 bmm), same
process, same model, same feeds. Rule on: `MxGatherMatMul` (the bmm reads the selected experts'
MX bytes in place); with `--keep-gathered` the gathered experts are also a graph output, so the
rule stops at `MxGatherDequantize` (only the selected experts dequantized, ORT's bmm).

Model: W [E, N, K] E4M3 blocked 32 along K, `Gather(DequantizeLinear(W), ids)` → bmm with the
token's activation (transformers' batched_mm experts as torch dynamo exports them), S = 4 ids.
Usage: python3 provider/bench/gather_experts.py E N K [RUNS] [--keep-gathered]   (build: cargo build --release -p provider)"""
import os
import sys
import time

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EP = "MxFuseExecutionProvider"


def model(path, E, N, K, keep_gathered):
    rng = np.random.default_rng(0)
    s = rng.integers(118, 130, (E, N, K // 32)).astype(np.uint8)
    inits = [numpy_helper.from_array(rng.standard_normal((E, N, K)).astype(ml_dtypes.float8_e4m3fn), "wq"),
             helper.make_tensor("ws", TP.FLOAT8E8M0, list(s.shape), s.tobytes(), raw=True),
             numpy_helper.from_array(np.array([-1], np.int64), "last")]
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], axis=2, block_size=32, output_dtype=TP.FLOAT),
             helper.make_node("Gather", ["w", "ids"], ["wsel"], axis=0),
             helper.make_node("Unsqueeze", ["x", "last"], ["xcol"]),
             helper.make_node("MatMul", ["wsel", "xcol"], ["y"])]
    g = helper.make_graph(nodes, "experts", [helper.make_tensor_value_info("x", TP.FLOAT, ["s", K]),
                                             helper.make_tensor_value_info("ids", TP.INT64, ["s"])],
                          [helper.make_tensor_value_info(o, TP.FLOAT, None)
                           for o in (["y", "wsel"] if keep_gathered else ["y"])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)], ir_version=11), path)


def main():
    keep = "--keep-gathered" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--keep-gathered"]
    E, N, K = (int(v) for v in args[:3])
    runs = int(args[3]) if len(args) > 3 else 15
    path = f"/tmp/mxfuse_gather_experts_{E}_{N}_{K}_{int(keep)}.onnx"
    model(path, E, N, K, keep)
    ort.register_execution_provider_library(EP, os.path.join(ROOT, "target/release/libmxfuse_ep.so"))
    devs = [d for d in ort.get_ep_devices() if d.ep_name == EP and d.device.type == ort.OrtHardwareDeviceType.CPU]
    rng = np.random.default_rng(1)
    feed = {"x": rng.standard_normal((4, K)).astype(np.float32),
            "ids": rng.choice(E, 4, replace=False).astype(np.int64)}
    ys = {}
    for label, opts in [("rule on", {}), ("rule off", {"disable_rules": "mx_gather_dequant"})]:
        so = ort.SessionOptions()
        so.add_provider_for_devices(devs, opts)
        s = ort.InferenceSession(path, so)
        ys[label] = s.run(None, feed)[0]
        ts = []
        for _ in range(runs):
            t = time.perf_counter()
            s.run(None, feed)
            ts.append(time.perf_counter() - t)
        print(f"E={E} N={N} K={K} S=4 {label}{' (gathered kept)' if keep else ''}: median {np.median(ts) * 1e3:.2f} ms")
    # The fused GEMM sums in another order than ORT's f32 bmm.
    np.testing.assert_allclose(ys["rule on"], ys["rule off"], rtol=1e-4, atol=1e-4 * np.abs(ys["rule off"]).max())


if __name__ == "__main__":
    main()
