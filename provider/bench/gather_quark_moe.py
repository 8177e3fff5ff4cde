"""A whole MoE expert block in AMD Quark's spelling (float stacked experts fake-quantized by
`com.amd.quark::MXQuantizeDequantize`, gathered per (token, slot) sample; tests/python/
test_gather_quark.py's `quark_moe_model`) through the plugin EP: rule `mx_gather_dequant` on (the
experts quantized once, at session creation; two `MxGatherMatMul`) against the rule off in the
same process, same feeds (rule `mxquant` then takes the fake quants as activation quantizers, as
before this spelling was fused: `MxQuantize` of all E experts every step before the Gather, of the
selected ones and ORT's f32 bmm after it). Prints the median step of RUNS runs after one warm-up (the rule-off step at most 5
runs), the session creation time, and the ratio; checks the two outputs agree.

`--after`: the fake quant after the Gather (`MXQuantizeDequantize(Gather(W, ids))`). `--lib
PATH`: another build of libmxfuse_ep.so (a base commit's, for before/after runs of two builds).
Usage: python3 provider/bench/gather_quark_moe.py E H I [RUNS] [--after] [--lib PATH]
(build: cargo build --release -p provider)"""
import os
import sys
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import test_gather_quark as t  # noqa: E402
from gather_matmul_forms import median_ms  # noqa: E402

EP = "MxFuseExecutionProvider"


def main():
    args = sys.argv[1:]
    after = "--after" in args
    lib = os.path.join(ROOT, "target/release/libmxfuse_ep.so")
    if "--lib" in args:
        lib = args[args.index("--lib") + 1]
        args.remove("--lib")
        args.remove(lib)
    args = [a for a in args if a != "--after"]
    E, H, I = (int(v) for v in args[:3])
    runs = int(args[3]) if len(args) > 3 else 15
    t.E = E
    path = f"/tmp/mxfuse_quark_moe_{E}_{H}_{I}_{int(after)}.onnx"
    t.quark_moe_model(path, after, h=H, i=I)
    ort.register_execution_provider_library(EP, lib)
    devs = [d for d in ort.get_ep_devices() if d.ep_name == EP and d.device.type == ort.OrtHardwareDeviceType.CPU]
    rng = np.random.default_rng(1)
    s = 4  # one token, top-4
    feed = {"x": np.repeat(rng.standard_normal((1, H)).astype(np.float32), s, axis=0),
            "ids": rng.choice(E, s, replace=False).astype(np.int64)}
    ms, ys = {}, {}
    for label, opts, n in (("rule on", {}, runs), ("rule off", {"disable_rules": "mx_gather_dequant"}, min(runs, 5))):
        so = ort.SessionOptions()
        so.add_provider_for_devices(devs, opts)
        a = time.perf_counter()
        sess = ort.InferenceSession(path, so)
        create = time.perf_counter() - a
        ys[label] = sess.run(None, feed)[0]
        ms[label] = median_ms(sess, feed, n)
        print(f"{label}: step {ms[label]:.2f} ms, session creation {create:.2f} s", flush=True)
    err = np.abs(ys["rule on"] - ys["rule off"]).max() / np.abs(ys["rule off"]).max()
    print(f"E={E} H={H} I={I} {'after' if after else 'before'} the Gather: "
          f"rule off / on {ms['rule off'] / ms['rule on']:.0f}x (outputs differ by {err:.1e} of the largest)")


if __name__ == "__main__":
    main()
