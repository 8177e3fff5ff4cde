#!/usr/bin/env python3
"""Throughput of one plugin-EP session run from several client threads at once (ONNX Runtime
allows concurrent `Run` on one session; the EP does not serialize them), against one client,
for the thread settings a server chooses between: ORT's intra-op threads (which the EP's
kernels use with the default `threads = 0`) and spinning. BENCHMARKS.md, probe 8.

Prints one line per configuration: runs per second over `--runs` runs in total (split evenly
over the clients) of batch 1 × `--tokens` tokens, after 5 warm-up runs per client, and whether
every output equalled the single-threaded run's bits.

Usage: flock /tmp/mxfuse_cpu.lock python3 provider/bench/concurrent_runs.py --model decoder.onnx --tokens 16
"""

import argparse
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[2]
EP = "MxFuseExecutionProvider"

# (label, client threads, intra-op threads, allow spinning)
CONFIGS = [
    ("1 client, intra 1", 1, 1, True),
    ("1 client, intra 2", 1, 2, True),
    ("1 client, intra 2, no spinning", 1, 2, False),
    ("2 clients, intra 1", 2, 1, True),
    ("2 clients, intra 2", 2, 2, True),
    ("2 clients, intra 2, no spinning", 2, 2, False),
    ("4 clients, intra 1", 4, 1, True),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--lib", default=str(ROOT / "target/release/libmxfuse_ep.so"))
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    ort.set_default_logger_severity(3)
    ort.register_execution_provider_library(EP, args.lib)
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP]
    want = None
    for label, clients, intra, spin in CONFIGS:
        so = ort.SessionOptions()
        so.intra_op_num_threads = intra
        so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        so.add_provider_for_devices(devices, {})
        sess = ort.InferenceSession(args.model, so)
        hidden = sess.get_inputs()[0].shape[-1]
        x = np.random.default_rng(0).standard_normal((1, args.tokens, hidden)).astype(np.float32)
        feed = {sess.get_inputs()[0].name: x}
        if want is None:
            want = sess.run(None, feed)
        same = [True]

        def client(n):
            for _ in range(n):
                out = sess.run(None, feed)
                if not all(np.array_equal(a, b) for a, b in zip(out, want)):
                    same[0] = False

        warm = [threading.Thread(target=client, args=(5,)) for _ in range(clients)]
        for t in warm:
            t.start()
        for t in warm:
            t.join()
        threads = [threading.Thread(target=client, args=(args.runs // clients,)) for _ in range(clients)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        print(f"{label:34s} {args.runs / elapsed:8.1f} runs/s  bits {'same' if same[0] else 'DIFFER'}", flush=True)


if __name__ == "__main__":
    main()
