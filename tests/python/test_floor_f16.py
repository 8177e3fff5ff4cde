"""The OCP floor scale computed in float16 (scale rule `floor_f16`).

A float16 graph that scales its float16 block amax in float16 (`Mul(amax, 2^-8)` or
`Div(amax, 256)` in f16, then `Cast(..., FLOAT8E8M0, round_mode=down)`) rounds the product to
float16's subnormal grid for blocks with amax < 2^-6, which can land on the next power of two (or
on 0). mxfuse fuses it with the kernels' `floor_f16` rule, which computes exactly that: the
dequantized values equal `onnx.reference` bit for bit on blocks at every magnitude, through the
plugin EP and rewritten offline. (RCEIL's quotient rounded to float16 has no kernel rule and stays
refused: test_device_placement.py.)
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from test_mx_dequant import claimed_ops, ep_session, offline_session, rewrite, same_bits, save

K, N = 128, 48


def quantizer(nodes, inits, x, div):
    """Standard MXFP8 quantize + DequantizeLinear of f16 x [m, K] with the floor scale in f16."""
    c = np.float16(256.0 if div else 2.0**-8)
    inits += [numpy_helper.from_array(np.array([0, K // 32, 32], np.int64), "blk"),
              numpy_helper.from_array(np.array([-1], np.int64), "ax"),
              numpy_helper.from_array(np.array(c, np.float16), "c")]
    nodes += [
        helper.make_node("Reshape", [x, "blk"], ["xb"]),
        helper.make_node("Abs", ["xb"], ["ab"]),
        helper.make_node("ReduceMax", ["ab", "ax"], ["amax"], keepdims=0),
        helper.make_node("Div" if div else "Mul", ["amax", "c"], ["s16"]),
        helper.make_node("Cast", ["s16"], ["scale"], to=TP.FLOAT8E8M0, round_mode="down", saturate=1),
        helper.make_node("QuantizeLinear", [x, "scale"], ["q"], axis=-1, block_size=32,
                         output_dtype=TP.FLOAT8E4M3FN),
        helper.make_node("DequantizeLinear", ["q", "scale"], ["xd"], axis=-1, block_size=32,
                         output_dtype=TP.FLOAT16),
    ]
    return "xd"


def model(path, div):
    """x f16 → MXFP8 (floor in f16) → xd (an output) → MatMul with an f16 weight → y."""
    rng = np.random.default_rng(7)
    nodes, inits = [], []
    xd = quantizer(nodes, inits, "x", div)
    inits.append(numpy_helper.from_array((rng.standard_normal((K, N)) * 0.1).astype(np.float16), "w"))
    nodes.append(helper.make_node("MatMul", [xd, "w"], ["y"]))
    outs = [helper.make_tensor_value_info(o, TP.FLOAT16, None) for o in ("xd", "y")]
    return save(nodes, inits, [helper.make_tensor_value_info("x", TP.FLOAT16, ["m", K])], outs, path)


def feed(rows=24, seed=3):
    """Blocks from 2^-20 to 2^6 in magnitude, plus blocks whose amax·2^-8 rounds up to a power of
    two on float16's subnormal grid (amax = 1.99·2^e: 31.84·2^-24 → 2^-19 at e = -12), zero
    blocks and blocks of the smallest subnormals."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, K)).astype(np.float32)
    for r in range(rows):
        for b in range(K // 32):
            x[r, 32 * b:32 * b + 32] *= 2.0 ** rng.integers(-20, 7)
    x[0, :32] = 0.0
    x[1, :32] = 2.0**-24
    x[1, 32:64] = 2.0**-23
    for i, e in enumerate(range(-16, -6)):
        r = 2 + i
        x[r, :32] = rng.uniform(-1.0, 1.0, 32) * 2.0**e
        x[r, 5] = 1.99 * 2.0**e
    return {"x": x.astype(np.float16)}


@pytest.mark.parametrize("div", [False, True], ids=["mul", "div"])
def test_floor_scale_in_float16_fuses_and_matches_onnx_reference(div, lib, ep_devices, mxfuse_cli, tmp_path):
    src = model(tmp_path / "m.onnx", div)
    f = feed()
    want = ReferenceEvaluator(onnx.load(src)).run(None, f)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"].get("mxquant") == 1, report
    fused = onnx.load(tmp_path / "fused.onnx")
    rules = [a.s.decode() for n in fused.graph.node for a in n.attribute if a.name == "scale_rule"]
    assert rules == ["floor_f16"], rules
    ep = ep_session(src, ep_devices)
    assert "QuantizeLinear" in claimed_ops(ep), claimed_ops(ep)
    online = ep.run(None, f)
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, f)
    # The dequantized activations: bit for bit (every scale byte the graph computes).
    assert same_bits(online[0], want[0])
    assert same_bits(offline[0], want[0])
    # Some blocks do take scales the exact rule would not: the test sees the difference.
    amax = np.abs(f["x"].astype(np.float64)).reshape(-1, K // 32, 32).max(-1) / 256
    live = (amax > 0) & (amax.astype(np.float16) > 0)
    graph = np.floor(np.log2(amax[live].astype(np.float16).astype(np.float64)))
    assert np.any(graph != np.floor(np.log2(amax[live]))), "the feed has blocks the f16 rounding moves"
    # The GEMM: float-order tolerance against the reference's float16 MatMul of the same xd.
    assert same_bits(online[1], offline[1])
    w = next(numpy_helper.to_array(t) for t in onnx.load(src).graph.initializer if t.name == "w")
    ref = want[0].astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(online[1].astype(np.float64), ref, rtol=2e-3, atol=2e-3 * np.abs(ref).max())


def test_rounding_up_to_the_next_power_of_two_is_what_the_graph_computes(lib, ep_devices, mxfuse_cli, tmp_path):
    """One block whose amax·2^-8 = 31.84·2^-24 rounds to 2^-19 in float16: the graph's scale is
    2^-19, the exact floor rule's 2^-20; the fused kernels give the graph's dequantized values."""
    src = model(tmp_path / "m.onnx", False)
    x = np.zeros((1, K), np.float16)
    x[0, :32] = np.float16(2.0**-12) * np.linspace(0.1, 1.0, 32).astype(np.float16)
    x[0, 31] = np.float16(1.99 * 2.0**-12)
    amax = float(x[0, :32].max())
    assert np.float16(amax / 256) == np.float16(2.0**-19) and amax / 256 < 2.0**-19
    want = ReferenceEvaluator(onnx.load(src)).run(None, {"x": x})[0]
    rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    got = offline_session(tmp_path / "fused.onnx", lib).run(None, {"x": x})[0]
    online = ep_session(src, ep_devices).run(None, {"x": x})[0]
    assert same_bits(got, want) and same_bits(online, want)
    # With scale 2^-19 the block max is 1.99·2^-12 / 2^-19 = 254.7 → E4M3 256: the reference's.
    assert float(want[0, 31]) == 256 * 2.0**-19


def norm_model(path):
    """x + r (f16) → RMSNormalization (Gemma-free, f16) → MXFP8 (floor in f16) → MatMul: the
    norm fusion takes the quantizer with the same rule."""
    rng = np.random.default_rng(11)
    nodes, inits = [], []
    inits += [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(K)).astype(np.float16), "g"),
              numpy_helper.from_array((rng.standard_normal((K, N)) * 0.1).astype(np.float16), "w")]
    nodes += [helper.make_node("Add", ["x", "r"], ["h"]),
              helper.make_node("RMSNormalization", ["h", "g"], ["n"], axis=-1, epsilon=1e-5)]
    xd = quantizer(nodes, inits, "n", False)
    nodes.append(helper.make_node("MatMul", [xd, "w"], ["y"]))
    ins = [helper.make_tensor_value_info(v, TP.FLOAT16, ["m", K]) for v in ("x", "r")]
    outs = [helper.make_tensor_value_info(o, TP.FLOAT16, None) for o in ("h", "y")]
    return save(nodes, inits, ins, outs, path)


def test_the_norm_fusion_takes_the_float16_floor_scale(lib, ep_devices, mxfuse_cli, tmp_path):
    src = norm_model(tmp_path / "m.onnx")
    rng = np.random.default_rng(5)
    f = {"x": rng.standard_normal((6, K)).astype(np.float16),
         "r": rng.standard_normal((6, K)).astype(np.float16)}
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"].get("add_rmsnorm_mxquant") == 1, report
    fused = onnx.load(tmp_path / "fused.onnx")
    rules = {n.op_type: a.s.decode() for n in fused.graph.node for a in n.attribute if a.name == "scale_rule"}
    assert rules == {"AddRmsNormMxQuant": "floor_f16"}, rules
    online = ep_session(src, ep_devices).run(None, f)
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, f)
    for a, b in zip(online, offline):
        assert same_bits(a, b)
    want = ReferenceEvaluator(onnx.load(src)).run(None, f)
    assert same_bits(offline[0], want[0])  # the residual sum
    np.testing.assert_allclose(offline[1].astype(np.float32), want[1].astype(np.float32), rtol=0.05, atol=0.05)
