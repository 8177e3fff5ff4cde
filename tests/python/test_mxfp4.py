"""MXFP4 weights: FLOAT4E2M1 values (two per byte, element 2i in the low nibble of byte i) with
FLOAT8E8M0 block scales, dequantized by an opset-24 `DequantizeLinear`.

ONNX Runtime 1.31's CPU EP has no kernel for an E8M0-scaled DequantizeLinear, so these models do
not run there at all. With mxfuse: a DequantizeLinear alone becomes `MxDequantize` (bit for bit
`onnx.reference`), and a constant MXFP4 weight feeding a MatMul behind an MXFP8 activation fuses
into `MxMatMul`, which reads the 4-bit weight and widens it to E4M3 once, at load. Both ways of
running mxfuse (plugin EP on the original model, custom-op library on the rewritten one) are
compared with `onnx.reference` on the original model.
"""

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from test_mx_dequant import (claimed_ops, e8m0_tensor, ep_session, mx_activation, offline_session, rewrite,
                             same_bits, save)

K, N = 64, 48
# The 16 E2M1 values by code, from the format (sign, 2 exponent bits with bias 1, 1 mantissa bit).
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def pack(codes, pad=0xF):
    """ONNX packing of 4-bit codes: element 2i in the low nibble of byte i; an odd count pads the
    last high nibble (with garbage by default: it must never be read)."""
    flat = np.asarray(codes, np.uint8).reshape(-1)
    if flat.size % 2:
        flat = np.append(flat, np.uint8(pad))
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)


def fp4_tensor(name, codes):
    codes = np.asarray(codes)
    return helper.make_tensor(name, TP.FLOAT4E2M1, list(codes.shape), pack(codes).tobytes(), raw=True)


def test_packing_and_values_agree_with_onnx_and_ml_dtypes():
    """The test's own packing and value table are onnx's and ml_dtypes' (the oracle the Rust
    codec is checked against in kernels/tests/mxfp4.rs is the same format definition)."""
    codes = np.arange(16, dtype=np.uint8)
    assert np.array_equal(E2M1.view(np.uint32), codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32).view(np.uint32))
    t = fp4_tensor("t", codes[:15].reshape(3, 5))
    assert len(t.raw_data) == 8  # ceil(15 / 2)
    assert np.array_equal(numpy_helper.to_array(t).astype(np.float32).reshape(-1), E2M1[:15])


def all_codes_model(path, out_type):
    """y = DequantizeLinear(x [256, 16] = every code per row, scale [256, 1] = every byte, axis 1,
    block 16): every (code, scale byte) pair."""
    x = np.tile(np.arange(16, dtype=np.uint8), (256, 1))
    s = np.arange(256, dtype=np.uint8).reshape(256, 1)
    nodes = [helper.make_node("DequantizeLinear", ["xq", "xs"], ["y"], axis=1, block_size=16,
                              output_dtype=out_type)]
    out = "y"
    if out_type == TP.BFLOAT16:
        # ORT's Python API returns no bfloat16 arrays: widen (exactly) to float for the check.
        nodes.append(helper.make_node("Cast", ["y"], ["y32"], to=TP.FLOAT))
        out, out_type = "y32", TP.FLOAT
    return save(nodes, [fp4_tensor("xq", x), e8m0_tensor("xs", s)], [],
                [helper.make_tensor_value_info(out, out_type, [256, 16])], path)


def odd_count_model(path):
    """Odd element counts (the padding nibble is garbage): blocked along axis 0 with a short last
    block ([33, 7], blocks of 32), per-axis ([7, 9] along axis 1) and per-tensor ([3, 5])."""
    rng = np.random.default_rng(3)
    c1, c2, c3 = (rng.integers(0, 16, shape) for shape in ((33, 7), (7, 9), (3, 5)))
    inits = [fp4_tensor("a", c1), e8m0_tensor("as", rng.integers(100, 150, (2, 7))),
             fp4_tensor("b", c2), e8m0_tensor("bs", [0, 1, 127, 128, 200, 253, 254, 255, 126]),
             fp4_tensor("c", c3), e8m0_tensor("cs", np.uint8(131))]
    nodes = [
        helper.make_node("DequantizeLinear", ["a", "as"], ["ya"], axis=0, block_size=32, output_dtype=TP.FLOAT),
        helper.make_node("DequantizeLinear", ["b", "bs"], ["yb"], axis=1, output_dtype=TP.FLOAT),
        helper.make_node("DequantizeLinear", ["c", "cs"], ["yc"], output_dtype=TP.FLOAT16),
    ]
    outs = [helper.make_tensor_value_info("ya", TP.FLOAT, [33, 7]),
            helper.make_tensor_value_info("yb", TP.FLOAT, [7, 9]),
            helper.make_tensor_value_info("yc", TP.FLOAT16, [3, 5])]
    return save(nodes, inits, [], outs, path)


def test_cpu_ep_alone_cannot_run_it(tmp_path):
    src = odd_count_model(tmp_path / "m.onnx")
    with pytest.raises(Exception, match="DequantizeLinear|implementation"):
        ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("out_type", [TP.FLOAT, TP.FLOAT16, TP.BFLOAT16])
def test_every_code_and_scale_byte_matches_onnx_reference(out_type, lib, ep_devices, mxfuse_cli, tmp_path):
    """Bit for bit against onnx.reference on all 16 × 256 (code, scale) pairs: ±0, scale 0 (2^-127
    · 0.5 is an f32 subnormal), 2^127 · 6 (Inf), scale 0xFF (NaN), the one rounding to f16/bf16."""
    src = all_codes_model(tmp_path / "m.onnx", out_type)
    want = ReferenceEvaluator(onnx.load(src)).run(None, {})[0]
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_dequant"] == 1 and report["rejections"] == [], report
    # No constant folding: the DequantizeLinear of constants must reach the EP / our kernel.
    off = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ep = ep_session(src, ep_devices, off)
    assert claimed_ops(ep) == ["DequantizeLinear"], claimed_ops(ep)
    assert same_bits(ep.run(None, {})[0], want)
    assert same_bits(offline_session(tmp_path / "fused.onnx", lib, off).run(None, {})[0], want)


def test_odd_counts_and_every_granularity_match_onnx_reference(lib, ep_devices, mxfuse_cli, tmp_path):
    src = odd_count_model(tmp_path / "m.onnx")
    want = ReferenceEvaluator(onnx.load(src)).run(None, {})
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_dequant"] == 3 and report["rejections"] == [], report
    off = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ep = ep_session(src, ep_devices, off)
    assert claimed_ops(ep) == ["DequantizeLinear"] * 3, claimed_ops(ep)
    online = ep.run(None, {})
    offline = offline_session(tmp_path / "fused.onnx", lib, off).run(None, {})
    for name, w, a, b in zip(("ya", "yb", "yc"), want, online, offline):
        assert same_bits(a, w), name
        assert same_bits(b, w), name


def expert_model(path):
    """A MiniMax-M3 / gpt-oss-shaped expert: x → MXFP8 activation (standard opset-24 spelling) →
    `xd`, read by a MatMul with an MXFP4 up-projection `[K, N]` (DequantizeLinear axis 0) and a
    Gemm (transB = 1, bias) with an MXFP4 `[N, K]` weight (axis 1); a third MXFP4 weight feeds a
    MatMul and an Add (its DequantizeLinear stays for the Add)."""
    rng = np.random.default_rng(7)
    nodes, inits = [], []
    xd = mx_activation(nodes, inits, "x")
    inits += [
        fp4_tensor("w1q", rng.integers(0, 16, (K, N))), e8m0_tensor("w1s", rng.integers(118, 130, (K // 32, N))),
        fp4_tensor("w2q", rng.integers(0, 16, (N, K))), e8m0_tensor("w2s", rng.integers(118, 130, (N, K // 32))),
        fp4_tensor("w3q", rng.integers(0, 16, (K, N))), e8m0_tensor("w3s", rng.integers(118, 130, (K // 32, N))),
        numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "bias"),
        numpy_helper.from_array(np.float32(0.25), "quarter"),
    ]
    dq = dict(block_size=32, output_dtype=TP.FLOAT)
    nodes += [
        helper.make_node("DequantizeLinear", ["w1q", "w1s"], ["w1"], axis=0, name="w1_dq", **dq),
        helper.make_node("DequantizeLinear", ["w2q", "w2s"], ["w2"], axis=1, name="w2_dq", **dq),
        helper.make_node("DequantizeLinear", ["w3q", "w3s"], ["w3"], axis=0, name="w3_dq", **dq),
        helper.make_node("MatMul", [xd, "w1"], ["up"], name="up_proj"),
        helper.make_node("Gemm", [xd, "w2", "bias"], ["gate"], transB=1, name="gate_proj"),
        helper.make_node("MatMul", [xd, "w3"], ["down"], name="shared_proj"),
        helper.make_node("Add", ["w3", "quarter"], ["w3_shift"], name="w3_reader"),
    ]
    outs = [helper.make_tensor_value_info(o, TP.FLOAT, None) for o in ("up", "gate", "down", "w3_shift")]
    return save(nodes, inits, [helper.make_tensor_value_info("x", TP.FLOAT, ["m", K])], outs, path)


def test_mxfp4_expert_weights_fuse_into_mxmatmul_and_match_onnx_reference(lib, ep_devices, mxfuse_cli, tmp_path):
    src = expert_model(tmp_path / "m.onnx")
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mxquant"] == 1 and report["counts"]["mx_dequant"] == 1, report
    assert report["rejections"] == [], report["rejections"]
    fused = onnx.load(tmp_path / "fused.onnx").graph
    ops = [n.op_type for n in fused.node]
    assert ops.count("MxMatMul") == 3 and ops.count("MxDequantize") == 1, ops
    assert "DequantizeLinear" not in ops, ops
    # The MxMatMuls read the 4-bit initializers in place: the file stays MXFP4.
    fp4 = {t.name for t in fused.initializer if t.data_type == TP.FLOAT4E2M1}
    assert fp4 == {"w1q", "w2q", "w3q"}, fp4
    for n in fused.node:
        if n.op_type == "MxMatMul":
            assert n.input[2] in fp4, n
    dq = next(n for n in fused.node if n.op_type == "MxDequantize")
    assert list(dq.input) == ["w3q", "w3s"] and list(dq.output) == ["w3"], dq

    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, K)).astype(np.float32)
    x[2] = 0.0
    x[3, 7] = 3.0e4  # a block with a large outlier
    want = ReferenceEvaluator(onnx.load(src)).run(None, {"x": x})

    ep = ep_session(src, ep_devices)
    claimed = claimed_ops(ep)
    assert {"MatMul", "Gemm", "QuantizeLinear", "DequantizeLinear"} <= set(claimed), claimed
    assert "Add" not in claimed, claimed
    online = ep.run(None, {"x": x})
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, {"x": x})
    for name, w, a, b in zip(("up", "gate", "down", "w3_shift"), want, online, offline):
        assert same_bits(a, b), name  # the two mxfuse paths run the same kernels
        if name == "w3_shift":
            assert same_bits(a, w), name  # exact dequantized values + an exact f32 Add
        else:
            # GEMMs: the summation order differs from numpy's.
            np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5, err_msg=name)


def test_malformed_fp4_inputs_are_ort_errors_not_crashes(lib, tmp_path):
    """com.mxfuse nodes written by hand with bad FP4 operands: a scale that does not fit the
    values' blocks, and an FP4 MxMatMul weight without its scales. Each is a clear ORT error."""
    rng = np.random.default_rng(5)
    mx = [helper.make_opsetid("", 24), helper.make_opsetid("com.mxfuse", 1)]

    def model(nodes, inits, inputs, out, name):
        g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(out, TP.FLOAT, None)], inits)
        path = tmp_path / name
        onnx.save(helper.make_model(g, opset_imports=mx, ir_version=11), path)
        return offline_session(path, lib, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)

    bad_scale = model(
        [helper.make_node("MxDequantize", ["xq", "xs"], ["y"], domain="com.mxfuse", axis=0, block_size=32,
                          output_dtype=TP.FLOAT)],
        [fp4_tensor("xq", rng.integers(0, 16, (64, 3))), e8m0_tensor("xs", np.full((3, 3), 127))],
        [], "y", "bad_scale.onnx")
    with pytest.raises(Exception, match=r"blocked scale has shape \[3, 3\], expected \[2, 3\]"):
        bad_scale.run(None, {})

    no_b_scale = model(
        [helper.make_node("MxMatMul", ["aq", "as", "bq"], ["y"], domain="com.mxfuse", output_dtype=TP.FLOAT)],
        [helper.make_tensor("aq", TP.FLOAT8E4M3FN, [2, 64], np.full(128, 0x38, np.uint8).tobytes(), raw=True),
         e8m0_tensor("as", np.full((2, 2), 127)), fp4_tensor("bq", rng.integers(0, 16, (64, 5)))],
        [], "y", "no_b_scale.onnx")
    with pytest.raises(Exception, match="FLOAT4E2M1 b needs b_scale"):
        no_b_scale.run(None, {})
