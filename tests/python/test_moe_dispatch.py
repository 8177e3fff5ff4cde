"""MoE experts behind a data-dependent dispatch (new-user probe 7): per-expert MXFP8 linears
reading the tokens routed to that expert, `Gather(x, NonZero(Equal(ids, e)))`, as torch dynamo
exports a Mixtral-style `for expert in experts: idx = where(mask[e])` loop unrolled. An expert may
be routed no token at all: its quantizer then sees zero rows.

mxfuse's offline shape inference does not know `NonZero` (graph_rewrites/src/ir/infer, left to
its owner: the fusions after it are refused with that reason), so offline the quantizer stays
the standard ops, its E8M0 scale computed by ORT: ONNX Runtime 1.31's `ReduceMax` keeps the
reduced axis of an empty input ([0, 2, 32] instead of [0, 2]), and `MxQuantizeLinear` /
`MxDequantize` refused that empty scale ("blocked scale has shape [0, 2, 32], expected [0, 2]")
on every step where an expert got no token. An empty x now takes any empty scale
(kernels/src/scale_map.rs).
"""

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from test_mx_dequant import K, N, claimed_ops, ep_session, mx_activation, offline_session, rewrite, save


def routed_expert_model(path):
    """y [n, N] = MXFP8(x[tokens routed to expert 0]) @ W: the tokens are
    `NonZero(Equal(ids, 0))`, so y has as many rows as ids has zeros (maybe none)."""
    rng = np.random.default_rng(7)
    nodes = [
        helper.make_node("Equal", ["ids", "zero"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["nz"], name="route"),
        helper.make_node("Squeeze", ["nz", "axis0"], ["tok"]),
        helper.make_node("Gather", ["x", "tok"], ["xe"], axis=0),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array((rng.standard_normal((K, N)) * 0.1).astype(np.float32), "w")]
    xd = mx_activation(nodes, inits, "xe")
    nodes.append(helper.make_node("MatMul", [xd, "w"], ["y"]))
    return save(nodes, inits, [helper.make_tensor_value_info("x", TP.FLOAT, ["t", K]),
                               helper.make_tensor_value_info("ids", TP.INT64, ["t"])],
                [helper.make_tensor_value_info("y", TP.FLOAT, None)], path)


def test_an_expert_routed_no_token_runs_offline_and_online(lib, ep_devices, mxfuse_cli, tmp_path):
    src = routed_expert_model(tmp_path / "m.onnx")
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    # Offline: the quantizer's rank is unknown after NonZero; ORT computes the scale.
    assert report["counts"]["mx_quant_linear"] == 1 and report["counts"]["mx_dequant"] == 1, report
    assert any("NonZero" in r["reason"] for r in report["rejections"]), report["rejections"]
    offline = offline_session(tmp_path / "fused.onnx", lib)
    online = ep_session(src, ep_devices)
    assert "MatMul" in claimed_ops(online), claimed_ops(online)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, K)).astype(np.float32)
    for ids in ([1, 2, 3, 1, 2], [0, 2, 0, 0, 1], [0, 0, 0, 0, 0], [3, 3, 3, 3, 3]):
        feed = {"x": x, "ids": np.array(ids, np.int64)}
        want = ReferenceEvaluator(onnx.load(src)).run(None, feed)[0]
        for sess in (offline, online):
            got = sess.run(None, feed)[0]
            assert got.shape == want.shape == (ids.count(0), N)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(np.abs(want).max(initial=0), 1))
