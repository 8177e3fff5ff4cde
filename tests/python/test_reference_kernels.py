"""The numpy kernels scripts/run_in_ort.py gives onnx.reference for the com.microsoft ops it lacks
(models/tests/python/check_models.py CUSTOM) against ONNX Runtime's own CPU kernels, on nodes that
leave attributes out or name optional outputs, as exporters write them. A kernel that disagrees
with ORT makes run_in_ort.py blame a correct rewrite: with the old defaults a
SkipSimplifiedLayerNormalization without `epsilon` (ORT: 1e-12, the kernel said 1e-5) was reported
0.59 off, a QuickGelu without `alpha` (ORT: 1.702, the kernel said 1.0) 0.17 off, and a
SimplifiedLayerNormalization whose inv_std_var output is read stopped the script with a traceback."""

import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from conftest import ROOT

sys.path.insert(0, str(ROOT / "models" / "tests" / "python"))
from check_models import CUSTOM  # noqa: E402

H = 64
NP = {TP.FLOAT: np.float32, TP.FLOAT16: np.float16}


def run_both(node, inputs, dtype, feeds, inits=()):
    outs = [helper.make_tensor_value_info(o, TP.FLOAT if o == "inv" else dtype, None) for o in node.output if o]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(i, dtype, None) for i in inputs], outs,
                          list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                          ir_version=10)
    got = ReferenceEvaluator(m, new_ops=CUSTOM).run(None, feeds)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return got, want


def close(got, want, tol):
    for a, b in zip(got, want):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        assert a.shape == b.shape
        assert np.abs(a - b).max() <= tol * np.abs(b).max(), np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.parametrize("dtype", [TP.FLOAT, TP.FLOAT16])
def test_skip_simplified_without_epsilon_is_orts(dtype):
    rng = np.random.default_rng(0)
    # Small rows: the mean square (~1e-6) is where 1e-12 and 1e-5 give different results.
    x, skip = ((rng.standard_normal((2, 5, H)) * 1e-3).astype(NP[dtype]) for _ in range(2))
    gamma = numpy_helper.from_array((1 + 0.1 * rng.standard_normal(H)).astype(NP[dtype]), "gamma")
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["y", "", "", "s"],
                            domain="com.microsoft")
    got, want = run_both(node, ["x", "skip"], dtype, {"x": x, "skip": skip}, [gamma])
    close(got, want, 1e-6 if dtype == TP.FLOAT else 1e-3)


def test_simplified_inv_std_var_output_is_given():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, H)).astype(np.float32)
    gamma = numpy_helper.from_array(np.ones(H, np.float32), "gamma")
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "gamma"], ["y", "inv"], axis=-1, epsilon=1e-6)
    got, want = run_both(node, ["x"], TP.FLOAT, {"x": x}, [gamma])
    assert len(got) == 2
    close(got, want, 1e-6)


def test_quick_gelu_without_alpha_is_orts():
    x = np.linspace(-6, 6, 96, dtype=np.float32).reshape(2, 48)
    got, want = run_both(helper.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft"), ["x"], TP.FLOAT,
                         {"x": x})
    close(got, want, 1e-6)


def test_quark_fake_quant_without_axis_or_block_size_takes_quarks_defaults():
    """Quark's schema: axis 1, block 32 (a [M, K] activation: the last axis). The kernel had no
    defaults, so such a node stopped onnx.reference (and run_in_ort.py's comparison)."""
    x = np.random.default_rng(2).standard_normal((5, 64)).astype(np.float32)

    def quark_model(**attrs):
        node = helper.make_node("MXQuantizeDequantize", ["x"], ["y"], domain="com.amd.quark",
                                element_dtype="fp8_e4m3", **attrs)
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [5, 64])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, [5, 64])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.amd.quark", 1)],
                                 ir_version=10)

    got = ReferenceEvaluator(quark_model(), new_ops=CUSTOM).run(None, {"x": x})[0]
    want = ReferenceEvaluator(quark_model(axis=1, block_size=32), new_ops=CUSTOM).run(None, {"x": x})[0]
    assert np.array_equal(got, want) and not np.array_equal(got, x)
