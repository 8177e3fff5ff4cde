"""The `mxfuse-ep` Python package (python/): its helpers, and the wheel build."""

import importlib.util
import shutil
import subprocess
import sys
import zipfile

import onnxruntime as ort
import pytest

from conftest import EP_NAME, ROOT

PACKAGE = ROOT / "python" / "onnxruntime_ep_mxfuse"


def load_package(tmp_path, lib):
    """The package as the wheel lays it out: __init__.py next to libmxfuse_ep.so."""
    dst = tmp_path / "onnxruntime_ep_mxfuse"
    dst.mkdir()
    shutil.copy(PACKAGE / "__init__.py", dst / "__init__.py")
    shutil.copy(lib, dst / "libmxfuse_ep.so")
    spec = importlib.util.spec_from_file_location("onnxruntime_ep_mxfuse", dst / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_helpers_follow_the_onnxruntime_ep_convention(tmp_path, lib, ep_devices):
    mx = load_package(tmp_path, lib)
    assert mx.get_ep_name() == EP_NAME
    assert mx.get_ep_names() == [EP_NAME]
    path = mx.get_library_path()
    assert path.endswith("libmxfuse_ep.so") and (tmp_path / "onnxruntime_ep_mxfuse" / "libmxfuse_ep.so").samefile(path)
    mx.register(ort)  # already registered by the fixture: must be a no-op, not an error
    assert EP_NAME in ort.get_available_providers()


def test_editable_install_finds_the_checkouts_library_or_says_how_to_build_it(tmp_path, lib):
    """`pip install -e ./python` bundles no library: get_library_path() returned a path that did
    not exist, and ORT's register failed with "cannot open shared object file"."""
    pkg = tmp_path / "python" / "onnxruntime_ep_mxfuse"
    pkg.mkdir(parents=True)
    shutil.copy(PACKAGE / "__init__.py", pkg / "__init__.py")

    def load():
        spec = importlib.util.spec_from_file_location("onnxruntime_ep_mxfuse", pkg / "__init__.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    with pytest.raises(FileNotFoundError, match="cargo build --release -p provider"):
        load().get_library_path()
    built = tmp_path / "target" / "release" / "libmxfuse_ep.so"
    built.parent.mkdir(parents=True)
    shutil.copy(lib, built)
    assert built.samefile(load().get_library_path())


def wheel_tooling_available():
    try:
        import setuptools.command.bdist_wheel  # noqa: F401  (setuptools >= 70.1)
        return True
    except ImportError:
        return importlib.util.find_spec("wheel") is not None


@pytest.mark.skipif(not wheel_tooling_available(), reason="needs the `wheel` package or setuptools >= 70.1")
def test_wheel_bundles_the_library_with_a_platform_tag(tmp_path, lib):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w", str(tmp_path),
         str(ROOT / "python")],
        check=True,
        env={**__import__("os").environ, "MXFUSE_EP_LIB": lib},
    )
    (whl,) = tmp_path.glob("mxfuse_ep-*.whl")
    assert "-py3-none-linux" in whl.name, whl.name
    names = zipfile.ZipFile(whl).namelist()
    assert "onnxruntime_ep_mxfuse/libmxfuse_ep.so" in names
    assert "onnxruntime_ep_mxfuse/__init__.py" in names


def test_get_ep_devices_says_when_the_library_is_not_registered(tmp_path, lib):
    """Before registration ORT lists none of our devices: a clear error, not an empty list that
    ORT later rejects with "Must provide one or more OrtEpDevice instances"."""
    import types
    mx = load_package(tmp_path, lib)
    unregistered = types.SimpleNamespace(get_ep_devices=lambda: [], OrtHardwareDeviceType=ort.OrtHardwareDeviceType)
    with pytest.raises(RuntimeError, match="register the library first"):
        mx.get_ep_devices(unregistered, "cpu")


def test_get_ep_devices_says_when_there_is_no_gpu_device(tmp_path, lib, ep_devices):
    mx = load_package(tmp_path, lib)
    if any(d.device.type == ort.OrtHardwareDeviceType.GPU
           for d in ort.get_ep_devices() if d.ep_name == EP_NAME):
        pytest.skip("this machine offers a GPU device")
    with pytest.raises(RuntimeError, match="offers no GPU device"):
        mx.get_ep_devices(ort, "gpu")
    assert mx.get_ep_devices(ort, "auto") == mx.get_ep_devices(ort, "cpu") != []


# A fresh process (the test process has registered the EP already); ORT's registration is slowed
# down so that every thread is past register()'s "already registered?" check before the first one
# has registered, as happens at random without the delay (4 of 5 runs of 8 threads).
REGISTER_FROM_THREADS = """
import sys, threading, time, importlib.util
import onnxruntime as ort
spec = importlib.util.spec_from_file_location("onnxruntime_ep_mxfuse", sys.argv[1])
mx = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mx)
real = ort.register_execution_provider_library
def slow(*args):
    time.sleep(0.2)
    return real(*args)
ort.register_execution_provider_library = slow
start, errors = threading.Barrier(8), []
def worker():
    start.wait()
    try:
        mx.register(ort)
    except Exception as e:
        errors.append(str(e))
threads = [threading.Thread(target=worker) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not errors, errors[0]
assert mx.get_ep_name() in ort.get_available_providers()
print("registered once")
"""


def test_register_from_several_threads_at_once_registers_once(tmp_path, lib):
    """Was: each thread found the EP unregistered and registered it, and all but the first failed
    with the library's 'already registered with ONNX Runtime' (a serving process whose workers
    each call register() at start-up)."""
    load_package(tmp_path, lib)
    out = subprocess.run([sys.executable, "-c", REGISTER_FROM_THREADS,
                          str(tmp_path / "onnxruntime_ep_mxfuse" / "__init__.py")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "registered once" in out.stdout, out.stderr[-2000:]


def test_register_and_get_ep_devices_say_when_onnxruntime_is_too_old(tmp_path, lib):
    """New-user probe 9: with onnxruntime 1.22 (no plugin EP API) register() and get_ep_devices()
    failed with "module 'onnxruntime' has no attribute 'register_execution_provider_library'"."""
    import types
    mx = load_package(tmp_path, lib)
    old = types.SimpleNamespace(__version__="1.22.1", get_available_providers=lambda: ["CPUExecutionProvider"])
    for call in (lambda: mx.register(old), lambda: mx.get_ep_devices(old, "cpu")):
        with pytest.raises(RuntimeError, match=r"onnxruntime 1\.22\.1 is too old for MxFuseExecutionProvider: "
                                               r"it needs ONNX Runtime >= 1\.31"):
            call()
