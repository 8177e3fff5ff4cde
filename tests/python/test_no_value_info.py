"""Models without recorded intermediate shapes (no `value_info`): the plugin EP claims what the
offline rewrite fuses.

ONNX Runtime's shape inference does not read a shape computed at run time: the MoE output's
`Reshape(out, Shape(x))` back to x's shape is typed [?, ?, ?], so layer 2's residual sum was
[?, ?, 64] and rule `add_rmsnorm_mxquant` refused that layer's norm on the EP (its operand x is
[batch, seq, 64]: not provably the sum's shape), while `mxfuse rewrite`'s own inference, which
tracks `Shape → Gather → Concat` values, typed it [batch, seq, 64] and fused it. Likewise the
names the EP's Quark op gives dims its shape inference does not know (`mxfuse_unk_k`) made a
Quark export's residual sums [1, ?, 64]. The EP now fills the dims ORT left unknown with the
offline inference (provider/src/shapes.rs), for `GetCapability` and for `Compile`'s rewrite of the
claimed subgraph: the same sites fuse either way, so both paths compute the same bits.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

from conftest import library_path
from test_gather_dequant import emulated_device_process
from test_moe_dispatch import moe_decoder
from test_mx_dequant import claimed_ops, ep_session, offline_session, rewrite, same_bits

ROOT = Path(__file__).resolve().parents[2]
TOKENS = [(1, 1), (1, 3), (1, 16), (2, 8), (1, 37)]


@pytest.mark.parametrize("shape_of_normed", [None, "gather"])
def test_a_moe_decoder_without_value_info_fuses_both_norms_as_offline(
        shape_of_normed, lib, ep_devices, mxfuse_cli, tmp_path):
    src = moe_decoder(tmp_path / "m.onnx", "dense", "softmax", shape_of_normed=shape_of_normed)
    assert not onnx.load(src).graph.value_info
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["add_rmsnorm_mxquant"] == 2, report["counts"]
    online, offline = ep_session(src, ep_devices), offline_session(tmp_path / "fused.onnx", lib)
    assert claimed_ops(online).count("ReduceMean") == 2, claimed_ops(online)  # was 1
    rng = np.random.default_rng(11)
    for shape in TOKENS:  # one session, token counts changing from run to run
        feed = {"x": rng.standard_normal((*shape, 64)).astype(np.float32)}
        got = online.run(None, feed)[0]
        assert got.shape == (*shape, 64)
        assert same_bits(got, offline.run(None, feed)[0]), shape
        if shape in [(1, 3), (1, 37)]:  # the device placement's Compile reads the same shapes
            out = emulated_device_process(lib, src, feed, tmp_path)
            assert out.returncode == 0, out.stderr[-2000:]
            assert out.stdout.count("'ReduceMean'") == 2, out.stdout
            assert same_bits(np.load(tmp_path / "y.npy"), got), shape


@pytest.mark.parametrize("spelling", ["std", "quark"])
def test_a_real_export_stripped_of_value_info_fuses_as_with_it(spelling, ep_devices, tmp_path):
    """torch.export (dynamo) MiniMax-shaped decoders with the symbolic `seq`: the EP claims the
    same nodes with and without the exporter's value_info (the Quark one claimed 2 of its 4 norms
    without), with the same bits."""
    model = onnx.load(ROOT / "models" / "fixtures" / "real" / f"minimax_m3_tiny_dynamo_mxfp8_{spelling}.onnx")
    del model.graph.value_info[:]
    onnx.save(model, tmp_path / "stripped.onnx")
    src = ROOT / "models" / "fixtures" / "real" / f"minimax_m3_tiny_dynamo_mxfp8_{spelling}.onnx"
    with_vi, without = ep_session(src, ep_devices), ep_session(tmp_path / "stripped.onnx", ep_devices)
    assert sorted(claimed_ops(without)) == sorted(claimed_ops(with_vi))
    for seq in (1, 5):
        ids = {"input_ids": np.random.default_rng(seq).integers(0, 100, (1, seq)).astype(np.int64)}
        assert same_bits(without.run(None, ids)[0], with_vi.run(None, ids)[0]), seq


def test_what_cannot_be_proven_is_still_refused_with_the_reason(ep_devices, tmp_path):
    """Where neither inference knows the shapes (the residual operand a graph input of unknown
    dims), the norm is still refused and the VERBOSE log says why."""
    src = moe_decoder(tmp_path / "m.onnx", "dense", "softmax", layers=1)
    m = onnx.load(src)
    # The residual stream comes in as a second input of unknown dims: x + r feeds the norm.
    m.graph.input.append(helper.make_tensor_value_info("r", TP.FLOAT, [None, None, 64]))
    m.graph.node.insert(0, helper.make_node("Add", ["x", "r"], ["xr"]))
    for n in m.graph.node[1:]:
        n.input[:] = ["xr" if i == "x" else i for i in n.input]
    onnx.save(m, tmp_path / "r.onnx")
    child = (
        "import sys, onnxruntime as ort\n"
        "ort.register_execution_provider_library('MxFuseExecutionProvider', sys.argv[1])\n"
        "d = [d for d in ort.get_ep_devices() if d.ep_name == 'MxFuseExecutionProvider'"
        " and d.device.type == ort.OrtHardwareDeviceType.CPU]\n"
        "so = ort.SessionOptions(); so.log_severity_level = 0\n"
        "so.add_provider_for_devices(d, {})\n"
        "ort.InferenceSession(sys.argv[2], so)\n")
    out = subprocess.run([sys.executable, "-c", child, library_path(), str(tmp_path / "r.onnx")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    log = out.stdout + out.stderr
    assert "add_rmsnorm_mxquant refused at" in log and "not show they are" in log, log[-3000:]
    # What the EP did fill in is said too (the MoE output's reshape back, at least).
    assert "taken from the offline rewrite's inference" in log, log[-3000:]


class LayerGraph:
    """Nodes and initializers of a decoder layer in `elem` with hidden size `h`, each node named
    after its one output (the helpers return that name)."""

    def __init__(self, elem, h=64):
        self.elem, self.h, self.nodes, self.inits = elem, h, [], []
        self.npt = {TP.FLOAT: np.float32, TP.FLOAT16: np.float16}[elem]

    def const(self, name, value, dtype=np.float32):
        if name not in {i.name for i in self.inits}:
            self.inits.append(onnx.numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def node(self, op_type, ins, out, domain="", **attrs):
        self.nodes.append(helper.make_node(op_type, ins, [out], name=out, domain=domain, **attrs))
        return out

    def norm(self, s, tag):
        """Decomposed RMSNorm in f32, cast back to `elem`."""
        node, const, f32 = self.node, self.const, TP.FLOAT
        xf = node("Cast", [s], f"{tag}_xf", to=f32)
        mean = node("ReduceMean", [node("Mul", [xf, xf], f"{tag}_sq"), const("axes", [-1], np.int64)],
                    f"{tag}_mean")
        inv = node("Reciprocal", [node("Sqrt", [node("Add", [mean, const("eps", 1e-6)], f"{tag}_v")],
                                       f"{tag}_std")], f"{tag}_inv")
        y = node("Mul", [node("Mul", [xf, inv], f"{tag}_n"), const(f"{tag}_w", np.linspace(0.5, 1.5, self.h))],
                 f"{tag}_y")
        return node("Cast", [y], f"{tag}_out", to=self.elem)

    def mx(self, x, tag):
        """Standard opset-24 MXFP8 (OCP floor) quantize + DequantizeLinear of a [batch, seq, h] x."""
        node, const, h = self.node, self.const, self.h
        blocks = node("Reshape", [x, const("blocks", [0, 0, h // 32, 32], np.int64)], f"{tag}_b")
        amax = node("ReduceMax", [node("Abs", [blocks], f"{tag}_abs"), const("axes", [-1], np.int64)],
                    f"{tag}_amax", keepdims=0)
        scale = node("Mul", [node("Cast", [amax], f"{tag}_amax_f32", to=TP.FLOAT), const("c", 2.0**-8)],
                     f"{tag}_s")
        scale = node("Cast", [scale], f"{tag}_e8m0", to=TP.FLOAT8E8M0, round_mode="down", saturate=1)
        q = node("QuantizeLinear", [x, scale], f"{tag}_q", axis=-1, block_size=32,
                 output_dtype=TP.FLOAT8E4M3FN)
        return node("DequantizeLinear", [q, scale], f"{tag}_dq", axis=-1, block_size=32,
                    output_dtype=self.elem)

    def weight(self, tag, seed):
        w = np.random.default_rng(seed).standard_normal((self.h, self.h)).astype(np.float32) * 0.1
        return self.const(f"{tag}_w", w, self.npt)

    def linear(self, a, tag, seed):
        return self.node("MatMul", [a, self.weight(tag, seed)], tag)

    def save(self, path, name, inputs, outputs):
        """An opset-24 (+ com.microsoft 1), IR-11 model without value_info, at `path`."""
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        opsets = [helper.make_opsetid("", 24), helper.make_opsetid("com.microsoft", 1)]
        onnx.save(helper.make_model(g, opset_imports=opsets, ir_version=11), path)
        return path


def attention_layer(path, elem, op):
    """A decoder layer as torch's dynamo exporter writes it at opset ≥ 23 (so in every standard
    MX export), without value_info: norm → MXFP8 → q / k / v, ONNX `Attention` (or q through
    ONNX `RotaryEmbedding`, or ORT's `MultiHeadAttention`) → MXFP8 → o_proj → residual Add →
    norm → MXFP8 → MatMul."""
    h, layer = 64, LayerGraph(elem)
    node, norm, mx, linear = layer.node, layer.norm, layer.mx, layer.linear

    s = node("Add", ["x", "res"], "s")
    a = mx(norm(s, "n1"), "qkv_in")
    q, k, v = (linear(a, p, i) for i, p in enumerate(["q", "k", "v"]))
    if op == "RotaryEmbedding":
        q = node("RotaryEmbedding", [q, "cos", "sin", "pos"], "q_rot", num_heads=4)
        ctx = node("Mul", [q, node("Add", [k, v], "kv")], "ctx")
    elif op == "MultiHeadAttention":  # ONNX Runtime's transformers optimizer
        ctx = node(op, [q, k, v], "ctx", domain="com.microsoft", num_heads=4)
    else:
        ctx = node("Attention", [q, k, v], "ctx", q_num_heads=4, kv_num_heads=4, is_causal=1)
    s2 = node("Add", [s, linear(mx(ctx, "o_in"), "o", 3)], "s2")
    out = linear(mx(norm(s2, "n2"), "mlp_in"), "y", 4)
    ins = [helper.make_tensor_value_info(n, elem, ["batch", "seq", h]) for n in ("x", "res")]
    if op == "RotaryEmbedding":
        ins += [helper.make_tensor_value_info(n, elem, [64, 8]) for n in ("cos", "sin")]
        ins.append(helper.make_tensor_value_info("pos", TP.INT64, ["batch", "seq"]))
    return layer.save(path, "attention_layer", ins, [helper.make_tensor_value_info(out, elem, None)])


@pytest.mark.parametrize("elem", [TP.FLOAT, TP.FLOAT16])
@pytest.mark.parametrize("op", ["Attention", "RotaryEmbedding", "MultiHeadAttention"])
def test_opset23_attention_without_value_info_fuses_and_the_rewrite_loads(op, elem, lib, ep_devices, mxfuse_cli,
                                                                          tmp_path):
    """Probe 10: mxfuse's inference did not know ONNX's opset-23 `Attention` / `RotaryEmbedding`
    (nor ONNX Runtime's `com.microsoft::MultiHeadAttention`),
    so offline everything after them had unknown shapes: the o_proj quantizer and the second norm
    were refused, and `mx_quant_linear` left the o_proj `QuantizeLinear` (E8M0 scale) in place,
    which ONNX Runtime cannot load ("Could not find an implementation for QuantizeLinear(24)")."""
    src = attention_layer(tmp_path / "m.onnx", elem, op)
    assert not onnx.load(src).graph.value_info
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["add_rmsnorm_mxquant"] == 2, report["counts"]  # was 1
    assert report["counts"]["mxquant"] == 1, report["counts"]  # was 0
    assert not report["rejections"], report["rejections"]
    rng = np.random.default_rng(5)
    feed = {n: rng.standard_normal((1, 3, 64)).astype(np.float16 if elem == TP.FLOAT16 else np.float32)
            for n in ("x", "res")}
    if op == "RotaryEmbedding":
        feed.update(cos=np.cos(np.arange(512) / 7).reshape(64, 8).astype(feed["x"].dtype),
                    sin=np.sin(np.arange(512) / 7).reshape(64, 8).astype(feed["x"].dtype),
                    pos=np.arange(3, dtype=np.int64).reshape(1, 3))
    online = ep_session(src, ep_devices)
    offline = offline_session(tmp_path / "fused.onnx", lib)  # raised NOT_IMPLEMENTED before
    if elem == TP.FLOAT16:  # ORT runs unfused f16 ops in f32 on the custom-op path (docs/provider.md)
        offline = ep_session(tmp_path / "fused.onnx", ep_devices)
    assert same_bits(offline.run(None, feed)[0], online.run(None, feed)[0])


def pad_einsum_layer(path, body_shapes=True):
    """A decoder layer whose dims reach the MXFP8 sites only through ops mxfuse's inference did
    not know before: x [batch, seq, 48] padded to 64 (`Pad`) and projected by `Einsum`; the
    residual through an `If` (its branches declare [batch, seq, 64]) and a `Loop` (its body's
    state likewise); residual Add → norm → MXFP8 → MatMul; a SwiGLU whose gate and up are
    `Einsum`s → MXFP8 → MatMul. A `Scan` (a running sum over the padded rows) is a second output.
    No value_info; `body_shapes=False`: the If branches and the Loop body declare their outputs'
    element types only (mxfuse infers the bodies)."""
    h, layer = 64, LayerGraph(TP.FLOAT)
    node, const, vi = layer.node, layer.const, helper.make_tensor_value_info
    rows = ["batch", "seq", h] if body_shapes else None
    padded = node("Pad", ["x", const("pads", [0, 0, 0, 0, 0, h - 48], np.int64)], "padded")
    proj = node("Einsum", [padded, layer.weight("in", 0)], "proj", equation="bsd,de->bse")
    branch = lambda op, out: helper.make_graph(  # noqa: E731
        [helper.make_node(op, ["res"], [out])], f"{op}_branch", [], [vi(out, TP.FLOAT, rows)])
    picked = node("If", ["flag"], "picked", then_branch=branch("Identity", "then_out"),
                  else_branch=branch("Neg", "else_out"))
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["r_in", "r_in"], ["r_out"])],
        "double", [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("r_in", TP.FLOAT, ["batch", "seq", h])],
        [vi("cond_out", TP.BOOL, []), vi("r_out", TP.FLOAT, rows)])
    carried = node("Loop", [const("two", 2, np.int64), "", picked], "carried", body=body)
    s = node("Add", [proj, carried], "s")
    y1 = layer.linear(layer.mx(layer.norm(s, "n1"), "n1_mx"), "o", 1)
    gate = node("Einsum", [y1, layer.weight("gate", 2)], "gate", equation="bsd,df->bsf")
    up = node("Einsum", [y1, layer.weight("up", 3)], "up", equation="...d,df->...f")
    act = node("Mul", [node("Mul", [gate, node("Sigmoid", [gate], "gate_sig")], "silu"), up], "act")
    out = layer.linear(layer.mx(act, "act_mx"), "down", 4)
    scan_body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "row"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["running"])],
        "running_sum", [vi("acc_in", TP.FLOAT, ["batch", h]), vi("row", TP.FLOAT, ["batch", h])],
        [vi("acc_out", TP.FLOAT, ["batch", h]), vi("running", TP.FLOAT, ["batch", h])])
    layer.nodes.append(helper.make_node("Scan", ["acc0", padded], ["total", "sums"], name="scan", num_scan_inputs=1,
                                        scan_input_axes=[1], scan_output_axes=[1], body=scan_body))
    ins = [vi("x", TP.FLOAT, ["batch", "seq", 48]), vi("res", TP.FLOAT, ["batch", "seq", h]),
           vi("flag", TP.BOOL, []), vi("acc0", TP.FLOAT, ["batch", h])]
    outs = [vi(n, TP.FLOAT, None) for n in (out, "total", "sums")]
    return layer.save(path, "pad_einsum_layer", ins, outs)


def claimed_and_all_names(sess):
    """Names of the nodes the EP claimed, and of every node ORT kept in its graph."""
    info = sess.get_provider_graph_assignment_info()
    claimed = {n.name for sg in info if sg.ep_name == "MxFuseExecutionProvider" for n in sg.get_nodes()}
    return claimed, {n.name for sg in info for n in sg.get_nodes()}


@pytest.mark.parametrize("body_shapes", [True, False])
def test_pad_einsum_and_control_flow_carry_the_dims_to_the_fusions(body_shapes, lib, ep_devices, mxfuse_cli,
                                                                   tmp_path):
    """Probe 10 left `Pad`, `Einsum`, `OneHot`, `Resize` and control flow out of the offline
    inference: in such a model without value_info the norm and the SwiGLU were refused ("unknown
    shape") and their E8M0 `QuantizeLinear`s stayed, which ONNX Runtime's CPU EP cannot load. Now
    both fuse, the If / Loop / Scan bodies are kept as they are, and the rewrite (custom-op
    library) computes what the original does on the plugin EP.

    Until h-left the EP fused less of this model: ONNX Runtime's inference leaves the Loop's
    carried output unranked, which its API reports as 0 dims (read as a scalar, so never filled
    in), and the inference the EP runs had no bodies (ORT's attribute API does not read graphs),
    so the EP ran the norm and the SwiGLU unfused, quantizing with `MxQuantizeLinear`, and the
    GEMMs summed in another order. Now the view tells an unranked tensor from a scalar
    (`TensorTypeAndShape_HasShape`) and the inference gets the bodies (`Node_GetSubgraphs`):
    the EP claims the nodes the offline rewrite replaces, and both give the same bits."""
    src = pad_einsum_layer(tmp_path / "m.onnx", body_shapes)
    assert not onnx.load(src).graph.value_info
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["add_rmsnorm_mxquant"] == 1, report
    assert report["counts"]["swiglu_mxquant_matmul"] == 1, report
    assert not report["rejections"], report["rejections"]
    fused = onnx.load(tmp_path / "fused.onnx")
    assert {"If", "Loop", "Scan", "Pad", "Einsum"} <= {n.op_type for n in fused.graph.node}
    assert not {"QuantizeLinear", "DequantizeLinear"} & {n.op_type for n in fused.graph.node}
    online, offline = ep_session(src, ep_devices), offline_session(tmp_path / "fused.onnx", lib)
    # The same fusions: the EP claims exactly the nodes the rewrite replaced that ORT kept (its
    # optimizer drops the float → float Casts before the EP sees the graph).
    replaced = {n for f in report["fusions"] for n in f["replaced"]}
    claimed, kept = claimed_and_all_names(online)
    assert claimed == replaced & kept, (sorted(claimed ^ (replaced & kept)))
    assert {"n1_mean", "silu", "o", "down"} <= claimed  # was: the MatMuls' quantizers only
    rng = np.random.default_rng(7)
    for batch, seq, flag in [(1, 1, True), (1, 5, False), (2, 3, True)]:
        feed = {"x": rng.standard_normal((batch, seq, 48)).astype(np.float32),
                "res": rng.standard_normal((batch, seq, 64)).astype(np.float32),
                "flag": np.array(flag), "acc0": np.zeros((batch, 64), np.float32)}
        got, want = offline.run(None, feed), online.run(None, feed)
        assert got[0].shape == (batch, seq, 64) and got[2].shape == (batch, seq, 64)
        for g, w in zip(got, want):
            assert same_bits(g, w), (batch, seq, flag)


def test_a_tensor_of_unknown_rank_is_still_refused_on_both_paths(lib, ep_devices, mxfuse_cli, tmp_path):
    """What neither inference can rank stays refused: with `res` a graph input of unknown rank
    and bodies that declare no shapes, the If / Loop outputs have no rank for either path. The
    EP used to read such a tensor as a scalar (0 dims); now as unranked, so it refuses the norm
    and the SwiGLU as the rewrite does (claiming only the fallbacks' Q / DQ nodes), and computes
    what the fused model does within float summation order."""
    src = pad_einsum_layer(tmp_path / "m.onnx", body_shapes=False)
    ranked_report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert ranked_report["counts"]["add_rmsnorm_mxquant"] == 1, ranked_report["counts"]
    m = onnx.load(src)
    next(i for i in m.graph.input if i.name == "res").type.tensor_type.ClearField("shape")
    onnx.save(m, tmp_path / "unranked.onnx")
    report = rewrite(mxfuse_cli, tmp_path / "unranked.onnx", tmp_path / "unranked_fused.onnx")
    assert report["counts"]["add_rmsnorm_mxquant"] == 0 and report["counts"]["swiglu_mxquant_matmul"] == 0
    assert any("rank of 'n1_out' is unknown" in r["reason"] for r in report["rejections"]), report["rejections"]
    online = ep_session(tmp_path / "unranked.onnx", ep_devices)
    claimed, kept = claimed_and_all_names(online)
    assert claimed == {n for f in report["fusions"] for n in f["replaced"]} & kept
    assert claimed == {"n1_mx_q", "n1_mx_dq", "act_mx_q", "act_mx_dq"}, sorted(claimed)
    fused = offline_session(tmp_path / "fused.onnx", lib)
    rng = np.random.default_rng(3)
    feed = {"x": rng.standard_normal((1, 5, 48)).astype(np.float32),
            "res": rng.standard_normal((1, 5, 64)).astype(np.float32),
            "flag": np.array(False), "acc0": np.zeros((1, 64), np.float32)}
    got, want = online.run(None, feed), fused.run(None, feed)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    assert same_bits(got[1], want[1]) and same_bits(got[2], want[2])
