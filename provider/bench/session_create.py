#!/usr/bin/env python3
"""Wall time of `InferenceSession(...)` creation with the mxfuse plugin EP (BENCHMARKS.md
"Rewrite", the EP's Quark weight checks), and a digest of one run's outputs.

One library per process (ORT registers an EP name once), so an A/B comparison runs this script
alternately with each build's library, e.g. (under the CPU lock):

    for i in 1 2 3; do for v in base new; do
      flock /tmp/mxfuse_cpu.lock python3 provider/bench/session_create.py --lib $v/libmxfuse_ep.so \\
        --model q.onnx --tag $v
    done; done

Prints one line per session: tag, creation seconds, and (first session only) a SHA-256 of every
output of one run on fixed inputs (symbolic dims 1, values from a fixed seed), so the two builds'
outputs can be compared byte for byte. `--verbose` shows ORT's log at VERBOSE (the EP's
"mxfuse: Compile ran N Quark weight check(s)" line).
"""

import argparse
import hashlib
import time

import numpy as np
import onnxruntime as ort

EP = "MxFuseExecutionProvider"
TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tag", default="")
    ap.add_argument("--sessions", type=int, default=1)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    ort.register_execution_provider_library(EP, a.lib)
    devices = [d for d in ort.get_ep_devices()
               if d.ep_name == EP and d.device.type == ort.OrtHardwareDeviceType.CPU]
    for i in range(a.sessions):
        so = ort.SessionOptions()
        so.add_provider_for_devices(devices, {})
        so.log_severity_level = 0 if a.verbose else 3
        t = time.perf_counter()
        s = ort.InferenceSession(a.model, sess_options=so)
        dt = time.perf_counter() - t
        digest = ""
        if i == 0:
            rng = np.random.default_rng(0)
            feeds = {}
            for x in s.get_inputs():
                shape = [d if isinstance(d, int) else 1 for d in x.shape]
                feeds[x.name] = rng.standard_normal(shape).astype(TYPES[x.type])
            h = hashlib.sha256()
            for y in s.run(None, feeds):
                h.update(np.ascontiguousarray(y).tobytes())
            digest = h.hexdigest()[:16]
        print(f"{a.tag} create_s {dt:.3f} {digest}", flush=True)


if __name__ == "__main__":
    main()
