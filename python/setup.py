"""Build hook: copy the release libmxfuse_ep.so into the package and tag the wheel
`py3-none-<platform>` (the library is not a Python extension).

Set MXFUSE_EP_LIB to a built library to package it; otherwise the workspace's
target/release/libmxfuse_ep.so is used (run `cargo build --release -p provider` first).
"""

import os
import shutil
import sysconfig
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # setuptools >= 70 ships it
    from setuptools.command.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
LIB = "libmxfuse_ep.so"


def find_library() -> Path:
    env = os.environ.get("MXFUSE_EP_LIB")
    candidates = [Path(env)] if env else []
    candidates.append(HERE.parent / "target" / "release" / LIB)
    for c in candidates:
        if c.is_file():
            return c
    raise SystemExit(
        f"{LIB} not found (looked at {', '.join(map(str, candidates))}); "
        "run `cargo build --release -p provider` or set MXFUSE_EP_LIB"
    )


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        dest = Path(self.build_lib) / "onnxruntime_ep_mxfuse" / LIB
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(find_library(), dest)


class BinaryDistribution(Distribution):
    """Carries a native library: install into platlib, not purelib."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """`py3-none-<platform>`: the library is not a CPython extension (ABI-independent)."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return "py3", "none", sysconfig.get_platform().replace("-", "_").replace(".", "_")


setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel},
)
