//! Every real export spelling the `models` builders emit, through the whole rule set: the two
//! fusion rules must take every site `models::expected_fusions` counts, and `mxquant` only the
//! o_proj inputs. One axis of [`models::Spelling`] is varied at a time from the MiniMax-M3
//! torch-export default, plus the combinations that interact (dtype × casts, MoE router).

use clap::ValueEnum;
use graph_rewrites::ir::Graph;
use graph_rewrites::pipeline::{run_pipeline, PipelineOptions, RewriteReport};
use graph_rewrites::view::GraphView;
use models::{
    AddOrder, DType, DecoderConfig, GammaForm, GateUpForm, NormSpelling, QuantSpelling,
    SwigluSpelling, WeightForm,
};

/// Builds `cfg`, rewrites it, and returns the report and the rewritten graph.
fn rewrite(cfg: &DecoderConfig) -> (RewriteReport, Graph) {
    let model = models::model_proto(cfg).expect("model builds");
    let mut g = Graph::from_model(model, None).expect("model loads");
    let opts = PipelineOptions {
        explain: true,
        ..Default::default()
    };
    let report = run_pipeline(&mut g, &opts).expect("pipeline runs");
    (report, g)
}

fn op_count(g: &Graph, op: &str) -> usize {
    g.nodes().iter().filter(|n| g.op_type(**n) == op).count()
}

/// Asserts the counts `models` expects, with the refusals in the message when they differ.
fn assert_fuses_all(cfg: &DecoderConfig) {
    let want = models::expected_fusions(cfg);
    let (report, g) = rewrite(cfg);
    let got = |r: &str| report.counts.get(r).copied().unwrap_or(0);
    let near: Vec<_> = report
        .near_misses
        .iter()
        .filter(|r| r.rule != "mxquant")
        .collect();
    let ctx = format!(
        "{:?} {:?}\nrejections: {:#?}\nnear misses: {near:#?}",
        cfg.dtype, cfg.spelling, report.rejections
    );
    assert_eq!(
        got("add_rmsnorm_mxquant"),
        want.add_rmsnorm_mxquant,
        "norm fusions, {ctx}"
    );
    assert_eq!(
        got("swiglu_mxquant_matmul"),
        want.swiglu_mxquant_matmul,
        "swiglu fusions, {ctx}"
    );
    assert_eq!(
        got("mxquant"),
        want.standalone_mxquant,
        "standalone quantizers, {ctx}"
    );
    // Nothing of the quantize spellings is left.
    for op in [
        "QuantizeLinear",
        "MXQuantizeDequantize",
        "Sigmoid",
        "QuickGelu",
        "Swish",
        "SwiGLU",
    ] {
        let left = op_count(&g, op);
        // The MoE router keeps its own Sigmoid.
        let allowed = if op == "Sigmoid" {
            cfg.n_layers.saturating_sub(cfg.first_dense_layers) * usize::from(cfg.n_experts > 0)
        } else {
            0
        };
        assert_eq!(left, allowed, "{op} left after the rewrite, {ctx}");
    }
    let left = want.allreduce - absorbed_allreduces(cfg);
    assert_eq!(op_count(&g, "AllReduce"), left, "AllReduce count, {ctx}");
}

/// AllReduces a norm fusion absorbs: every one in front of a residual Add (o_proj and MLP
/// outputs), except the MLP output of the last layer, which feeds the final (unquantized) norm.
fn absorbed_allreduces(cfg: &DecoderConfig) -> usize {
    if cfg.spelling.allreduce {
        2 * cfg.n_layers - 1
    } else {
        0
    }
}

fn quantized(quant: QuantSpelling) -> DecoderConfig {
    let mut cfg = DecoderConfig::tiny();
    cfg.spelling.quant = quant;
    cfg
}

#[test]
fn default_minimax_export_fuses_every_site() {
    assert_fuses_all(&DecoderConfig::tiny());
}

#[test]
fn every_quant_spelling_fuses() {
    for q in [
        QuantSpelling::StdFloor,
        QuantSpelling::StdRceilMul,
        QuantSpelling::StdRceilDiv,
        QuantSpelling::Quark,
    ] {
        for w in [WeightForm::Float, WeightForm::StdMx, WeightForm::Quark] {
            let mut cfg = quantized(q);
            cfg.spelling.weights = w;
            assert_fuses_all(&cfg);
        }
    }
}

#[test]
fn every_norm_spelling_and_gamma_form_fuses() {
    for &norm in NormSpelling::value_variants() {
        for &gamma in GammaForm::value_variants() {
            for first in [true, false] {
                let mut cfg = DecoderConfig::tiny();
                cfg.spelling.norm = norm;
                cfg.spelling.gamma = gamma;
                cfg.spelling.first_layer_without_residual = first;
                assert_fuses_all(&cfg);
            }
        }
    }
}

#[test]
fn every_swiglu_spelling_fuses() {
    for &s in SwigluSpelling::value_variants() {
        for &gu in GateUpForm::value_variants() {
            let mut cfg = DecoderConfig::tiny();
            cfg.spelling.swiglu = s;
            cfg.spelling.gate_up = gu;
            assert_fuses_all(&cfg);
        }
    }
}

#[test]
fn allreduce_and_add_order_fuse() {
    for norm in [NormSpelling::PowRecip, NormSpelling::SkipSimplified] {
        for order in [AddOrder::ResidualFirst, AddOrder::BranchFirst] {
            let mut cfg = DecoderConfig::tiny();
            cfg.spelling.norm = norm;
            cfg.spelling.add_order = order;
            cfg.spelling.allreduce = true;
            assert_fuses_all(&cfg);
        }
    }
}

#[test]
fn moe_router_keeps_reading_the_normed_tensor() {
    let mut cfg = DecoderConfig::tiny();
    cfg.n_experts = 2;
    cfg.shared_expert = true;
    assert_fuses_all(&cfg);
    let (_, g) = rewrite(&cfg);
    // The router MatMul reads the fused op's 4th output, which kept the norm's name.
    let normed = g
        .value_by_name("model.layers.1.post_attention_layernorm.out")
        .expect("normed kept");
    let (producer, slot) = g.producer(normed).expect("normed produced");
    assert_eq!((g.op_type(producer), slot), ("AddRmsNormMxQuant", 3));
}

/// f16/bf16 with the norm computed in fp32 between Casts, through each quantizer that takes the
/// dtype (Quark takes no bf16).
#[test]
fn half_precision_with_fp32_norm_casts_fuses() {
    let norms = [
        NormSpelling::PowRecip,
        NormSpelling::MulDiv,
        NormSpelling::RmsNormalization,
        NormSpelling::SkipSimplified,
    ];
    let dtypes = [
        (DType::F16, QuantSpelling::Quark),
        (DType::F16, QuantSpelling::StdFloor),
        (DType::Bf16, QuantSpelling::StdFloor),
    ];
    for (dt, quant) in dtypes {
        for norm in norms {
            for gamma in [
                GammaForm::Plain,
                GammaForm::GemmaAddOne,
                GammaForm::GemmaCastAddOne,
            ] {
                let mut cfg = quantized(quant);
                cfg.dtype = dt;
                cfg.spelling.norm = norm;
                cfg.spelling.norm_f32_casts = true;
                cfg.spelling.gamma = gamma;
                assert_fuses_all(&cfg);
            }
        }
    }
}
