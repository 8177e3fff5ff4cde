#!/usr/bin/env python3
"""Session creation time of the plugin EP: `python3 provider/bench/session_create.py LIB MODEL
[N]` registers LIB, creates N (default 3) sessions of MODEL on the EP's CPU device (set
MXFUSE_EP_TEST_DEVICE_MEMORY=host for the emulated device placement) and prints the fastest.
Run base and new libraries interleaved under `flock /tmp/mxfuse_cpu.lock` (BENCHMARKS.md,
"new-user probe 6")."""

import sys
import time

import onnxruntime as ort


def main():
    lib, model = sys.argv[1:3]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    ort.register_execution_provider_library("MxFuseExecutionProvider", lib)
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "MxFuseExecutionProvider"]
    times = []
    for _ in range(n):
        so = ort.SessionOptions()
        so.add_provider_for_devices(devices, {})
        t = time.perf_counter()
        ort.InferenceSession(model, so)
        times.append(time.perf_counter() - t)
    print(f"{lib} {model}: min {min(times):.3f} s of {n}")


if __name__ == "__main__":
    main()
