"""AMD Quark's deprecated op name `com.vai.quantize::MXFixNeuron` (older Quark releases and
`quark.onnx.tools.convert_custom_ops` write it) for `com.amd.quark::MXQuantizeDequantize`: Quark
decoders respelled that way load in ONNX Runtime with the plugin EP (which publishes the op in both
domains), `mxfuse rewrite` fuses them exactly as the Quark spelling, and the original (on the plugin
EP) and the rewrite give the same bits; an MXFixNeuron left unfused runs on the EP's kernel."""

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

from conftest import EP_NAME, ROOT
from test_moe_dispatch import TOKENS, moe_decoder
from test_mx_dequant import claimed_ops, ep_session, rewrite, same_bits
from test_ort_fixtures import FIXTURES, ep_session_with, expected_fusions, feed_for
from test_weight_only import quark_oracle_ops

QUARK, VAI = "com.amd.quark", "com.vai.quantize"


def as_fix_neuron(src, dst):
    """`src` with every Quark MX fake quant renamed `com.vai.quantize::MXFixNeuron` and the
    com.amd.quark opset import made com.vai.quantize's (what convert_custom_ops writes)."""
    m = onnx.load(str(src))
    renamed = 0
    for n in m.graph.node:
        if n.domain == QUARK and n.op_type == "MXQuantizeDequantize":
            n.domain, n.op_type = VAI, "MXFixNeuron"
            renamed += 1
    assert renamed > 0
    for o in m.opset_import:
        if o.domain == QUARK:
            o.domain = VAI
    assert not any(n.domain == QUARK for n in m.graph.node)
    onnx.save(m, str(dst))
    return dst


def fused_count(sess):
    return sum(1 for sg in sess.get_provider_graph_assignment_info() if sg.ep_name == EP_NAME)


@pytest.mark.parametrize("name", ["simplified_quickgelu_quark", "skip_simplified_quark_gemma_add1"])
def test_quark_fixture_decoder_as_mxfixneuron(name, ep_devices, mxfuse_cli, tmp_path):
    """The models crate's Quark decoders (norm + SwiGLU + activation fusions, Quark weight
    quantizers) respelled: the EP claims the manifest's sites, the rewrite fuses what the Quark
    spelling's rewrite fuses, and the original on the plugin EP matches the rewrite bit for bit."""
    src = as_fix_neuron(FIXTURES / f"{name}.onnx", tmp_path / f"{name}.vai.onnx")
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    quark_report = rewrite(mxfuse_cli, FIXTURES / f"{name}.onnx", tmp_path / "quark_fused.onnx")
    assert report["counts"] == quark_report["counts"], report["counts"]
    assert sum(report["counts"].values()) > 0
    left = [n.op_type for n in onnx.load(tmp_path / "fused.onnx").graph.node if n.domain in (QUARK, VAI)]
    quark_left = [n.op_type for n in onnx.load(tmp_path / "quark_fused.onnx").graph.node if n.domain == QUARK]
    assert left == ["MXFixNeuron"] * len(quark_left), (left, quark_left)

    online = ep_session(src, ep_devices)
    assert fused_count(online) == expected_fusions(name)
    offline = ep_session(tmp_path / "fused.onnx", ep_devices)
    feed = feed_for(online, seed=len(name))
    for a, b in zip(online.run(None, feed), offline.run(None, feed)):
        assert same_bits(a, b)
    # And the same bits as the model in Quark's own spelling.
    quark = ep_session(FIXTURES / f"{name}.onnx", ep_devices)
    for a, b in zip(online.run(None, feed), quark.run(None, feed)):
        assert same_bits(a, b)


@pytest.mark.parametrize("dispatch,router,fused", [
    ("dense", "sigmoid", {"swiglu_mxquant_matmul": 10, "add_rmsnorm_mxquant": 2, "mxquant": 0}),
    ("stacked_activation_first", "softmax",
     {"mx_gather_dequant": 4, "swiglu_mxquant_matmul": 4, "add_rmsnorm_mxquant": 2}),
])
def test_quark_moe_decoder_as_mxfixneuron(dispatch, router, fused, ep_devices, mxfuse_cli, tmp_path):
    """Two MoE decoder layers in Quark's spelling (test_moe_dispatch's builder) respelled:
    the norms, SwiGLUs and stacked experts fuse as in Quark's spelling, no fake quant is left,
    and the original on the plugin EP, the rewrite and onnx.reference (with the reference
    kernel of MXFixNeuron) agree."""
    quark_src = moe_decoder(tmp_path / "quark.onnx", dispatch, router, quark=True, value_info=True)
    src = as_fix_neuron(quark_src, tmp_path / "vai.onnx")
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert {k: report["counts"][k] for k in fused} == fused, report["counts"]
    quark_report = rewrite(mxfuse_cli, quark_src, tmp_path / "quark_fused.onnx")
    assert report["counts"] == quark_report["counts"]
    ops = [n.op_type for n in onnx.load(tmp_path / "fused.onnx").graph.node]
    assert not {"MXFixNeuron", "MXQuantizeDequantize"} & set(ops), ops

    custom, _ = quark_oracle_ops()
    ref = ReferenceEvaluator(onnx.load(src), new_ops=custom)
    online = ep_session(src, ep_devices)
    offline = ep_session(tmp_path / "fused.onnx", ep_devices)
    rng = np.random.default_rng(5)
    for shape in TOKENS:
        feed = {"x": rng.standard_normal((*shape, 64)).astype(np.float32)}
        got = online.run(None, feed)[0]
        assert same_bits(got, offline.run(None, feed)[0]), shape
        want = ref.run(None, feed)[0]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max(), err_msg=str(shape))


def test_an_unfused_mxfixneuron_runs_on_the_eps_kernel(ep_devices, tmp_path):
    """With every rule off the respelled fixture's fake quants are not claimed: ORT's CPU EP runs
    them with the kernel the EP publishes for com.vai.quantize::MXFixNeuron, and the result
    matches the fused run up to f32 summation order. Without the EP the model does not load."""
    src = str(as_fix_neuron(FIXTURES / "simplified_quickgelu_quark.onnx", tmp_path / "m.onnx"))
    rules = "add_rmsnorm_mxquant,swiglu_mxquant_matmul,mxquant,mx_weight_matmul"
    unfused = ep_session_with(src, ep_devices, {"disable_rules": rules})
    assert claimed_ops(unfused) == []
    fused = ep_session_with(src, ep_devices, {})
    assert "MXFixNeuron" in claimed_ops(fused)
    feed = feed_for(fused, seed=7)
    for a, b in zip(fused.run(None, feed), unfused.run(None, feed)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    with pytest.raises(Exception, match="com.vai.quantize|MXFixNeuron"):
        ort.InferenceSession(src, providers=["CPUExecutionProvider"])


def test_run_in_ort_compares_the_respelled_quark_sample(lib, mxfuse_cli, tmp_path):
    """scripts/run_in_ort.py on AMD Quark's sample MLP respelled: onnx.reference evaluates
    MXFixNeuron with the project's Quark kernel, the rewrite keeps 4 of them (axis 1), so the
    script runs it on the plugin EP, and every output is bit-identical and matches the reference."""
    src = as_fix_neuron(ROOT / "models" / "fixtures" / "samples" / "tiny_swiglu_mlp_MXFP8E4M3.onnx",
                        tmp_path / "vai.onnx")
    fused = tmp_path / "fused.onnx"
    subprocess.run([mxfuse_cli, "rewrite", str(src), "-o", str(fused)], check=True, capture_output=True)
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_in_ort.py"), str(src), str(fused), lib],
                         capture_output=True, text=True, timeout=300)
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    assert "keeps 4 com.vai.quantize nodes" in out and out.rstrip().endswith("OK"), out
    lines = [l for l in out.splitlines() if l.startswith("output ")]
    assert lines and all("bit-identical: True" in l and "onnx.reference| = 0 " in l for l in lines), out


def test_run_in_ort_reference_kernel_takes_mxfixneuron():
    """scripts/run_in_ort.py's onnx.reference kernels (check_models.CUSTOM) evaluate the alias
    exactly as Quark's op."""
    sys.path.insert(0, str(ROOT / "models" / "tests" / "python"))
    from check_models import CUSTOM
    from onnx import TensorProto as TP
    from onnx import helper

    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    ys = []
    for domain, op in [(QUARK, "MXQuantizeDequantize"), (VAI, "MXFixNeuron")]:
        node = helper.make_node(op, ["x"], ["y"], domain=domain, axis=-1, block_size=32,
                                element_dtype="fp8_e4m3", rounding_mode=2)
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, [4, 64])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])
        ys.append(ReferenceEvaluator(m, new_ops=CUSTOM).run(None, {"x": x})[0])
    assert same_bits(ys[0], ys[1]) and not np.array_equal(ys[0], x)
