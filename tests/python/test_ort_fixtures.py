"""The models crate's decoder fixtures through ORT: the plugin EP (online fusion) against the
offline `mxfuse rewrite` + custom-op library. Both paths run the same kernels on the same
fused subgraphs, so the outputs must be identical; the EP must claim exactly the sites the
fixture manifest expects."""

import json
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import EP_NAME, ROOT

FIXTURES = ROOT / "models" / "fixtures"
# Fixtures ORT 1.31's CPU EP can run the unfused remainder of (it has no bf16 Add and no
# com.microsoft::AllReduce schema). For the Quark ones the rewritten model keeps Quark weight
# fake-quant nodes, whose schema only the EP publishes: no custom-op-library run for those.
RUNNABLE = [
    ("dynamo_f32_floor", True),
    ("llama_powdiv_silu_two_mm_rceil_mul", True),
    ("f16_casts_muldiv_swish_floor", True),
    ("f16_mulrecip_gemma_add1_oaimin_rceil_div", True),
    ("pipeline_stage_residual_input", True),
    ("moe_shared_expert_f16_mxw", True),
    ("moe_mxfp4_experts", True),
    ("simplified_quickgelu_quark", False),
    ("skip_simplified_quark_gemma_add1", False),
]


def expected_fusions(name):
    """Fused nodes the manifest expects: norm + SwiGLU sites + standalone quantizers."""
    for e in json.loads((FIXTURES / "manifest.json").read_text()):
        if e["file"] == f"{name}.onnx":
            x = e["expected"]
            return x["add_rmsnorm_mxquant"] + x["swiglu_mxquant_matmul"] + x["standalone_mxquant"]
    raise KeyError(name)


def feed_for(sess, seed):
    rng = np.random.default_rng(seed)
    feed = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 3 for d in i.shape]
        dtype = {"tensor(float)": np.float32, "tensor(float16)": np.float16}[i.type]
        feed[i.name] = rng.standard_normal(shape).astype(dtype)
    return feed


@pytest.mark.parametrize("name,custom_ops_loadable", RUNNABLE)
def test_ep_matches_offline_rewrite(name, custom_ops_loadable, lib, ep_devices, mxfuse_cli, tmp_path):
    src = FIXTURES / f"{name}.onnx"
    rewritten = tmp_path / f"{name}.mxfuse.onnx"
    subprocess.run([mxfuse_cli, "rewrite", str(src), "-o", str(rewritten)], check=True, capture_output=True)

    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(ep_devices, {})
    online = ort.InferenceSession(str(src), so)
    fused = [sg for sg in online.get_provider_graph_assignment_info() if sg.ep_name == EP_NAME]
    assert len(fused) == expected_fusions(name)

    assert [n.domain for n in onnx.load(str(rewritten)).graph.node].count("com.mxfuse") > 0
    # The offline model through the EP: each com.mxfuse node claimed on its own.
    so = ort.SessionOptions()
    so.add_provider_for_devices(ep_devices, {})
    offline_ep = ort.InferenceSession(str(rewritten), so)

    feed = feed_for(online, seed=len(name))
    want = online.run(None, feed)
    for a, b in zip(want, offline_ep.run(None, feed)):
        np.testing.assert_array_equal(a, b)
    if not custom_ops_loadable:
        return
    so = ort.SessionOptions()
    so.register_custom_ops_library(lib)
    offline = ort.InferenceSession(str(rewritten), so, providers=["CPUExecutionProvider"])
    for a, b in zip(want, offline.run(None, feed)):
        if a.dtype == np.float16:
            # The com.mxfuse ops give identical bits on both paths (checked above), but with the
            # ops on ORT's CPU EP its InsertCastTransformer moves "isolated" f16 nodes of the
            # *unfused* attention to f32, so that math rounds differently and an E4M3 rounding
            # downstream may flip (one E4M3 step is 2^-3 relative). Only the shape is checked.
            assert a.shape == b.shape
        else:
            np.testing.assert_array_equal(a, b)


def ep_session_with(src, ep_devices, options):
    """A session of `src` on the plugin EP with provider `options`, recording what it claims."""
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(ep_devices, options)
    return ort.InferenceSession(str(src), so)


def test_quark_model_runs_unfused_with_rules_disabled(ep_devices):
    """With every rule disabled nothing is fused; the Quark fake-quant nodes then run through
    the kernel the EP publishes with their schema, on ORT's CPU EP, and the result matches the
    fused run up to f32 summation order."""
    src = FIXTURES / "simplified_quickgelu_quark.onnx"
    unfused = ep_session_with(src, ep_devices, {"disable_rules": "add_rmsnorm_mxquant,swiglu_mxquant_matmul,mxquant"})
    assert all(sg.ep_name != EP_NAME for sg in unfused.get_provider_graph_assignment_info())
    fused = ep_session_with(src, ep_devices, {})
    feed = feed_for(fused, seed=7)
    for a, b in zip(fused.run(None, feed), unfused.run(None, feed)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "name",
    ["dynamo_f32_floor", "llama_powdiv_silu_two_mm_rceil_mul", "pipeline_stage_residual_input", "moe_mxfp4_experts"],
)
def test_ep_matches_onnx_reference_on_the_original_model(name, ep_devices):
    """The original (unfused, standard ONNX) model through `onnx.reference` vs the EP: the
    norms and quantizers are bit-exact by construction; only the GEMMs' f32 summation order
    differs, i.e. ulp-level differences (an E4M3 rounding flip would show as ~6% and fail)."""
    from onnx.reference import ReferenceEvaluator

    src = str(FIXTURES / f"{name}.onnx")
    so = ort.SessionOptions()
    so.add_provider_for_devices(ep_devices, {})
    sess = ort.InferenceSession(src, so)
    feed = feed_for(sess, seed=11)
    for got, want in zip(sess.run(None, feed), ReferenceEvaluator(onnx.load(src)).run(None, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
