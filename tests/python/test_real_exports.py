"""Real exports (models/fixtures/real) through the plugin EP at ORT's default optimization level,
against onnx.reference (with a numpy model of Quark's `com.amd.quark::MXQuantizeDequantize`).

* The Quark MXFP8 decoder-layer export puts `axis = 1` (the sequence axis of `[B, S, H]`) on some
  activations and fake-quantizes scalar constants (eps, alpha, beta): Quark's op pads a length
  that is not a multiple of 32 with zeros. The EP must run it at any sequence length, fused or not.
* The torch-dynamo MiniMax-M3 exports (standard opset-24 MX and Quark MX): the Quark one failed
  to load under ORT's optimizer while the EP's shape inference wrote unknown dims as -1.
"""

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from conftest import EP_NAME, ROOT

REAL = ROOT / "models" / "fixtures" / "real"
MODEL = REAL / "quark_mxfp8e4m3_decoder_layer.onnx"


class MXQuantizeDequantize(OpRun):
    """Quark's ONNX op: OCP floor scale per 32-block along `axis` (zero-padded), E4M3 saturating."""

    op_domain = "com.amd.quark"

    def _run(self, x, element_dtype=None, axis=None, block_size=None, rounding_mode=None):
        x = np.asarray(x, dtype=np.float32)
        lines = x.reshape(1) if x.ndim == 0 else x
        ax = axis if axis >= 0 else axis + lines.ndim
        t = np.moveaxis(lines, ax, -1)
        n = t.shape[-1]
        padded = np.zeros(t.shape[:-1] + (-(-n // 32) * 32,), np.float32)
        padded[..., :n] = t
        blocks = padded.reshape(-1, 32)
        amax = np.abs(blocks).max(axis=1)
        exp = np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - 8
        scale = np.where(amax > 0, np.exp2(exp), 1.0).astype(np.float32)[:, None]
        q = np.clip(blocks / scale, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
        out = np.moveaxis((q * scale).reshape(padded.shape)[..., :n], -1, ax)
        return (np.ascontiguousarray(out).reshape(x.shape),)


@pytest.mark.parametrize("seq", [8, 5, 32, 40])
@pytest.mark.parametrize("rules", ["all", "none"])
def test_real_quark_layer_runs_at_any_sequence_length(ep_devices, seq, rules):
    x = np.random.default_rng(seq).standard_normal((2, seq, 64)).astype(np.float32)
    want = ReferenceEvaluator(onnx.load(str(MODEL)), new_ops=[MXQuantizeDequantize]).run(
        None, {"hidden_states": x})[0]
    so = ort.SessionOptions()
    options = {} if rules == "all" else {
        "disable_rules": "add_rmsnorm_mxquant,swiglu_mxquant_matmul,mxquant"}
    so.add_provider_for_devices(ep_devices, options)
    got = ort.InferenceSession(str(MODEL), so).run(None, {"hidden_states": x})[0]
    assert np.isfinite(want).all()
    # Quantized values are exact; the GEMMs sum in another order than numpy (f32 accumulation).
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("seq", [1, 5, 8])
@pytest.mark.parametrize("spelling", ["std", "quark"])
def test_dynamo_minimax_export_matches_onnx_reference(ep_devices, seq, spelling):
    model = REAL / f"minimax_m3_tiny_dynamo_mxfp8_{spelling}.onnx"
    ids = np.random.default_rng(seq).integers(0, 100, (1, seq)).astype(np.int64)
    want = ReferenceEvaluator(onnx.load(str(model)), new_ops=[MXQuantizeDequantize]).run(
        None, {"input_ids": ids})[0]
    so = ort.SessionOptions()
    so.add_provider_for_devices(ep_devices, {})
    got = ort.InferenceSession(str(model), so).run(None, {"input_ids": ids})[0]
    assert np.isfinite(want).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
