"""Quark fake-quantized stacked experts above other constants' 64 MiB, as a real MoE layer's
(`[32, 1536, 6144]` f32 is 1.2 GB): the Quark weight cap (4 GiB by default; setting
`quark_weight_max_mib`, `mxfuse rewrite --set` and the EP's provider option of that name) lets
rule `mx_gather_dequant` read, quantize and check them offline (external data here) and in the
plugin EP (ORT's bytes read in place). One 72 MiB f32 stack; the oracle is the numpy Quark
kernel on the selected experts, the products in f64.
"""

import json
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from test_gather_quark import fake_quant, float_experts
from test_mx_dequant import claimed_ops, ep_session, offline_session, same_bits
from test_weight_only import quark_oracle_ops

E, N, K = 9, 2048, 1024  # 72 MiB of f32


@pytest.fixture(scope="module")
def experts():
    return float_experts(np.random.default_rng(20), (E, N, K))


def bmm_model(path, w):
    """y [S, N, 1] = Gather(MXQuantizeDequantize(w, axis 2), ids) @ x.unsqueeze(-1); `w` stored
    as external data next to `path`."""
    nodes = [fake_quant("w", "wf", 2, "experts_fq"),
             helper.make_node("Gather", ["wf", "ids"], ["wsel"], axis=0, name="select_experts"),
             helper.make_node("Unsqueeze", ["x", "ax"], ["xu"]),
             helper.make_node("MatMul", ["wsel", "xu"], ["y"], name="expert_bmm")]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([-1], np.int64), "ax")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TP.INT64, ["s"]),
                                       helper.make_tensor_value_info("x", TP.FLOAT, ["s", K])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    opsets = [helper.make_opsetid("", 24), helper.make_opsetid("com.amd.quark", 1)]
    onnx.save(helper.make_model(g, opset_imports=opsets, ir_version=11), path,
              save_as_external_data=True, location=path.name + ".data", size_threshold=1024)
    return path


def rewrite(cli, src, dst, *settings):
    report = str(dst) + ".json"
    args = [a for s in settings for a in ("--set", s)]
    subprocess.run([cli, "rewrite", str(src), "-o", str(dst), "--report", report, *args], check=True,
                   capture_output=True)
    return json.loads(open(report).read())


FEED = {"ids": np.array([8, 0, 4, 8, -1]),
        "x": np.random.default_rng(21).standard_normal((5, K)).astype(np.float32)}


def oracle(w):
    """f64 products of the selected experts, fake-quantized by the numpy Quark kernel."""
    _, quark_qdq_numpy = quark_oracle_ops()
    sel = w[FEED["ids"] % E]
    deq = quark_qdq_numpy(sel, 2).astype(np.float64)
    return np.einsum("snk,sk->sn", deq, FEED["x"].astype(np.float64))[:, :, None]


def test_quark_experts_over_64_mib_are_fused_offline_and_in_the_ep(experts, lib, ep_devices, mxfuse_cli,
                                                                    tmp_path):
    src = bmm_model(tmp_path / "m.onnx", experts)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_gather_dequant"] == 1, report["rejections"]
    fused = onnx.load(tmp_path / "fused.onnx", load_external_data=False)
    assert sorted(n.op_type for n in fused.graph.node) == ["MxGatherMatMul", "Unsqueeze"]
    sess = ep_session(src, ep_devices)
    assert sorted(claimed_ops(sess)) == ["Gather", "MXQuantizeDequantize", "MatMul"], claimed_ops(sess)
    online = sess.run(None, FEED)[0]
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, FEED)[0]
    assert same_bits(online, offline)
    want = oracle(experts)
    # Exact products, f32 accumulation: float order (docs/ops.md).
    assert np.abs(online.astype(np.float64) - want).max() <= 1e-5 * np.abs(want).max()


def test_quark_experts_over_the_cap_or_inexact_say_why_and_still_run(experts, lib, ep_devices, mxfuse_cli,
                                                                     tmp_path):
    src = bmm_model(tmp_path / "m.onnx", experts)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx", "quark_weight_max_mib=64")
    why = [r["reason"] for r in report["rejections"] if r["rule"] == "mx_gather_dequant"]
    assert any("'w' is 72 MiB, over the 64 MiB the rewrite reads for a Quark weight "
               "(setting quark_weight_max_mib)" in r for r in why), why
    # The EP with the same option: the fake quant alone is claimed, as an activation quantizer
    # (MxQuantize of every expert per run), the Gather and bmm left to ORT; the outputs are
    # still the model's.
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(ep_devices, {"quark_weight_max_mib": "64"})
    sess = ort.InferenceSession(str(src), so)
    assert claimed_ops(sess) == ["MXQuantizeDequantize"], claimed_ops(sess)
    online = sess.run(None, FEED)[0]
    want = oracle(experts)
    assert np.abs(online.astype(np.float64) - want).max() <= 1e-5 * np.abs(want).max()
    # An Inf in expert 6: Quark passes it through, E4M3 has no Inf.
    w = experts.copy()
    w[6, 100, 40] = np.inf
    src = bmm_model(tmp_path / "inf.onnx", w)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused_inf.onnx")
    why = [r["reason"] for r in report["rejections"] if r["rule"] == "mx_gather_dequant"]
    assert any("not exactly an MXFP8 weight: element [6, 100, 32]" in r and "Inf" in r for r in why), why
