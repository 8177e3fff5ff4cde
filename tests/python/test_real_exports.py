"""Real exports (models/fixtures/real) through the plugin EP at ORT's default optimization level,
against AMD Quark's own output and onnx.reference (with the project's kernels of the contrib and
Quark ops).

* The Quark MXFP8 decoder-layer export puts `axis = 1` (the sequence axis of `[B, S, H]`) on some
  activations and the op on scalar constants (eps, alpha, beta): Quark's op pads a length that is
  not a multiple of 32 with zeros and returns a scalar unchanged. The EP must run it at any
  sequence length, fused or not.
* The torch-dynamo MiniMax-M3 exports (standard opset-24 MX and Quark MX): the Quark one failed
  to load under ORT's optimizer while the EP's shape inference wrote unknown dims as -1.
"""

import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

from conftest import ROOT

# The project's onnx.reference kernels of the contrib and Quark ops (models/tests/python): the Quark
# one is the numpy oracle checked bit-exactly against AMD Quark's own kernel.
sys.path.insert(0, str(ROOT / "models" / "tests" / "python"))
from check_models import CUSTOM  # noqa: E402

REAL = ROOT / "models" / "fixtures" / "real"
MODEL = REAL / "quark_mxfp8e4m3_decoder_layer.onnx"


def test_real_quark_layer_reproduces_quarks_own_output(ep_devices):
    """The expected output was computed by ONNX Runtime with AMD Quark's own kernel."""
    io = np.load(REAL / "quark_mxfp8e4m3_decoder_layer.expected.npz")
    so = ort.SessionOptions()
    so.add_provider_for_devices(ep_devices, {})
    got = ort.InferenceSession(str(MODEL), so).run(None, {"hidden_states": io["x"]})[0]
    np.testing.assert_allclose(got, io["y"], rtol=1e-5, atol=1e-5 * np.abs(io["y"]).max())


@pytest.mark.parametrize("seq", [8, 5, 32, 40])
@pytest.mark.parametrize("rules", ["all", "none"])
def test_real_quark_layer_runs_at_any_sequence_length(ep_devices, seq, rules):
    x = np.random.default_rng(seq).standard_normal((2, seq, 64)).astype(np.float32)
    want = ReferenceEvaluator(onnx.load(str(MODEL)), new_ops=CUSTOM).run(
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
    want = ReferenceEvaluator(onnx.load(str(model)), new_ops=CUSTOM).run(
        None, {"input_ids": ids})[0]
    so = ort.SessionOptions()
    so.add_provider_for_devices(ep_devices, {})
    got = ort.InferenceSession(str(model), so).run(None, {"input_ids": ids})[0]
    assert np.isfinite(want).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
