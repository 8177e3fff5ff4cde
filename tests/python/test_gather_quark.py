"""Stacked MoE experts in AMD Quark's spelling (rule `mx_gather_dequant`,
rules/gathered_quark.rs): float expert weights fake-quantized by
`com.amd.quark::MXQuantizeDequantize`, gathered by expert id before the fake quant
(`Gather(MXQuantizeDequantize(W), ids)`) or after it (`MXQuantizeDequantize(Gather(W, ids))`).
The rewrite quantizes W at rewrite time and gathers the stored MXFP8 bytes
(`MxGatherDequantize`, or `MxGatherMatMul` with the experts' bmm): only the selected experts are
decoded, where the original graph fake-quantizes all of them every step. The oracle is
`onnx.reference` on the original graph with the project's numpy Quark kernel.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from test_gather_dequant import bmm_oracle, check_bmm
from test_mx_dequant import claimed_ops, ep_session, offline_session, rewrite, same_bits, save
from test_weight_only import quark_oracle_ops

E, N, K = 8, 48, 64
NP = {TP.FLOAT: np.float32, TP.FLOAT16: np.float16}


def save_quark(nodes, inits, inputs, outputs, path):
    """`save`, importing the com.amd.quark domain too."""
    save(nodes, inits, inputs, outputs, path)
    m = onnx.load(path)
    m.opset_import.append(helper.make_opsetid("com.amd.quark", 1))
    onnx.save(m, path)
    return path


def fake_quant(x, y, axis, name=None):
    return helper.make_node("MXQuantizeDequantize", [x], [y], domain="com.amd.quark", axis=axis,
                            block_size=32, element_dtype="fp8_e4m3", rounding_mode=2, name=name)


def float_experts(rng, shape, np_type=np.float32):
    """Float experts whose blocks differ in magnitude (2^-6 .. 2^6), with a zero block and
    the E4M3 extremes (448·2^-8, a subnormal) in expert 0."""
    w = rng.standard_normal(shape) * np.exp2(rng.integers(-6, 7, shape[:-1] + (1,)))
    w = w.astype(np.float32)
    w.reshape(-1)[:32] = 0
    w.reshape(-1)[32:35] = [1.75, -448 / 256, 2.0**-9 / 256]
    return w.astype(np_type)


def quark_gather_model(path, after, weight_first, out_type, bmm):
    """W [E, N, K] (weight first, fake-quantized along 2) or [E, K, N] (along 1), a float
    constant of `out_type`, gathered by ids [S] before or `after` the fake quant. With `bmm` the
    gathered experts feed the experts' bmm (`W[ids] @ x.unsqueeze(-1)` or `x.unsqueeze(1) @
    W[ids]`, the only output), otherwise they are the output."""
    rng = np.random.default_rng(10)
    shape, axis = ((E, N, K), 2) if weight_first else ((E, K, N), 1)
    inits = [numpy_helper.from_array(float_experts(rng, shape, NP[out_type]), "w"),
             numpy_helper.from_array(np.array([-1 if weight_first else 1], np.int64), "ax")]
    if after:
        nodes = [helper.make_node("Gather", ["w", "ids"], ["wg"], axis=0, name="select_experts"),
                 fake_quant("wg", "wsel", axis, "experts_fq")]
    else:
        nodes = [fake_quant("w", "wf", axis, "experts_fq"),
                 helper.make_node("Gather", ["wf", "ids"], ["wsel"], axis=0, name="select_experts")]
    inputs = [helper.make_tensor_value_info("ids", TP.INT64, ["s"])]
    out = "wsel"
    if bmm:
        mm = ["wsel", "xu"] if weight_first else ["xu", "wsel"]
        nodes += [helper.make_node("Unsqueeze", ["x", "ax"], ["xu"]),
                  helper.make_node("MatMul", mm, ["y"], name="expert_bmm")]
        inputs.append(helper.make_tensor_value_info("x", out_type, ["s", K]))
        out = "y"
    return save_quark(nodes, inits, inputs, [helper.make_tensor_value_info(out, out_type, None)], path)


def reference(src, feed):
    custom, _ = quark_oracle_ops()
    return ReferenceEvaluator(onnx.load(src), new_ops=custom).run(None, feed)[0]


def fused_ops(path):
    return sorted(n.op_type for n in onnx.load(path).graph.node)


@pytest.mark.parametrize("after", [False, True])
@pytest.mark.parametrize("weight_first", [True, False])
@pytest.mark.parametrize("out_type", [TP.FLOAT, TP.FLOAT16])
def test_quark_experts_gathered_are_the_fake_quants_bits(after, weight_first, out_type, lib, ep_devices,
                                                         mxfuse_cli, tmp_path):
    src = quark_gather_model(tmp_path / "m.onnx", after, weight_first, out_type, bmm=False)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_gather_dequant"] == 1, report
    assert fused_ops(tmp_path / "fused.onnx") == ["MxGatherDequantize"]
    feed = {"ids": np.array([3, 0, 7, 3, -1], np.int64)}  # repeats and a negative id
    want = reference(src, feed)
    ep = ep_session(src, ep_devices)
    assert sorted(claimed_ops(ep)) == ["Gather", "MXQuantizeDequantize"], claimed_ops(ep)
    online = ep.run(None, feed)[0]
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, feed)[0]
    assert same_bits(online, want) and same_bits(offline, want)


@pytest.mark.parametrize("after", [False, True])
@pytest.mark.parametrize("weight_first", [True, False])
@pytest.mark.parametrize("out_type", [TP.FLOAT, TP.FLOAT16])
def test_quark_expert_bmm_reads_the_stacked_weights_in_place(after, weight_first, out_type, lib, ep_devices,
                                                             mxfuse_cli, tmp_path):
    src = quark_gather_model(tmp_path / "m.onnx", after, weight_first, out_type, bmm=True)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_gather_dequant"] == 1, report
    assert fused_ops(tmp_path / "fused.onnx") == ["MxGatherMatMul", "Unsqueeze"]
    rng = np.random.default_rng(11)
    feed = {"x": rng.standard_normal((6, K)).astype(NP[out_type]), "ids": np.array([3, 0, 7, 3, -1, 5])}
    # f64 products of the fake-quantized experts (exact in f32) with the activation (E = 8 as in
    # test_gather_dequant).
    _, quark_qdq_numpy = quark_oracle_ops()
    w = numpy_helper.to_array(onnx.load(src).graph.initializer[0]).astype(np.float32)
    deq = quark_qdq_numpy(w, 2 if weight_first else 1).astype(NP[out_type]).astype(np.float64)
    want = bmm_oracle(deq, feed["x"], feed["ids"], weight_first)
    online = check_bmm(src, tmp_path / "fused.onnx", (lib, ep_devices), feed, want,
                       ["Gather", "MXQuantizeDequantize", "MatMul"])
    if out_type == TP.FLOAT:
        np.testing.assert_allclose(online, reference(src, feed), rtol=0, atol=1e-5 * np.abs(want).max())


def test_quark_experts_with_an_inf_are_refused_and_still_run(lib, ep_devices, mxfuse_cli, tmp_path):
    """An Inf in expert 5: Quark passes it through, E4M3 has no Inf. The rule says why; the
    fake quant stays rule `mxquant`'s, as before this spelling was fused (MxQuantize of all
    experts at run time, whose MxDequantize the rule then gathers)."""
    src = quark_gather_model(tmp_path / "m.onnx", False, True, TP.FLOAT, bmm=False)
    m = onnx.load(src)
    w = numpy_helper.to_array(m.graph.initializer[0]).copy()
    w[5, 2, 40] = np.inf
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    onnx.save(m, src)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    why = [r["reason"] for r in report["rejections"] if r["rule"] == "mx_gather_dequant"]
    assert any("not exactly an MXFP8 weight" in r and "Inf" in r for r in why), why
    assert fused_ops(tmp_path / "fused.onnx") == ["MxGatherDequantize", "MxQuantize"]
    # The other experts as the original graph computes them (the Inf's own block is MxQuantize's
    # known difference from Quark's kernel: docs/provider.md, "Foreign ops").
    feed = {"ids": np.array([4, 1], np.int64)}
    assert same_bits(ep_session(src, ep_devices).run(None, feed)[0], reference(src, feed))


def test_quark_fake_quant_along_the_ids_axis_is_refused(mxfuse_cli, tmp_path):
    """After the Gather, axis 0 is the ids' axis: blocks across the selected experts, not a
    fake quant of each expert. Refused with the reason."""
    src = quark_gather_model(tmp_path / "m.onnx", True, True, TP.FLOAT, bmm=False)
    m = onnx.load(src)
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(
        float_experts(np.random.default_rng(12), (64, N, K)), "w"))
    next(a for a in m.graph.node[1].attribute if a.name == "axis").i = 0
    onnx.save(m, src)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_gather_dequant"] == 0, report
    assert any("along the ids' axis 0" in r["reason"] for r in report["rejections"]), report["rejections"]


def quark_moe_model(path, after, h=64, i=64):
    """A whole MoE expert block in Quark's spelling, per (token, slot) sample (transformers'
    batched_mm experts): x [S, h] → Quark fake quant → bmm(Wgu[ids] [S, 2i, h], x) → SwiGLU →
    Quark fake quant → bmm(Wd[ids] [S, h, i], act) → y, the float expert weights fake-quantized
    along K before (or `after`) the Gather. provider/bench/gather_quark_moe.py times it."""
    rng = np.random.default_rng(13)
    nodes, inits = [], [numpy_helper.from_array(np.array([-1], np.int64), "last"),
                        numpy_helper.from_array(np.array([i, i], np.int64), "halves")]

    def experts(name, n, k):
        inits.append(numpy_helper.from_array(float_experts(rng, (E, n, k)) / 8, name))
        if after:
            nodes.append(helper.make_node("Gather", [name, "ids"], [name + "_g"], axis=0))
            nodes.append(fake_quant(name + "_g", name + "_sel", 2))
        else:
            nodes.append(fake_quant(name, name + "_f", 2))
            nodes.append(helper.make_node("Gather", [name + "_f", "ids"], [name + "_sel"], axis=0))

    nodes.append(fake_quant("x", "xq", -1))
    experts("wgu", 2 * i, h)
    nodes += [
        helper.make_node("Unsqueeze", ["xq", "last"], ["xcol"]),
        helper.make_node("MatMul", ["wgu_sel", "xcol"], ["gu3"]),
        helper.make_node("Squeeze", ["gu3", "last"], ["gu"]),
        helper.make_node("Split", ["gu", "halves"], ["gate", "up"], axis=-1),
        helper.make_node("Sigmoid", ["gate"], ["sg"]),
        helper.make_node("Mul", ["gate", "sg"], ["silu"]),
        helper.make_node("Mul", ["silu", "up"], ["act"]),
        fake_quant("act", "actq", -1),
    ]
    experts("wd", h, i)
    nodes += [helper.make_node("Unsqueeze", ["actq", "last"], ["acol"]),
              helper.make_node("MatMul", ["wd_sel", "acol"], ["y3"]),
              helper.make_node("Squeeze", ["y3", "last"], ["y"])]
    return save_quark(nodes, inits, [helper.make_tensor_value_info("x", TP.FLOAT, ["s", h]),
                                     helper.make_tensor_value_info("ids", TP.INT64, ["s"])],
                      [helper.make_tensor_value_info("y", TP.FLOAT, None)], path)


@pytest.mark.parametrize("after", [False, True])
def test_quark_moe_expert_block(after, lib, ep_devices, mxfuse_cli, tmp_path):
    src = quark_moe_model(tmp_path / "m.onnx", after)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_gather_dequant"] == 2, report
    fused = fused_ops(tmp_path / "fused.onnx")
    assert fused.count("MxGatherMatMul") == 2 and not {"Gather", "MXQuantizeDequantize"} & set(fused), fused
    rng = np.random.default_rng(14)
    feed = {"x": rng.standard_normal((6, 64)).astype(np.float32), "ids": np.array([1, 5, 5, 0, 7, 2])}
    want = reference(src, feed)
    online = ep_session(src, ep_devices).run(None, feed)[0]
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, feed)[0]
    assert same_bits(online, offline)
    # Float order only (the activation quantizers' inputs agree to within it, and a rare E4M3
    # step there would show as more: none at this seed).
    np.testing.assert_allclose(online, want, rtol=0, atol=1e-5 * np.abs(want).max())
