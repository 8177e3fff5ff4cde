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

from test_mx_dequant import claimed_ops, e8m0_tensor, ep_session, offline_session, rewrite, same_bits, save
from test_mxfp4 import E2M1, fp4_tensor

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
import os, sys, numpy as np, onnxruntime as ort
from test_mx_dequant import claimed_ops, ep_session
lib, src, feeds, out = sys.argv[1:5]
ort.set_default_logger_severity(int(os.environ.get("MXFUSE_TEST_LOG_SEVERITY", "2")))
ort.register_execution_provider_library("MxFuseExecutionProvider", lib)
devs = [d for d in ort.get_ep_devices() if d.ep_name == "MxFuseExecutionProvider"]
s = ep_session(src, devs)
print("claimed", sorted(claimed_ops(s)))
np.save(out, s.run(None, dict(np.load(feeds)))[0])
"""


def emulated_device_process(lib, src, feed, tmp_path, log_severity=2):
    """Runs `src` on `feed` in a child process whose EP places sessions on the emulated device
    memory the GPU tests use; the finished process (stdout: what the EP claimed; the first output
    in tmp_path / "y.npy"; stderr: ORT's log from `log_severity` up, 1 = INFO)."""
    import os
    import subprocess
    import sys
    np.savez(tmp_path / "feeds.npz", **feed)
    env = dict(os.environ, MXFUSE_EP_TEST_DEVICE_MEMORY="host", PYTHONPATH=os.path.dirname(__file__),
               MXFUSE_TEST_LOG_SEVERITY=str(log_severity))
    return subprocess.run([sys.executable, "-c", DEVICE_CHILD, lib, str(src), str(tmp_path / "feeds.npz"),
                           str(tmp_path / "y.npy")], env=env, capture_output=True, text=True, timeout=120)


def run_on_emulated_device(lib, src, feed, tmp_path):
    """`src` on the emulated device (`emulated_device_process`): (what the EP claimed, as
    printed, and the first output)."""
    out = emulated_device_process(lib, src, feed, tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout, np.load(tmp_path / "y.npy")


def test_device_placement_takes_the_gather_too(lib, ep_devices, tmp_path):
    """Under a device placement (the emulated device memory the GPU tests use) the rule runs as on
    the CPU device: the Gather and its DequantizeLinear are claimed together (the device runs
    `MxGatherDequantize`: kernels/gpu/mx_gather.hip; here its host stand-in) and the bits are the
    CPU device's."""
    src = embedding_model(tmp_path / "m.onnx")
    feed = {"ids": np.array([[0, 99, -1], [5, 5, -100]], np.int32)}
    claimed, got = run_on_emulated_device(lib, src, feed, tmp_path)
    assert "claimed ['DequantizeLinear', 'Gather']" in claimed, claimed
    want = ep_session(src, ep_devices).run(None, feed)[0]
    assert same_bits(got, want)


def bmm_model(path, weight_first=True, fp4=False, out_type=TP.FLOAT, a_batch="s"):
    """Only the bmm's output leaves the graph, so the rule takes the MatMul too
    (`MxGatherMatMul`): weight first, W [E, N, K] blocked along K (axis 2), y = W[ids] @
    x.unsqueeze(-1) [S, N, 1]; weight second, W [E, K, N] blocked along axis 1, y =
    x.unsqueeze(1) @ W[ids] [S, 1, N]. Returns the path and the f32 dequantized experts."""
    rng = np.random.default_rng(3)
    shape, axis = ([E, N, K], 2) if weight_first else ([E, K, N], 1)
    sshape = list(shape)
    sshape[axis] //= 32
    scales = rng.integers(118, 130, sshape).astype(np.uint8)
    if fp4:
        codes = rng.integers(0, 16, shape)
        vals = E2M1[codes]
        wq = fp4_tensor("wq", codes)
    else:
        q = rng.standard_normal(shape).astype(ml_dtypes.float8_e4m3fn)
        vals = q.astype(np.float32)
        wq = numpy_helper.from_array(q, "wq")
    deq = vals * np.exp2(np.repeat(scales.astype(np.float64) - 127, 32, axis=axis)).astype(np.float32)
    inits = [wq, e8m0_tensor("ws", scales),
             numpy_helper.from_array(np.array([-1 if weight_first else 1], np.int64), "ax")]
    mm = ["wsel", "xu"] if weight_first else ["xu", "wsel"]
    nodes = [
        helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], axis=axis, block_size=32, output_dtype=out_type),
        helper.make_node("Gather", ["w", "ids"], ["wsel"], axis=0),
        helper.make_node("Unsqueeze", ["x", "ax"], ["xu"]),
        helper.make_node("MatMul", mm, ["y"], name="expert_bmm"),
    ]
    inputs = [helper.make_tensor_value_info("x", out_type, [a_batch, K]),
              helper.make_tensor_value_info("ids", TP.INT64, ["s"])]
    return save(nodes, [*inits], inputs, [helper.make_tensor_value_info("y", out_type, None)], path), deq


def bmm_oracle(deq, x, ids, weight_first):
    """f64: each sample's activation times its expert (the sample dim broadcast as MatMul's)."""
    s = max(len(x), len(ids))
    xs = np.broadcast_to(x.astype(np.float64), (s, x.shape[1]))
    ws = deq.astype(np.float64)[np.broadcast_to(ids, (s,)) % E]
    return np.einsum("snk,sk->sn", ws, xs)[:, :, None] if weight_first else np.einsum("skn,sk->sn", ws, xs)[:, None, :]


@pytest.mark.parametrize("weight_first", [True, False])
@pytest.mark.parametrize("fp4", [False, True])
@pytest.mark.parametrize("out_type", [TP.FLOAT, TP.FLOAT16])
def test_expert_bmm_reads_the_stacked_mx_weights_in_place(weight_first, fp4, out_type, lib, ep_devices, mxfuse_cli, tmp_path):
    src, deq = bmm_model(tmp_path / "m.onnx", weight_first, fp4, out_type)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_gather_dequant"] == 1, report
    fused = sorted(n.op_type for n in onnx.load(tmp_path / "fused.onnx").graph.node)
    assert fused == ["MxGatherMatMul", "Unsqueeze"], fused
    np_type = {TP.FLOAT: np.float32, TP.FLOAT16: np.float16}[out_type]
    rng = np.random.default_rng(4)
    ids = np.array([3, 0, 7, 3, -1, 5], np.int64)
    feed = {"x": rng.standard_normal((6, K)).astype(np_type), "ids": ids}
    want = bmm_oracle(deq, feed["x"], ids, weight_first)
    check_bmm(src, tmp_path / "fused.onnx", (lib, ep_devices), feed, want,
              ["DequantizeLinear", "Gather", "MatMul"])


def check_bmm(src, fused, ep, feed, want, claimed):
    """The bmm model `src` through the EP (`ep`: lib, devices; claiming the ops `claimed`) and
    the offline-rewritten `fused`: the same bits on both paths, within float order of the f64
    `want` (exact products, f32 accumulation: relative to the largest output; f16 adds its one
    rounding of the output). Returns the output."""
    lib, ep_devices = ep
    sess = ep_session(src, ep_devices)
    assert sorted(claimed_ops(sess)) == claimed, claimed_ops(sess)
    online = sess.run(None, feed)[0]
    offline = offline_session(fused, lib).run(None, feed)[0]
    assert same_bits(online, offline)
    assert online.shape == want.shape
    tol = 1e-5 if online.dtype == np.float32 else 2.0**-10
    assert np.abs(online.astype(np.float64) - want).max() <= tol * np.abs(want).max()
    return online


def test_expert_bmm_broadcasts_one_activation_over_the_ids(lib, ep_devices, mxfuse_cli, tmp_path):
    """MatMul broadcasts a batch of 1 against the S gathered experts; so does MxGatherMatMul."""
    src, deq = bmm_model(tmp_path / "m.onnx", True, False, TP.FLOAT, a_batch=1)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_gather_dequant"] == 1, report
    feed = {"x": np.random.default_rng(5).standard_normal((1, K)).astype(np.float32),
            "ids": np.array([6, 1, 6], np.int64)}
    want = ReferenceEvaluator(onnx.load(src)).run(None, feed)[0]
    for sess in (ep_session(src, ep_devices), offline_session(tmp_path / "fused.onnx", lib)):
        got = sess.run(None, feed)[0]
        assert got.shape == (3, N, 1)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_expert_bmm_the_gemm_cannot_take_stays_with_a_note(mxfuse_cli, lib, tmp_path):
    """Weight first but blocked along N (axis 1), not K: the gathered dequantize still fuses,
    the MatMul stays (ORT's), and the report says why."""
    src, _ = bmm_model(tmp_path / "m.onnx", True, False, TP.FLOAT)
    m = onnx.load(src)
    q = numpy_helper.to_array(m.graph.initializer[0])
    m.graph.initializer[1].CopyFrom(e8m0_tensor("ws", np.full((E, N // 48, K), 127, np.uint8)))
    m.graph.node[0].attribute[0].i = 1  # axis
    m.graph.node[0].attribute[1].i = 48  # block_size
    onnx.save(m, src)
    assert q.shape == (E, N, K)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    fused = sorted(n.op_type for n in onnx.load(tmp_path / "fused.onnx").graph.node)
    assert fused == ["MatMul", "MxGatherDequantize", "Unsqueeze"], fused
    notes = [n for f in report["fusions"] for n in f.get("notes", [])]
    assert any("MatMul stays" in n and "blocks of 32 along K" in n for n in notes), notes
    feed = {"x": np.ones((2, K), np.float32), "ids": np.array([1, 2], np.int64)}
    want = ReferenceEvaluator(onnx.load(src)).run(None, feed)[0]
    got = offline_session(tmp_path / "fused.onnx", lib).run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def moe_experts_model(path):
    """A whole MXFP8 MoE expert block as transformers' batched_mm exports it, per (token, slot)
    sample: tokens → MXFP8 (opset-24 chain) → bmm(Wgu[ids], x) → SwiGLU → MXFP8 →
    bmm(Wd[ids], act) → y; stacked E4M3 experts blocked 32 along K."""
    import test_mx_dequant as tmd
    from test_mx_dequant import mx_activation
    rng = np.random.default_rng(6)
    h, i = 64, 64
    nodes, inits = [], []

    def experts(name, n, k):
        inits.extend([numpy_helper.from_array(rng.standard_normal((E, n, k)).astype(ml_dtypes.float8_e4m3fn), name + "_q"),
                      e8m0_tensor(name + "_s", rng.integers(118, 126, (E, n, k // 32)))])
        nodes.append(helper.make_node("DequantizeLinear", [name + "_q", name + "_s"], [name], axis=2,
                                      block_size=32, output_dtype=TP.FLOAT))

    def quantize(x, out, prefix):
        n, t = [], []
        saved, tmd.K = tmd.K, h
        try:
            mx_activation(n, t, x, out=out, name=prefix + "_dq")
        finally:
            tmd.K = saved
        local = {"xb", "ab", "amax", "s32", "scale", "q", "blk", "ax", "c"}
        for nd in n:
            for lst in (nd.input, nd.output):
                for j, v in enumerate(lst):
                    if v in local:
                        lst[j] = f"{prefix}_{v}"
        for tt in t:
            tt.name = f"{prefix}_{tt.name}"
        nodes.extend(n)
        inits.extend(t)

    quantize("x", "xq", "x")
    experts("wgu", 2 * i, h)
    experts("wd", h, i)
    inits += [numpy_helper.from_array(np.array([-1], np.int64), "last"),
              numpy_helper.from_array(np.array([i, i], np.int64), "halves")]
    nodes += [
        helper.make_node("Gather", ["wgu", "ids"], ["wgu_sel"], axis=0),
        helper.make_node("Unsqueeze", ["xq", "last"], ["xcol"]),
        helper.make_node("MatMul", ["wgu_sel", "xcol"], ["gu3"]),
        helper.make_node("Squeeze", ["gu3", "last"], ["gu"]),
        helper.make_node("Split", ["gu", "halves"], ["gate", "up"], axis=-1),
        helper.make_node("Sigmoid", ["gate"], ["sg"]),
        helper.make_node("Mul", ["gate", "sg"], ["silu"]),
        helper.make_node("Mul", ["silu", "up"], ["act"]),
    ]
    quantize("act", "actq", "a")
    nodes += [helper.make_node("Gather", ["wd", "ids"], ["wd_sel"], axis=0),
              helper.make_node("Unsqueeze", ["actq", "last"], ["acol"]),
              helper.make_node("MatMul", ["wd_sel", "acol"], ["y3"]),
              helper.make_node("Squeeze", ["y3", "last"], ["y"])]
    return save(nodes, inits, [helper.make_tensor_value_info("x", TP.FLOAT, ["s", h]),
                               helper.make_tensor_value_info("ids", TP.INT64, ["s"])],
                [helper.make_tensor_value_info("y", TP.FLOAT, None)], path)


def test_mxfp8_moe_expert_block_in_batched_mm_spelling(lib, ep_devices, mxfuse_cli, tmp_path):
    src = moe_experts_model(tmp_path / "m.onnx")
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_gather_dequant"] == 2 and report["counts"]["swiglu_mxquant_matmul"] == 1, report
    fused = [n.op_type for n in onnx.load(tmp_path / "fused.onnx").graph.node]
    assert fused.count("MxGatherMatMul") == 2 and "SwiGluMxQuant" in fused and "Gather" not in fused, fused
    rng = np.random.default_rng(7)
    feed = {"x": rng.standard_normal((6, 64)).astype(np.float32), "ids": np.array([1, 5, 5, 0, 7, 2])}
    want = ReferenceEvaluator(onnx.load(src)).run(None, feed)[0]
    online = ep_session(src, ep_devices).run(None, feed)[0]
    offline = offline_session(tmp_path / "fused.onnx", lib).run(None, feed)[0]
    assert same_bits(online, offline)
    # Float order only (the quantizers' inputs agree to within it, and a rare E4M3 step there
    # would show as more: none at this seed).
    np.testing.assert_allclose(online, want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_device_placement_runs_the_expert_bmm_online_and_offline(lib, ep_devices, mxfuse_cli, tmp_path):
    """The expert bmm under a device placement (the emulated device memory): online the rule takes
    it as on the CPU device, and an offline-rewritten model's MxGatherMatMul is claimed as it is
    (the device kernels: kernels/gpu/mx_gather.hip); the bits are the CPU device's."""
    src, _ = bmm_model(tmp_path / "m.onnx", True, False, TP.FLOAT)
    rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    feed = {"x": np.linspace(-2, 2, 3 * 64, dtype=np.float32).reshape(3, 64), "ids": np.array([7, 0, 7])}
    want = ep_session(tmp_path / "fused.onnx", ep_devices).run(None, feed)[0]
    claimed, got = run_on_emulated_device(lib, tmp_path / "fused.onnx", feed, tmp_path)
    assert "claimed ['MxGatherMatMul']" in claimed, claimed
    assert same_bits(got, want)
    claimed, got = run_on_emulated_device(lib, src, feed, tmp_path)
    assert "'Gather'" in claimed and "'MatMul'" in claimed, claimed
    assert same_bits(got, want)
