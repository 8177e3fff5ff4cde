//! The `mxfuse-gen-model` binary: flags reach the config, errors are messages (not panics).

use std::path::{Path, PathBuf};
use std::process::Command;

use models::{expected_fusions, DecoderConfig, NormSpelling, QuantSpelling, SwigluSpelling};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mxfuse-gen-model"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

#[test]
fn flags_build_the_same_model_as_the_library() {
    let dir = scratch("cli_flags");
    let out = dir.join("m.onnx");
    let status = bin()
        .args([
            "--layers",
            "3",
            "--experts",
            "2",
            "--first-dense",
            "1",
            "--shared-expert",
        ])
        .args([
            "--norm",
            "skip-simplified",
            "--swiglu",
            "quick-gelu",
            "--quant",
            "quark",
        ])
        .args(["--dtype", "f16", "--allreduce", "--print-expected", "-o"])
        .arg(&out)
        .output()
        .expect("run bin");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let mut cfg = DecoderConfig::tiny();
    cfg.n_layers = 3;
    cfg.n_experts = 2;
    cfg.first_dense_layers = 1;
    cfg.shared_expert = true;
    cfg.dtype = models::DType::F16;
    cfg.spelling.norm = NormSpelling::SkipSimplified;
    cfg.spelling.swiglu = SwigluSpelling::QuickGelu;
    cfg.spelling.quant = QuantSpelling::Quark;
    cfg.spelling.allreduce = true;
    let want = prost::Message::encode_to_vec(&models::model_proto(&cfg).expect("build"));
    assert!(
        std::fs::read(&out).expect("model written") == want,
        "bin and library models differ"
    );
    let printed: serde_json::Value =
        serde_json::from_slice(&status.stdout).expect("expected-counts JSON");
    assert_eq!(
        printed,
        serde_json::to_value(expected_fusions(&cfg)).expect("json")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn invalid_shapes_fail_with_a_message() {
    let dir = scratch("cli_invalid");
    let out = bin()
        .args(["--hidden", "100", "-o"])
        .arg(dir.join("m.onnx"))
        .output()
        .expect("run bin");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("hidden = 100 must be a positive multiple of 32"),
        "{err}"
    );
    assert!(!dir.join("m.onnx").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fixtures_mode_writes_the_catalog_and_manifest() {
    let dir = scratch("cli_fixtures");
    let out = bin().arg("--fixtures").arg(&dir).output().expect("run bin");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("manifest.json")).expect("manifest"),
    )
    .expect("json");
    let files = manifest.as_array().expect("list");
    assert_eq!(files.len(), models::catalog::fixtures().len());
    for f in files {
        assert!(dir.join(f["file"].as_str().expect("file")).exists());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
