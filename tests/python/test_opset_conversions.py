"""New-user probe 13 (BENCHMARKS.md): the fixtures re-expressed at other ONNX opsets, as
`onnx.version_converter.convert_version` or an exporter at another opset writes them
(tests/python/opset_respell.py: ReduceMean / ReduceMax / ReduceSum / Squeeze axes as attribute or
input, Split sizes as attribute, input or `num_outputs`, Clip bounds as attributes or inputs, Cast
`saturate`; Cast / QuantizeLinear / DequantizeLinear 25 and 28).

Each converted model must fuse exactly what the model fuses at its own opset, and run through
the plugin EP bit for bit as the original does (same fused kernels, the unfused ops' ORT kernels
of another version computing the same thing); the offline rewrite through the EP equals the
online fusion; and the fused run agrees with the unfused model (onnx.reference for standard MX,
the EP with every rule off for AMD Quark's fake quant) within the existing tests' tolerances.

Bounds: standard MX needs opset >= 24 (FLOAT8E8M0), `RMSNormalization` 23, `Shape(start, end)`
15; ONNX Runtime 1.31 loads opset <= 26, so 27 and 28 are rewrite-only (the counts).

Found by the probe (fixed, with unit tests in graph_rewrites/tests/rules_swiglu.rs and
graph_rewrites/src/pattern/tests.rs):
* Clip-6 (opset <= 10) states its bounds as attributes: the SwiGLU-OAI up clamp `Clip(min=-L,
  max=L)` was refused ("bounds (None, None) are not ±7") and a gate `Clip(max=L)` with "has no
  upper bound". The up clamp fuses now; the gate clamp is refused for the right reason (its absent
  `min` is the lowest float, which clamps -inf: not SwiGLU-OAI's gate).
* The reviewed-version table missed Cast / QuantizeLinear / DequantizeLinear-28, so at opset 28
  they were taken for version 25 (harmless there: 28 adds FLOAT6 types only; the rules accept 28
  now by review, and `test_reviewed_versions_are_onnxs_schema_history` keeps the table whole).
"""

import re
import sys

import numpy as np
import onnx
import onnx.defs
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from conftest import ROOT
from opset_respell import at_opset, lowest_opset, onnx_opset, respell
from test_mx_dequant import offline_session, rewrite, same_bits
from test_ort_fixtures import ep_session_with

sys.path.insert(0, str(ROOT / "models" / "tests" / "python"))
from check_models import CUSTOM  # noqa: E402

FIXTURES = ROOT / "models" / "fixtures"
ALL_RULES = ("add_rmsnorm_mxquant,swiglu_mxquant_matmul,mxquant,mx_weight_matmul,mx_gather_dequant,"
             "mx_quant_linear,mx_dequant")
ORT_MAX_OPSET = 26

# (fixture, target opsets, how the unfused model is run: "reference" (onnx.reference, f32
# standard MX), "unfused_ep" (the EP with every rule off: Quark's kernel), None (not compared:
# float16, where ORT's f16 Casts may flip an E4M3 rounding — test_ort_fixtures.py), or "counts"
# (ORT 1.31 cannot run it at all: bf16 Add, AllReduce, a GQA cache needing its dims)).
MATRIX = [
    ("dynamo_f32_floor", (25, 26, 27, 28), "reference"),
    ("llama_powdiv_silu_two_mm_rceil_mul", (25, 26), "reference"),
    ("moe_mxfp4_experts", (26, 28), "reference"),
    ("pipeline_stage_residual_input", (25,), "reference"),
    ("f16_casts_muldiv_swish_floor", (25, 28), None),
    ("f16_mulrecip_gemma_add1_oaimin_rceil_div", (26,), None),
    ("moe_shared_expert_f16_mxw", (26,), None),
    ("dynamo_bf16_casts_floor_mxw", (25, 28), "counts"),
    ("dynamo_allreduce_branch_first", (26, 28), "counts"),
    ("skip_simplified_oai_quickgelu_allreduce_f16", (25, 28), "counts"),
    ("real/ortgenai_llama_tiny_mxfp8_std", (25, 28), "counts"),
    ("real/minimax_m3_tiny_dynamo_mxfp8_std", (26,), "reference"),
    ("real/minimax_m3_tiny_dynamo_mxfp8_quark", (15, 17, 18, 24, 26), "unfused_ep"),
    ("real/quark_mxfp8e4m3_decoder_layer", (10, 13, 17, 26), "unfused_ep"),
    ("simplified_quickgelu_quark", (10, 11, 13, 17, 24, 26, 28), "unfused_ep"),
    ("skip_simplified_quark_gemma_add1", (10, 13, 17, 26), "unfused_ep"),
    ("samples/tiny_swiglu_mlp_MXFP8E4M3", (10, 13, 17, 26), "unfused_ep"),
    ("baseline_no_quant", (10, 13, 17, 26), "unfused_ep"),
]
CASES = [(name, t, how) for name, targets, how in MATRIX for t in targets]


def fusions(report):
    return sorted(f["rule"] for f in report["fusions"])


def feeds(model, seed):
    """Inputs for every graph input: f32 / f16 normal, int64 token ids; symbolic dims 3.
    (test_ort_fixtures.feed_for takes float inputs only; the real exports take token ids.)"""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        tt = i.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 3 for d in tt.shape.dim]
        if tt.elem_type == TP.INT64:
            out[i.name] = rng.integers(0, 100, shape).astype(np.int64)
        else:
            out[i.name] = rng.standard_normal(shape).astype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
    return out


def close_to(got, want, rtol, atol_rel):
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol_rel * max(float(np.abs(b).max()), 1.0))


@pytest.mark.parametrize("name,target,how", CASES, ids=[f"{n.split('/')[-1]}-{t}" for n, t, _ in CASES])
def test_a_fixture_at_another_opset_fuses_and_runs_as_at_its_own(name, target, how, ep_devices, mxfuse_cli,
                                                                   tmp_path):
    src = FIXTURES / f"{name}.onnx"
    model = onnx.load(src)
    low, why = lowest_opset(model)
    assert target >= low, f"{name} cannot go to opset {target}: {why}"
    converted, _ = at_opset(model, target)
    assert onnx_opset(converted) == target
    conv = tmp_path / f"at{target}.onnx"
    onnx.save(converted, conv)

    own = rewrite(mxfuse_cli, src, tmp_path / "own.mxfuse.onnx")
    got = rewrite(mxfuse_cli, conv, tmp_path / f"at{target}.mxfuse.onnx")
    assert fusions(got) == fusions(own), (got["rejections"], got["near_misses"])
    if how == "counts" or target > ORT_MAX_OPSET:
        return

    feed = feeds(model, seed=target)
    want = ep_session_with(src, ep_devices, {}).run(None, feed)
    online = ep_session_with(conv, ep_devices, {}).run(None, feed)
    assert all(same_bits(a, b) for a, b in zip(online, want)), "the EP runs the converted model as the original"
    offline_ep = ep_session_with(tmp_path / f"at{target}.mxfuse.onnx", ep_devices, {}).run(None, feed)
    assert all(same_bits(a, b) for a, b in zip(offline_ep, online)), "offline rewrite == online fusion"
    if how == "reference":
        ref = ReferenceEvaluator(converted, new_ops=CUSTOM).run(None, feed)
        close_to(online, ref, 1e-5, 1e-5)
    elif how == "unfused_ep":
        unfused = ep_session_with(conv, ep_devices, {"disable_rules": ALL_RULES}).run(None, feed)
        close_to(online, unfused, 1e-4, 1e-5)


def oai_quark_mlp(path, gate_clip6):
    """gate, up [b, s, 64] → SwiGLU-OAI (L = 7, α = 1.702, β = 1) → Quark MXFP8 → MatMul, at
    opset 18 (Clip-13 with input bounds), re-expressed at opset 10 (Clip-6 attributes). The gate
    is clamped by `Clip(max=L)` (`gate_clip6`) or `Min(gate, L)`; up by `Clip(-L, L)`."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.float32(v), n) for n, v in
             (("lim", 7.0), ("neg", -7.0), ("beta", 1.0), ("alpha", 1.702))]
    inits.append(numpy_helper.from_array((rng.standard_normal((64, 16)) * 0.1).astype(np.float32), "w"))
    gate = (helper.make_node("Clip", ["gate", "", "lim"], ["g"]) if gate_clip6
            else helper.make_node("Min", ["gate", "lim"], ["g"]))
    nodes = [
        gate,
        helper.make_node("Clip", ["up", "neg", "lim"], ["u"]),
        helper.make_node("Add", ["u", "beta"], ["u1"]),
        helper.make_node("Mul", ["g", "alpha"], ["ga"]),
        helper.make_node("Sigmoid", ["ga"], ["sg"]),
        helper.make_node("Mul", ["g", "sg"], ["glu"]),
        helper.make_node("Mul", ["glu", "u1"], ["act"]),
        helper.make_node("MXQuantizeDequantize", ["act"], ["actq"], domain="com.amd.quark",
                         element_dtype="fp8_e4m3", axis=-1, block_size=32, rounding_mode=2),
        helper.make_node("MatMul", ["actq", "w"], ["y"]),
    ]
    ins = [helper.make_tensor_value_info(n, TP.FLOAT, ["b", "s", 64]) for n in ("gate", "up")]
    g = helper.make_graph(nodes, "oai", ins, [helper.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.amd.quark", 1)],
                          ir_version=9)
    m = respell(m, 10)
    assert all(len(n.input) == 1 for n in m.graph.node if n.op_type == "Clip"), "Clip-6: attribute bounds"
    onnx.save(m, path)
    return path


def test_clip_6_up_clamp_fuses_and_computes_what_ort_does(lib, ep_devices, mxfuse_cli, tmp_path):
    """Was refused ("up clamp bounds (None, None) are not ±7"): the Clip-6 bounds are attributes."""
    src = oai_quark_mlp(tmp_path / "m.onnx", gate_clip6=False)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert fusions(report) == ["swiglu_mxquant_matmul"], report["rejections"]
    rng = np.random.default_rng(10)
    for shape in [(1, 1), (2, 5)]:
        # Large enough that both clamps bite.
        feed = {n: (rng.standard_normal((*shape, 64)) * 6).astype(np.float32) for n in ("gate", "up")}
        online = ep_session_with(src, ep_devices, {}).run(None, feed)
        offline = offline_session(tmp_path / "fused.onnx", lib).run(None, feed)
        assert same_bits(online[0], offline[0])
        unfused = ep_session_with(src, ep_devices, {"disable_rules": ALL_RULES}).run(None, feed)
        close_to(online, unfused, 1e-4, 1e-5)


def test_clip_6_gate_clamp_is_refused_for_its_default_lower_bound(ep_devices, mxfuse_cli, tmp_path):
    """Clip-6's absent `min` is the lowest float: it turns a -inf gate into -FLT_MAX (g·σ(αg) = -0,
    where SwiGLU-OAI gives NaN), so it is not SwiGLU-OAI's gate clamp. Was refused as "has no
    upper bound"; the quantizer still fuses alone and the model runs as ORT computes it."""
    src = oai_quark_mlp(tmp_path / "m.onnx", gate_clip6=True)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert fusions(report) == ["mxquant"], report
    why = [r["reason"] for r in report["rejections"] if r["rule"] == "swiglu_mxquant_matmul"]
    assert len(why) == 1 and "has a lower bound" in why[0] and "Clip-6's default min" in why[0], why
    feed = {n: np.random.default_rng(4).standard_normal((2, 3, 64)).astype(np.float32) for n in ("gate", "up")}
    online = ep_session_with(src, ep_devices, {}).run(None, feed)
    unfused = ep_session_with(src, ep_devices, {"disable_rules": ALL_RULES}).run(None, feed)
    close_to(online, unfused, 1e-4, 1e-5)


def reviewed_history():
    """graph_rewrites/src/pattern/opsets.rs: ONNX_HISTORY rows and MX_QDQ_VERSIONS."""
    text = (ROOT / "graph_rewrites" / "src" / "pattern" / "opsets.rs").read_text()
    table = text.split("const ONNX_HISTORY")[1].split("];")[0]
    rows = {op: [int(v) for v in vs.split(",") if v.strip()]
            for op, vs in re.findall(r'\("(\w+)", &\[([\d, ]*)\]\)', table)}
    qdq = re.search(r"MX_QDQ_VERSIONS: &\[i64\] = &\[([\d, ]*)\]", text).group(1)
    return rows, [int(v) for v in qdq.split(",")]


def test_reviewed_versions_are_onnxs_schema_history():
    """A version missing from the table is read as the one before it (reviewed); so every schema
    version onnx has must be listed (Cast / Q / DQ-28 were not), and the MX Q/DQ versions are
    exactly the Cast / Q / DQ versions from 24 on."""
    rows, qdq = reviewed_history()
    top = onnx.defs.onnx_opset_version()
    for op, versions in rows.items():
        if op == "SimplifiedLayerNormalization":  # ORT's contrib op in the ONNX domain
            continue
        schema = sorted({onnx.defs.get_schema(op, v).since_version for v in range(1, top + 1) if onnx.defs.has(op, v)})
        assert versions == schema, f"{op}: opsets.rs lists {versions}, onnx {onnx.__version__} has {schema}"
    for op in ("Cast", "QuantizeLinear", "DequantizeLinear"):
        assert [v for v in rows[op] if v >= 24] == qdq, op
