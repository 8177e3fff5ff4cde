"""libmxfuse_ep.so in ONNX Runtime 1.31: plugin EP vs custom-op library vs references.

Models are built here with onnx.helper or taken from models/fixtures/samples (copies of ../shared/samples; tiny, fast). Outputs of
FLOAT8E4M3FN / FLOAT8E8M0 type are Cast to float inside the model (exact for both types), since
numpy cannot hold E8M0.
"""

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

from conftest import EP_NAME

# Committed copies of the small real samples of ../shared/samples (the dynamo export and the
# opset-24 standard MXFP8 quantizer among them), so a bare checkout runs these tests.
SAMPLES = Path(__file__).resolve().parents[2] / "models" / "fixtures" / "samples"
STD_QUANT = SAMPLES / "mxfp8_dynamic_quant_opset24.onnx"
FLOAT_BLOCK = SAMPLES / "rmsnorm_swiglu_block_opset23.onnx"


def floatify_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Casts every graph output to float (exact for the fp8 types)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    outs = list(m.graph.output)
    del m.graph.output[:]
    for o in outs:
        m.graph.node.append(helper.make_node("Cast", [o.name], [o.name + "_f"], to=TP.FLOAT))
        m.graph.output.append(helper.make_tensor_value_info(o.name + "_f", TP.FLOAT, None))
    return m


def mxquantize_model(k=64, **attrs) -> onnx.ModelProto:
    """The offline rewrite of the standard quant sample: one com.mxfuse::MxQuantize."""
    x = helper.make_tensor_value_info("x", TP.FLOAT, ["M", k])
    q = helper.make_tensor_value_info("q", TP.FLOAT8E4M3FN, None)
    s = helper.make_tensor_value_info("scale", TP.FLOAT8E8M0, None)
    node = helper.make_node("MxQuantize", ["x"], ["q", "scale"], domain="com.mxfuse", **attrs)
    g = helper.make_graph([node], "mxq", [x], [q, s])
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 24), helper.make_opsetid("com.mxfuse", 1)], ir_version=11
    )


def ep_session(model, ep_devices, options=None, record=True):
    so = ort.SessionOptions()
    if record:
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(ep_devices, options or {})
    return ort.InferenceSession(model.SerializeToString(), so)


def custom_op_session(model, lib):
    so = ort.SessionOptions()
    so.register_custom_ops_library(lib)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def cpu_session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def assignment(sess):
    """{ep name: [op types]} of ORT's node-to-EP assignment."""
    out = {}
    for sg in sess.get_provider_graph_assignment_info():
        out.setdefault(sg.ep_name, []).extend(n.op_type for n in sg.get_nodes())
    return out


def activations(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * 3
    x[0, :32] = 0.0  # an all-zero block
    return x


def test_ep_runs_standard_mxfp8_quant_that_cpu_ep_refuses(ep_devices):
    model = floatify_outputs(onnx.load(STD_QUANT))
    with pytest.raises(Exception, match="(?i)implementation|NOT_IMPLEMENTED"):
        cpu_session(model)
    sess = ep_session(model, ep_devices)
    ours = sorted(assignment(sess)[EP_NAME])
    assert ours == sorted(["Reshape", "Abs", "ReduceMax", "Mul", "Cast", "QuantizeLinear"])
    x = activations((4, 64))
    got = sess.run(None, {"x": x})
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)  # bit-exact (floor rule, spec §test vectors)


def test_offline_rewritten_model_runs_with_custom_op_library_and_with_ep(lib, ep_devices):
    original = floatify_outputs(onnx.load(STD_QUANT))
    rewritten = floatify_outputs(mxquantize_model())
    x = activations((4, 64), seed=1)
    fused_online = ep_session(original, ep_devices).run(None, {"x": x})
    offline_custom_ops = custom_op_session(rewritten, lib).run(None, {"x": x})
    ep_on_rewritten = ep_session(rewritten, ep_devices)
    assert assignment(ep_on_rewritten)[EP_NAME] == ["MxQuantize"]
    offline_ep = ep_on_rewritten.run(None, {"x": x})
    for a, b, c in zip(fused_online, offline_custom_ops, offline_ep):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize(
    "attrs",
    [{"block_size": 16}, {"scale_rule": "ceil"}, {"nan_policy": "drop"}, {"scale_rule": 3}],
)
def test_malformed_attribute_is_an_ort_error(lib, ep_devices, attrs):
    model = floatify_outputs(mxquantize_model(**attrs))
    for make in (lambda: custom_op_session(model, lib), lambda: ep_session(model, ep_devices)):
        with pytest.raises(Exception) as e:
            sess = make()
            sess.run(None, {"x": activations((2, 64))})
        assert "mxfuse" in str(e.value) or "attribute" in str(e.value)


def test_bad_shape_at_run_time_is_an_ort_error(lib):
    model = floatify_outputs(mxquantize_model(k=48))
    sess = custom_op_session(model, lib)
    with pytest.raises(Exception, match="mxfuse"):
        sess.run(None, {"x": np.zeros((2, 48), np.float32)})


def test_nothing_to_fuse_stays_on_cpu_ep_with_identical_outputs(ep_devices):
    model = onnx.load(FLOAT_BLOCK)
    sess = ep_session(model, ep_devices)
    assert EP_NAME not in assignment(sess)
    rng = np.random.default_rng(2)
    feed = {i.name: rng.standard_normal((2, 8, 64)).astype(np.float32) for i in model.graph.input}
    for a, b in zip(sess.run(None, feed), cpu_session(model).run(None, feed)):
        np.testing.assert_array_equal(a, b)


def test_disabled_rule_is_not_claimed(ep_devices):
    model = floatify_outputs(onnx.load(STD_QUANT))
    # Unfused and unclaimed, the E8M0 quantizer has no CPU kernel: session creation must fail
    # cleanly.
    with pytest.raises(Exception, match="(?i)implementation|NOT_IMPLEMENTED"):
        ep_session(model, ep_devices, {"disable_rules": "mxquant,mx_quant_linear"})


def test_without_the_fusion_the_fallback_runs_the_quantizer_alone(ep_devices):
    """With `mxquant` off, the fallback `mx_quant_linear` takes the lone QuantizeLinear (its
    scale computed by ORT's own Abs/ReduceMax/Mul/Cast), `mx_dequant` the DequantizeLinear: the
    same bytes as the fused MxQuantize."""
    model = floatify_outputs(onnx.load(STD_QUANT))
    x = activations((4, 64), seed=5)
    fused = ep_session(model, ep_devices).run(None, {"x": x})
    alone = ep_session(model, ep_devices, {"disable_rules": "mxquant"}).run(None, {"x": x})
    for a, b in zip(fused, alone):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_unknown_provider_option_is_an_error(ep_devices, capfd):
    # onnxruntime's Python layer prints the EP's error and falls back to the CPU EP.
    sess = ep_session(floatify_outputs(mxquantize_model()), ep_devices, {"no_such_option": "1"})
    assert EP_NAME not in sess.get_providers()
    assert 'unknown provider option "no_such_option"' in capfd.readouterr().out


def test_changing_a_provider_option_on_a_live_session_is_an_error(ep_devices):
    """Was silently accepted (the EP had no SetDynamicOptions): threads, rules and the rules'
    settings are fixed at session creation. Keys that are not ours pass (ORT hands every EP the
    same keys)."""
    sess = ep_session(floatify_outputs(mxquantize_model()), ep_devices)
    # Also with the EP-name prefix `ort` (Rust) callers write, which passed silently.
    for key in ("threads", "rule.mxquant", "scale_rule", "MxFuseExecutionProvider.threads"):
        with pytest.raises(Exception, match=f'provider option "{key}" cannot be changed on a live session'):
            sess.set_ep_dynamic_options({key: "1"})
    sess.set_ep_dynamic_options({"ep.dynamic.workload_type": "Efficient"})
    assert sess.run(None, {"x": activations((2, 64))})[0].shape == (2, 64)


def test_eight_threads_two_hundred_runs_identical(ep_devices):
    model = floatify_outputs(onnx.load(STD_QUANT))
    sess = ep_session(model, ep_devices, record=False)
    x = activations((4, 64), seed=3)
    want = sess.run(None, {"x": x})
    failures = []

    def worker():
        for _ in range(200):
            got = sess.run(None, {"x": x})
            if not all(np.array_equal(g, w) for g, w in zip(got, want)):
                failures.append(got)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


# Runs in a child process: it unregisters the EP library, which the other tests of this process
# keep registered.
UNREGISTER_WITH_A_LIVE_SESSION = """
import sys, numpy as np, onnxruntime as ort
lib, model, name = sys.argv[1:]
x = np.arange(4 * 64, dtype=np.float32).reshape(4, 64) / 7 - 18
def session():
    ort.register_execution_provider_library(name, lib)
    so = ort.SessionOptions()
    so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == "MxFuseExecutionProvider"], {})
    return ort.InferenceSession(model, so)
live = session()
want = live.run(None, {"x": x})
ort.unregister_execution_provider_library(name)
after = live.run(None, {"x": x})
del live
again = session().run(None, {"x": x})
assert all(np.array_equal(a, b) and np.array_equal(a, c) for a, b, c in zip(want, after, again))
print("survived")
"""


@pytest.mark.parametrize("name", [EP_NAME, "another_name"])
def test_unregistering_the_library_under_a_live_session_does_not_crash(lib, tmp_path, name):
    """Was a segfault: ORT's UnregisterExecutionProviderLibrary unloads the library and releases
    its factory although a session still holds one of its EPs (the C API asks callers not to,
    but in Python a session a reference cycle keeps alive is enough); that session's next run
    jumped into unmapped code. The library now stays mapped and the factory outlives its EPs."""
    model = tmp_path / "m.onnx"
    onnx.save(floatify_outputs(onnx.load(STD_QUANT)), model)
    child = subprocess.run([sys.executable, "-c", UNREGISTER_WITH_A_LIVE_SESSION, lib, str(model), name],
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0 and "survived" in child.stdout, (child.returncode, child.stderr[-2000:])


REGISTER_UNDER_TWO_NAMES = """
import sys, numpy as np, onnxruntime as ort
lib, model = sys.argv[1:]
def session():
    so = ort.SessionOptions()
    so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == "MxFuseExecutionProvider"], {})
    return ort.InferenceSession(model, so)
ort.register_execution_provider_library("first", lib)
try:
    ort.register_execution_provider_library("second", lib)
    sys.exit("registered twice")
except Exception as e:
    assert 'already registered with ONNX Runtime as "first"' in str(e), e
x = np.ones((4, 64), np.float32)
session().run(None, {"x": x})
ort.unregister_execution_provider_library("first")
ort.register_execution_provider_library("second", lib)
session().run(None, {"x": x})
print("one registration at a time")
"""


def test_a_second_registration_under_another_name_is_refused(lib, tmp_path):
    """Was: ORT accepted it and listed our CPU device twice (one per factory), so the package's
    get_ep_devices() handed both to add_provider_for_devices, which ORT refuses ("All OrtEpDevice
    values in ep_devices must have the same execution provider")."""
    model = tmp_path / "m.onnx"
    onnx.save(floatify_outputs(onnx.load(STD_QUANT)), model)
    child = subprocess.run([sys.executable, "-c", REGISTER_UNDER_TWO_NAMES, lib, str(model)],
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0 and "one registration at a time" in child.stdout, child.stderr[-2000:]
