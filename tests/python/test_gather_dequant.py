"""A `Gather` of an E8M0-scaled `DequantizeLinear` (rule `mx_gather_dequant` →
`com.mxfuse::MxGatherDequantize`): stacked MoE expert weights selected per token (transformers'
`batched_mm` experts as torch dynamo exports them: `gate_up_proj[expert_ids]` → bmm) and MX
embedding tables read by token id. Only the gathered slices are dequantized; the bits are those of
DequantizeLinear → Gather (checked against `onnx.reference` on the original model), in the plugin
EP and offline.
"""

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from test_mx_dequant import claimed_ops, ep_session, offline_session, rewrite, same_bits
from test_mxfp4 import e8m0_tensor, fp4_tensor, save

E, N, K = 8, 48, 64


def experts_model(path, out_type=TP.FLOAT, fp4=False):
    """Stacked experts W [E, N, K] (E4M3, or FLOAT4E2M1) blocked 32 along K (axis 2), gathered by
    expert id per (token, slot) and applied as transformers' batched_mm does:
    bmm(W[ids] [S, N, K], x [S, K, 1]) → [S, N, 1]. Outputs: the gathered weights and the bmm."""
    rng = np.random.default_rng(0)
    scales = rng.integers(118, 130, (E, N, K // 32)).astype(np.uint8)
    if fp4:
        wq = fp4_tensor("wq", rng.integers(0, 16, (E, N, K)))
    else:
        vals = rng.standard_normal((E, N, K)).astype(ml_dtypes.float8_e4m3fn)
        vals.reshape(-1)[:3] = np.array([448, -448, 2.0**-9], np.float32).astype(ml_dtypes.float8_e4m3fn)
        wq = numpy_helper.from_array(vals, "wq")
    inits = [wq, e8m0_tensor("ws", scales),
             numpy_helper.from_array(np.array([-1], np.int64), "last")]
    nodes = [
        helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], axis=2, block_size=32,
                         output_dtype=out_type, name="experts_dq"),
        helper.make_node("Gather", ["w", "ids"], ["wsel"], axis=0, name="select_experts"),
        helper.make_node("Unsqueeze", ["x", "last"], ["xcol"]),
        helper.make_node("MatMul", ["wsel", "xcol"], ["y"], name="bmm"),
    ]
    outs = ["wsel", "y"]
    inputs = [helper.make_tensor_value_info("x", out_type, ["s", K]),
              helper.make_tensor_value_info("ids", TP.INT64, ["s"])]
    return save(nodes, inits, inputs, [helper.make_tensor_value_info(o, out_type, None) for o in outs], path)


def embedding_model(path):
    """An MX embedding table [V, H] blocked 32 along H (axis 1), read by token ids [B, T] with
    negative ids (Gather-13 counts them from the back)."""
    rng = np.random.default_rng(1)
    table = rng.standard_normal((100, K)).astype(ml_dtypes.float8_e4m3fn)
    inits = [numpy_helper.from_array(table, "tq"),
             e8m0_tensor("ts", rng.integers(110, 140, (100, K // 32)))]
    nodes = [
        helper.make_node("DequantizeLinear", ["tq", "ts"], ["table"], axis=1, block_size=32,
                         output_dtype=TP.FLOAT16),
        helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0),
    ]
    return save(nodes, inits, [helper.make_tensor_value_info("ids", TP.INT32, ["b", "t"])],
                [helper.make_tensor_value_info("emb", TP.FLOAT16, None)], path)


def run_three_ways(src, tmp_path, lib, ep_devices, mxfuse_cli, feed):
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_gather_dequant"] == 1 and report["counts"]["mx_dequant"] == 0, report
    fused = [n.op_type for n in onnx.load(tmp_path / "fused.onnx").graph.node]
    assert "MxGatherDequantize" in fused and not {"DequantizeLinear", "Gather", "MxDequantize"} & set(fused), fused
    want = ReferenceEvaluator(onnx.load(src)).run(None, feed)
    ep = ep_session(src, ep_devices)
    assert sorted(claimed_ops(ep))[:2] == ["DequantizeLinear", "Gather"], claimed_ops(ep)
    online = ep.run(None, feed)
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, feed)
    return want, online, offline


@pytest.mark.parametrize("out_type", [TP.FLOAT, TP.FLOAT16])
def test_stacked_experts_gather_dequantizes_only_the_selected_experts(out_type, lib, ep_devices, mxfuse_cli, tmp_path):
    src = experts_model(tmp_path / "m.onnx", out_type)
    rng = np.random.default_rng(2)
    np_type = {TP.FLOAT: np.float32, TP.FLOAT16: np.float16}[out_type]
    ids = np.array([3, 0, 7, 3, -1], np.int64)  # repeats and a negative id
    feed = {"x": rng.standard_normal((5, K)).astype(np_type), "ids": ids}
    want, online, offline = run_three_ways(src, tmp_path, lib, ep_devices, mxfuse_cli, feed)
    assert same_bits(online[0], want[0]) and same_bits(offline[0], want[0])
    for got in (online[1], offline[1]):
        tol = 1e-5 if out_type == TP.FLOAT else 2e-2
        np.testing.assert_allclose(got.astype(np.float32), want[1].astype(np.float32), rtol=tol, atol=tol)


def test_stacked_fp4_experts_with_a_2d_index(lib, ep_devices, mxfuse_cli, tmp_path):
    """MXFP4 (FLOAT4E2M1) experts; the ids come as [tokens, top_k] (a 2-D index)."""
    src = experts_model(tmp_path / "m.onnx", TP.FLOAT, fp4=True)
    m = onnx.load(src)
    # Gather by [T, top_k] ids, no bmm (its operand would be 4-D): output [T, top_k, N, K].
    del m.graph.node[2:]
    m.graph.input[1].CopyFrom(helper.make_tensor_value_info("ids", TP.INT64, ["t", 2]))
    del m.graph.input[0]
    del m.graph.output[1]
    onnx.save(m, src)
    feed = {"ids": np.array([[1, 6], [6, 0], [7, 7]], np.int64)}
    want, online, offline = run_three_ways(src, tmp_path, lib, ep_devices, mxfuse_cli, feed)
    assert online[0].shape == (3, 2, N, K)
    assert same_bits(online[0], want[0]) and same_bits(offline[0], want[0])


def test_mx_embedding_table_read_by_token_ids(lib, ep_devices, mxfuse_cli, tmp_path):
    src = embedding_model(tmp_path / "m.onnx")
    feed = {"ids": np.array([[0, 99, -1], [5, 5, -100]], np.int32)}
    want, online, offline = run_three_ways(src, tmp_path, lib, ep_devices, mxfuse_cli, feed)
    assert online[0].shape == (2, 3, K)
    assert same_bits(online[0], want[0]) and same_bits(offline[0], want[0])


def test_out_of_range_id_is_an_error_not_a_crash(lib, ep_devices, tmp_path):
    src = embedding_model(tmp_path / "m.onnx")
    ep = ep_session(src, ep_devices)
    with pytest.raises(Exception, match="index 100 is out of range"):
        ep.run(None, {"ids": np.array([[100]], np.int32)})
    # The session still runs afterwards.
    assert ep.run(None, {"ids": np.array([[1]], np.int32)})[0].shape == (1, 1, K)


def test_gather_along_the_block_axis_is_refused_and_still_runs(mxfuse_cli, lib, tmp_path):
    """Blocks along the gathered axis would be split: the rule refuses, `mx_dequant` takes the
    DequantizeLinear, ORT's Gather the rest."""
    src = embedding_model(tmp_path / "m.onnx")
    m = onnx.load(src)
    m.graph.node[1].attribute[0].i = 1  # gather along H, the quantized axis
    m.graph.input[0].CopyFrom(helper.make_tensor_value_info("ids", TP.INT32, [2]))
    onnx.save(m, src)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_gather_dequant"] == 0 and report["counts"]["mx_dequant"] == 1, report
    assert any("gathers along the quantized axis" in r["reason"] for r in report["rejections"]), report["rejections"]
    feed = {"ids": np.array([3, 63], np.int32)}
    want = ReferenceEvaluator(onnx.load(src)).run(None, feed)[0]
    got = offline_session(tmp_path / "fused.onnx", lib).run(None, feed)[0]
    assert same_bits(got, want)


DEVICE_CHILD = """
import sys, numpy as np, onnxruntime as ort
from test_mx_dequant import claimed_ops, ep_session
lib, src = sys.argv[1], sys.argv[2]
ort.register_execution_provider_library("MxFuseExecutionProvider", lib)
devs = [d for d in ort.get_ep_devices() if d.ep_name == "MxFuseExecutionProvider"]
s = ep_session(src, devs)
print("claimed", sorted(claimed_ops(s)))
y = s.run(None, {"ids": np.array([[0, 99, -1], [5, 5, -100]], np.int32)})[0]
np.save(sys.argv[3], y)
"""


def test_device_placement_leaves_the_gather_to_ort(lib, ep_devices, tmp_path):
    """Under a device placement (the emulated device memory the GPU tests use) the rule is off:
    the DequantizeLinear is claimed as MxDequantize, ORT's CPU EP gathers, and the bits are the
    CPU device's."""
    import os
    import subprocess
    import sys
    src = embedding_model(tmp_path / "m.onnx")
    env = dict(os.environ, MXFUSE_EP_TEST_DEVICE_MEMORY="host",
               PYTHONPATH=os.path.dirname(__file__))
    out = subprocess.run([sys.executable, "-c", DEVICE_CHILD, lib, str(src), str(tmp_path / "y.npy")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "claimed ['DequantizeLinear']" in out.stdout, out.stdout
    feed = {"ids": np.array([[0, 99, -1], [5, 5, -100]], np.int32)}
    want = ep_session(src, ep_devices).run(None, feed)[0]
    assert same_bits(np.load(tmp_path / "y.npy"), want)
