//! Rule `swiglu_mxquant_matmul`: before/after on small built graphs, and one refusal per check
//! with its reason. (Every spelling of real exporters runs through the rule in
//! `tests/rules_matrix.rs`, built by the `models` crate.)

use graph_rewrites::ir::Graph;
use graph_rewrites::pattern::predicates::dtype::{FLOAT, FLOAT8E4M3FN, FLOAT8E8M0};
use graph_rewrites::pipeline::{run_pipeline, PipelineOptions, RewriteReport};
use graph_rewrites::testing::{first_node, node_attr, value_names, Attr, ModelBuilder};
use graph_rewrites::view::{AttrValue, GraphView, NodeId};

const I: i64 = 64;

/// Which activation spelling the test graph uses.
#[derive(Clone, Copy, PartialEq)]
enum Act {
    /// `Sigmoid(g) → Mul(g, σ) → Mul(·, up)`.
    SiluMul,
    /// Clip/Clip, `Mul(α) → Sigmoid → Mul`, `Add(β)`, `Mul`.
    Oai,
    /// OAI without the up clamp (neither SiLU nor OAI).
    OaiNoUpClip,
    /// OAI with the up clamp as `Max(Min(up, lim), lo)`.
    OaiMaxMin,
    /// OAI with the up clamp as `Min(Max(up, lo), lim)`.
    OaiMinMax,
    /// `com.microsoft::QuickGelu(α)·up`.
    QuickGelu,
    /// `silu(g)·σ(g)`: "up" is the Sigmoid inside the pattern.
    SiluTimesSigmoid,
}

#[derive(Clone)]
struct Case {
    act: Act,
    /// gate/up from `Split(gate_up)` instead of two inputs.
    split: bool,
    /// up is `[1, I]` (broadcast against gate `[4, I]`).
    broadcast_up: bool,
    /// The up clamp's lower bound (OAI): −limit unless changed.
    up_low: f32,
    /// Standard MX quantizer (with this scale constant and Cast round_mode) instead of Quark.
    standard: Option<(f32, &'static str)>,
    /// The activation is also a graph output.
    leak_act: bool,
    /// This OAI constant ("alpha", "beta", "lim") stored as `[1, 1, 1]` (rank 3, gate's 2), and
    /// whether the activation's `[4, I]` value_info (then wrong) is kept.
    wide: Option<(&'static str, bool)>,
    /// This OAI constant ("alpha", "beta", "lim", "lo") stored with these dims (its value
    /// repeated), and whether its last element is changed (a vector of unequal values). The
    /// gate is clamped by `Min` when it is "lim" (Clip takes scalar bounds only).
    vector: Option<(&'static str, &'static [i64], bool)>,
    /// Opset 10 (`Clip-6`: the bounds are `min` / `max` attributes), with the gate clamped by
    /// `Clip(max=L)` (true) or by `Min(gate, L)` (false). Needs `split: false` (Split-18's
    /// `num_outputs` does not exist there).
    clip6: Option<bool>,
}

impl Default for Case {
    fn default() -> Self {
        Case {
            act: Act::Oai,
            split: true,
            broadcast_up: false,
            up_low: -7.0,
            standard: None,
            leak_act: false,
            wide: None,
            vector: None,
            clip6: None,
        }
    }
}

/// gate/up → activation = `act` → MX quantize → MatMul(W[I,16]) = out.
fn build(c: &Case) -> ModelBuilder {
    let t = FLOAT;
    let mut b = ModelBuilder::new(if c.clip6.is_some() { 10 } else { 24 });
    b.opset("com.microsoft", 1).opset("com.amd.quark", 1);
    let up_shape: &[i64] = if c.broadcast_up { &[1, I] } else { &[4, I] };
    if c.split {
        b.input("gu", t, &[4, 2 * I]);
        b.node_in(
            "",
            "Split",
            &["gu"],
            &["gate", "up"],
            &[("axis", Attr::I(-1)), ("num_outputs", Attr::I(2))],
        );
        b.value_info("gate", t, &[4, I])
            .value_info("up", t, up_shape);
    } else {
        b.input("gate", t, &[4, I]).input("up", t, up_shape);
    }
    match c.act {
        Act::SiluMul => {
            b.node("Sigmoid", &["gate"], &["sg"])
                .node("Mul", &["gate", "sg"], &["silu"]);
            b.node("Mul", &["silu", "up"], &["act"]);
        }
        Act::SiluTimesSigmoid => {
            b.node("Sigmoid", &["gate"], &["sg"])
                .node("Mul", &["gate", "sg"], &["silu"]);
            b.node("Mul", &["silu", "sg"], &["act"]);
        }
        Act::QuickGelu => {
            b.node_in(
                "com.microsoft",
                "QuickGelu",
                &["gate"],
                &["qg"],
                &[("alpha", Attr::F(1.0))],
            );
            b.node("Mul", &["qg", "up"], &["act"]);
        }
        Act::Oai | Act::OaiNoUpClip | Act::OaiMaxMin | Act::OaiMinMax => {
            let mut init = |name: &str, v: f32| {
                let (dims, values): (&[i64], Vec<f32>) = match (c.wide, c.vector) {
                    (Some((w, _)), _) if w == name => (&[1, 1, 1], vec![v]),
                    (_, Some((w, dims, equal))) if w == name => {
                        let mut values = vec![v; dims.iter().product::<i64>() as usize];
                        if !equal {
                            *values.last_mut().unwrap() = v + 1.0;
                        }
                        (dims, values)
                    }
                    _ => (&[], vec![v]),
                };
                b.init_f32(name, dims, &values);
            };
            init("lim", 7.0);
            init("lo", c.up_low);
            init("alpha", 1.702);
            init("beta", 1.0);
            if let Some(clip_gate) = c.clip6 {
                if clip_gate {
                    b.node_in("", "Clip", &["gate"], &["gc"], &[("max", Attr::F(7.0))]);
                } else {
                    b.node("Min", &["gate", "lim"], &["gc"]);
                }
            } else if c.vector.is_some_and(|(w, ..)| w == "lim") {
                b.node("Min", &["gate", "lim"], &["gc"]);
            } else {
                b.node("Clip", &["gate", "", "lim"], &["gc"]);
            }
            let u = match c.act {
                Act::Oai if c.clip6.is_some() => {
                    let bounds = [("min", Attr::F(c.up_low)), ("max", Attr::F(7.0))];
                    b.node_in("", "Clip", &["up"], &["uc"], &bounds);
                    "uc"
                }
                Act::Oai => {
                    b.node("Clip", &["up", "lo", "lim"], &["uc"]);
                    "uc"
                }
                Act::OaiMaxMin => {
                    b.node("Min", &["up", "lim"], &["um"])
                        .node("Max", &["lo", "um"], &["uc"]);
                    "uc"
                }
                Act::OaiMinMax => {
                    b.node("Max", &["up", "lo"], &["um"])
                        .node("Min", &["um", "lim"], &["uc"]);
                    "uc"
                }
                _ => "up",
            };
            b.node("Mul", &["gc", "alpha"], &["ga"])
                .node("Sigmoid", &["ga"], &["sg"]);
            b.node("Mul", &["gc", "sg"], &["glu"])
                .node("Add", &[u, "beta"], &["u1"]);
            b.node("Mul", &["u1", "glu"], &["act"]);
        }
    }
    if c.wide.is_none_or(|(_, keep)| keep) {
        b.value_info("act", t, &[4, I]);
    }
    if c.leak_act {
        b.output("act", t, &[4, I]);
    }
    b.init_f32("w", &[I, 16], &vec![0.5; (I * 16) as usize]);
    match c.standard {
        None => {
            b.quark_fake_quant("act", "aq", 32, -1);
        }
        Some((k, round)) => {
            b.init_i64("bshape", &[3], &[0, I / 32, 32])
                .init_i64("axes", &[1], &[-1])
                .init_f32("k", &[], &[k]);
            b.node("Reshape", &["act", "bshape"], &["blk"])
                .node("Abs", &["blk"], &["ab"]);
            b.node_in(
                "",
                "ReduceMax",
                &["ab", "axes"],
                &["amax"],
                &[("keepdims", Attr::I(0))],
            );
            b.node("Mul", &["amax", "k"], &["s32"]);
            let cast = [
                ("to", Attr::I(FLOAT8E8M0 as i64)),
                ("round_mode", Attr::S(round)),
            ];
            b.node_in("", "Cast", &["s32"], &["scale"], &cast);
            let q = [
                ("axis", Attr::I(-1)),
                ("block_size", Attr::I(32)),
                ("output_dtype", Attr::I(FLOAT8E4M3FN as i64)),
            ];
            b.node_in("", "QuantizeLinear", &["act", "scale"], &["q"], &q);
            let d = [("axis", Attr::I(-1)), ("block_size", Attr::I(32))];
            b.node_in("", "DequantizeLinear", &["q", "scale"], &["aq"], &d);
        }
    }
    b.node("MatMul", &["aq", "w"], &["out"])
        .output("out", t, &[4, 16]);
    b
}

fn rewrite(c: &Case) -> (RewriteReport, Graph) {
    build(c).rewrite()
}

fn fused(g: &dyn GraphView) -> NodeId {
    first_node(g, "SwiGluMxQuant")
}

/// The refusal reason of `swiglu_mxquant_matmul`, asserting it did not fuse.
fn refusal(c: &Case) -> String {
    build(c).refusal("swiglu_mxquant_matmul")
}

#[test]
fn oai_from_split_becomes_swiglu_mxquant_and_mxmatmul() {
    let (report, g) = rewrite(&Case::default());
    assert_eq!(report.counts["swiglu_mxquant_matmul"], 1, "{report:#?}");
    let ops: Vec<&str> = g.nodes().iter().map(|n| g.op_type(*n)).collect();
    assert_eq!(ops, ["SwiGluMxQuant", "MxMatMul"]);
    let n = fused(&g);
    assert_eq!(value_names(&g, g.inputs(n)), ["gu"]);
    assert_eq!(
        node_attr(&g, n, "layout"),
        AttrValue::String("split_halves".into())
    );
    assert_eq!(
        node_attr(&g, n, "activation"),
        AttrValue::String("oai".into())
    );
    assert_eq!(node_attr(&g, n, "alpha"), AttrValue::Float(1.702));
    assert_eq!(node_attr(&g, n, "limit"), AttrValue::Float(7.0));
    assert_eq!(node_attr(&g, n, "beta"), AttrValue::Float(1.0));
    assert_eq!(
        node_attr(&g, n, "swish_form"),
        AttrValue::String("unrolled".into())
    );
    assert_eq!(node_attr(&g, n, "fp32_activation"), AttrValue::Int(0));
    // The MatMul output keeps its name.
    let out = g.value_by_name("out").unwrap();
    assert_eq!(g.op_type(g.producer(out).unwrap().0), "MxMatMul");
}

#[test]
fn silu_from_two_inputs_with_standard_rceil_quant() {
    let c = Case {
        act: Act::SiluMul,
        split: false,
        standard: Some((1.0 / 448.0, "up")),
        ..Case::default()
    };
    let (report, g) = rewrite(&c);
    assert_eq!(report.counts["swiglu_mxquant_matmul"], 1, "{report:#?}");
    let n = fused(&g);
    assert_eq!(value_names(&g, g.inputs(n)), ["gate", "up"]);
    assert_eq!(
        node_attr(&g, n, "layout"),
        AttrValue::String("separate".into())
    );
    assert_eq!(
        node_attr(&g, n, "activation"),
        AttrValue::String("silu".into())
    );
    assert_eq!(node_attr(&g, n, "alpha"), AttrValue::Float(1.0));
    assert_eq!(
        node_attr(&g, n, "scale_rule"),
        AttrValue::String("rceil".into())
    );
    assert_eq!(
        node_attr(&g, n, "nan_policy"),
        AttrValue::String("propagate".into())
    );
}

#[test]
fn quick_gelu_is_one_rounding() {
    let (report, g) = rewrite(&Case {
        act: Act::QuickGelu,
        ..Case::default()
    });
    assert_eq!(report.counts["swiglu_mxquant_matmul"], 1, "{report:#?}");
    let n = fused(&g);
    assert_eq!(
        node_attr(&g, n, "swish_form"),
        AttrValue::String("single_op".into())
    );
    assert_eq!(node_attr(&g, n, "alpha"), AttrValue::Float(1.0));
}

#[test]
fn fp32_activation_setting_reaches_the_op() {
    let mut g = build(&Case::default()).graph().unwrap();
    let mut opts = PipelineOptions::default();
    opts.settings
        .insert("swiglu_fp32_activation".into(), "1".into());
    run_pipeline(&mut g, &opts).unwrap();
    assert_eq!(
        node_attr(&g, fused(&g), "fp32_activation"),
        AttrValue::Int(1)
    );
}

// ---- one refusal per check ----

#[test]
fn refuses_broadcasting_gate_and_up() {
    let why = refusal(&Case {
        act: Act::SiluMul,
        split: false,
        broadcast_up: true,
        ..Case::default()
    });
    assert!(
        why.contains("must have the same shape") && why.contains("no broadcast"),
        "{why}"
    );
}

/// The up clamp spelled as two ops (Min then Max or Max then Min) is the same clamp as
/// `Clip(up, -L, L)` (also for NaN, in ORT): it fuses as OAI; asymmetric bounds are refused.
#[test]
fn oai_up_clamp_as_min_max_fuses() {
    for act in [Act::OaiMaxMin, Act::OaiMinMax] {
        let (report, g) = rewrite(&Case {
            act,
            ..Case::default()
        });
        assert_eq!(report.counts["swiglu_mxquant_matmul"], 1, "{report:#?}");
        let n = fused(&g);
        assert_eq!(
            node_attr(&g, n, "activation"),
            AttrValue::String("oai".into())
        );
        assert_eq!(node_attr(&g, n, "limit"), AttrValue::Float(7.0));
        let why = refusal(&Case {
            act,
            up_low: -6.0,
            ..Case::default()
        });
        assert!(why.contains("are not ±7"), "{why}");
    }
}

/// α, the limit or β stored with more dims than gate (`[1, 1, 1]` for a `[4, I]` gate)
/// broadcasts the activation to `[1, 4, I]`, which the fused op does not write: refused, by the
/// activation's inferred shape or, where a value_info states the un-broadcast shape, by the
/// constant's rank. Before, it fused and the linear's output lost a dim (new-user probe 11: a
/// decoder with `[1, 1, 1, 1]` SwiGLU-OAI constants rewrote to a model ORT could not load).
#[test]
fn refuses_a_constant_that_broadcasts_the_activation_to_more_dims() {
    for name in ["alpha", "beta", "lim"] {
        for keep in [false, true] {
            let why = refusal(&Case {
                wide: Some((name, keep)),
                ..Case::default()
            });
            // (Clip takes scalar bounds, so its inferred output keeps gate's shape: the limit
            // is refused by its rank either way.)
            let expected = if keep || name == "lim" {
                "has rank 3, gate 2"
            } else {
                "is not gate's shape"
            };
            assert!(why.contains(expected), "{name} {keep}: {why}");
        }
    }
    // Scalar constants keep gate's shape: fused.
    let (report, _) = rewrite(&Case::default());
    assert_eq!(report.counts["swiglu_mxquant_matmul"], 1, "{report:#?}");
}

/// α, the limit, the up clamp's lower bound or β stored as a vector of one repeated value (an
/// export's `[I]` α = 1.702, limit 7) computes what the scalar does: fused with the same
/// attributes, also as `[1, I]`. Unequal values are refused with the reason (probe 11 left
/// every vector refused as "not a readable scalar constant").
#[test]
fn a_vector_of_one_repeated_alpha_limit_or_beta_fuses_as_the_scalar() {
    for name in ["alpha", "beta", "lim", "lo"] {
        for dims in [&[I][..], &[1, I]] {
            let case = Case {
                act: Act::OaiMaxMin,
                vector: Some((name, dims, true)),
                ..Case::default()
            };
            let (report, g) = rewrite(&case);
            assert_eq!(
                report.counts["swiglu_mxquant_matmul"], 1,
                "{name}: {report:#?}"
            );
            let n = fused(&g);
            assert_eq!(node_attr(&g, n, "alpha"), AttrValue::Float(1.702), "{name}");
            assert_eq!(node_attr(&g, n, "limit"), AttrValue::Float(7.0), "{name}");
            assert_eq!(node_attr(&g, n, "beta"), AttrValue::Float(1.0), "{name}");
            let why = refusal(&Case {
                vector: Some((name, dims, false)),
                ..case
            });
            assert!(why.contains("that are not all equal"), "{name}: {why}");
        }
    }
    // A vector that would broadcast gate's [4, I] to more rows than it has is not the scalar.
    let why = refusal(&Case {
        act: Act::OaiMaxMin,
        vector: Some(("alpha", &[2, 1, I], true)),
        ..Case::default()
    });
    assert!(
        why.contains("does not broadcast into gate's shape"),
        "{why}"
    );
}

#[test]
fn refuses_partial_oai() {
    let why = refusal(&Case {
        act: Act::OaiNoUpClip,
        ..Case::default()
    });
    assert!(why.contains("partial SwiGLU-OAI"), "{why}");
}

/// Opset < 11: Clip-6 holds its bounds as attributes. The up clamp `Clip(min=-L, max=L)` is
/// the clamp the fused op computes (it was refused: the bounds were read from inputs only,
/// found none, "bounds (None, None) are not ±7").
#[test]
fn oai_up_clamp_as_clip_6_attributes_fuses() {
    let c = Case {
        split: false,
        clip6: Some(false),
        ..Case::default()
    };
    let (report, g) = rewrite(&c);
    assert_eq!(report.counts["swiglu_mxquant_matmul"], 1, "{report:#?}");
    let n = fused(&g);
    assert_eq!(
        node_attr(&g, n, "activation"),
        AttrValue::String("oai".into())
    );
    assert_eq!(node_attr(&g, n, "limit"), AttrValue::Float(7.0));
    let why = refusal(&Case {
        up_low: -6.0,
        ..c.clone()
    });
    assert!(why.contains("are not ±7"), "{why}");
}

/// A Clip-6 gate clamp `Clip(max=L)` is not SwiGLU-OAI's: its absent `min` is the schema's
/// default, the lowest float, so -inf becomes -FLT_MAX (and g·σ(αg) -0, not NaN). Refused
/// with that reason (it was "has no upper bound": the stated `max` attribute went unread).
#[test]
fn refuses_a_clip_6_gate_clamp_for_its_default_lower_bound() {
    let why = refusal(&Case {
        split: false,
        clip6: Some(true),
        ..Case::default()
    });
    assert!(
        why.contains("has a lower bound") && why.contains("Clip-6's default min"),
        "{why}"
    );
}

#[test]
fn refuses_asymmetric_up_clamp() {
    let why = refusal(&Case {
        up_low: -6.0,
        ..Case::default()
    });
    assert!(why.contains("are not ±7"), "{why}");
}

#[test]
fn refuses_unknown_scale_rule() {
    // Mul(2^-8) is the floor rule's constant, but round_mode=up is RCEIL's rounding.
    let why = refusal(&Case {
        standard: Some((2f32.powi(-8), "up")),
        ..Case::default()
    });
    assert!(why.contains("not a known MX scale rule"), "{why}");
}

#[test]
fn refuses_escaping_activation() {
    let why = refusal(&Case {
        leak_act: true,
        ..Case::default()
    });
    assert!(why.contains("'act' is a graph output"), "{why}");
}

#[test]
fn refuses_reading_a_value_the_fusion_removes() {
    let why = refusal(&Case {
        act: Act::SiluTimesSigmoid,
        split: false,
        ..Case::default()
    });
    assert!(why.contains("is computed inside the fusion"), "{why}");
}
