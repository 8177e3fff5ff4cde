"""Models on the EP's device placement (the emulated device memory the GPU tests use, which
runs everything of the GPU path but the kernel launches) that the CPU device runs.

ONNX Runtime copies a value between one of its CPU nodes and one of our device nodes with
`MemcpyFromHost` / `MemcpyToHost`, whose 1.31 schema has no `float8e8m0`: a claimed node reading
an E8M0 scale that a CPU node computes (the standalone `QuantizeLinear` / `DequantizeLinear` of
an MXFP8 quantizer whose scale formula the rules refuse, here an RCEIL scale computed in float16)
made session creation fail with ORT's "Type 'tensor(float8e8m0)' of input parameter ... of
operator (MemcpyFromHost) ... is invalid" (new-user probe 6; `provider/src/gpu/boundary.rs`).
"""

import numpy as np
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from test_gather_dequant import emulated_device_process
from test_mx_dequant import ep_session, rewrite, same_bits, save

K, N = 64, 48


def f16_scale_model(path):
    """x f16 [m, K] → MXFP8 (RCEIL) with the scale computed in float16 (`Div(amax, 448)` in
    f16 + round up, which the rules refuse: the quotient is rounded to f16 first, no kernel rule) →
    DequantizeLinear → MatMul with an f16 weight. The EP claims the QuantizeLinear and the
    DequantizeLinear on their own; ORT's CPU EP computes the E8M0 scale (`Cast`)."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(np.array([0, K // 32, 32], np.int64), "blk"),
             numpy_helper.from_array(np.array([-1], np.int64), "ax"),
             numpy_helper.from_array(np.array(448.0, np.float16), "c"),
             numpy_helper.from_array((rng.standard_normal((K, N)) * 0.1).astype(np.float16), "w")]
    nodes = [
        helper.make_node("Reshape", ["x", "blk"], ["xb"]),
        helper.make_node("Abs", ["xb"], ["ab"]),
        helper.make_node("ReduceMax", ["ab", "ax"], ["amax"], keepdims=0),
        helper.make_node("Div", ["amax", "c"], ["s16"]),
        helper.make_node("Cast", ["s16"], ["scale"], to=TP.FLOAT8E8M0, round_mode="up", saturate=1),
        helper.make_node("QuantizeLinear", ["x", "scale"], ["q"], axis=-1, block_size=32,
                         output_dtype=TP.FLOAT8E4M3FN, name="quant"),
        helper.make_node("DequantizeLinear", ["q", "scale"], ["xd"], axis=-1, block_size=32,
                         output_dtype=TP.FLOAT16, name="dequant"),
        helper.make_node("MatMul", ["xd", "w"], ["y"]),
    ]
    return save(nodes, inits, [helper.make_tensor_value_info("x", TP.FLOAT16, ["m", K])],
                [helper.make_tensor_value_info("y", TP.FLOAT16, ["m", N])], path)


FEED = {"x": (np.random.default_rng(1).standard_normal((5, K)) * 3).astype(np.float16)}


def test_standard_quantizer_reading_a_host_e8m0_scale_is_a_clear_session_error(lib, ep_devices, tmp_path):
    """The claimed QuantizeLinear can run nowhere on the device placement (ORT cannot copy its
    scale to the device, and its CPU EP has no E8M0 QuantizeLinear): session creation fails with
    the EP's reason and what to do. The CPU device runs the model."""
    src = f16_scale_model(tmp_path / "m.onnx")
    ep_session(src, ep_devices).run(None, FEED)
    out = emulated_device_process(lib, src, FEED, tmp_path)
    assert out.returncode != 0
    err = out.stderr
    assert "MemcpyFromHost) in node" not in err, err[-2000:]
    assert ("quant on the device placement: quant reads the float8e8m0 tensor 'scale' that Cast -> scale "
            "(left to ORT's CPU EP) computes") in err, err[-2000:]
    assert "Run this model on the CPU device" in err, err[-2000:]


def test_offline_rewrite_reading_a_host_e8m0_scale_runs_on_ort_with_the_cpu_device_bits(
        lib, ep_devices, mxfuse_cli, tmp_path):
    """Rewritten offline the two nodes are `com.mxfuse` ops (`MxQuantizeLinear`, `MxDequantize`)
    whose kernels the EP publishes for ORT's CPU EP: on the device placement the EP leaves both
    to ORT, saying why in one WARNING line, and the outputs are the CPU device's bits."""
    src = f16_scale_model(tmp_path / "m.onnx")
    rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    want = ep_session(tmp_path / "fused.onnx", ep_devices).run(None, FEED)[0]
    out = emulated_device_process(lib, tmp_path / "fused.onnx", FEED, tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "claimed []" in out.stdout, out.stdout
    warnings = [line for line in out.stderr.splitlines() if "left to ORT's CPU EP" in line]
    assert warnings and all("mxfuse: 2 fused subgraph(s) left to ORT's CPU EP on the device placement" in line
                            and "(the kernel the EP publishes)" in line for line in warnings), out.stderr
    assert same_bits(np.load(tmp_path / "y.npy"), want)


def test_info_summary_names_the_placement_and_weight_only_runs_there(lib, ep_devices, tmp_path):
    """A weight-only MX MatMul on the device placement: the EP claims the MatMul with its weight's
    DequantizeLinear (rule mx_weight_matmul; the device runs the weight-only MxMatMul), and its
    INFO summary says where the claimed nodes run."""
    import test_weight_only as wo
    src, _, _ = wo.model(tmp_path / "m.onnx", "matmul", TP.FLOAT, TP.FLOAT8E4M3FN, 3, np.random.default_rng(2))
    feed = {"x": np.random.default_rng(2).standard_normal((3, wo.K)).astype(np.float32)}
    out = emulated_device_process(lib, src, feed, tmp_path, log_severity=1)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "claimed ['DequantizeLinear', 'MatMul']" in out.stdout, out.stdout
    summary = [line for line in out.stderr.splitlines() if "mxfuse: claiming " in line]
    assert summary, out.stderr[-2000:]
    assert all("run on the test device memory placement" in line for line in summary), summary
