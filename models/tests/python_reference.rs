//! Runs models/tests/python/check_models.py (onnx.checker full_check, shape inference agreement,
//! onnx.reference runs, structure) over the fixture catalog plus equivalence groups: models of
//! different spellings of the same function must compute the same outputs. Skips (passes with a
//! note) when python3 with onnx, numpy and ml_dtypes is not available.

use std::path::{Path, PathBuf};
use std::process::Command;

use models::catalog::{fixture_base, fixtures, write_manifest, ManifestEntry};
use models::{
    AddOrder, DType, DecoderConfig, GammaForm, NormSpelling, QuantSpelling, SwigluSpelling,
    WeightForm, WeightStorage,
};
use serde_json::json;

fn python_with_onnx() -> Option<String> {
    let py = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import onnx, numpy, ml_dtypes, onnx.reference"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    ok.then_some(py)
}

/// A fresh scratch directory under the target dir (removed at the end of a passing test).
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Spelling variants of one function, from `base` (each closure edits a copy).
type Edit = fn(&mut DecoderConfig);

fn group(base: &DecoderConfig, edits: &[Edit]) -> Vec<DecoderConfig> {
    std::iter::once(base.clone())
        .chain(edits.iter().map(|e| {
            let mut c = base.clone();
            e(&mut c);
            c
        }))
        .collect()
}

/// (group name, rtol, atol, configs).
fn equivalence_groups() -> Vec<(&'static str, f64, f64, Vec<DecoderConfig>)> {
    let mut silu = fixture_base();
    silu.n_layers = 2;
    silu.n_experts = 2;
    silu.shared_expert = true;
    silu.spelling.quant = QuantSpelling::None;
    silu.spelling.swiglu = SwigluSpelling::SiluMul;
    let norms: &[Edit] = &[
        |c| c.spelling.norm = NormSpelling::PowDiv,
        |c| c.spelling.norm = NormSpelling::MulRecip,
        |c| c.spelling.norm = NormSpelling::MulDiv,
        |c| c.spelling.norm = NormSpelling::RmsNormalization,
        |c| c.spelling.norm = NormSpelling::Simplified,
        |c| c.spelling.norm = NormSpelling::SkipSimplified,
        |c| c.spelling.gamma = GammaForm::Plain,
        |c| c.spelling.gamma = GammaForm::GemmaAddOne,
        |c| c.spelling.add_order = AddOrder::BranchFirst,
        |c| c.spelling.allreduce = true,
        |c| c.spelling.swiglu = SwigluSpelling::QuickGelu,
        |c| c.spelling.swiglu = SwigluSpelling::Swish,
        |c| c.spelling.swiglu = SwigluSpelling::Swiglu,
    ];
    let mut oai = fixture_base();
    oai.spelling.quant = QuantSpelling::None;
    let oais: &[Edit] = &[
        |c| c.spelling.swiglu = SwigluSpelling::OaiMin,
        |c| c.spelling.swiglu = SwigluSpelling::OaiQuickGelu,
        |c| c.spelling.norm = NormSpelling::SkipSimplified,
    ];
    let mut quant = fixture_base();
    quant.spelling.weights = WeightForm::StdMx;
    let quants: &[Edit] = &[
        |c| {
            c.spelling.quant = QuantSpelling::Quark;
            c.spelling.weights = WeightForm::Quark;
        },
        |c| c.spelling.weights = WeightForm::Quark,
        |c| c.spelling.quant = QuantSpelling::Quark,
    ];
    let mut rceil = fixture_base();
    rceil.spelling.quant = QuantSpelling::StdRceilMul;
    let mut half = fixture_base();
    half.dtype = DType::F16;
    half.spelling.quant = QuantSpelling::None;
    let halfs: &[Edit] = &[
        |c| c.spelling.norm = NormSpelling::RmsNormalization,
        |c| c.spelling.norm = NormSpelling::SkipSimplified,
        |c| c.spelling.norm_f32_casts = false,
    ];
    vec![
        ("silu_f32", 1e-4, 1e-5, group(&silu, norms)),
        ("oai_f32", 1e-4, 1e-5, group(&oai, oais)),
        // Same OCP floor rule in both domains, same random weights: identical dequantized values.
        ("mx_floor_f32", 1e-5, 1e-6, group(&quant, quants)),
        // Div(448) and Mul(fl(1/448)) may differ by an ulp before the round-up cast: rarely a scale.
        (
            "mx_rceil_f32",
            1e-2,
            1e-2,
            group(&rceil, &[|c| c.spelling.quant = QuantSpelling::StdRceilDiv]),
        ),
        ("norm_f16", 2e-2, 2e-2, group(&half, halfs)),
    ]
}

#[test]
fn generated_models_pass_onnx_checks_and_spellings_agree() {
    let Some(py) = python_with_onnx() else {
        eprintln!("skipped: python3 with onnx, numpy, ml_dtypes not found (set PYTHON=...)");
        return;
    };
    let dir = scratch("python_reference");
    let mut manifest = Vec::new();
    for f in fixtures() {
        let file = format!("{}.onnx", f.name);
        models::write(&f.cfg, &dir.join(&file)).expect("write fixture");
        manifest.push(ManifestEntry::new(file, f.what, &f.cfg));
    }
    // Fixtures again with external weights: onnx (and, for the float baseline, onnxruntime) must
    // load them and compute the same as the inline files.
    let mut groups = Vec::new();
    for f in fixtures()
        .iter()
        .filter(|f| f.name.starts_with("dynamo_f32") || f.name.starts_with("baseline"))
    {
        let ext_cfg = DecoderConfig {
            storage: WeightStorage::External { sparse: false },
            ..f.cfg.clone()
        };
        let ext_file = format!("{}_external.onnx", f.name);
        models::write(&ext_cfg, &dir.join(&ext_file)).expect("write external model");
        manifest.push(ManifestEntry::new(
            ext_file.clone(),
            "external weights",
            &ext_cfg,
        ));
        groups.push(json!({
            "name": "external", "files": [format!("{}.onnx", f.name), ext_file], "rtol": 0.0, "atol": 0.0
        }));
    }
    for (name, rtol, atol, cfgs) in equivalence_groups() {
        let mut files = Vec::new();
        for (i, cfg) in cfgs.iter().enumerate() {
            let file = format!("eq_{name}_{i}.onnx");
            models::write(cfg, &dir.join(&file)).expect("write equivalence model");
            manifest.push(ManifestEntry::new(file.clone(), name, cfg));
            files.push(file);
        }
        groups.push(json!({ "name": name, "files": files, "rtol": rtol, "atol": atol }));
    }
    write_manifest(&dir, &manifest).expect("manifest");
    std::fs::write(dir.join("equiv.json"), json!(groups).to_string()).expect("equiv.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/check_models.py");
    let out = Command::new(&py)
        .arg(&script)
        .arg(&dir)
        .output()
        .expect("run python");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "check_models.py failed:\n{log}");
    assert!(log.contains(" passed, 0 failed"), "{log}");
    // With onnxruntime installed the script also ran the f32 float models (contrib ops included) there.
    let ort_line = log
        .lines()
        .find(|l| l.contains("matched onnxruntime"))
        .unwrap_or_default();
    eprintln!("{ort_line}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn real_export_fixtures_agree_across_quant_forms() {
    let Some(py) = python_with_onnx() else {
        eprintln!("skipped: python3 with onnx, numpy, ml_dtypes not found (set PYTHON=...)");
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(&py)
        .arg(root.join("tests/python/check_models.py"))
        .arg("--real")
        .arg(root.join("fixtures/real"))
        .output()
        .expect("run python");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && log.contains(" passed, 0 failed"),
        "{log}"
    );
}
