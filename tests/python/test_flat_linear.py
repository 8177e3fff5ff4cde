"""torch.export's `nn.Linear` on a `[B, S, K]` activation: `Reshape(x, [-1, K]) → Gemm(transB=1,
bias) | MatMul → Reshape(.., [B, S, N])`. With an MXFP8 activation the quantizer's
DequantizeLinear reaches the linear through the first Reshape; the rules read through it when it
keeps K (docs/ops.md, MxMatMul): the plugin EP (claiming the Reshape) and the offline rewrite
(custom-op library) give the same bits, and both agree with onnx.reference on the original.
A Reshape that changes the last axis is not read through (a note; the float MatMul runs as before).
"""

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from test_mx_dequant import claimed_ops, ep_session, mx_activation, offline_session, rewrite, same_bits, save

H, N = 64, 48


def model(path, linear, flat=(-1, H)):
    """x, residual [batch, seq, H] → Add → RMSNormalization → MXFP8 → DequantizeLinear →
    Reshape(flat) → `linear` ("gemm": transB=1 with bias; "matmul") → Reshape([batch, seq, N])
    (computed from Shape(x), as dynamo does for symbolic dims; [batch, seq, H / K', N] for a
    `flat` of another K')."""
    rng = np.random.default_rng(0)
    c = lambda a, n: numpy_helper.from_array(np.asarray(a), n)  # noqa: E731
    kf = flat[-1]
    inits = [
        c((1 + 0.1 * rng.standard_normal(H)).astype(np.float32), "gamma"),
        c(np.array([0, 0, H // 32, 32], np.int64), "blk"),
        c(np.array(flat, np.int64), "flat"),
        c(np.array([N] if kf == H else [H // kf, N], np.int64), "n"),
        c((0.5 * rng.standard_normal(N)).astype(np.float32), "bias"),
    ]
    if linear == "gemm":
        inits.append(c((0.1 * rng.standard_normal((N, kf))).astype(np.float32), "w"))
        lin = helper.make_node("Gemm", ["xf", "w", "bias"], ["yf"], transB=1)
    else:
        inits.append(c((0.1 * rng.standard_normal((kf, N))).astype(np.float32), "w"))
        lin = helper.make_node("MatMul", ["xf", "w"], ["yf"])
    nodes = [
        helper.make_node("Add", ["x", "residual"], ["sum"]),
        helper.make_node("RMSNormalization", ["sum", "gamma"], ["y"], epsilon=1e-6),
    ]
    mx_activation(nodes, inits, "y", blk="blk", out="yd", name=None)
    nodes += [
        helper.make_node("Reshape", ["yd", "flat"], ["xf"]),
        lin,
        helper.make_node("Shape", ["x"], ["lead"], end=-1),
        helper.make_node("Concat", ["lead", "n"], ["unflat"], axis=0),
        helper.make_node("Reshape", ["yf", "unflat"], ["out"]),
    ]
    ins = [helper.make_tensor_value_info(n, TP.FLOAT, ["batch", "seq", H]) for n in ("x", "residual")]
    outs = [helper.make_tensor_value_info("out", TP.FLOAT, None),
            helper.make_tensor_value_info("sum", TP.FLOAT, None)]
    save(nodes, inits, ins, outs, path)
    return path


def feeds(b, s, seed=1):
    rng = np.random.default_rng(seed)
    f = {n: (3 * rng.standard_normal((b, s, H))).astype(np.float32) for n in ("x", "residual")}
    f["x"][0, 0, :32] = -f["residual"][0, 0, :32]  # an all-zero block
    return f


def check(src, fused, lib, ep_devices, shapes=((1, 5), (1, 1), (5, 1))):
    """EP on the original, custom ops on the rewrite, onnx.reference on the original."""
    ep = ep_session(src, ep_devices)
    offline = offline_session(fused, lib)
    ref = ReferenceEvaluator(onnx.load(src))
    for b, s in shapes:
        feed = feeds(b, s)
        online = ep.run(None, feed)
        off = offline.run(None, feed)
        want = ref.run(None, feed)
        for name, a, o, w in zip(("out", "sum"), online, off, want):
            assert a.shape == w.shape, (name, a.shape, w.shape)
            assert same_bits(a, o), (src.name, b, s, name)
            np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5 * np.abs(w).max(),
                                       err_msg=f"{src.name} [{b}, {s}] {name}")
    return ep


def test_linear_through_view_fuses_online_and_offline(lib, ep_devices, mxfuse_cli, tmp_path):
    for linear in ("gemm", "matmul"):
        src = model(tmp_path / f"{linear}.onnx", linear)
        fused = tmp_path / f"{linear}.fused.onnx"
        report = rewrite(mxfuse_cli, src, fused)
        assert report["counts"]["add_rmsnorm_mxquant"] == 1, (linear, report)
        assert not any(f.get("notes") for f in report["fusions"]), report
        fused_ops = [n.op_type for n in onnx.load(fused).graph.node]
        assert sorted(fused_ops) == ["AddRmsNormMxQuant", "Concat", "MxMatMul", "Reshape", "Reshape",
                                     "Shape"], fused_ops
        assert "DequantizeLinear" not in fused_ops and "MxDequantize" not in fused_ops
        ep = check(src, fused, lib, ep_devices)
        claimed = claimed_ops(ep)
        # The flattening Reshape and the linear go with the fusion; the trailing Reshape and
        # its shape computation stay with ORT.
        assert claimed.count("Reshape") == 2, claimed  # the block Reshape and view(-1, K)
        assert ("Gemm" if linear == "gemm" else "MatMul") in claimed, claimed
        assert "DequantizeLinear" in claimed and "Concat" not in claimed, claimed


def test_reshape_that_changes_k_is_not_read_through(lib, ep_devices, mxfuse_cli, tmp_path):
    src = model(tmp_path / "k32.onnx", "matmul", flat=(-1, 32))
    fused = tmp_path / "k32.fused.onnx"
    report = rewrite(mxfuse_cli, src, fused)
    notes = [n for f in report["fusions"] for n in f.get("notes", [])]
    assert any("does not end in K = 64" in n for n in notes), report
    fused_ops = [n.op_type for n in onnx.load(fused).graph.node]
    assert "MxDequantize" in fused_ops and "MatMul" in fused_ops, fused_ops
    ep = check(src, fused, lib, ep_devices)
    assert "MatMul" not in claimed_ops(ep)
