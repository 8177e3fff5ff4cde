"""New-user probe 12: what a new user's hand-built models found (BENCHMARKS.md, "new-user probe
12").

1. Two RMSNorms of one residual sum (a parallel attention / MLP block, GPT-NeoX style, with a
norm each): the first norm's fusion absorbed the residual Add and the second norm stayed ORT's
ops, only its quantizer fused (`mxquant`), online and offline, with nothing in the report saying
why. Both fuse now; the plugin EP, the offline rewrite and onnx.reference agree.

Left (BENCHMARKS.md): with ONNX Runtime's default optimizations its common-subexpression pass
merges the two norm chains (they differ only in γ) before the EP sees the graph, and a norm whose
normalized tensor another γ multiply reads is refused ("interior value ... is also read"), so
there the EP fuses the two quantizers only; the EP half of this test runs with ORT's graph
optimizations off, as a model's own un-merged chains reach the EP.

2. The MXFP8 quantize spelled as torchao's `to_mx` writes it: `x.reshape(-1, 32)`, the amax per
row, viewed back to `[*x.shape[:-1], K // 32]` — refused before ("block Reshape [-1, 32] does not
split the last axis"), the quantizer and the norm before it unfused.

3. (Left by the probe, fused since session 28.) The norm's mean written as a sum over the hidden
size, `x.pow(2).sum(-1, keepdim=True) / H`: `Div(ReduceSum(x·x), H)`. Only the quantizer fused;
`--explain` showed the near miss "expected ReduceMean ..., found Div". ORT's CPU ReduceMean is its
ReduceSum then a division by H, so this is the same computation and fuses now, as does
`Mul(ReduceSum, 1/H)` for a power-of-two H (1/H exact); by a rounded 1/H it is refused."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

from test_mx_dequant import claimed_ops, ep_session, offline_session, rewrite, same_bits
from test_robustness import K, Graph, weight


def rms_norm(g, s, seed):
    """HF Llama's decomposed RMSNorm in f32 (Pow, ReduceMean, Add(eps), Sqrt, Reciprocal)."""
    mean = g.node("ReduceMean", [g.node("Pow", [s, g.const(2.0)]), g.const([-1], np.int64)])
    rstd = g.node("Reciprocal", [g.node("Sqrt", [g.node("Add", [mean, g.const(1e-6)])])])
    return g.node("Mul", [g.node("Mul", [s, rstd]), g.const(1 + weight([K], seed))])


def parallel_block(path):
    """sum = x + res; attn-ish = MXFP8(norm_a(sum)) @ Wa; mlp-ish = MXFP8(norm_b(sum)) @ Wb;
    out = sum + both (the residual read a third time)."""
    g = Graph()
    s = g.node("Add", ["x", "res"])
    a = g.node("MatMul", [g.mx_dequant(rms_norm(g, s, 1), 3), g.const(weight([K, K], 3))])
    b = g.node("MatMul", [g.mx_dequant(rms_norm(g, s, 2), 3), g.const(weight([K, K], 4))])
    g.outputs.append(g.node("Add", [g.node("Add", [a, b]), s]))
    inputs = [helper.make_tensor_value_info(n, TP.FLOAT, ["b", "s", K]) for n in ("x", "res")]
    return g.model(inputs, path)


def test_two_norms_of_one_residual_sum_both_fuse(lib, ep_devices, mxfuse_cli, tmp_path):
    src = parallel_block(tmp_path / "m.onnx")
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert [f["rule"] for f in report["fusions"]] == ["add_rmsnorm_mxquant"] * 2, report
    ops = [n.op_type for n in onnx.load(tmp_path / "fused.onnx").graph.node]
    assert ops.count("AddRmsNormMxQuant") == 2 and "ReduceMean" not in ops, ops
    rng = np.random.default_rng(12)
    feed = {n: rng.standard_normal((2, 3, K)).astype(np.float32) for n in ("x", "res")}
    sess = ep_session(src, ep_devices, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    claimed = claimed_ops(sess)
    # Both norms' nodes went to the EP (before: the second norm ran on ORT's CPU EP).
    assert claimed.count("ReduceMean") == 2 and claimed.count("QuantizeLinear") == 2, claimed
    online = sess.run(None, feed)
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, feed)
    assert all(same_bits(a, b) for a, b in zip(online, offline))
    want = ReferenceEvaluator(onnx.load(src)).run(None, feed)
    for got, ref in zip(online, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


def test_two_norms_merged_by_ort_still_run_the_same_bits(lib, ep_devices, mxfuse_cli, tmp_path):
    """With ORT's default optimizations (the chains merged, both norms refused online) the EP's
    result is still bit for bit the offline rewrite's: the fused norm is exact in f32."""
    src = parallel_block(tmp_path / "m.onnx")
    rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    feed = {n: np.random.default_rng(5).standard_normal((1, 4, K)).astype(np.float32) for n in ("x", "res")}
    online = ep_session(src, ep_devices).run(None, feed)
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, feed)
    assert all(same_bits(a, b) for a, b in zip(online, offline))


def flat_block_norm(path, keepdims):
    """Add → RMSNorm → MXFP8 with the block shape [-1, 32] and the amax Reshape'd back to
    Concat(Shape(y)[:-1], [K/32]) → MatMul, on [b, s, K]."""
    g = Graph()
    s = g.node("Add", ["x", "res"])
    g.outputs.append(s)
    y = rms_norm(g, s, 1)
    blocks = g.node("Reshape", [y, g.const([-1, 32], np.int64)])
    amax = g.node("ReduceMax", [g.node("Abs", [blocks]), g.const([-1], np.int64)], keepdims=keepdims)
    shape = g.node("Concat", [g.node("Shape", [y], end=-1), g.const([K // 32], np.int64)], axis=0)
    scale = g.node("Cast", [g.node("Mul", [g.node("Reshape", [amax, shape]), g.const(2.0**-8)])],
                   to=TP.FLOAT8E8M0, round_mode="down", saturate=1)
    q = g.node("QuantizeLinear", [y, scale], axis=-1, block_size=32, output_dtype=TP.FLOAT8E4M3FN)
    dq = g.node("DequantizeLinear", [q, scale], axis=-1, block_size=32, output_dtype=TP.FLOAT)
    g.outputs.append(g.node("MatMul", [dq, g.const(weight([K, 48], 3))]))
    inputs = [helper.make_tensor_value_info(n, TP.FLOAT, ["b", "s", K]) for n in ("x", "res")]
    return g.model(inputs, path)


@pytest.mark.parametrize("keepdims", [0, 1])
def test_flattened_block_shape_fuses_online_and_offline(keepdims, lib, ep_devices, mxfuse_cli, tmp_path):
    src = flat_block_norm(tmp_path / "m.onnx", keepdims)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert [f["rule"] for f in report["fusions"]] == ["add_rmsnorm_mxquant"], report
    rng = np.random.default_rng(7)
    feed = {n: (rng.standard_normal((2, 5, K)) * 4).astype(np.float32) for n in ("x", "res")}
    sess = ep_session(src, ep_devices)
    claimed = claimed_ops(sess)
    assert "ReduceMean" in claimed and "QuantizeLinear" in claimed and "Concat" in claimed, claimed
    online = sess.run(None, feed)
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, feed)
    assert all(same_bits(a, b) for a, b in zip(online, offline))
    want = ReferenceEvaluator(onnx.load(src)).run(None, feed)
    for got, ref in zip(online, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


def sum_over_h_norm(path, h, scale_op, count):
    """sum = x + res; y = RMSNorm(sum) with the mean as `scale_op(ReduceSum(sum·sum, -1), count)`;
    MXFP8(y) @ W; outputs the MatMul and the sum."""
    g = Graph()
    s = g.node("Add", ["x", "res"])
    g.outputs.append(s)
    ss = g.node("ReduceSum", [g.node("Mul", [s, s]), g.const([-1], np.int64)], keepdims=1)
    mean = g.node(scale_op, [ss, g.const(count)])
    rstd = g.node("Reciprocal", [g.node("Sqrt", [g.node("Add", [mean, g.const(1e-6)])])])
    y = g.node("Mul", [g.node("Mul", [s, rstd]), g.const(1 + weight([h], 1))])
    g.outputs.append(g.node("MatMul", [g.mx_dequant(y, 3, h), g.const(weight([h, 48], 3))]))
    inputs = [helper.make_tensor_value_info(n, TP.FLOAT, ["b", "s", h]) for n in ("x", "res")]
    return g.model(inputs, path)


def close_to(got, want):
    """Within the float-order tolerance of docs/ops.md (the mean's sum order may round the last
    bit differently; the quantizers are exact)."""
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(np.abs(b).max()))


@pytest.mark.parametrize("h,scale_op,count", [(64, "Div", 64.0), (96, "Div", 96.0), (64, "Mul", 1 / 64)])
def test_mean_as_a_sum_over_h_fuses_online_and_offline(h, scale_op, count, lib, ep_devices, mxfuse_cli,
                                                       tmp_path):
    """Was: only the quantizer fused (`mxquant`), the norm's near miss "expected ReduceMean ...,
    found Div". Now the whole norm: the plugin EP claims the ReduceSum and the Div / Mul, and its
    result is the offline rewrite's bit for bit; ORT's own CPU kernels on the unfused norm (the EP
    with only `mxquant`) and onnx.reference agree within float-order tolerance."""
    src = sum_over_h_norm(tmp_path / "m.onnx", h, scale_op, count)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert [f["rule"] for f in report["fusions"]] == ["add_rmsnorm_mxquant"], report
    ops = [n.op_type for n in onnx.load(tmp_path / "fused.onnx").graph.node]
    assert ops.count("AddRmsNormMxQuant") == 1 and "ReduceSum" not in ops, ops
    rng = np.random.default_rng(28)
    feed = {n: (rng.standard_normal((2, 5, h)) * 3).astype(np.float32) for n in ("x", "res")}
    sess = ep_session(src, ep_devices)
    claimed = claimed_ops(sess)
    assert "ReduceSum" in claimed and scale_op in claimed and "QuantizeLinear" in claimed, claimed
    online = sess.run(None, feed)
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, feed)
    assert all(same_bits(a, b) for a, b in zip(online, offline))
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(ep_devices, {"enable_rules": "mxquant"})
    ort_norm = ort.InferenceSession(str(src), so)
    assert "ReduceSum" not in claimed_ops(ort_norm), "the norm runs on ORT's CPU EP"
    unfused = ort_norm.run(None, feed)
    assert same_bits(online[0], unfused[0]), "the residual sum is ORT's Add, bit for bit"
    close_to(online, unfused)
    close_to(online, ReferenceEvaluator(onnx.load(src)).run(None, feed))


@pytest.mark.parametrize("h", [96, 6144])
def test_mean_as_a_sum_times_a_rounded_reciprocal_is_refused(h, lib, ep_devices, mxfuse_cli, tmp_path):
    """`Mul(ReduceSum, 1/H)` with H not a power of two: 1/H rounded to float, whose product is
    not the kernel's division by H in the last bit. Refused with the reason, offline and online;
    the quantizer still fuses alone and the model runs as ORT computes its norm."""
    src = sum_over_h_norm(tmp_path / "m.onnx", h, "Mul", np.float32(1 / h))
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert [f["rule"] for f in report["fusions"]] == ["mxquant"], report
    why = [r["reason"] for r in report["rejections"] if r["rule"] == "add_rmsnorm_mxquant"]
    assert len(why) == 1 and f"1/{h} rounded to float" in why[0] and f"divides by {h}" in why[0], why
    rng = np.random.default_rng(6)
    feed = {n: rng.standard_normal((1, 3, h)).astype(np.float32) for n in ("x", "res")}
    sess = ep_session(src, ep_devices)
    claimed = claimed_ops(sess)
    assert "ReduceSum" not in claimed and "QuantizeLinear" in claimed, claimed
    online = sess.run(None, feed)
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, feed)
    assert all(same_bits(a, b) for a, b in zip(online, offline))
    close_to(online, ReferenceEvaluator(onnx.load(src)).run(None, feed))
