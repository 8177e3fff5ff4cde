//! The committed fixture set (models/fixtures/): one small model per spelling combination that
//! matters to the rewrite rules, with a manifest of what each should fuse. Regenerate with
//! `mxfuse-gen-model --fixtures models/fixtures`; a test checks the committed files still match.

use std::path::Path;

use serde::Serialize;

use crate::config::{
    AddOrder, DType, DecoderConfig, GammaForm, GateUpForm, NormSpelling, QuantSpelling, Spelling,
    SwigluSpelling, WeightForm,
};
use crate::decoder::{expected_fusions, FusionCounts};
use crate::error::{Error, Result};
use crate::norm::MS_DOMAIN;

/// One fixture: file stem, what it stands for, and its config.
#[derive(Clone, Debug)]
pub struct Fixture {
    pub name: &'static str,
    pub what: &'static str,
    pub cfg: DecoderConfig,
}

/// Fixture shapes: one layer (its input norm has no residual, its post-attention and the final
/// norm do), hidden 64, intermediate 32, 2 q heads / 1 kv head of 32: about 18k parameters.
pub fn fixture_base() -> DecoderConfig {
    DecoderConfig {
        hidden: 64,
        intermediate: 32,
        n_layers: 1,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 32,
        moe_intermediate: 32,
        ..DecoderConfig::tiny()
    }
}

fn fx(
    name: &'static str,
    what: &'static str,
    f: impl FnOnce(&mut DecoderConfig, &mut Spelling),
) -> Fixture {
    let mut cfg = fixture_base();
    let mut sp = cfg.spelling;
    f(&mut cfg, &mut sp);
    cfg.spelling = sp;
    Fixture { name, what, cfg }
}

/// The fixture set.
pub fn fixtures() -> Vec<Fixture> {
    use GammaForm as G;
    use NormSpelling as N;
    use QuantSpelling as Q;
    use SwigluSpelling as S;
    vec![
        fx("dynamo_f32_floor", "MiniMax-M3 torch export (Pow/Reciprocal norm, folded Gemma γ, SwiGLU-OAI Clip, gate_up+Split) + standard MX floor quant", |_, _| {}),
        fx("dynamo_bf16_casts_floor_mxw", "as dynamo_f32_floor in bf16 with Casts to f32 around the norm, standard MX weights (DequantizeLinear of E4M3/E8M0)", |c, s| {
            c.dtype = DType::Bf16;
            s.weights = WeightForm::StdMx;
        }),
        fx("llama_powdiv_silu_two_mm_rceil_mul", "Pow/Div norm, plain γ, SiLU·up from two MatMuls, RCEIL quant spelled Mul(1/448)", |_, s| {
            s.norm = N::PowDiv;
            s.gamma = G::Plain;
            s.swiglu = S::SiluMul;
            s.gate_up = GateUpForm::TwoMatmuls;
            s.quant = Q::StdRceilMul;
        }),
        fx("f16_mulrecip_gemma_add1_oaimin_rceil_div", "f16 without Casts, Mul(x,x)/Reciprocal norm, Gemma Add(w,1) node, OAI gate clamp as Min, RCEIL quant spelled Div(448), Add(branch, residual) order", |c, s| {
            c.dtype = DType::F16;
            s.norm_f32_casts = false;
            s.norm = N::MulRecip;
            s.gamma = G::GemmaAddOne;
            s.swiglu = S::OaiMin;
            s.quant = Q::StdRceilDiv;
            s.add_order = AddOrder::BranchFirst;
        }),
        fx("f16_casts_muldiv_swish_floor", "f16 with Casts, Mul(x,x)/Div norm, plain γ (Llama: γ applied after the cast back), ONNX Swish(opset 24)·up", |c, s| {
            c.dtype = DType::F16;
            s.norm = N::MulDiv;
            s.gamma = G::Plain;
            s.swiglu = S::Swish;
        }),
        fx("rmsnorm23_swiglu28_floor", "ONNX RMSNormalization (opset 23) and SwiGLU (opset 28) from two MatMuls", |_, s| {
            s.norm = N::RmsNormalization;
            s.swiglu = S::Swiglu;
            s.gate_up = GateUpForm::TwoMatmuls;
        }),
        fx("simplified_quickgelu_quark", "SimplifiedLayerNormalization (+ separate residual Add), com.microsoft::QuickGelu(1)·up, Quark MXQuantizeDequantize on activations and weights", |_, s| {
            s.norm = N::Simplified;
            s.swiglu = S::QuickGelu;
            s.quant = Q::Quark;
            s.weights = WeightForm::Quark;
        }),
        fx("skip_simplified_oai_quickgelu_allreduce_f16", "ORT GenAI style: SkipSimplifiedLayerNormalization (residual from output 3; the first norm is SimplifiedLayerNormalization), SwiGLU-OAI after ORT's optimizer (QuickGelu(1.702)), AllReduce before every residual add", |c, s| {
            c.dtype = DType::F16;
            s.norm = N::SkipSimplified;
            s.swiglu = S::OaiQuickGelu;
            s.allreduce = true;
        }),
        fx("skip_simplified_quark_gemma_add1", "SkipSimplifiedLayerNormalization with a Gemma Add(w,1) γ, SiLU·up, Quark activation quant, float weights", |_, s| {
            s.norm = N::SkipSimplified;
            s.gamma = G::GemmaAddOne;
            s.swiglu = S::SiluMul;
            s.quant = Q::Quark;
        }),
        fx("dynamo_allreduce_branch_first", "torch-export spelling with AllReduce on the embedding and after o_proj/down_proj, Add(branch, residual) order", |_, s| {
            s.allreduce = true;
            s.add_order = AddOrder::BranchFirst;
        }),
        fx("pipeline_stage_residual_input", "every norm (the first too) has a residual Add: a `residual` graph input (pipeline stage)", |_, s| {
            s.first_layer_without_residual = false;
        }),
        fx("moe_shared_expert_f16_mxw", "one MoE layer: float router MatMul on the normed tensor (the `normed` output must survive the fusion), 4 experts + shared expert on one quantized activation, standard MX weights", |c, s| {
            c.dtype = DType::F16;
            c.n_experts = 4;
            c.first_dense_layers = 0;
            c.shared_expert = true;
            s.weights = WeightForm::StdMx;
        }),
        fx("moe_mxfp4_experts", "one MoE layer in f32 with MXFP4 weights everywhere (DequantizeLinear of FLOAT4E2M1/E8M0, as gpt-oss and MiniMax-M3 ship experts): 4 experts + shared expert; MxMatMul reads the 4-bit weights", |c, s| {
            c.n_experts = 4;
            c.first_dense_layers = 0;
            c.shared_expert = true;
            s.weights = WeightForm::StdMxfp4;
        }),
        fx("baseline_no_quant", "negative: the float model without any MX quantization (nothing to fuse)", |_, s| {
            s.quant = Q::None;
        }),
    ]
}

/// True when every op of the fixture is standard ONNX (onnx.checker full_check and
/// onnx.reference can run it).
pub fn is_standard_onnx(cfg: &DecoderConfig) -> bool {
    let s = cfg.spelling;
    !s.allreduce
        && !matches!(
            s.norm,
            NormSpelling::Simplified | NormSpelling::SkipSimplified
        )
        && !matches!(
            s.swiglu,
            SwigluSpelling::QuickGelu | SwigluSpelling::OaiQuickGelu
        )
        && s.quant != QuantSpelling::Quark
        && s.weights != WeightForm::Quark
}

/// Non-standard domains a config's model imports.
pub fn custom_domains(cfg: &DecoderConfig) -> Vec<&'static str> {
    let s = cfg.spelling;
    let mut d = Vec::new();
    if s.allreduce
        || s.norm == NormSpelling::SkipSimplified
        || matches!(
            s.swiglu,
            SwigluSpelling::QuickGelu | SwigluSpelling::OaiQuickGelu
        )
    {
        d.push(MS_DOMAIN);
    }
    if s.quant == QuantSpelling::Quark || s.weights == WeightForm::Quark {
        d.push(crate::mx_quant::QUARK_DOMAIN);
    }
    d
}

/// One manifest row (fixtures/manifest.json).
#[derive(Clone, Debug, Serialize)]
pub struct ManifestEntry {
    pub file: String,
    pub what: String,
    pub dtype: DType,
    pub hidden: usize,
    pub intermediate: usize,
    pub n_layers: usize,
    pub n_experts: usize,
    pub spelling: Spelling,
    pub standard_onnx: bool,
    pub expected: FusionCounts,
}

impl ManifestEntry {
    pub fn new(file: String, what: &str, cfg: &DecoderConfig) -> Self {
        Self {
            file,
            what: what.into(),
            dtype: cfg.dtype,
            hidden: cfg.hidden,
            intermediate: cfg.intermediate,
            n_layers: cfg.n_layers,
            n_experts: cfg.n_experts,
            spelling: cfg.spelling,
            standard_onnx: is_standard_onnx(cfg),
            expected: expected_fusions(cfg),
        }
    }
}

/// Writes every fixture and `manifest.json` into `dir`; returns the manifest.
pub fn write_fixtures(dir: &Path) -> Result<Vec<ManifestEntry>> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.into(),
        source,
    })?;
    let mut manifest = Vec::new();
    for f in fixtures() {
        let file = format!("{}.onnx", f.name);
        crate::write(&f.cfg, &dir.join(&file))?;
        manifest.push(ManifestEntry::new(file, f.what, &f.cfg));
    }
    write_manifest(dir, &manifest)?;
    Ok(manifest)
}

/// Writes `manifest.json` (pretty, stable order) into `dir`.
pub fn write_manifest(dir: &Path, manifest: &[ManifestEntry]) -> Result<()> {
    let path = dir.join("manifest.json");
    let json = serde_json::to_string_pretty(manifest)
        .map_err(|e| Error::InvalidConfig(format!("manifest serialization: {e}")))?;
    std::fs::write(&path, json + "\n").map_err(|source| Error::Io { path, source })
}
