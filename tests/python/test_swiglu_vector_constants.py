"""SwiGLU-OAI with α, the clamp limit and β stored as `[I]` vectors of one repeated value (as
some exports write α = 1.702 and limit 7), which `swiglu_mxquant_matmul` refused until h-left:
the rewrite fuses them, and the plugin EP and the custom-op library compute bit for bit what
they compute for the same model with scalar constants. A vector with one element changed is
still refused, with the reason."""

import numpy as np
from onnx import TensorProto as TP
from onnx import helper

from test_mx_dequant import claimed_ops, ep_session, offline_session, rewrite, same_bits
from test_no_value_info import LayerGraph

I = 64


def oai_layer(path, vector, unequal=False):
    """gate, up [batch, seq, I] → SwiGLU-OAI (gate `Min(g, L)`, up `Max(Min(u, L), -L) + β`,
    `g·σ(α·g)`) → MXFP8 → MatMul; α, L, -L, β scalars or (`vector`) `[I]` vectors."""
    layer = LayerGraph(TP.FLOAT, h=I)
    node = layer.node

    def const(name, v):
        value = np.full(I, v, np.float32) if vector else np.float32(v)
        if unequal and name == "alpha":
            value[-1] = 1.5
        return layer.const(name, value)

    g = node("Min", ["gate", const("lim", 7.0)], "g")
    u = node("Max", [node("Min", ["up", const("lim", 7.0)], "u_hi"), const("neg_lim", -7.0)], "u")
    u = node("Add", [u, const("beta", 1.0)], "u1")
    sig = node("Sigmoid", [node("Mul", [g, const("alpha", 1.702)], "ga")], "sg")
    act = node("Mul", [node("Mul", [g, sig], "glu"), u], "act")
    out = layer.linear(layer.mx(act, "act_mx"), "down", 4)
    ins = [helper.make_tensor_value_info(n, TP.FLOAT, ["batch", "seq", I]) for n in ("gate", "up")]
    return layer.save(path, "oai", ins, [helper.make_tensor_value_info(out, TP.FLOAT, None)])


def test_an_oai_vector_of_one_value_fuses_with_the_scalars_bits(lib, ep_devices, mxfuse_cli, tmp_path):
    runs = {}
    for vector in (False, True):
        src = oai_layer(tmp_path / f"m{vector}.onnx", vector)
        report = rewrite(mxfuse_cli, src, tmp_path / f"f{vector}.onnx")
        assert report["counts"]["swiglu_mxquant_matmul"] == 1, report
        online = ep_session(src, ep_devices)
        assert "Sigmoid" in claimed_ops(online)
        runs[vector] = (online, offline_session(tmp_path / f"f{vector}.onnx", lib))
    rng = np.random.default_rng(2)
    for shape in [(1, 1), (1, 5), (2, 3)]:
        feed = {n: (rng.standard_normal((*shape, I)) * 6).astype(np.float32) for n in ("gate", "up")}
        want = runs[False][0].run(None, feed)[0]
        for sess in (*runs[True], runs[False][1]):
            assert same_bits(sess.run(None, feed)[0], want), shape
    src = oai_layer(tmp_path / "unequal.onnx", vector=True, unequal=True)
    report = rewrite(mxfuse_cli, src, tmp_path / "unequal_fused.onnx")
    assert report["counts"]["swiglu_mxquant_matmul"] == 0, report
    assert any("that are not all equal" in r["reason"] for r in report["rejections"]), report["rejections"]
