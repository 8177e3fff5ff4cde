"""scripts/run_in_ort.py (what the quick start runs, and what a new user runs on their own model)
on the shared samples it used to stop on with a traceback: AMD Quark's MLP (onnx.reference has no
Quark kernel; the rewrite keeps Quark nodes the custom-op library cannot run) and a standard
opset-24 quantizer whose graph outputs include the FLOAT8E8M0 scales (ORT's Python API cannot
return them), and a SkipSimplifiedLayerNormalization model with omitted outputs, where
onnx.reference used to read the value it stored under '' as a later Clip's omitted min."""

import subprocess
import sys

import pytest

from conftest import ROOT, newest_build

SAMPLES = ROOT / "models" / "fixtures" / "samples"


@pytest.mark.parametrize("name, says", [
    ("tiny_swiglu_mlp_MXFP8E4M3", "keeps 4 com.amd.quark nodes"),
    ("mxfp8_dynamic_quant_opset24", "outputs ['scale'] are FLOAT8E8M0"),
])
def test_run_in_ort_compares_the_samples(tmp_path, lib, mxfuse_cli, name, says):
    src, fused = SAMPLES / f"{name}.onnx", tmp_path / f"{name}.fused.onnx"
    subprocess.run([mxfuse_cli, "rewrite", str(src), "-o", str(fused)], check=True, capture_output=True)
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_in_ort.py"), str(src), str(fused), lib],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert says in out and out.rstrip().endswith("OK"), out
    # Every compared output is bit-identical between the two ORT runs and checked against
    # onnx.reference (with the project's Quark kernel), which they match exactly here.
    lines = [l for l in out.splitlines() if l.startswith("output ")]
    assert lines and all("bit-identical: True" in l and "onnx.reference| = 0 " in l for l in lines), out


def test_run_in_ort_reference_ignores_omitted_outputs(tmp_path, lib, mxfuse_cli):
    gen = newest_build("mxfuse-gen-model", "MXFUSE_GEN_MODEL", "cargo build --release -p models")
    src, fused = tmp_path / "skip.onnx", tmp_path / "skip.fused.onnx"
    subprocess.run([gen, "--preset", "tiny", "--norm", "skip-simplified", "--quant", "std-floor", "-o", str(src)],
                   check=True, capture_output=True)
    subprocess.run([mxfuse_cli, "rewrite", str(src), "-o", str(fused)], check=True, capture_output=True)
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_in_ort.py"), str(src), str(fused), lib],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    line = next(l for l in run.stdout.splitlines() if l.startswith("output "))
    err = float(line.split("onnx.reference| = ")[1].split()[0])
    assert err < 1e-4, line  # float order only (it was 1.79 with the '' mix-up)
