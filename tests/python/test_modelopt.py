"""NVIDIA TensorRT Model Optimizer's MXFP8 spelling end to end: a float16 decoder layer whose
activations are `trt::TRT_MXFP8DynamicQuantize` → `trt::TRT_MXFP8DequantizeLinear` and whose
weights are E4M3 + uint8 E8M0 initializers through `TRT_MXFP8DequantizeLinear` (torch's Linear
layout `[N, K]`, read by the MatMul through a Transpose), with symbolic batch / sequence.

ONNX Runtime's CPU EP has no `trt` domain, so the unfused model does not load there; the reference
is onnx.reference on the original model with the two ops written out below from ModelOpt's
definitions (`MXFP8QTensor`: scale = 2^ceil(log2(amax / 448)), clamped to [-127, 127], a zero
block's byte 0; values clipped to ±448 and cast to E4M3; dequantize = value · 2^(byte − 127)).
The fused model (offline rewrite + custom-op library, and the plugin EP on the CPU device and on
the emulated device placement) must match it within the float-order tolerance (docs/ops.md).
"""

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from test_gather_dequant import emulated_device_process
from test_mx_dequant import claimed_ops, ep_session, offline_session, rewrite, same_bits

H, I = 64, 96
E4M3 = ml_dtypes.float8_e4m3fn


class TRT_MXFP8DynamicQuantize(OpRun):  # noqa: N801 (the op's name)
    op_domain = "trt"

    def _run(self, x, axis=-1, block_size=32, output_dtype=TP.FLOAT8E4M3FN):
        assert axis in (-1, x.ndim - 1) and block_size == 32
        blocks = x.astype(np.float64).reshape(*x.shape[:-1], -1, 32)
        amax = np.abs(blocks).max(axis=-1, keepdims=True)
        with np.errstate(divide="ignore"):
            e = np.where(amax > 0, np.ceil(np.log2(amax / 448.0)), -127.0)
        e = np.clip(e, -127, 127)
        q = np.clip(blocks / np.exp2(e), -448, 448).astype(np.float32).astype(E4M3)
        return q.reshape(x.shape), (e[..., 0] + 127).astype(np.uint8)


class TRT_MXFP8DequantizeLinear(OpRun):  # noqa: N801
    op_domain = "trt"

    def _run(self, x, scale, axis=-1, block_size=32, output_dtype=TP.FLOAT16):
        axis = axis % x.ndim
        s = np.repeat(np.exp2(scale.astype(np.float64) - 127), block_size, axis=axis)
        y = x.astype(np.float64) * s
        return (y.astype(helper.tensor_dtype_to_np_dtype(output_dtype)),)


def reference(src):
    return ReferenceEvaluator(onnx.load(src), new_ops=[TRT_MXFP8DynamicQuantize, TRT_MXFP8DequantizeLinear])


def trt_qdq(nodes, x, out, dtype):
    nodes += [
        helper.make_node("TRT_MXFP8DynamicQuantize", [x], [f"{out}_q", f"{out}_s"], domain="trt",
                         axis=-1, block_size=32, output_dtype=TP.FLOAT8E4M3FN),
        helper.make_node("TRT_MXFP8DequantizeLinear", [f"{out}_q", f"{out}_s"], [out], domain="trt",
                         axis=-1, block_size=32, output_dtype=dtype),
    ]


def trt_linear(nodes, inits, x, out, n, k, rng, dtype):
    """`MatMul(x, Transpose(TRT_MXFP8DequantizeLinear(W [n, k], s [n, k/32], axis 1)))`, W and s
    quantized from random floats as ModelOpt's exporter does (`compute_e8m0`: RCEIL)."""
    w = rng.standard_normal((n, k)) * 0.05
    q, s = TRT_MXFP8DynamicQuantize.__new__(TRT_MXFP8DynamicQuantize)._run(w)
    inits += [numpy_helper.from_array(q, f"{out}_w"), numpy_helper.from_array(s, f"{out}_ws")]
    nodes += [
        helper.make_node("TRT_MXFP8DequantizeLinear", [f"{out}_w", f"{out}_ws"], [f"{out}_wd"], domain="trt",
                         axis=1, block_size=32, output_dtype=dtype),
        helper.make_node("Transpose", [f"{out}_wd"], [f"{out}_wt"], perm=[1, 0]),
        helper.make_node("MatMul", [x, f"{out}_wt"], [out]),
    ]


def decoder_layer(path, dtype=TP.FLOAT16):
    """x, residual [batch, seq, H] → Add = sum → RMSNormalization → q, k, v, gate, up
    projections, each behind its own ModelOpt quantize pair (ModelOpt gives every Linear its own
    input quantizer); SiLU(gate) · up → ModelOpt quantize pair → down projection = y."""
    rng = np.random.default_rng(0)
    np_t = helper.tensor_dtype_to_np_dtype(dtype)
    inits = [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(H)).astype(np_t), "gamma")]
    nodes = [helper.make_node("Add", ["x", "residual"], ["sum"]),
             helper.make_node("RMSNormalization", ["sum", "gamma"], ["normed"], epsilon=1e-6)]
    for name, n in (("q", H), ("k", 32), ("v", 32), ("gate", I), ("up", I)):
        trt_qdq(nodes, "normed", f"{name}_in", dtype)
        trt_linear(nodes, inits, f"{name}_in", name, n, H, rng, dtype)
    nodes += [helper.make_node("Sigmoid", ["gate"], ["sig"]),
              helper.make_node("Mul", ["gate", "sig"], ["silu"]),
              helper.make_node("Mul", ["silu", "up"], ["act"])]
    trt_qdq(nodes, "act", "act_qdq", dtype)
    trt_linear(nodes, inits, "act_qdq", "y", H, I, rng, dtype)
    vi = lambda n, d: helper.make_tensor_value_info(n, dtype, ["batch", "seq", d])  # noqa: E731
    g = helper.make_graph(nodes, "modelopt_layer", [vi("x", H), vi("residual", H)],
                          [vi("q", H), vi("k", 32), vi("v", 32), vi("y", H), vi("sum", H)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 24), helper.make_opsetid("trt", 1)],
                              ir_version=11)
    onnx.save(model, path)
    return path


def feeds(b, s, dtype=np.float16, seed=1):
    rng = np.random.default_rng(seed)
    f = {n: (2 * rng.standard_normal((b, s, H))).astype(dtype) for n in ("x", "residual")}
    f["x"][0, 0, :32] = -f["residual"][0, 0, :32]  # an all-zero block
    # A block maximum far above the rest (onnx.reference squares float16 inputs in float16:
    # keep Σx² finite there).
    f["x"][0, -1, 40] = 100
    return f


SHAPES = ((1, 1), (1, 3), (2, 8))  # 1, 3 and 16 tokens
OUTS = ("q", "k", "v", "y", "sum")


def test_unfused_model_does_not_load_on_the_cpu_ep(tmp_path):
    src = decoder_layer(tmp_path / "m.onnx")
    with pytest.raises(Exception, match="TRT_MXFP8|trt"):
        ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])


def test_decoder_layer_fuses_offline_and_in_the_ep(lib, ep_devices, mxfuse_cli, tmp_path):
    src = decoder_layer(tmp_path / "m.onnx")
    fused = tmp_path / "m.fused.onnx"
    report = rewrite(mxfuse_cli, src, fused)
    assert report["counts"]["add_rmsnorm_mxquant"] == 1, report
    assert report["counts"]["swiglu_mxquant_matmul"] == 1, report
    ops = sorted(n.op_type for n in onnx.load(fused).graph.node)
    assert ops == ["AddRmsNormMxQuant"] + ["MxMatMul"] * 6 + ["SwiGluMxQuant"], ops
    ep = ep_session(src, ep_devices)
    claimed = claimed_ops(ep)
    # All six quantizers and six MatMuls are claimed. ORT's common-subexpression pass does not
    # merge the five `trt` quantizers of `normed` (offline the rewrite does): online the norm
    # fusion takes the four siblings with their MatMuls (`modelopt::sibling_pairs`).
    assert claimed.count("TRT_MXFP8DynamicQuantize") == 6 and claimed.count("MatMul") == 6, claimed
    offline = offline_session(fused, lib)
    ref = reference(src)
    for b, s in SHAPES:
        feed = feeds(b, s)
        online = ep.run(None, feed)
        off = offline.run(None, feed)
        want = ref.run(None, feed)
        for name, a, o, w in zip(OUTS, online, off, want):
            assert a.shape == w.shape == (b, s, a.shape[-1]), (name, a.shape, w.shape)
            assert same_bits(a, o), (b, s, name)
            # Measured: q, k, v and sum bit-exact; y within 4e-3 of its largest magnitude (the
            # reference computes SiLU · up in float16, the fused kernel in f32, so a few
            # activations land on the other side of an E4M3 rounding boundary).
            a32, w32 = a.astype(np.float32), w.astype(np.float32)
            tol = 1e-2 if name == "y" else 1e-3
            np.testing.assert_allclose(a32, w32, rtol=0, atol=tol * np.abs(w32).max(),
                                       err_msg=f"[{b}, {s}] {name}")


def test_device_placement_runs_the_fusions_with_the_cpu_device_bits(lib, ep_devices, tmp_path):
    src = decoder_layer(tmp_path / "m.onnx")
    feed = feeds(1, 3)
    out = emulated_device_process(lib, src, feed, tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "TRT_MXFP8DynamicQuantize" in out.stdout, out.stdout
    want = ep_session(src, ep_devices).run(None, feed)[0]
    assert same_bits(np.load(tmp_path / "y.npy"), want)


def test_float_activations_are_refused_with_the_reason(lib, ep_devices, mxfuse_cli, tmp_path):
    """For float inputs ModelOpt's float32 log2 and the exact RCEIL rule differ in rare blocks
    and TensorRT's kernel is not public: no rule takes them, and the EP's kernel for the unfused
    op says why when it runs."""
    src = decoder_layer(tmp_path / "f32.onnx", TP.FLOAT)
    report = rewrite(mxfuse_cli, src, tmp_path / "f32.fused.onnx")
    reasons = [r["reason"] for r in report["rejections"]]
    assert any("float activation" in r for r in reasons), reasons
    sess = ep_session(src, ep_devices)
    assert "TRT_MXFP8DynamicQuantize" not in claimed_ops(sess)
    with pytest.raises(Exception, match="not established"):
        sess.run(None, feeds(1, 3, np.float32))
