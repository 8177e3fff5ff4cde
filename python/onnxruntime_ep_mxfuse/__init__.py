"""mxfuse for ONNX Runtime.

One shared library that is both a plugin execution provider (fuses MXFP8 quantization into
RMSNorm / SwiGLU / MatMul at session creation) and a custom-op library for models rewritten
offline by the ``mxfuse`` CLI.

Plugin EP::

    import onnxruntime as ort, onnxruntime_ep_mxfuse as mx
    mx.register(ort)   # = ort.register_execution_provider_library(mx.get_ep_name(), mx.get_library_path())
    so = ort.SessionOptions()
    so.add_provider_for_devices(mx.get_ep_devices(ort, "cpu"), {"scale_rule": "floor"})
    sess = ort.InferenceSession("model.onnx", sess_options=so)

Custom-op library (offline-rewritten model)::

    so = ort.SessionOptions()
    so.register_custom_ops_library(mx.get_library_path())
"""

import threading
from pathlib import Path

__all__ = ["get_library_path", "get_ep_name", "get_ep_names", "get_ep_devices", "register"]
__version__ = "0.1.0"

_EP_NAME = "MxFuseExecutionProvider"


def get_library_path() -> str:
    """Absolute path of the bundled ``libmxfuse_ep.so``.

    An editable install (``pip install -e ./python``) bundles nothing: the library is then the
    checkout's ``target/release/libmxfuse_ep.so``, and without one this raises
    ``FileNotFoundError`` saying how to build it (ONNX Runtime would only say that it cannot open
    the file).
    """
    here = Path(__file__).resolve().parent
    bundled = here / "libmxfuse_ep.so"
    if bundled.is_file():
        return str(bundled)
    checkout = here.parent.parent / "target" / "release" / "libmxfuse_ep.so"
    if checkout.is_file():
        return str(checkout)
    raise FileNotFoundError(
        f"libmxfuse_ep.so is not in the package ({bundled}) nor in the checkout ({checkout}): "
        "an editable install does not copy it; run `cargo build --release -p provider` in the "
        "mxfuse checkout, or install the wheel with `pip install ./python`"
    )


def get_ep_name() -> str:
    """The execution provider's name (also the conventional registration name)."""
    return _EP_NAME


def get_ep_names() -> list:
    """All EP names the library provides."""
    return [_EP_NAME]


def _require_plugin_ep_api(ort_module, function: str) -> None:
    """Raises ``RuntimeError`` naming the version when ``ort_module`` predates the plugin EP API
    (an ONNX Runtime before 1.23 has no ``register_execution_provider_library`` /
    ``get_ep_devices``, and register() and get_ep_devices() failed with a bare AttributeError;
    1.23-1.30 have it, and the library itself refuses them with "needs ONNX Runtime >= 1.31")."""
    if not hasattr(ort_module, function):
        version = getattr(ort_module, "__version__", "?")
        raise RuntimeError(
            f"onnxruntime {version} is too old for {_EP_NAME}: it needs ONNX Runtime >= 1.31 "
            "(pip install onnxruntime==1.31.1)"
        )


# Held across register()'s check and registration: threads calling it at once (a serving
# process's workers at start-up) all found the EP unregistered, and all but the first failed
# with the library's "already registered with ONNX Runtime".
_REGISTER_LOCK = threading.Lock()


def register(ort_module=None) -> None:
    """Registers the plugin EP with ONNX Runtime under :func:`get_ep_name` (once per process;
    safe to call from several threads at once)."""
    if ort_module is None:
        import onnxruntime as ort_module
    _require_plugin_ep_api(ort_module, "register_execution_provider_library")
    with _REGISTER_LOCK:
        if _EP_NAME not in ort_module.get_available_providers():
            ort_module.register_execution_provider_library(_EP_NAME, get_library_path())


def get_ep_devices(ort_module=None, device: str = "auto") -> list:
    """The EP's devices of ONE hardware type, ready for ``add_provider_for_devices``.

    On a machine with a usable GPU the EP offers a CPU and a GPU device, and ONNX Runtime
    refuses a session given devices with different memory, so pick one type: ``"cpu"``,
    ``"gpu"``, or ``"auto"`` (the GPU if the EP offers one, else the CPU). The EP library must
    be registered first (``register(ort)``, or ``ort.register_execution_provider_library(
    get_ep_name(), get_library_path())``); otherwise this raises ``RuntimeError``, as does a
    ``"gpu"`` request on a machine where the EP offers no GPU device.
    """
    if ort_module is None:
        import onnxruntime as ort_module
    if device not in ("cpu", "gpu", "auto"):
        raise ValueError(f"device must be 'cpu', 'gpu' or 'auto', got {device!r}")
    _require_plugin_ep_api(ort_module, "get_ep_devices")
    mine = [d for d in ort_module.get_ep_devices() if d.ep_name == _EP_NAME]
    if not mine:
        raise RuntimeError(
            f"{_EP_NAME} offers no device: register the library first, e.g. "
            "onnxruntime_ep_mxfuse.register(onnxruntime)"
        )
    kinds = {"cpu": ort_module.OrtHardwareDeviceType.CPU, "gpu": ort_module.OrtHardwareDeviceType.GPU}
    if device == "auto":
        device = "gpu" if any(d.device.type == kinds["gpu"] for d in mine) else "cpu"
    if device not in kinds:
        raise ValueError(f"device must be 'cpu', 'gpu' or 'auto', got {device!r}")
    picked = [d for d in mine if d.device.type == kinds[device]]
    if not picked:
        raise RuntimeError(
            f"{_EP_NAME} offers no {device.upper()} device here (no GPU runtime found: the reason "
            "is ONNX Runtime's INFO log line 'mxfuse: no GPU runtime (...)', shown by a session with "
            "log_severity_level=1 or by ort.set_default_logger_severity(1) before registering); "
            "ask for 'cpu' or 'auto'"
        )
    return picked
