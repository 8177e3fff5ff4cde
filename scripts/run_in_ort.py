"""Runs an MXFP8 model three ways and compares them:

1. the original model through `onnx.reference` (the ONNX spec's evaluator; ORT's own CPU EP
   cannot run Q/DQ with E8M0 scales),
2. the original model in ONNX Runtime with the mxfuse plugin EP (fuses online),
3. the offline-rewritten model in ONNX Runtime with the mxfuse custom-op library.

Usage: python scripts/run_in_ort.py ORIGINAL.onnx REWRITTEN.onnx [LIB.so]
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx.reference import ReferenceEvaluator

EP_NAME = "MxFuseExecutionProvider"


def feeds_for(path, seed=0, batch=1, seq=8):
    m = onnx.load(path, load_external_data=False)
    rng = np.random.default_rng(seed)
    inits = {i.name for i in m.graph.initializer}
    feeds = {}
    for i in m.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (batch if k == 0 else seq) for k, d in enumerate(t.shape.dim)]
        dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[i.name] = rng.standard_normal(dims).astype(dt)
    return feeds


def main():
    original, rewritten = sys.argv[1], sys.argv[2]
    lib = sys.argv[3] if len(sys.argv) > 3 else os.path.join("target", "release", "libmxfuse_ep.so")
    lib = os.path.abspath(lib)
    feeds = feeds_for(original)

    ref = ReferenceEvaluator(original).run(None, feeds)

    ort.register_execution_provider_library(EP_NAME, lib)
    devices = [d for d in ort.get_ep_devices()
               if d.ep_name == EP_NAME and d.device.type == ort.OrtHardwareDeviceType.CPU]
    so = ort.SessionOptions()
    so.add_provider_for_devices(devices, {})
    so.log_severity_level = 3  # errors only
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    session = ort.InferenceSession(original, sess_options=so)
    placed = {}
    for sg in session.get_provider_graph_assignment_info():
        n, k = placed.get(sg.ep_name, (0, 0))
        placed[sg.ep_name] = (n + 1, k + len(sg.get_nodes()))
    for ep, (n, k) in sorted(placed.items()):
        print(f"{ep}: {n} subgraphs, {k} nodes of the original model")
    online = session.run(None, feeds)

    so2 = ort.SessionOptions()
    so2.log_severity_level = 3
    so2.register_custom_ops_library(lib)
    offline = ort.InferenceSession(rewritten, sess_options=so2, providers=["CPUExecutionProvider"]).run(None, feeds)

    ok = True
    for k, (r, a, b) in enumerate(zip(ref, online, offline)):
        same = np.array_equal(a, b, equal_nan=True)
        err = float(np.max(np.abs(a.astype(np.float64) - r.astype(np.float64)))) if r.size else 0.0
        scale = float(np.max(np.abs(r))) if r.size else 1.0
        print(f"output {k}: plugin EP vs rewritten+custom ops bit-identical: {same}; "
              f"max |plugin EP - onnx.reference| = {err:.3g} (max |ref| = {scale:.3g})")
        ok &= same
    print("OK" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
