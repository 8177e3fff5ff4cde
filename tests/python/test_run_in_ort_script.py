"""scripts/run_in_ort.py (what the quick start runs, and what a new user runs on their own model)
on the shared samples it used to stop on with a traceback: AMD Quark's MLP (onnx.reference has no
Quark kernel; the rewrite keeps Quark nodes the custom-op library cannot run) and a standard
opset-24 quantizer whose graph outputs include the FLOAT8E8M0 scales (ORT's Python API cannot
return them), and a SkipSimplifiedLayerNormalization model with omitted outputs, where
onnx.reference used to read the value it stored under '' as a later Clip's omitted min."""

import subprocess
import sys

import numpy as np
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


def test_run_in_ort_f16_decoder_is_ok(tmp_path, lib, mxfuse_cli):
    """A float16 decoder from the generator printed MISMATCH (exit 1): on the custom-op path ORT's
    CPU EP runs some unfused f16 ops in f32 (docs/provider.md), so those bits differ from the
    online run although the fused ops agree; the script now also runs the rewrite on the EP."""
    gen = newest_build("mxfuse-gen-model", "MXFUSE_GEN_MODEL", "cargo build --release -p models")
    src, fused = tmp_path / "f16.onnx", tmp_path / "f16.fused.onnx"
    subprocess.run([gen, "--preset", "tiny", "--dtype", "f16", "--quant", "std-floor", "-o", str(src)],
                   check=True, capture_output=True)
    subprocess.run([mxfuse_cli, "rewrite", str(src), "-o", str(fused)], check=True, capture_output=True)
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_in_ort.py"), str(src), str(fused), lib],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.rstrip().endswith("OK"), run.stdout + run.stderr
    lines = run.stdout.splitlines()
    i = next(i for i, l in enumerate(lines) if l.startswith("output "))
    assert "vs the rewritten model on the plugin EP bit-identical: True" in lines[i], lines[i]
    # Its difference to onnx.reference is a few percent (ORT's f16 rounding of the unfused ops
    # flips E4M3 roundings), far from the f32 models' 1e-7: the script says why under the line
    # (new-user probe 5: the bare number looked like a broken fusion).
    assert lines[i + 1].startswith("  (float16: ORT and onnx.reference round the unfused f16 ops"), run.stdout


def bf16_model(path):
    """bfloat16 graph inputs and outputs (ORT's Python API has no numpy type for them): x + residual
    → Cast(f32) → decomposed norm → Cast(bf16) → MXFP8 → MatMul, the sum an output too."""
    import ml_dtypes
    import numpy as np
    import onnx
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper
    from test_mx_dequant import save

    rng = np.random.default_rng(0)
    c = lambda a, n: numpy_helper.from_array(np.asarray(a), n)  # noqa: E731
    inits = [c(np.float32(2.0), "two"), c(np.array([-1], np.int64), "ax"), c(np.float32(1e-6), "eps"),
             c((1 + 0.1 * rng.standard_normal(64)).astype(np.float32), "gamma"),
             c(np.array([0, 0, 2, 32], np.int64), "blk"), c(np.float32(2.0**-8), "k"),
             c((0.1 * rng.standard_normal((64, 16))).astype(ml_dtypes.bfloat16), "w")]
    n = helper.make_node
    nodes = [n("Add", ["x", "residual"], ["sum"]), n("Cast", ["sum"], ["sf"], to=TP.FLOAT),
             n("Pow", ["sf", "two"], ["sq"]), n("ReduceMean", ["sq", "ax"], ["var"], keepdims=1),
             n("Add", ["var", "eps"], ["ve"]), n("Sqrt", ["ve"], ["rms"]), n("Reciprocal", ["rms"], ["inv"]),
             n("Mul", ["sf", "inv"], ["nf"]), n("Mul", ["nf", "gamma"], ["yf"]), n("Cast", ["yf"], ["y"], to=TP.BFLOAT16),
             n("Reshape", ["y", "blk"], ["yb"]), n("Abs", ["yb"], ["ab"]),
             n("ReduceMax", ["ab", "ax"], ["amax"], keepdims=0), n("Cast", ["amax"], ["a32"], to=TP.FLOAT),
             n("Mul", ["a32", "k"], ["s32"]),
             n("Cast", ["s32"], ["scale"], to=TP.FLOAT8E8M0, round_mode="down", saturate=1),
             n("QuantizeLinear", ["y", "scale"], ["q"], axis=-1, block_size=32, output_dtype=TP.FLOAT8E4M3FN),
             n("DequantizeLinear", ["q", "scale"], ["yd"], axis=-1, block_size=32, output_dtype=TP.BFLOAT16),
             n("MatMul", ["yd", "w"], ["out"])]
    ins = [helper.make_tensor_value_info(v, TP.BFLOAT16, [1, 8, 64]) for v in ("x", "residual")]
    outs = [helper.make_tensor_value_info(v, TP.BFLOAT16, None) for v in ("out", "sum")]
    save(nodes, inits, ins, outs, path)


def test_run_in_ort_feeds_and_fetches_bfloat16(tmp_path, lib, mxfuse_cli):
    """It used to stop with ORT's "Numpy_type 256 can't be converted to MLDataType"."""
    src, fused = tmp_path / "bf16.onnx", tmp_path / "bf16.fused.onnx"
    bf16_model(src)
    subprocess.run([mxfuse_cli, "rewrite", str(src), "-o", str(fused)], check=True, capture_output=True)
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_in_ort.py"), str(src), str(fused), lib],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [l for l in run.stdout.splitlines() if l.startswith("output ")]
    assert len(lines) == 2 and all("bit-identical: True" in l and "onnx.reference| = 0 " in l for l in lines), run.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bf16.fused.onnx", "bf16.onnx"]  # its copies are gone


def test_run_in_ort_bf16_decoder_says_why_ort_cannot_run_it(tmp_path, lib, mxfuse_cli):
    """A bf16 decoder from the generator cannot run on ORT's CPU EP at all (no bf16 Add kernel for
    the attention's unfused ops, with or without mxfuse): the script exits with ORT's one-line
    reason and says so instead of leaving the user to guess whether the rewrite is at fault."""
    gen = newest_build("mxfuse-gen-model", "MXFUSE_GEN_MODEL", "cargo build --release -p models")
    src, fused = tmp_path / "bf16.onnx", tmp_path / "bf16.fused.onnx"
    subprocess.run([gen, "--preset", "tiny", "--dtype", "bf16", "-o", str(src)], check=True, capture_output=True)
    subprocess.run([mxfuse_cli, "rewrite", str(src), "-o", str(fused)], check=True, capture_output=True)
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_in_ort.py"), str(src), str(fused), lib],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "NOT_IMPLEMENTED" in run.stderr and "no bfloat16 kernel" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    # It names the user's model, not the script's temporary bf16-output copy (probe 10).
    assert f"cannot load {src}:" in run.stderr and "run_in_ort_f64" not in run.stderr, run.stderr


GENAI = ROOT / "models" / "fixtures" / "real" / "ortgenai_llama_tiny_mxfp8_std.onnx"


def run_script(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "run_in_ort.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_run_in_ort_on_a_kv_cache_decoder_says_which_dims_to_set(tmp_path, lib, mxfuse_cli):
    """ORT GenAI's Llama (GroupQueryAttention, KV cache): the generated inputs gave every symbolic
    dim 8, GQA refused the 8-wide past_key (the head size is 16) and the script stopped with a
    traceback. Now one line names the dims it used and the options that set them, and with the
    KV-cache dims set (or the inputs given in a .npz) the comparison runs."""
    fused = tmp_path / "genai.fused.onnx"
    subprocess.run([mxfuse_cli, "rewrite", str(GENAI), "-o", str(fused)], check=True, capture_output=True)
    bad = run_script(GENAI, fused, lib)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr, bad.stderr
    last = bad.stderr.strip().splitlines()[-1]
    assert "kv_cache_dim=8" in last and "--dim NAME=VALUE" in last and "packed KV head dimension" in last, last

    typo = run_script(GENAI, fused, lib, "--dim", "kv_cache=16")
    assert typo.returncode == 1 and "--dim kv_cache: " in typo.stderr and "kv_cache_dim" in typo.stderr, typo.stderr

    ok = run_script(GENAI, fused, lib, "--dim", "kv_cache_dim=16", "--dim", "past_sequence_length=0")
    assert ok.returncode == 0 and ok.stdout.rstrip().endswith("OK"), ok.stdout + ok.stderr
    assert ok.stdout.count("bit-identical: True") == 5, ok.stdout

    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 250, (2, 1)), "attention_mask": np.ones((2, 4), np.int64)}
    for layer in (0, 1):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{layer}.{kv}"] = rng.standard_normal((2, 2, 3, 16)).astype(np.float32)
    np.savez(tmp_path / "step.npz", **feeds)
    ok = run_script(GENAI, fused, lib, "--feeds", tmp_path / "step.npz")
    assert ok.returncode == 0 and ok.stdout.rstrip().endswith("OK"), ok.stdout + ok.stderr


def test_run_in_ort_generated_integer_inputs_are_ids_masks_and_positions():
    sys.path.insert(0, str(ROOT / "scripts"))
    from run_in_ort import feeds_for
    f = feeds_for(str(GENAI), dims={"sequence_length": 5, "total_sequence_length": 7})
    assert f["input_ids"].shape == (1, 5) and f["input_ids"].min() >= 0
    assert f["attention_mask"].shape == (1, 7) and (f["attention_mask"] == 1).all()
    assert f["past_key_values.0.key"].shape == (1, 2, 8, 8)  # not set: the default 8


def test_run_in_ort_default_library_is_the_checkouts_wherever_it_runs(tmp_path, mxfuse_cli):
    """Without LIB.so the script looked for `target/release/libmxfuse_ep.so` relative to the working
    directory: run from the model's folder (as a new user does), ORT failed with a traceback. Now the
    default is this checkout's release build (else the installed wheel's), and a LIB.so that does not
    exist is one clear line."""
    if not (ROOT / "target" / "release" / "libmxfuse_ep.so").is_file():
        pytest.skip("no release build of the provider in this checkout")
    name = "mxfp8_dynamic_quant_opset24"
    src, fused = SAMPLES / f"{name}.onnx", tmp_path / f"{name}.fused.onnx"
    subprocess.run([mxfuse_cli, "rewrite", str(src), "-o", str(fused)], check=True, capture_output=True)
    script = str(ROOT / "scripts" / "run_in_ort.py")
    run = subprocess.run([sys.executable, script, str(src), fused.name], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.rstrip().endswith("OK"), run.stdout + run.stderr
    bad = subprocess.run([sys.executable, script, str(src), fused.name, "no/such/libmxfuse_ep.so"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr, bad.stderr
    assert bad.stderr.strip() == "no/such/libmxfuse_ep.so: no such file (LIB.so is the mxfuse library, " \
                                 "e.g. target/release/libmxfuse_ep.so)", bad.stderr


def test_run_in_ort_says_when_the_two_paths_fused_different_sites(tmp_path, lib, mxfuse_cli):
    """A MoE layer with a NonZero dispatch: the plugin EP fuses its experts with ORT's shapes,
    and the offline rewrite could not while mxfuse's inference did not know NonZero, so the two
    ORT runs differed in float order. The script said a bare MISMATCH; it now says the two paths took
    different numbers of nodes and where to look (new-user probe 7). Once the offline rewrite
    fuses them too, the runs agree and the script says OK."""
    from test_moe_dispatch import moe_decoder
    src, fused = moe_decoder(tmp_path / "moe.onnx", "nonzero", layers=1), tmp_path / "moe.fused.onnx"
    subprocess.run([mxfuse_cli, "rewrite", str(src), "-o", str(fused)], check=True, capture_output=True)
    out = run_script(str(src), str(fused), lib).stdout
    if out.rstrip().endswith("MISMATCH"):
        assert "the plugin EP took 104 of the original model's nodes, the offline rewrite 51: they fused different sites" in out, out
    else:
        assert out.rstrip().endswith("OK"), out


def test_run_in_ort_bad_model_paths_and_old_ort_are_one_line(tmp_path):
    """New-user probe 9: a mistyped model path, a file that is not ONNX and a LIB.so that is not
    the mxfuse library ended in a traceback (`open`'s FileNotFoundError, protobuf's DecodeError,
    ORT's Fail after the reference run); an ONNX Runtime older than 1.31 in an
    AttributeError (no `register_execution_provider_library`) or the library's refusal after the
    reference run. Each is now one line on stderr, exit 1, before anything runs."""
    script = str(ROOT / "scripts" / "run_in_ort.py")
    good = str(SAMPLES / "mxfp8_dynamic_quant_opset24.onnx")
    (tmp_path / "notes.onnx").write_text("not a model\n")
    for args, says in [
        (["no/such/model.onnx", good], "no/such/model.onnx: no such file"),
        ([good, "no/such/fused.onnx"], "no/such/fused.onnx: no such file"),
        ([str(tmp_path), good], f"{tmp_path}: not a file"),
        ([str(tmp_path / "notes.onnx"), good], f"{tmp_path / 'notes.onnx'}: not a valid ONNX model ("),
        # A LIB.so that is not the mxfuse library: ORT's traceback, after the reference run.
        ([good, good, str(tmp_path / "notes.onnx")],
         f"{tmp_path / 'notes.onnx'}: ONNX Runtime cannot load it as the mxfuse library ("),
        ([good, good, "--feeds", "no/such/inputs.npz"], "--feeds no/such/inputs.npz: not a readable .npz"),
        ([good, good, "--feeds", str(tmp_path / "notes.onnx")], f"--feeds {tmp_path / 'notes.onnx'}: not a readable"),
    ]:
        run = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=120)
        assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
        err = run.stderr.strip()
        assert err.startswith(says) and "\n" not in err, err
    sys.path.insert(0, str(ROOT / "scripts"))
    from run_in_ort import check_ort_version
    check_ort_version("1.31.1")
    check_ort_version("1.32.0.dev20261201")
    with pytest.raises(SystemExit, match=r"onnxruntime 1\.22\.1 is too old: mxfuse needs ONNX Runtime >= 1\.31"):
        check_ort_version("1.22.1")
