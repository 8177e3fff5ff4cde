#!/usr/bin/env python3
"""Sessions with the mxfuse plugin EP created, run once and destroyed in a loop, as a serving
process that loads and unloads models does: the process's resident memory (`VmRSS`) and thread
count after the first session and every `--every` sessions, to show whether anything the EP
keeps per session (prepacked weights, compiled programs, its own thread pool, the device
placement's buffer pools and allocator) outlives the session. BENCHMARKS.md, probe 8.

`--device` runs on the emulated device placement (`MXFUSE_EP_TEST_DEVICE_MEMORY=host`, set before
the library loads), `--options k=v,...` passes provider options (e.g. `threads=2`), and
`--reregister` also unregisters and registers the EP library around every session.

Usage: python3 provider/bench/session_churn.py --model decoder.onnx [--sessions 200] [--device]
"""

import argparse
import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
EP = "MxFuseExecutionProvider"


def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def inputs(sess, tokens):
    """Zeros-free deterministic inputs: symbolic dims 1 but the second-to-last (`tokens`)."""
    rng = np.random.default_rng(0)
    feed = {}
    for i in sess.get_inputs():
        dims = [d if isinstance(d, int) else (tokens if k == len(i.shape) - 2 else 1) for k, d in enumerate(i.shape)]
        dtype = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64}[i.type]
        feed[i.name] = (rng.integers(0, 50, dims) if dtype == np.int64 else rng.standard_normal(dims)).astype(dtype)
    return feed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--lib", default=str(ROOT / "target/release/libmxfuse_ep.so"))
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--tokens", type=int, default=3)
    ap.add_argument("--device", action="store_true", help="the emulated device placement")
    ap.add_argument("--options", default="", help="provider options k=v,k=v")
    ap.add_argument("--reregister", action="store_true")
    args = ap.parse_args()
    if args.device:
        os.environ["MXFUSE_EP_TEST_DEVICE_MEMORY"] = "host"
    import onnxruntime as ort
    ort.set_default_logger_severity(3)
    options = dict(kv.split("=", 1) for kv in args.options.split(",") if kv)
    registered = False
    first = None
    for i in range(args.sessions):
        if not registered:
            ort.register_execution_provider_library(EP, args.lib)
            registered = True
        so = ort.SessionOptions()
        so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == EP], options)
        sess = ort.InferenceSession(args.model, so)
        out = sess.run(None, inputs(sess, args.tokens))
        if first is None:
            first = out
        assert all(np.array_equal(a, b) for a, b in zip(first, out)), f"session {i} gave other outputs"
        del sess, so
        if args.reregister:
            ort.unregister_execution_provider_library(EP)
            registered = False
        if i == 0 or (i + 1) % args.every == 0:
            print(f"after {i + 1:4d} sessions: VmRSS {status('VmRSS') / 1024:7.1f} MiB, threads {status('Threads')}",
                  flush=True)


if __name__ == "__main__":
    main()
