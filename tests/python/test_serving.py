"""The plugin EP inside a serving process (acceptance probe 8), on the CPU device and on the
emulated device placement (`MXFUSE_EP_TEST_DEVICE_MEMORY=host`, a child process): one session run
from several threads at once with different token counts, sessions of two models run at once,
the session and run options a serving stack sets, IOBinding into preallocated CPU buffers,
`run_async`, and the two documented refusals (`disable_cpu_ep_fallback` on a decoder,
`optimized_model_filepath`, `ep.context_enable`). Every run must give the bits of a plain single-threaded run; that
run equals `onnx.reference` within float order. Nothing here broke when probed; these keep it so.
The 200× session create / destroy RSS check is `provider/bench/session_churn.py` (not CI).
"""

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import onnx
import onnx.utils
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

from conftest import EP_NAME, ROOT

FIXTURES = ROOT / "models" / "fixtures"
DECODER = FIXTURES / "dynamo_f32_floor.onnx"  # standard MXFP8, hidden 64
MOE = FIXTURES / "moe_mxfp4_experts.onnx"  # stacked MXFP4 experts
TOKENS = (1, 3, 16, 37)


def feed(tokens, seed=0):
    x = np.random.default_rng(seed + tokens).standard_normal((1, tokens, 64)).astype(np.float32)
    return {"hidden_states": x}


def session(path, devices, options=None, config=None, **settings):
    so = ort.SessionOptions()
    for k, v in (config or {}).items():
        so.add_session_config_entry(k, v)
    for k, v in settings.items():
        setattr(so, k, v)
    so.add_provider_for_devices(devices, options or {})
    return ort.InferenceSession(str(path), so)


def same(a, b):
    return len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x.view(np.uint32), y.view(np.uint32))
                                    for x, y in zip(a, b))


def with_claimed_outputs(path, dst):
    """`path` with the last MatMul's output (a node the EP runs) as a second graph output."""
    m = onnx.load(path)
    last = [n.output[0] for n in m.graph.node if n.op_type == "MatMul"][-1]
    m.graph.output.append(onnx.helper.make_tensor_value_info(last, onnx.TensorProto.FLOAT, None))
    onnx.save(m, dst)
    return dst


def check_threads(devices):
    """One session per model, 6 threads alternating between them, each running every token
    count: the single-threaded bits."""
    sessions = [session(p, devices) for p in (DECODER, MOE)]
    want = [{t: s.run(None, feed(t)) for t in TOKENS} for s in sessions]
    bad = []

    def worker(i):
        s, w = sessions[i % 2], want[i % 2]
        for r in range(len(TOKENS)):
            t = TOKENS[(i + r) % len(TOKENS)]
            if not same(s.run(None, feed(t)), w[t]):
                bad.append((i, t))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, bad


def check_options(devices, tmp):
    """Session and run options a server sets keep the bits; outputs of claimed nodes bound to
    preallocated CPU buffers; `terminate` fails one run only; `run_async`."""
    path = with_claimed_outputs(DECODER, tmp / "two_outputs.onnx")
    f = feed(16)
    base = session(path, devices).run(None, f)
    ref = ReferenceEvaluator(str(path)).run(None, f)
    for got, r in zip(base, ref):
        np.testing.assert_allclose(got, r, rtol=1e-5, atol=1e-5 * np.abs(r).max())
    L = ort.GraphOptimizationLevel
    variants = [
        dict(intra_op_num_threads=1),
        dict(execution_mode=ort.ExecutionMode.ORT_PARALLEL, inter_op_num_threads=2, intra_op_num_threads=2),
        dict(enable_mem_pattern=False, enable_cpu_mem_arena=False, enable_mem_reuse=False),
        dict(graph_optimization_level=L.ORT_DISABLE_ALL),
        dict(graph_optimization_level=L.ORT_ENABLE_BASIC),
        dict(log_severity_level=0, log_verbosity_level=1),
        dict(options={"threads": "2"}, config={"session.intra_op.allow_spinning": "0"}),
        dict(config={"session.set_denormal_as_zero": "1", "session.disable_prepacking": "1"}),
    ]
    for v in variants:
        assert same(session(path, devices, **v).run(None, f), base), v
    # The EP named in `providers` (with options) and picked by a device selection policy.
    named = ort.InferenceSession(str(path), providers=[(EP_NAME, {"threads": "1"}), "CPUExecutionProvider"])
    assert named.get_providers()[0] == EP_NAME and same(named.run(None, f), base)
    so = ort.SessionOptions()
    so.set_provider_selection_policy(ort.OrtExecutionProviderDevicePolicy.PREFER_CPU)
    picked = ort.InferenceSession(str(path), so)
    assert picked.get_providers()[0] == EP_NAME and same(picked.run(None, f), base)

    s = session(path, devices, intra_op_num_threads=2)
    io = s.io_binding()
    io.bind_cpu_input("hidden_states", f["hidden_states"])
    outs = [np.full_like(b, np.nan) for b in base]
    for o, buf in zip(s.get_outputs(), outs):
        io.bind_output(o.name, "cpu", 0, np.float32, list(buf.shape), buf.ctypes.data)
    s.run_with_iobinding(io)
    assert same(outs, base)

    stop = ort.RunOptions()
    stop.terminate = True
    with pytest.raises(Exception, match="terminate flag"):
        s.run(None, f, stop)
    loud = ort.RunOptions()
    loud.log_severity_level = 0
    assert same(s.run(None, f, loud), base)

    done, results = threading.Event(), {}

    def callback(res, i, err):
        results[i] = (res, err)
        if len(results) == 4:
            done.set()

    for i in range(4):
        s.run_async(None, f, callback, i)
    assert done.wait(60)
    assert all(err == "" and same(res, base) for res, err in results.values()), results


def check_refusals(devices, tmp):
    """`disable_cpu_ep_fallback`: a model of fusable blocks alone runs, a decoder (its final norm
    stays with ORT) is ORT's refusal; `optimized_model_filepath` is ORT's refusal to serialize
    compiled nodes; `ep.context_enable` the EP's (docs/provider.md)."""
    blocks = tmp / "blocks.onnx"
    m = onnx.load(DECODER)
    outs = [n.output[0] for n in m.graph.node if n.op_type == "MatMul"][:3]
    onnx.utils.extract_model(str(DECODER), str(blocks), ["hidden_states"], outs)
    strict = {"session.disable_cpu_ep_fallback": "1"}
    got = session(blocks, devices, config=strict).run(None, feed(3))
    for g, r in zip(got, ReferenceEvaluator(str(blocks)).run(None, feed(3))):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5 * np.abs(r).max())
    with pytest.raises(Exception, match="fallback to CPU EP has been explicitly disabled"):
        session(DECODER, devices, config=strict)
    with pytest.raises(Exception, match="contains compiled nodes"):
        session(DECODER, devices, optimized_model_filepath=str(tmp / "optimized.onnx"))
    # Was ORT's "OrtEp::Compile() returned a NULL EPContext node".
    with pytest.raises(Exception, match="ep.context_enable=1 asks for an EPContext model, which "
                                        "MxFuseExecutionProvider does not write.*mxfuse rewrite"):
        session(DECODER, devices, config={"ep.context_enable": "1", "ep.context_file_path": str(tmp / "ctx.onnx")})
    assert not (tmp / "ctx.onnx").exists()
    # An ORT-format file: ORT assigns our nodes without compiling them, the EP is not told.
    with pytest.raises(Exception, match="Failed to find kernel for"):
        session(DECODER, devices, optimized_model_filepath=str(tmp / "optimized.ort"))


def run_all(devices, tmp):
    check_threads(devices)
    check_options(devices, tmp)
    check_refusals(devices, tmp)


def test_serving_on_the_cpu_device(ep_devices, tmp_path):
    run_all(ep_devices, tmp_path)


CHILD = """
import sys
from pathlib import Path
import onnxruntime as ort
import test_serving
lib, tmp = sys.argv[1:3]
ort.set_default_logger_severity(3)
ort.register_execution_provider_library(test_serving.EP_NAME, lib)
devices = [d for d in ort.get_ep_devices() if d.ep_name == test_serving.EP_NAME]
assert devices[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT).name == "MxFuse_GPU"  # the emulated device
test_serving.run_all(devices, Path(tmp))
print("serving checks passed")
"""


def test_serving_on_the_emulated_device_placement(lib, tmp_path):
    """The same checks with every fused node on the device program (host memory posing as GPU
    memory: ORT's Memcpy nodes, our allocator and data transfer, the device executor)."""
    env = dict(os.environ, MXFUSE_EP_TEST_DEVICE_MEMORY="host", PYTHONPATH=os.path.dirname(__file__))
    out = subprocess.run([sys.executable, "-c", CHILD, lib, str(tmp_path)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "serving checks passed" in out.stdout, out.stderr[-3000:]


@pytest.mark.parametrize("name", ["dynamo_f32_floor", "llama_powdiv_silu_two_mm_rceil_mul",
                                  "skip_simplified_quark_gemma_add1", "moe_mxfp4_experts"])
def test_every_optimization_level_claims_the_same_nodes_with_the_rewrites_bits(name, lib, ep_devices, mxfuse_cli,
                                                                                tmp_path):
    """docs/provider.md: ORT's level-1 rewrites run before the EP's GetCapability and leave these
    norms (decomposed Pow / Div, SkipSimplifiedLayerNormalization) and quantizers alone, its
    level-2+ fusions (e.g. SimplifiedLayerNormalization of an unclaimed final norm) run on ORT's
    nodes only; so at every level the EP claims the same nodes, and its outputs are the offline
    rewrite's (custom-op library, same level) bit for bit."""
    from test_mx_dequant import claimed_ops, offline_session, rewrite
    src = FIXTURES / f"{name}.onnx"
    rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    f = feed(5)
    claims = set()
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                  ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, ort.GraphOptimizationLevel.ORT_ENABLE_LAYOUT,
                  ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        s = session(src, ep_devices, config={"session.record_ep_graph_assignment_info": "1"},
                    graph_optimization_level=level)
        claims.add(tuple(sorted(claimed_ops(s))))
        assert same(s.run(None, f), offline_session(tmp_path / "fused.onnx", lib, level).run(None, f)), level
    assert len(claims) == 1 and claims.pop(), claims
