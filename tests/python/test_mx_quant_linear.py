"""E8M0 `QuantizeLinear`s that no fusion absorbs (rule `mx_quant_linear` → `com.mxfuse::MxQuantizeLinear`).

A constant (static) E8M0 scale — blocked, per-axis or per-tensor — or an E5M2 output is not the
dynamic MX spelling rule `mxquant` absorbs. ONNX Runtime 1.31's CPU EP has no kernel for any
E8M0 QuantizeLinear, so these models do not load there at all. With mxfuse they run (a) in the
plugin EP, (b) rewritten offline with the custom-op library; both are compared with
`onnx.reference` on the original model, bit for bit.
"""

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

from test_mx_dequant import claimed_ops, e8m0_tensor, ep_session, offline_session, rewrite, same_bits, save

OFF = ort.GraphOptimizationLevel.ORT_DISABLE_ALL


def reproducer(path):
    """The issue's model: Q(x [2, 64], constant [2, 2] scale, blocks of 32) → DQ."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sc"], ["q"], axis=-1, block_size=32,
                         output_dtype=TP.FLOAT8E4M3FN),
        helper.make_node("DequantizeLinear", ["q", "sc"], ["y"], axis=-1, block_size=32,
                         output_dtype=TP.FLOAT),
    ]
    return save(nodes, [e8m0_tensor("sc", np.reshape([127, 128, 126, 127], [2, 2]))],
                [helper.make_tensor_value_info("x", TP.FLOAT, [2, 64])],
                [helper.make_tensor_value_info("y", TP.FLOAT, [2, 64])], path)


def static_matmul_add(path):
    """Static MX activation quantization read by a MatMul and an Add, plus a per-axis Q → DQ
    (axis 0, scale [m]) and a per-tensor E5M2 Q whose bytes are a graph output."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((64, 16)) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sc"], ["q"], axis=-1, block_size=32,
                         output_dtype=TP.FLOAT8E4M3FN, name="act_q"),
        helper.make_node("DequantizeLinear", ["q", "sc"], ["xd"], axis=-1, block_size=32,
                         output_dtype=TP.FLOAT, name="act_dq"),
        helper.make_node("MatMul", ["xd", "w"], ["mm"]),
        helper.make_node("Add", ["xd", "x"], ["sum"]),
        helper.make_node("QuantizeLinear", ["x", "rows"], ["qa"], axis=0,
                         output_dtype=TP.FLOAT8E4M3FN, name="axis_q"),
        helper.make_node("DequantizeLinear", ["qa", "rows"], ["xa"], axis=0,
                         output_dtype=TP.FLOAT, name="axis_dq"),
        helper.make_node("QuantizeLinear", ["x", "one"], ["q5"], output_dtype=TP.FLOAT8E5M2,
                         saturate=0, name="tensor_q"),
        # ORT's Python API returns no E5M2 arrays: an E5M2 byte is the top byte of an f16, and
        # ORT's Cast widens it exactly (a NaN's sign may not survive: same_bits ignores it).
        helper.make_node("Cast", ["q5"], ["q5h"], to=TP.FLOAT16),
    ]
    inits = [
        e8m0_tensor("sc", np.reshape([127, 130, 120, 127, 0, 254, 133, 125], [4, 2])),
        e8m0_tensor("rows", np.reshape([126, 127, 140, 110], [4])),
        e8m0_tensor("one", np.reshape([129], [])),
        onnx.numpy_helper.from_array(w, "w"),
    ]
    outs = [helper.make_tensor_value_info("mm", TP.FLOAT, [4, 16]),
            helper.make_tensor_value_info("sum", TP.FLOAT, [4, 64]),
            helper.make_tensor_value_info("xa", TP.FLOAT, [4, 64]),
            helper.make_tensor_value_info("q5h", TP.FLOAT16, [4, 64])]
    return save(nodes, inits, [helper.make_tensor_value_info("x", TP.FLOAT, [4, 64])], outs, path)


def same_bytes(a, b):
    """Exact equality, NaN sign and payload included (FP8 outputs come back as uint8)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.itemsize == 1:
        return a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))
    return same_bits(a, b)


def test_cpu_ep_alone_cannot_run_it(tmp_path):
    src = reproducer(tmp_path / "m.onnx")
    with pytest.raises(Exception, match="QuantizeLinear|implementation"):
        ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])


def test_the_reproducer_runs_in_both_paths_bit_for_bit(lib, ep_devices, mxfuse_cli, tmp_path):
    src = reproducer(tmp_path / "m.onnx")
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_quant_linear"] == 1 and report["counts"]["mx_dequant"] == 1, report
    assert report["rejections"] == [], report["rejections"]
    fused_ops = [n.op_type for n in onnx.load(tmp_path / "fused.onnx").graph.node]
    assert fused_ops == ["MxQuantizeLinear", "MxDequantize"], fused_ops
    x = np.random.default_rng(2).standard_normal((2, 64)).astype(np.float32) * 3
    x[0, :4] = [np.nan, -np.inf, 1e30, -0.0]
    want = ReferenceEvaluator(onnx.load(src)).run(None, {"x": x})[0]
    ep = ep_session(src, ep_devices)
    assert sorted(claimed_ops(ep)) == ["DequantizeLinear", "QuantizeLinear"], claimed_ops(ep)
    online = ep.run(None, {"x": x})[0]
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, {"x": x})[0]
    assert same_bits(online, want) and same_bits(offline, want)


def test_static_q_dq_read_by_matmul_and_add(lib, ep_devices, mxfuse_cli, tmp_path):
    src = static_matmul_add(tmp_path / "m.onnx")
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_quant_linear"] == 3 and report["counts"]["mx_dequant"] == 2, report
    assert report["counts"]["mxquant"] == 0, report
    fused_ops = [n.op_type for n in onnx.load(tmp_path / "fused.onnx").graph.node]
    assert "QuantizeLinear" not in fused_ops and "DequantizeLinear" not in fused_ops, fused_ops
    # Static Q → DQ → MatMul stays unfused: the MatMul reads MxDequantize's float output.
    assert "MatMul" in fused_ops and "MxMatMul" not in fused_ops, fused_ops

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 64)) * 4).astype(np.float32)
    x[1, 5], x[2, 40], x[3, 63] = np.nan, -np.inf, 7e4
    want = ReferenceEvaluator(onnx.load(src)).run(None, {"x": x})
    ep = ep_session(src, ep_devices)
    claimed = claimed_ops(ep)
    assert claimed.count("QuantizeLinear") == 3 and claimed.count("DequantizeLinear") >= 2, claimed
    assert not {"MatMul", "Add"} & set(claimed), claimed
    online = ep.run(None, {"x": x})
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, {"x": x})
    for name, w, a, b in zip(["mm", "sum", "xa", "q5h"], want, online, offline):
        assert same_bytes(a, b), name
        if name == "mm":
            # ORT's f32 GEMM sums in another order than numpy's.
            np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5, err_msg=name)
        else:
            assert same_bytes(a, w), name


def value_classes():
    """Signed zeros, f32 subnormals, FP8 subnormals and ties, 448/464/57344/61440 both ways,
    ±Inf, NaN, and a spread of binades: 64 values, negated too."""
    v = [0.0, 1e-45, 1e-40, 2.0**-126, 2.0**-10, 3 * 2.0**-11, 2.0**-9, 2.0**-17, 3 * 2.0**-18,
         1.0, 1.0625, 1.1875, 1.125, 1.375, 448.0, 456.0, 464.0, 464.01, 480.0, 57344.0, 61439.0,
         61440.0, 65536.0, 1e30, 3.4028235e38, np.inf, np.nan]
    v += [1.7 * 2.0**e for e in range(-140, 128, 11)]
    v += [0.5] * (32 - len(v) % 32 if len(v) % 32 else 0)
    v = np.array(v, np.float32)
    return np.concatenate([v, -v])


def all_scales_model(path, x_type, out_type, saturate, n):
    """q = QuantizeLinear(x [256, n], scale [256, 1] = every E8M0 byte, axis 1, block n)."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["q"], axis=1, block_size=n,
                              output_dtype=out_type, saturate=saturate)]
    out = "q"
    if out_type == TP.FLOAT8E5M2:
        # ORT's Python API returns no E5M2 arrays: widen exactly to f16 (its top byte).
        nodes.append(helper.make_node("Cast", ["q"], ["q16"], to=TP.FLOAT16))
        out, out_type = "q16", TP.FLOAT16
    inputs = [helper.make_tensor_value_info("x", x_type, [256, n])]
    if x_type == TP.BFLOAT16:
        # ORT's Python API takes no bfloat16 arrays: feed float (bf16 values) and Cast exactly.
        nodes.insert(0, helper.make_node("Cast", ["xf"], ["x"], to=TP.BFLOAT16))
        inputs = [helper.make_tensor_value_info("xf", TP.FLOAT, [256, n])]
    return save(nodes, [e8m0_tensor("s", np.arange(256).reshape(256, 1))], inputs,
                [helper.make_tensor_value_info(out, out_type, [256, n])], path)


@pytest.mark.parametrize("x_type", [TP.FLOAT, TP.FLOAT16, TP.BFLOAT16])
@pytest.mark.parametrize("out_type", [TP.FLOAT8E4M3FN, TP.FLOAT8E5M2])
@pytest.mark.parametrize("saturate", [1, 0])
def test_every_scale_byte_and_value_class_matches_onnx_reference(x_type, out_type, saturate, lib, ep_devices,
                                                                 mxfuse_cli, tmp_path):
    """Bit for bit (NaN sign included) against onnx.reference: every E8M0 byte (0 = 2^-127,
    254 = 2^127, 0xFF = NaN) × every value class, f32/f16/bf16 in, E4M3FN/E5M2 out, saturate 1/0."""
    classes = value_classes()
    np_type = {TP.FLOAT: np.float32, TP.FLOAT16: np.float16, TP.BFLOAT16: ml_dtypes.bfloat16}[x_type]
    row = classes.astype(np_type)
    x = np.tile(row, (256, 1))
    src = all_scales_model(tmp_path / "m.onnx", x_type, out_type, saturate, len(classes))
    feed = {"xf": x.astype(np.float32)} if x_type == TP.BFLOAT16 else {"x": x}
    ref_feed = {"x": x} if x_type != TP.BFLOAT16 else feed
    want = ReferenceEvaluator(onnx.load(src)).run(None, ref_feed)[0]
    rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    ep = ep_session(src, ep_devices, OFF)
    assert "QuantizeLinear" in claimed_ops(ep), claimed_ops(ep)
    online = ep.run(None, feed)[0]
    offline = offline_session(tmp_path / "fused.onnx", lib, OFF).run(None, feed)[0]
    assert same_bytes(online, offline)
    if out_type == TP.FLOAT8E5M2:
        # Through the f16 Cast: NaN signs are not compared (the Rust tests compare them).
        assert same_bits(online, want)
        return
    bad = np.argwhere(online.view(np.uint8) != want.view(np.uint8))
    assert bad.size == 0, [(int(s), float(x[s, c]), int(online.view(np.uint8)[s, c]),
                            int(want.view(np.uint8)[s, c])) for s, c in bad[:8]]


def mx_quantize_linear_model(x_dims, **attrs):
    """A model already rewritten: com.mxfuse::MxQuantizeLinear(x, constant [2, 2] scale)."""
    attrs = {"axis": -1, "block_size": 32, "output_dtype": TP.FLOAT8E4M3FN, **attrs}
    node = helper.make_node("MxQuantizeLinear", ["x", "sc"], ["q"], domain="com.mxfuse", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, x_dims)],
                          [helper.make_tensor_value_info("q", TP.FLOAT8E4M3FN, None)],
                          [e8m0_tensor("sc", np.reshape([127, 128, 126, 127], [2, 2]))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 24), helper.make_opsetid("com.mxfuse", 1)],
                             ir_version=11)


@pytest.mark.parametrize("attrs", [{"output_dtype": TP.FLOAT}, {"saturate": 2}, {"block_size": -1}])
def test_malformed_attribute_is_an_ort_error(attrs, lib, ep_devices):
    """An ONNX Runtime error at session creation on both paths, never a crash. ORT drops the
    error of the op's type inference (y's type depends on `output_dtype`, so the attributes are
    parsed there) and reports that y's declared type does not match instead of our reason."""
    model = mx_quantize_linear_model([2, 64], **attrs).SerializeToString()
    x = {"x": np.zeros((2, 64), np.float32)}
    so = ort.SessionOptions()
    so.register_custom_ops_library(lib)
    with pytest.raises(Exception, match="mxfuse|attribute|Type Error"):
        ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, x)
    so = ort.SessionOptions()
    so.add_provider_for_devices(ep_devices, {})
    with pytest.raises(Exception, match="mxfuse|attribute|Type Error"):
        ort.InferenceSession(model, so).run(None, x)


def test_scale_that_does_not_fit_at_run_time_is_an_ort_error(lib, ep_devices, mxfuse_cli, tmp_path):
    """x [m, 64] with a constant [2, 2] scale: the rule cannot check m, the kernel does — a
    clear error from both paths for m = 3, and the same session still runs m = 2."""
    src = tmp_path / "m.onnx"
    nodes = [helper.make_node("QuantizeLinear", ["x", "sc"], ["q"], axis=-1, block_size=32,
                              output_dtype=TP.FLOAT8E4M3FN)]
    save(nodes, [e8m0_tensor("sc", np.reshape([127, 128, 126, 127], [2, 2]))],
         [helper.make_tensor_value_info("x", TP.FLOAT, ["m", 64])],
         [helper.make_tensor_value_info("q", TP.FLOAT8E4M3FN, ["m", 64])], src)
    rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    ep = ep_session(src, ep_devices)
    offline = offline_session(tmp_path / "fused.onnx", lib)
    for sess in (ep, offline):
        with pytest.raises(Exception, match="mxfuse.*scale"):
            sess.run(None, {"x": np.zeros((3, 64), np.float32)})
        assert sess.run(None, {"x": np.ones((2, 64), np.float32)})[0].shape == (2, 64)
