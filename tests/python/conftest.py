"""Shared fixtures for the ONNX Runtime end-to-end tests of libmxfuse_ep.so."""

import os
from pathlib import Path

import onnxruntime as ort
import pytest

ROOT = Path(__file__).resolve().parents[2]
EP_NAME = "MxFuseExecutionProvider"


def library_path() -> str:
    """MXFUSE_EP_LIB, else the release build, else the debug build."""
    env = os.environ.get("MXFUSE_EP_LIB")
    candidates = [Path(env)] if env else []
    candidates += [ROOT / "target" / p / "libmxfuse_ep.so" for p in ("release", "debug")]
    for c in candidates:
        if c.is_file():
            return str(c)
    pytest.fail(f"libmxfuse_ep.so not found ({candidates}); run `cargo build --release -p provider`")


@pytest.fixture(scope="session")
def lib() -> str:
    return library_path()


@pytest.fixture(scope="session")
def ep_devices(lib):
    """Registers the plugin EP once per process and returns its devices."""
    if EP_NAME not in ort.get_available_providers():
        ort.register_execution_provider_library(EP_NAME, lib)
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    assert len(devices) == 1, "the EP advertises exactly the CPU device"
    return devices
