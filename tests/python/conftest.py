"""Shared fixtures for the ONNX Runtime end-to-end tests of libmxfuse_ep.so."""

import os
from pathlib import Path

import onnxruntime as ort
import pytest

ROOT = Path(__file__).resolve().parents[2]
EP_NAME = "MxFuseExecutionProvider"


def newest_build(name: str, env: str, hint: str) -> str:
    """`$env` if set, else the newer of target/release/<name> and target/debug/<name>."""
    if os.environ.get(env):
        return os.environ[env]
    builds = [ROOT / "target" / p / name for p in ("release", "debug")]
    builds = [b for b in builds if b.is_file()]
    if not builds:
        pytest.fail(f"{name} not found under target/; run `{hint}` (or set {env})")
    return str(max(builds, key=lambda b: b.stat().st_mtime))


def library_path() -> str:
    return newest_build("libmxfuse_ep.so", "MXFUSE_EP_LIB", "cargo build --release -p provider")


@pytest.fixture(scope="session")
def lib() -> str:
    return library_path()


@pytest.fixture(scope="session")
def ep_devices(lib):
    """Registers the plugin EP once per process and returns its devices."""
    if EP_NAME not in ort.get_available_providers():
        ort.register_execution_provider_library(EP_NAME, lib)
    devices = [d for d in ort.get_ep_devices()
               if d.ep_name == EP_NAME and d.device.type == ort.OrtHardwareDeviceType.CPU]
    assert len(devices) == 1, "the EP advertises exactly the CPU device"
    return devices


@pytest.fixture(scope="session")
def mxfuse_cli() -> str:
    """The offline rewriter."""
    return newest_build("mxfuse", "MXFUSE_CLI", "cargo build --release -p graph_rewrites")
