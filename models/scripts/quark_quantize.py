"""Quantize a float ONNX model with AMD Quark's own MXFP8E4M3 config (real Quark output, fake-quant
com.amd.quark::MXQuantizeDequantize nodes wherever Quark puts them), for the rewrite-rule fixtures.
Feeds Normal(0,1) calibration data (MX needs none, the API wants a reader) for every float input.
Needs a venv with amd-quark + onnxruntime<=1.28 + torch, its bin/ on PATH (Quark JIT-builds its
custom-op library with ninja): PATH=$VENV/bin:$PATH $VENV/bin/python quark_quantize.py IN.onnx OUT.onnx
Also writes OUT minus .onnx + .expected.npz: a Normal(0,1) `hidden_states` [2, 8, H] input and the
output of ORT running OUT with Quark's own custom-op kernel, so tests without Quark can check an
oracle against the real thing.
"""
import sys

import numpy as np
import onnx
from quark.onnx import ModelQuantizer
from quark.onnx.quantization.config.config import Config
from quark.onnx.quantization.config.custom_config import get_default_config


class Reader:
    def __init__(self, model, batches=2, dims=None):
        feeds = []
        for i in range(batches):
            rng = np.random.default_rng(i)
            f = {}
            for vi in model.graph.input:
                shape = [d.dim_value if d.HasField("dim_value") else (dims or {}).get(d.dim_param, 8)
                         for d in vi.type.tensor_type.shape.dim]
                f[vi.name] = rng.standard_normal(shape).astype(np.float32)
            feeds.append(f)
        self.it = iter(feeds)

    def get_next(self):
        return next(self.it, None)

    def rewind(self):
        pass


def main(src, dst):
    model = onnx.load(src)
    cfg = Config(global_quant_config=get_default_config("MXFP8E4M3"))
    ModelQuantizer(cfg).quantize_model(src, dst, Reader(model, dims={"batch": 1, "seq": 8}))
    out = onnx.load(dst)
    # Quark lists every domain it knows; keep the ones the graph uses (smaller, clearer fixture).
    used = {n.domain for n in out.graph.node} | {""}
    keep = [o for o in out.opset_import if o.domain in used]
    del out.opset_import[:]
    out.opset_import.extend(keep)
    onnx.save(out, dst)
    write_expected(out, dst)


def write_expected(model, path):
    import onnxruntime as ort
    from quark.onnx import get_library_path

    so = ort.SessionOptions()
    so.register_custom_ops_library(get_library_path())
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    hidden = model.graph.input[0].type.tensor_type.shape.dim[-1].dim_value
    x = np.random.default_rng(0).standard_normal((2, 8, hidden)).astype(np.float32)
    y = sess.run(None, {model.graph.input[0].name: x})[0]
    np.savez(path[: -len(".onnx")] + ".expected.npz", x=x, y=y)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
