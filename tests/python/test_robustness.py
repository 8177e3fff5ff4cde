"""Spellings found by sweeping models the fixtures do not have (onnx.helper-built, tiny): each
ran wrong or not at all before its fix. Three runs per model: the plugin EP (online fusion), the
offline `mxfuse rewrite` + custom-op library, and the EP with only rule `mxquant` enabled, which
leaves the norm / SwiGLU to ORT's CPU EP and runs the same quantize + GEMM kernels: in f32 the
fused result must equal that unfused one bit for bit."""

import json
import os
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

K = 64


class Graph:
    """A small f32 opset-24 graph under construction."""

    def __init__(self):
        self.nodes, self.inits, self.outputs, self.n = [], [], [], 0

    def node(self, op, ins, **attrs):
        self.n += 1
        out = f"{op.lower()}{self.n}"
        self.nodes.append(helper.make_node(op, ins, [out], name=f"{op}{self.n}", **attrs))
        return out

    def const(self, value, dtype=np.float32):
        self.n += 1
        t = numpy_helper.from_array(np.asarray(value, dtype=dtype), f"c{self.n}")
        self.inits.append(t)
        return t.name

    def mx_dequant(self, x, rank, k=K):
        """Standard opset-24 MXFP8 (OCP floor) quantize + DequantizeLinear of x [..., k]."""
        blocks = self.node("Reshape", [x, self.const([0] * (rank - 1) + [k // 32, 32], np.int64)])
        amax = self.node("ReduceMax", [self.node("Abs", [blocks]), self.const([-1], np.int64)], keepdims=0)
        scale = self.node("Mul", [amax, self.const(2.0**-8)])
        scale = self.node("Cast", [scale], to=TP.FLOAT8E8M0, round_mode="down", saturate=1)
        q = self.node("QuantizeLinear", [x, scale], axis=-1, block_size=32, output_dtype=TP.FLOAT8E4M3FN)
        return self.node("DequantizeLinear", [q, scale], axis=-1, block_size=32, output_dtype=TP.FLOAT)

    def model(self, inputs, path):
        outs = [helper.make_tensor_value_info(o, TP.FLOAT, None) for o in self.outputs]
        g = helper.make_graph(self.nodes, "g", inputs, outs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)], ir_version=11)
        onnx.save(m, path)
        return path


def weight(shape, seed):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.1).astype(np.float32)


def norm_into_gemm(path, gemm_attrs, bias=None, m="m"):
    """Add → decomposed RMSNorm → MXFP8 → Gemm (torch nn.Linear on a rank-2 activation), with
    a bias constant of shape `bias` (N = 48) if given."""
    g = Graph()
    s = g.node("Add", ["x", "res"])
    g.outputs.append(s)
    mean = g.node("ReduceMean", [g.node("Pow", [s, g.const(2.0)]), g.const([-1], np.int64)])
    rstd = g.node("Reciprocal", [g.node("Sqrt", [g.node("Add", [mean, g.const(1e-6)])])])
    y = g.node("Mul", [g.node("Mul", [s, rstd]), g.const(1 + weight([K], 1))])
    dq = g.mx_dequant(y, 2)
    trans = gemm_attrs.get("transB", 0) == 1
    ins = [dq, g.const(weight([48, K] if trans else [K, 48], 2))] + ([g.const(weight(bias, 3) * 10)] if bias is not None else [])
    g.outputs.append(g.node("Gemm", ins, **gemm_attrs))
    inputs = [helper.make_tensor_value_info(n, TP.FLOAT, [m, K]) for n in ("x", "res")]
    return g.model(inputs, path)


def oai_min_max(path, order):
    """SwiGLU-OAI whose up clamp is two ops (`Max(Min(up, 7), -7)` or `Min(Max(up, -7), 7)`)."""
    g = Graph()
    gate = g.node("MatMul", ["x", g.const(weight([K, K], 4))])
    up = g.node("MatMul", ["x", g.const(weight([K, K], 5))])
    lim, lo = g.const(7.0), g.const(-7.0)
    if order == "max_min":
        uc = g.node("Max", [g.node("Min", [up, lim]), lo])
    else:
        uc = g.node("Min", [g.node("Max", [up, lo]), lim])
    gc = g.node("Clip", [gate, "", lim])
    glu = g.node("Mul", [gc, g.node("Sigmoid", [g.node("Mul", [gc, g.const(1.702)])])])
    act = g.node("Mul", [glu, g.node("Add", [uc, g.const(1.0)])])
    g.outputs.append(g.node("MatMul", [g.mx_dequant(act, 3), g.const(weight([K, 48], 6))]))
    return g.model([helper.make_tensor_value_info("x", TP.FLOAT, ["b", "s", K])], path)


def ep_run(path, ep_devices, feed, options=None):
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(ep_devices, options or {})
    sess = ort.InferenceSession(str(path), so)
    claimed = [n.op_type for sg in sess.get_provider_graph_assignment_info()
               if sg.ep_name == "MxFuseExecutionProvider" for n in sg.get_nodes()]
    return sess.run(None, feed), claimed


def rewrite(cli, src, dst):
    report = str(dst) + ".json"
    subprocess.run([cli, "rewrite", str(src), "-o", str(dst), "--report", report], check=True, capture_output=True)
    return json.loads(open(report).read())


def offline_run(path, lib, feed):
    so = ort.SessionOptions()
    so.register_custom_ops_library(lib)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feed)


def assert_bits_equal(a, b):
    for x, y in zip(a, b):
        assert np.array_equal(x.view(np.uint32), y.view(np.uint32))


def check_three_ways(src, lib, ep_devices, cli, tmp_path, feed, rule):
    report = rewrite(cli, src, tmp_path / "fused.onnx")
    assert [f["rule"] for f in report["fusions"]] == [rule], report["rejections"]
    fused, claimed = ep_run(src, ep_devices, feed)
    assert claimed, "the EP claimed nothing"
    assert_bits_equal(fused, offline_run(tmp_path / "fused.onnx", lib, feed))
    unfused, _ = ep_run(src, ep_devices, feed, {"enable_rules": "mxquant"})
    assert_bits_equal(fused, unfused)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_bias_free_gemm_after_the_norm_fuses(trans_b, lib, ep_devices, mxfuse_cli, tmp_path):
    """Was: the norm fused but the activation DequantizeLinear (E8M0 scales) stayed in front of
    the Gemm, and neither the EP session nor the rewritten model loaded (no ORT CPU kernel)."""
    src = norm_into_gemm(tmp_path / "m.onnx", {"transB": trans_b})
    rng = np.random.default_rng(0)
    feed = {n: rng.standard_normal((5, K)).astype(np.float32) for n in ("x", "res")}
    check_three_ways(src, lib, ep_devices, mxfuse_cli, tmp_path, feed, "add_rmsnorm_mxquant")


def linear_after_quantizer(path, bias_shape, alpha=1.0, beta=1.0):
    """torch's nn.Linear with bias on a rank-2 activation after a standalone MXFP8 quantizer:
    x → MXFP8 → Gemm(·, W [48, K], C, transB = 1)."""
    g = Graph()
    ins = [g.mx_dequant("x", 2), g.const(weight([48, K], 7))]
    if bias_shape is not None:
        ins.append(g.const(weight(bias_shape, 8) * 10))
    g.outputs.append(g.node("Gemm", ins, transB=1, alpha=alpha, beta=beta))
    return g.model([helper.make_tensor_value_info("x", TP.FLOAT, ["m", K])], path)


def check_against_onnx_reference(src, got, feed):
    """The unfused model through onnx.reference: quantizers are exact, the GEMM's f32 summation
    order (and onnx.reference's numpy order for alpha·AB + beta·C) differ at ulp level
    (docs/ops.md, MxMatMul tolerance)."""
    from onnx.reference import ReferenceEvaluator

    want = ReferenceEvaluator(onnx.load(src)).run(None, feed)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * float(np.abs(w).max()))


GEMM_BIASES = [([48], {}), ([1, 48], {"alpha": 0.5, "beta": 2.0}), ([], {"beta": -1.0}),
               ([5, 48], {}), ([5, 1], {"alpha": 3.0})]


@pytest.mark.parametrize("bias_shape,attrs", GEMM_BIASES)
def test_linear_with_bias_after_the_norm_fuses(bias_shape, attrs, lib, ep_devices, mxfuse_cli, tmp_path):
    """Was refused ('MxMatMul has no bias operand'), leaving the model without an ORT kernel
    for the E8M0 DequantizeLinear. Now the EP takes the Gemm; EP, offline rewrite and the
    mxquant-only run agree bit for bit, and onnx.reference within the GEMM tolerance."""
    # A [M, ...] bias needs M known to be its rows: 5 rows declared then.
    m = 5 if len(bias_shape) == 2 and bias_shape[0] == 5 else "m"
    src = norm_into_gemm(tmp_path / "m.onnx", {"transB": 1, **attrs}, bias=bias_shape, m=m)
    rng = np.random.default_rng(3)
    feed = {n: rng.standard_normal((5, K)).astype(np.float32) for n in ("x", "res")}
    check_three_ways(src, lib, ep_devices, mxfuse_cli, tmp_path, feed, "add_rmsnorm_mxquant")
    got, claimed = ep_run(src, ep_devices, feed)
    assert "Gemm" in claimed, claimed
    check_against_onnx_reference(src, got, feed)


@pytest.mark.parametrize("bias_shape,attrs", GEMM_BIASES[:3] + [(None, {"alpha": 0.25})])
def test_linear_with_bias_after_a_standalone_quantizer(bias_shape, attrs, lib, ep_devices, mxfuse_cli, tmp_path):
    """nn.Linear with bias reading a standard MXFP8 activation: MxQuantize + MxMatMul with the
    bias, online (the EP takes the Gemm) and offline (custom-op library) the same bits, and
    onnx.reference within the GEMM tolerance."""
    src = linear_after_quantizer(tmp_path / "m.onnx", bias_shape, **attrs)
    feed = {"x": (np.random.default_rng(4).standard_normal((5, K)) * 3).astype(np.float32)}
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert [f["rule"] for f in report["fusions"]] == ["mxquant"], report["rejections"]
    fused = onnx.load(tmp_path / "fused.onnx")
    mm = next(n for n in fused.graph.node if n.op_type == "MxMatMul")
    assert len(mm.input) == (5 if bias_shape is not None else 3), mm.input
    got, claimed = ep_run(src, ep_devices, feed)
    assert "Gemm" in claimed, claimed
    assert_bits_equal(got, offline_run(tmp_path / "fused.onnx", lib, feed))
    check_against_onnx_reference(src, got, feed)


def test_f16_linear_with_bias_runs_offline_and_online(lib, ep_devices, mxfuse_cli, tmp_path):
    """An f16 nn.Linear with bias (C is f16 as the Gemm's T) after MXFP8 (amax cast to float):
    the rewritten model through the custom-op library on ORT's CPU EP gives the EP's bits, within
    one f16 unit in the last place of the exact (f64) Gemm of onnx.reference's dequantized
    activation (onnx.reference's own f16 Gemm computes in f16 and was 7 units off here)."""
    f16 = lambda name, v: numpy_helper.from_array(np.asarray(v, np.float16), name)
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array(np.array([0, K // 32, 32], np.int64), "shape"),
             numpy_helper.from_array(np.array([-1], np.int64), "axes"),
             numpy_helper.from_array(np.array(2.0**-8, np.float32), "c"),
             f16("w", rng.standard_normal((48, K)) * 0.1), f16("bias", rng.standard_normal(48))]
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["xb"]), helper.make_node("Abs", ["xb"], ["ab"]),
             helper.make_node("ReduceMax", ["ab", "axes"], ["amax16"], keepdims=0),
             helper.make_node("Cast", ["amax16"], ["amax"], to=TP.FLOAT),
             helper.make_node("Mul", ["amax", "c"], ["s"]),
             helper.make_node("Cast", ["s"], ["scale"], to=TP.FLOAT8E8M0, round_mode="down", saturate=1),
             helper.make_node("QuantizeLinear", ["x", "scale"], ["q"], axis=-1, block_size=32, output_dtype=TP.FLOAT8E4M3FN),
             helper.make_node("DequantizeLinear", ["q", "scale"], ["xd"], axis=-1, block_size=32, output_dtype=TP.FLOAT16),
             helper.make_node("Gemm", ["xd", "w", "bias"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT16, ["m", K])],
                          [helper.make_tensor_value_info("y", TP.FLOAT16, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)], ir_version=11)
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert [f["rule"] for f in report["fusions"]] == ["mxquant"], report["rejections"]
    feed = {"x": (rng.standard_normal((5, K)) * 2).astype(np.float16)}
    online, claimed = ep_run(src, ep_devices, feed)
    assert "Gemm" in claimed, claimed
    offline = offline_run(tmp_path / "fused.onnx", lib, feed)
    assert online[0].dtype == np.float16 and np.array_equal(online[0].view(np.uint16), offline[0].view(np.uint16))
    from onnx.reference import ReferenceEvaluator

    xd = ReferenceEvaluator(model).run(["xd"], feed)[0].astype(np.float64)
    w, c = (numpy_helper.to_array(t).astype(np.float64) for t in inits[3:])
    exact = xd @ w.T + c
    ulp = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
    assert (np.abs(online[0].astype(np.float64) - exact) <= ulp).all()


def test_gemm_with_an_unbroadcastable_bias_keeps_the_dequantize_with_the_reason(mxfuse_cli, tmp_path):
    """A bias whose rows are not provably M (a graph input [r, 48]) is not absorbed: the Gemm
    reads the MxDequantize of the activation, and the note says why."""
    src = linear_after_quantizer(tmp_path / "m.onnx", [48])
    m = onnx.load(src)
    gemm = next(n for n in m.graph.node if n.op_type == "Gemm")
    gemm.input[2] = "c"
    m.graph.input.append(helper.make_tensor_value_info("c", TP.FLOAT, ["r", 48]))
    onnx.save(m, src)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    # The quantizer still fuses; the Gemm keeps the dequantized activation (MxDequantize), and
    # the fusion's note says why the Gemm was not absorbed.
    assert sorted(f["rule"] for f in report["fusions"]) == ["mx_dequant", "mxquant"], report
    notes = [n for f in report["fusions"] for n in f.get("notes", [])]
    assert any("bias 'c' has shape" in n for n in notes), notes


@pytest.mark.parametrize("order", ["max_min", "min_max"])
def test_oai_up_clamp_as_min_max_fuses_bit_exact(order, lib, ep_devices, mxfuse_cli, tmp_path):
    """Was refused as a 'partial SwiGLU-OAI'."""
    src = oai_min_max(tmp_path / "m.onnx", order)
    feed = {"x": (np.random.default_rng(1).standard_normal((2, 3, K)) * 8).astype(np.float32)}
    check_three_ways(src, lib, ep_devices, mxfuse_cli, tmp_path, feed, "swiglu_mxquant_matmul")


def test_external_data_rewritten_elsewhere_keeps_both_models_loadable(lib, ep_devices, mxfuse_cli, tmp_path):
    """Was: the data file was hard-linked next to the output, and ORT refuses a data file with
    two links ('potential hardlink attack'), so neither the original nor the rewrite loaded."""
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    src = oai_min_max(tmp_path / "inline.onnx", "max_min")
    onnx.save(onnx.load(src), src_dir / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=1024)
    out = tmp_path / "out" / "m.fused.onnx"
    rewrite(mxfuse_cli, src_dir / "m.onnx", out)
    assert os.stat(src_dir / "m.data").st_nlink == 1
    feed = {"x": np.random.default_rng(2).standard_normal((1, 4, K)).astype(np.float32)}
    online, _ = ep_run(src_dir / "m.onnx", ep_devices, feed)
    assert_bits_equal(online, offline_run(out, lib, feed))


@pytest.mark.parametrize("shape", [(0, 3, K), (2, 0, K)])
def test_empty_batch_or_sequence_runs(shape, lib, ep_devices, mxfuse_cli, tmp_path):
    """Was: 'F32 buffer is not aligned' from every fused op (ORT gives an empty tensor a NULL or
    unaligned pointer); ORT's CPU EP runs the unfused graph on empty tensors."""
    src = oai_min_max(tmp_path / "m.onnx", "max_min")
    rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    feed = {"x": np.zeros(shape, np.float32)}
    online, claimed = ep_run(src, ep_devices, feed)
    assert claimed and online[0].shape == shape[:2] + (48,)
    assert offline_run(tmp_path / "fused.onnx", lib, feed)[0].shape == online[0].shape


def test_symbolic_hidden_dim_refusal_says_why(mxfuse_cli, tmp_path):
    """x, residual [batch, seq, H] with the sum [batch, seq, 64] (γ fixes H): not provably
    the same shape, refused; the reason said 'broadcasting', which the model does not do."""
    src = norm_into_gemm(tmp_path / "m.onnx", {"transB": 1})
    m = onnx.load(src)
    for vi in m.graph.input:
        vi.type.tensor_type.shape.dim[1].dim_param = "H"
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("add1", TP.FLOAT, ["m", K]))
    onnx.save(m, src)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    reasons = [r["reason"] for r in report["rejections"] if r["rule"] == "add_rmsnorm_mxquant"]
    assert reasons and "[m, H], the sum [m, 64]" in reasons[0] and "do not show" in reasons[0], reasons


def norm_with_gamma_shape(path, gamma_shape, y_rank=3):
    """Add → decomposed RMSNorm whose weight Mul reads γ of `gamma_shape` → MXFP8 → MatMul, on
    [b, s, K] activations."""
    g = Graph()
    s = g.node("Add", ["x", "res"])
    mean = g.node("ReduceMean", [g.node("Pow", [s, g.const(2.0)]), g.const([-1], np.int64)])
    rstd = g.node("Reciprocal", [g.node("Sqrt", [g.node("Add", [mean, g.const(1e-6)])])])
    y = g.node("Mul", [g.node("Mul", [s, rstd]), g.const((1 + weight([K], 1)).reshape(gamma_shape))])
    g.outputs.append(g.node("MatMul", [g.mx_dequant(y, y_rank), g.const(weight([K, 48], 2))]))
    inputs = [helper.make_tensor_value_info(n, TP.FLOAT, ["b", "s", K]) for n in ("x", "res")]
    return g.model(inputs, path)


def test_norm_weight_of_broadcast_shape_fuses(lib, ep_devices, mxfuse_cli, tmp_path):
    """γ stored as [1, 1, H] (the activation's broadcast shape) multiplies by the same H values as
    [H]: the norm was refused ("expected [64]") and is now fused, bit for bit the unfused result."""
    src = norm_with_gamma_shape(tmp_path / "m.onnx", [1, 1, K])
    rng = np.random.default_rng(7)
    feed = {n: rng.standard_normal((2, 5, K)).astype(np.float32) for n in ("x", "res")}
    check_three_ways(src, lib, ep_devices, mxfuse_cli, tmp_path, feed, "add_rmsnorm_mxquant")


def test_norm_weight_of_higher_rank_than_the_input_is_refused(mxfuse_cli, tmp_path):
    """γ [1, 1, 1, H] on a rank-3 sum makes the norm's output rank 4, which the fused op does not."""
    report = rewrite(mxfuse_cli, norm_with_gamma_shape(tmp_path / "m.onnx", [1, 1, 1, K], 4), tmp_path / "f.onnx")
    why = [r["reason"] for r in report["rejections"] if r["rule"] == "add_rmsnorm_mxquant"]
    assert why and "[1, 1, 1, 64], expected [64] (or [1, .., 1, 64] of at most the input's rank)" in why[0], why


def if_with_mx_branch(path):
    """If(flag): then = x → MXFP8 → MatMul(w), else = MatMul(x, w); x and w from the main graph."""
    g = Graph()
    g.outputs.append("t_out")
    g.nodes.append(helper.make_node("MatMul", [g.mx_dequant("x", 2), "w"], ["t_out"]))
    then = helper.make_graph(g.nodes, "then", [], [helper.make_tensor_value_info("t_out", TP.FLOAT, None)], g.inits)
    other = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["e_out"])], "else", [],
                              [helper.make_tensor_value_info("e_out", TP.FLOAT, None)])
    node = helper.make_node("If", ["flag"], ["out"], then_branch=then, else_branch=other)
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, ["m", K]), helper.make_tensor_value_info("flag", TP.BOOL, [])]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("out", TP.FLOAT, None)],
                              [numpy_helper.from_array(weight([K, 48], 1), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)], ir_version=11), path)
    return path


def test_mx_quantizer_inside_an_if_branch_runs_on_the_plugin_ep(ep_devices, mxfuse_cli, tmp_path):
    """The offline rewrite leaves If / Loop bodies alone and says so; its note now says where such
    a model runs: the plugin EP, which ORT hands each body (it fuses the branch's quantizer + GEMM
    there; checked against onnx.reference)."""
    from onnx.reference import ReferenceEvaluator
    src = if_with_mx_branch(tmp_path / "if.onnx")
    out = subprocess.run([mxfuse_cli, "rewrite", str(src), "-o", str(tmp_path / "f.onnx")], check=True,
                         capture_output=True, text=True).stdout
    assert "MX / blocked quantization node(s) inside If / Loop / Scan" in out and "run this model on the plugin EP" in out, out
    rng = np.random.default_rng(3)
    for flag in (True, False):
        feed = {"x": rng.standard_normal((5, K)).astype(np.float32), "flag": np.array(flag)}
        (got,), claimed = ep_run(src, ep_devices, feed)
        want = ReferenceEvaluator(str(src)).run(None, feed)[0]
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
