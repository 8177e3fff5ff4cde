"""The kernels' status lines follow ONNX Runtime's log severity inside the plugin EP.

Without a GPU runtime the EP's device discovery (`GetSupportedDevices`, inside
`register_execution_provider_library`, before any session) logs "mxfuse: no GPU runtime (...):
using the CPU kernels" at INFO. It used to be a bare stderr line whatever the user's
`log_severity_level`; now it goes to ORT's loggers (docs/provider.md, "Log lines"): the
environment's default logger if that admits INFO, else the first session whose severity does.
Each case runs in a fresh process (the line is logged once per process) with `MXFUSE_GPU=off`,
so the reason, and the line, are the same on a machine with a GPU.
"""

import os
import subprocess
import sys

import onnx
from onnx import TensorProto, helper

from conftest import EP_NAME, library_path

LINE = "mxfuse: no GPU runtime (MXFUSE_GPU=off): using the CPU kernels"

CHILD = r"""
import sys
import onnxruntime as ort

lib, model, default_severity, *severities = sys.argv[1:]
if default_severity != "-":
    ort.set_default_logger_severity(int(default_severity))
ort.register_execution_provider_library("{ep}", lib)
devices = [d for d in ort.get_ep_devices() if d.ep_name == "{ep}"]
assert len(devices) == 1, devices
sessions = []
for severity in severities:
    so = ort.SessionOptions()
    if severity != "-":
        so.log_severity_level = int(severity)
    so.add_provider_for_devices(devices, {})
    sessions.append(ort.InferenceSession(model, sess_options=so))
    print("session", severity, "ready", file=sys.stderr, flush=True)
import numpy as np
if sessions:
    sessions[-1].run(None, {"x": np.ones((2, 3), np.float32)})
print("ok")
""".replace("{ep}", EP_NAME)


def _model(tmp_path) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "add.onnx"
    onnx.save(model, str(path))
    return str(path)


def _stderr(tmp_path, default_severity: str, *severities: str) -> str:
    env = dict(os.environ, MXFUSE_GPU="off")
    r = subprocess.run(
        [sys.executable, "-c", CHILD, library_path(), _model(tmp_path), default_severity, *severities],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
    return r.stderr


def _lines(stderr: str) -> list:
    return [line for line in stderr.splitlines() if LINE in line]


def test_errors_only_session_has_no_gpu_line_on_stderr(tmp_path):
    err = _stderr(tmp_path, "-", "3")
    assert "no GPU runtime" not in err and "using the CPU kernels" not in err, err


def test_default_severity_session_has_no_gpu_line_on_stderr(tmp_path):
    # ORT's default level is WARNING; the line is INFO.
    err = _stderr(tmp_path, "-", "-")
    assert "no GPU runtime" not in err, err


def test_verbose_session_shows_the_line_once_through_orts_log(tmp_path):
    err = _stderr(tmp_path, "-", "0")
    lines = _lines(err)
    assert len(lines) == 1, err
    # ORT's log format (`<time> [I:onnxruntime:..., file:line function] message`), not a
    # bare line of ours; written when the session's EP is created, before the session is ready.
    assert not lines[0].startswith("mxfuse:") and "[I:onnxruntime:" in lines[0], lines[0]
    assert lines[0].endswith(LINE), lines[0]
    assert err.index(LINE) < err.index("session 0 ready"), err


def test_the_line_goes_to_the_first_session_that_admits_it_and_only_once(tmp_path):
    err = _stderr(tmp_path, "-", "3", "1", "0")
    lines = _lines(err)
    assert len(lines) == 1, err
    # Not in the errors-only session; in the INFO one, created second.
    assert err.index("session 3 ready") < err.index(LINE) < err.index("session 1 ready"), err


def test_a_verbose_default_logger_shows_it_at_registration_and_sessions_do_not_repeat_it(tmp_path):
    err = _stderr(tmp_path, "0", "0")
    lines = _lines(err)
    assert len(lines) == 1, err
    assert "[I:onnxruntime:" in lines[0], lines[0]
    assert err.index(LINE) < err.index("session 0 ready"), err


def test_errors_only_default_logger_without_sessions_shows_nothing(tmp_path):
    err = _stderr(tmp_path, "3")
    assert "no GPU runtime" not in err, err
