"""A block Reshape whose shape is computed from `Shape(x)` (what exporters emit for symbolic
batch / sequence dims) in front of a fused norm: it fuses online and offline alike, and the shape
computation goes with the fusion. Left outside, it reads the fused norm's output and feeds the
fused node, and ONNX Runtime rejects the claim ("set nodes that cannot be fused together").
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from test_mx_dequant import claimed_ops, ep_session, mx_activation, offline_session, rewrite, same_bits, save

H, N = 64, 32


def model(path, lead, amax_view=False):
    """x, residual [batch, seq, H] → Add → RMSNormalization → MXFP8 (block shape from Shape(y),
    spelled by `lead`) → DequantizeLinear → MatMul. `amax_view`: the block amax as torch's
    `amax(-1, keepdim=True).view(*y.shape[:-1], H // 32)` — ReduceMax(keepdims=1) → Reshape to
    `Concat(lead, [H/32])`, the same `lead` as the block shape's."""
    rng = np.random.default_rng(0)
    c = lambda a, n: numpy_helper.from_array(np.asarray(a), n)  # noqa: E731
    inits = [
        c((1 + 0.1 * rng.standard_normal(H)).astype(np.float32), "gamma"),
        c((0.1 * rng.standard_normal((H, N))).astype(np.float32), "w"),
        c(np.array([H // 32, 32], np.int64), "tail"),
        c(np.array([0], np.int64), "zero"),
        c(np.array([-1], np.int64), "minus_one"),
        c(np.array(0, np.int64), "i0"),
        c(np.array(1, np.int64), "i1"),
    ]
    nodes = [
        helper.make_node("Add", ["x", "residual"], ["sum"]),
        helper.make_node("RMSNormalization", ["sum", "gamma"], ["y"], epsilon=1e-6),
    ]
    if lead == "shape_end":
        nodes.append(helper.make_node("Shape", ["y"], ["lead"], end=-1))
    elif lead == "slice":
        nodes += [helper.make_node("Shape", ["y"], ["full"]),
                  helper.make_node("Slice", ["full", "zero", "minus_one"], ["lead"])]
    else:  # TorchScript: Gather each dim, Unsqueeze, Concat
        nodes.append(helper.make_node("Shape", ["y"], ["full"]))
        for i in range(2):
            nodes += [helper.make_node("Gather", ["full", f"i{i}"], [f"g{i}"], axis=0),
                      helper.make_node("Unsqueeze", [f"g{i}", "zero"], [f"u{i}"])]
        nodes.append(helper.make_node("Concat", ["u0", "u1"], ["lead"], axis=0))
    nodes += [
        helper.make_node("Concat", ["lead", "tail"], ["blk"], axis=0),
    ]
    mx_activation(nodes, inits, "y", blk="blk", out="yd", name=None)
    if amax_view:
        rmax = next(n for n in nodes if n.op_type == "ReduceMax")
        rmax.output[0] = "amax_kept"
        del rmax.attribute[:]
        rmax.attribute.append(helper.make_attribute("keepdims", 1))
        inits.append(c(np.array([H // 32], np.int64), "blocks"))
        nodes[nodes.index(rmax) + 1:nodes.index(rmax) + 1] = [
            helper.make_node("Concat", ["lead", "blocks"], ["amax_shape"], axis=0),
            helper.make_node("Reshape", ["amax_kept", "amax_shape"], ["amax"]),
        ]
    nodes += [
        helper.make_node("MatMul", ["yd", "w"], ["out"]),
    ]
    ins = [helper.make_tensor_value_info(n, TP.FLOAT, ["batch", "seq", H]) for n in ("x", "residual")]
    outs = [helper.make_tensor_value_info("out", TP.FLOAT, None),
            helper.make_tensor_value_info("sum", TP.FLOAT, None)]
    save(nodes, inits, ins, outs, path)
    return path


@pytest.mark.parametrize("amax_view", [False, True])
def test_run_time_block_shape_fuses_online_and_offline(amax_view, lib, ep_devices, mxfuse_cli, tmp_path):
    """`amax_view` (new-user probe 11): the kept-dims amax reshaped to the scale's shape from the
    same run-time `lead` was not a known spelling (every quantizer stayed unfused, as
    MxQuantizeLinear); it fuses now, the shared shape computation going with the fusion."""
    rng = np.random.default_rng(1)
    feed = {n: rng.standard_normal((2, 3, H)).astype(np.float32) for n in ("x", "residual")}
    for lead in ("shape_end", "slice", "gather"):
        src = model(tmp_path / f"{lead}.onnx", lead, amax_view)
        report = rewrite(mxfuse_cli, src, tmp_path / f"{lead}.fused.onnx")
        assert report["counts"]["add_rmsnorm_mxquant"] == 1, (lead, report)
        fused_ops = [n.op_type for n in onnx.load(tmp_path / f"{lead}.fused.onnx").graph.node]
        assert fused_ops == ["AddRmsNormMxQuant", "MxMatMul"], (lead, fused_ops)

        ep = ep_session(src, ep_devices)
        claimed = claimed_ops(ep)
        assert {"RMSNormalization", "Shape", "Concat", "Reshape", "MatMul"} <= set(claimed), (lead, claimed)
        online = ep.run(None, feed)
        offline = offline_session(tmp_path / f"{lead}.fused.onnx", lib).run(None, feed)
        want = ReferenceEvaluator(onnx.load(src)).run(None, feed)
        for name, a, b, w in zip(("out", "sum"), online, offline, want):
            assert same_bits(a, b), (lead, name)
            np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5 * np.abs(w).max(), err_msg=f"{lead} {name}")


def test_block_shape_also_read_by_a_linear_output_reshape_loads_on_the_ep(lib, ep_devices, mxfuse_cli,
                                                                          tmp_path):
    """A standalone quantize of the input x [batch, seq, H] whose block shape
    `Concat(Shape(x, end=-1), [H/32, 32])` is computed from the same `Shape(x, end=-1)` as the
    flattened linear's output Reshape `Concat(Shape(x, end=-1), [N])` (two Shape nodes in the
    file; ORT's common-subexpression pass merges them, as the rewrite does). The shape computation
    then stays outside the claim, and the claimed block Reshape reads it as an input of the fused
    subgraph: the EP's Compile pins it to the constant `[0, 0, H/32, 32]` the claim checked (before,
    the session failed to load: "Reshape ...: the shape is not a constant")."""
    c = lambda a, n: numpy_helper.from_array(np.asarray(a), n)  # noqa: E731
    rng = np.random.default_rng(0)
    inits = [c((0.1 * rng.standard_normal((H, N))).astype(np.float32), "w"),
             c(np.array([H // 32, 32], np.int64), "tail"), c(np.array([-1, H], np.int64), "flat"),
             c(np.array([N], np.int64), "n")]
    nodes = [
        helper.make_node("Shape", ["x"], ["lead"], end=-1),
        helper.make_node("Concat", ["lead", "tail"], ["blk"], axis=0),
    ]
    mx_activation(nodes, inits, "x", blk="blk", name=None)
    nodes += [
        helper.make_node("Reshape", ["xd", "flat"], ["xf"]),
        helper.make_node("MatMul", ["xf", "w"], ["yf"]),
        helper.make_node("Shape", ["x"], ["lead2"], end=-1),
        helper.make_node("Concat", ["lead2", "n"], ["unflat"], axis=0),
        helper.make_node("Reshape", ["yf", "unflat"], ["out"]),
    ]
    src = tmp_path / "m.onnx"
    save(nodes, inits, [helper.make_tensor_value_info("x", TP.FLOAT, ["batch", "seq", H])],
         [helper.make_tensor_value_info("out", TP.FLOAT, None)], src)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mxquant"] == 1, report
    ep = ep_session(src, ep_devices)
    claimed = claimed_ops(ep)
    assert {"Reshape", "QuantizeLinear", "MatMul"} <= set(claimed), claimed
    assert "Shape" not in claimed, claimed
    offline = offline_session(tmp_path / "fused.onnx", lib)
    ref = ReferenceEvaluator(onnx.load(src))
    for shape in ((2, 3), (1, 1)):
        feed = {"x": (3 * np.random.default_rng(1).standard_normal(shape + (H,))).astype(np.float32)}
        a, b, w = ep.run(None, feed)[0], offline.run(None, feed)[0], ref.run(None, feed)[0]
        assert same_bits(a, b), shape
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5 * np.abs(w).max(), err_msg=str(shape))
