"""AMD Quark's MX fake quantization, `com.amd.quark::MXQuantizeDequantize`, with every element type
Quark exports (its configs MXFP8E4M3, MXFP8E5M2, MXFP6E3M2, MXFP6E2M3, MXFP4E2M1, MXINT8), run by
the plugin EP alone (Quark's own custom-op library is not registered).

Only fp8_e4m3 is fused; the other element types stay Quark nodes that the EP's published kernel
runs. The oracle is an independent numpy version of Quark's CPU kernel (src/mx/cpu/mx_kernel.cc,
shared/guides/real-material.md §1.2): shared exponent = the largest biased f32 exponent field of
the block (NaN and Inf count as 0), scale 2^(shared - 127 - emax) unclamped, elements cast by
`ml_dtypes` (round to nearest even, subnormals, clipped to ±max_norm) or, for INT8, rounded by
`rounding_mode` to [-128, 127]·2^-6; NaN and Inf pass. Outputs must equal it bit for bit.
"""

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from test_mx_dequant import claimed_ops, same_bits

QUARK = "com.amd.quark"
# element_dtype -> (ml_dtypes type or None for INT8, emax, max_norm)
ELEMENTS = {
    "fp8_e4m3": (ml_dtypes.float8_e4m3fn, 8, 448.0),
    "fp8_e5m2": (ml_dtypes.float8_e5m2, 15, 57344.0),
    "fp6_e3m2": (ml_dtypes.float6_e3m2fn, 4, 28.0),
    "fp6_e2m3": (ml_dtypes.float6_e2m3fn, 2, 7.5),
    "fp4_e2m1": (ml_dtypes.float4_e2m1fn, 2, 6.0),
    "int8": (None, 0, 127.0),
}
# Quark's builtin configs: element_dtype, rounding_mode 2. INT8 also with modes 0 and 1.
CASES = [(e, 2) for e in ELEMENTS] + [("int8", 0), ("int8", 1)]


def oracle_blocks(x, element, mode):
    """Quark's kernel on float32 blocks `x[..., block]`."""
    cast, emax, max_norm = ELEMENTS[element]
    field = ((x.view(np.uint32) >> 23) & 0xFF).astype(np.int32)
    field[field == 0xFF] = 0
    shared = field.max(axis=-1, keepdims=True)
    scale = np.ldexp(np.float32(1), shared - 127 - emax).astype(np.float32)  # down to 2^-142
    with np.errstate(invalid="ignore", over="ignore"):
        e = x / scale
        if cast is not None:
            q = np.clip(e, -max_norm, max_norm).astype(cast).astype(np.float32)
        else:
            t = (e * np.float32(64)).astype(np.float64)
            if mode == 0:
                r = np.sign(t) * np.floor(np.abs(t) + 0.5)
            elif mode == 1:
                r = np.floor(t + 0.5)
            else:
                r = np.round(t)  # numpy rounds half to even
            q = (np.clip(r, -128, 127) / 64).astype(np.float32)
        q = np.copysign(q, e)  # a zero keeps its sign
        y = (scale * q).astype(np.float32)  # the f32 multiply Quark does
    return np.where(np.isfinite(x), y, x)


def oracle(x, element, mode, axis, block=32):
    """The op on a whole tensor: `axis` moved last and zero-padded to whole blocks, as Quark."""
    dtype = x.dtype
    x = np.asarray(x, np.float32)
    if x.size == 1:
        return x.astype(dtype)
    if x.ndim == 1:
        axis = 0
    m = np.moveaxis(x, axis, -1)
    n = m.shape[-1]
    pad = -n % block
    p = np.concatenate([m, np.zeros(m.shape[:-1] + (pad,), np.float32)], axis=-1)
    y = oracle_blocks(p.reshape(-1, block).copy(), element, mode).reshape(p.shape)[..., :n]
    return np.moveaxis(y, -1, axis).astype(dtype)


def e4m3_differs(x, axis, block=32):
    """Where the EP's fp8_e4m3 path (the MXFP8 quantizer the rules fuse Quark's op into, kept so
    that fused and unfused models agree) differs from Quark's kernel: blocks holding an Inf (the
    MXFP8 quantizer counts it for the scale and makes it NaN) and nonzero blocks whose largest
    exponent field is below 8 (amax below 2^-119, f32 subnormals included: E8M0 clamps the scale
    at 2^-127, Quark does not)."""
    m = np.moveaxis(np.asarray(x, np.float32), axis, -1)
    n = m.shape[-1]
    p = np.concatenate([m, np.zeros(m.shape[:-1] + (-n % block,), np.float32)], axis=-1)
    b = p.reshape(-1, block)
    field = ((np.abs(np.where(np.isfinite(b), b, 0)).view(np.uint32) >> 23) & 0xFF).max(-1)
    nonzero = (np.isfinite(b) & (b != 0)).any(-1)
    bad = np.isinf(b).any(-1) | (nonzero & (field < 8))
    mask = np.repeat(bad, block).reshape(p.shape)[..., :n]
    return np.moveaxis(mask, -1, axis)


def qdq(x, y, element, mode, axis):
    return helper.make_node("MXQuantizeDequantize", [x], [y], domain=QUARK, name=y,
                            element_dtype=element, axis=axis, block_size=32, rounding_mode=mode)


def model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "quark_elements", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                            helper.make_opsetid(QUARK, 1)])
    m.ir_version = 9
    return m.SerializeToString()


def session(blob, ep_devices):
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(ep_devices, {})
    return ort.InferenceSession(blob, so)


def edge_values(rng, shape):
    """Normals over many binades per row, with edge blocks: zeros and -0, f32 subnormals, ties
    and values just past max_norm after scaling, the f32 maximum, NaN and ±Inf."""
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-30, 30, shape[:-1] + (1,)))).astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    flat[0, :32] = 0.0
    flat[0, 1::3] = -0.0
    flat[1, :32] = (np.arange(1, 33) * 977).astype(np.uint32).view(np.float32) * np.where(np.arange(32) % 2, -1, 1)
    flat[2, :32] = 1.0 + np.arange(32, dtype=np.float32) / 32  # mantissas on and between grid points
    flat[3, :32] = -(1.0 + (np.arange(32, dtype=np.float32) + 0.5) / 32)
    flat[4, :32] = np.float32(1.9999999) - np.arange(32, dtype=np.float32) * np.float32(1e-7)
    flat[5, :32] = np.finfo(np.float32).max / np.arange(1, 33, dtype=np.float32)
    flat[6, 3], flat[6, 7], flat[6, 9] = np.nan, np.inf, -np.inf
    flat[7, :32] = np.ldexp(np.float32(1), -140) * np.arange(32)  # tiny: scale below E8M0's range
    flat[7, 0] = np.ldexp(np.float32(1), -100)
    return x


def test_the_oracle_agrees_with_the_fp8_e4m3_oracle_of_the_real_export_check():
    """The numpy version here against the 10-line OCP oracle that matched Quark's kernel bit for
    bit (shared/samples/scripts/quark_mxfp8_demo.py) on finite, normal-range data."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((8, 128)) * np.exp2(rng.integers(-10, 10, (8, 1)))).astype(np.float32)
    x[0, :32] = 0.0
    x[1, 0], x[1, 1:32] = 1.0, 0.875
    xb = x.reshape(-1, 32)
    amax = np.abs(xb).max(-1, keepdims=True)
    s = np.exp2(np.clip(np.floor(np.log2(np.where(amax == 0, 1.0, amax))) - 8, -127, 127)).astype(np.float32)
    ocp = (np.clip(xb / s, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) * s).reshape(x.shape)
    assert np.array_equal(oracle(x, "fp8_e4m3", 2, -1), ocp)


@pytest.mark.parametrize("element,mode", CASES)
def test_weight_and_activation_feeding_a_matmul(ep_devices, element, mode):
    """x [2, 5, 40] (K = 40: a partial block) fake-quantized along K, W [40, 24] along K (axis 0),
    then MatMul. The fake-quantized operands are graph outputs too and must be the oracle's bits;
    the product is ORT's MatMul of them."""
    rng = np.random.default_rng(len(element) * 10 + mode)
    w = (rng.standard_normal((40, 24)) * 0.1).astype(np.float32)
    nodes = [qdq("x", "xq", element, mode, -1), qdq("w", "wq", element, mode, 0),
             helper.make_node("MatMul", ["xq", "wq"], ["y"])]
    blob = model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [2, "S", 40])],
                 [helper.make_tensor_value_info(n, TP.FLOAT, None) for n in ("y", "xq", "wq")],
                 [numpy_helper.from_array(w, "w")])
    sess = session(blob, ep_devices)
    # Not MXFP8 (or, for fp8_e4m3, fused): the EP claims nothing else here but its fusion.
    if element != "fp8_e4m3":
        assert claimed_ops(sess) == []
    x = rng.standard_normal((2, 5, 40)).astype(np.float32)
    x[0, 0, :8] = [0.0, -0.0, 1e-40, 3.0, -3.0, 0.5, 1.75, -6.5]
    y, xq, wq = sess.run(None, {"x": x})
    want_x, want_w = oracle(x, element, mode, -1), oracle(w, element, mode, 0)
    assert same_bits(wq, want_w)
    assert same_bits(xq, want_x)
    np.testing.assert_allclose(y, want_x.astype(np.float64) @ want_w.astype(np.float64), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("element,mode", CASES)
@pytest.mark.parametrize("axis,dtype", [(-1, np.float32), (1, np.float32), (0, np.float32), (1, np.float16)])
def test_edge_blocks_along_any_axis(ep_devices, element, mode, axis, dtype):
    """Edge blocks along axis -1 and 1 of a [3, 37, 64] tensor (37: the sequence axis Quark
    quantizes with its default axis = 1, padded) and axis 0 of [37, 64, 3], f32 and f16 (quantized as its f32 widening, then rounded
    back to f16)."""
    rng = np.random.default_rng(abs(axis) * 7 + mode)
    # Generated with the quantized axis last (edge blocks along it), then moved into place.
    generated = {-1: (3, 37, 64), 1: (3, 64, 37), 0: (64, 3, 37)}[axis]
    x = np.moveaxis(edge_values(rng, generated), -1, axis)
    ty = TP.FLOAT if dtype == np.float32 else TP.FLOAT16
    with np.errstate(over="ignore"):  # the f32 maximum becomes Inf in f16
        xin = x.astype(dtype)
    blob = model([qdq("x", "y", element, mode, axis)],
                 [helper.make_tensor_value_info("x", ty, list(x.shape))],
                 [helper.make_tensor_value_info("y", ty, list(x.shape))])
    (y,) = session(blob, ep_devices).run(None, {"x": xin})
    with np.errstate(over="ignore"):
        want = oracle(xin.astype(np.float32), element, mode, axis).astype(dtype)
    if element == "fp8_e4m3":
        differs = e4m3_differs(xin, axis)
        assert differs.any() and not differs.all()
        y, want = np.where(differs, 0, y), np.where(differs, 0, want)
    assert same_bits(y, want)
    # NaN and Inf pass (outside the blocks masked above); the edge values were not all flushed.
    assert np.array_equal(np.isnan(y), np.isnan(np.where(y == 0, 0, xin)))
    assert np.isfinite(y).any() and (y[np.isfinite(y)] != 0).any()


@pytest.mark.parametrize("element", list(ELEMENTS))
def test_one_element_tensors_pass_and_rank_1_uses_its_only_axis(ep_devices, element):
    """As Quark's kernel: a one-element tensor is returned unchanged; a rank-1 tensor (a bias with
    Quark's default axis = 1) is quantized along its only axis."""
    blob = model([qdq("s", "sq", element, 2, 1), qdq("b", "bq", element, 2, 1)],
                 [helper.make_tensor_value_info("s", TP.FLOAT, [1]),
                  helper.make_tensor_value_info("b", TP.FLOAT, [45])],
                 [helper.make_tensor_value_info("sq", TP.FLOAT, [1]),
                  helper.make_tensor_value_info("bq", TP.FLOAT, [45])])
    b = np.linspace(-3.3, 2.9, 45, dtype=np.float32)
    s = np.array([1.702], np.float32)
    sq, bq = session(blob, ep_devices).run(None, {"s": s, "b": b})
    assert same_bits(sq, s)
    assert same_bits(bq, oracle(b, element, 2, 0))


def test_unknown_element_type_and_rounding_mode_are_clear_errors(ep_devices):
    x = [helper.make_tensor_value_info("x", TP.FLOAT, [2, 32])]
    y = [helper.make_tensor_value_info("y", TP.FLOAT, [2, 32])]
    data = {"x": np.ones((2, 32), np.float32)}
    bad = model([qdq("x", "y", "fp5_e2m2", 2, -1)], x, y)
    with pytest.raises(Exception, match=r'element_dtype "fp5_e2m2" is not one of'):
        session(bad, ep_devices).run(None, data)
    bad = model([qdq("x", "y", "int8", 3, -1)], x, y)
    with pytest.raises(Exception, match="rounding_mode 3"):
        session(bad, ep_devices).run(None, data)
    # The session (and the process) survive: the same EP still runs a good model.
    good = model([qdq("x", "y", "fp4_e2m1", 2, -1)], x, y)
    assert same_bits(session(good, ep_devices).run(None, data)[0], data["x"])
