"""Times the ModelOpt-spelled float16 decoder layer of tests/python/test_modelopt.py at a larger
size on the plugin EP's CPU device: fused (every rule) against unfused (every rule disabled: the
EP's own kernels for the `trt` ops, ORT's CPU EP for the rest; ORT cannot run the model without
the EP at all). Usage: python3 bench/cpu/modelopt_layer.py [H I TOKENS REPS]; wrap in
`flock /tmp/mxfuse_cpu.lock`. Prints the median ms per run of each, interleaved A/B rounds."""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))
import test_modelopt as t  # noqa: E402
from conftest import EP_NAME, library_path  # noqa: E402

ALL_RULES = ("add_rmsnorm_mxquant,swiglu_mxquant_matmul,mx_gather_dequant,mxquant,mx_weight_matmul,"
             "mx_quant_linear,mx_dequant")


def session(src, devices, opts):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.add_provider_for_devices(devices, opts)
    return ort.InferenceSession(str(src), so)


def main():
    h, i, tokens, reps = (int(a) for a in (sys.argv[1:] + ["2048", "5632", "8", "30"])[:4])
    t.H, t.I = h, i
    ort.register_execution_provider_library(EP_NAME, library_path())
    devices = [d for d in ort.get_ep_devices()
               if d.ep_name == EP_NAME and d.device.type == ort.OrtHardwareDeviceType.CPU]
    src = t.decoder_layer(Path(tempfile.mkdtemp()) / "layer.onnx")
    runs = {"fused": session(src, devices, {}),
            "unfused": session(src, devices, {"disable_rules": ALL_RULES})}
    feed = t.feeds(1, tokens)
    for s in runs.values():
        s.run(None, feed)
    times = {k: [] for k in runs}
    for _ in range(reps):
        for k, s in runs.items():
            t0 = time.perf_counter()
            s.run(None, feed)
            times[k].append(time.perf_counter() - t0)
    for k, v in times.items():
        print(f"{k}: H={h} I={i} tokens={tokens}: median {1e3 * np.median(v):.3f} ms "
              f"(min {1e3 * min(v):.3f}) over {reps}")


if __name__ == "__main__":
    main()
