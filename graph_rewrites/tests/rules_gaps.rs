//! Spellings and refusals added after the first rule set: gate/up taken by `Slice`s (halves and
//! the interleaved even/odd layout; sources the fused op cannot read as one tensor fall back to
//! `separate`), the Skip norm's bias input, an AllReduce with other readers on the Skip path, and
//! the single-op norms' `stash_type` / `axis`. Each case is a small built graph; numeric
//! equivalence of the new spellings is checked in `tests/numeric_rules.rs`.

use graph_rewrites::pattern::predicates::dtype::FLOAT;
use graph_rewrites::testing::{op_types, Attr, ModelBuilder};
use graph_rewrites::view::{AttrValue, GraphView, NodeId};

const I: i64 = 64;
const H: i64 = 64;
const OPEN_END: i64 = i64::MAX;

fn only(g: &dyn GraphView, op: &str) -> NodeId {
    let found: Vec<NodeId> = g
        .nodes()
        .iter()
        .copied()
        .filter(|n| g.op_type(*n) == op)
        .collect();
    assert_eq!(found.len(), 1, "one {op} expected");
    found[0]
}

/// Quark MX fake quant of `x [4, k]` → MatMul(W[k, 16]) = out.
fn quark_matmul(b: &mut ModelBuilder, x: &str, k: i64) {
    b.quark_fake_quant(x, "xq", 32, -1);
    b.init_f32("w", &[k, 16], &vec![0.25; (k * 16) as usize]);
    b.node("MatMul", &["xq", "w"], &["out"])
        .output("out", FLOAT, &[4, 16]);
}

// ---- gate/up by Slice ----

/// One Slice: `(starts, ends, axes, steps)`; `None` leaves the optional input out.
#[derive(Clone)]
struct Sl {
    starts: Vec<i64>,
    ends: Vec<i64>,
    axes: Option<Vec<i64>>,
    steps: Option<Vec<i64>>,
}

fn sl(start: i64, end: i64, step: i64) -> Sl {
    Sl {
        starts: vec![start],
        ends: vec![end],
        axes: Some(vec![-1]),
        steps: Some(vec![step]),
    }
}

/// What gate and up are.
enum Src {
    /// Both sliced from `gu [4, 2I]`.
    Slices(Sl, Sl),
    /// gate sliced from `gu`, up a separate input.
    GateSliceOnly(Sl),
    /// Slice-1 (opset 9): bounds as attributes.
    AttrSlices { gate: (i64, i64), up: (i64, i64) },
    /// gate's `starts` is a graph input.
    RuntimeStarts,
    /// Split-11 (opset 11) with these sizes as its `split` attribute.
    SplitAttr(Vec<i64>),
}

/// `gu → Slice, Slice (or gate/up inputs) → SiLU·up → Quark MX → MatMul`.
fn slice_model(src: Src) -> ModelBuilder {
    let opset = match src {
        Src::AttrSlices { .. } => 9,
        Src::SplitAttr(_) => 11,
        _ => 18,
    };
    let mut b = ModelBuilder::new(opset);
    b.opset("com.amd.quark", 1);
    b.input("gu", FLOAT, &[4, 2 * I]);
    let slice = |b: &mut ModelBuilder, what: &str, s: &Sl| {
        let names = ["starts", "ends", "axes", "steps"].map(|k| format!("{what}_{k}"));
        b.init_i64(&names[0], &[s.starts.len() as i64], &s.starts)
            .init_i64(&names[1], &[s.ends.len() as i64], &s.ends);
        let mut ins = vec!["gu", names[0].as_str(), names[1].as_str()];
        if let Some(a) = &s.axes {
            b.init_i64(&names[2], &[a.len() as i64], a);
        }
        if let Some(st) = &s.steps {
            b.init_i64(&names[3], &[st.len() as i64], st);
        }
        match (&s.axes, &s.steps) {
            (Some(_), Some(_)) => ins.extend([names[2].as_str(), names[3].as_str()]),
            (Some(_), None) => ins.push(names[2].as_str()),
            (None, Some(_)) => ins.extend(["", names[3].as_str()]),
            (None, None) => {}
        }
        b.node("Slice", &ins, &[what]);
    };
    match &src {
        Src::Slices(g, u) => {
            slice(&mut b, "gate", g);
            slice(&mut b, "up", u);
        }
        Src::GateSliceOnly(g) => {
            slice(&mut b, "gate", g);
            b.input("up", FLOAT, &[4, I]);
        }
        Src::AttrSlices { gate, up } => {
            for (what, (s, e)) in [("gate", gate), ("up", up)] {
                let attrs = [
                    ("starts", Attr::Is(&[*s])),
                    ("ends", Attr::Is(&[*e])),
                    ("axes", Attr::Is(&[1])),
                ];
                b.node_in("", "Slice", &["gu"], &[what], &attrs);
            }
        }
        Src::SplitAttr(sizes) => {
            let attrs = [("axis", Attr::I(1)), ("split", Attr::Is(sizes))];
            b.node_in("", "Split", &["gu"], &["gate", "up"], &attrs);
        }
        Src::RuntimeStarts => {
            b.input("gate_starts", 7, &[1]);
            b.init_i64("ends", &[1], &[OPEN_END])
                .init_i64("axes", &[1], &[-1])
                .init_i64("steps", &[1], &[2])
                .init_i64("up_starts", &[1], &[1]);
            b.node(
                "Slice",
                &["gu", "gate_starts", "ends", "axes", "steps"],
                &["gate"],
            )
            .node(
                "Slice",
                &["gu", "up_starts", "ends", "axes", "steps"],
                &["up"],
            );
        }
    }
    b.value_info("gate", FLOAT, &[4, I])
        .value_info("up", FLOAT, &[4, I]);
    b.node("Sigmoid", &["gate"], &["sg"])
        .node("Mul", &["gate", "sg"], &["silu"])
        .node("Mul", &["silu", "up"], &["act"])
        .value_info("act", FLOAT, &[4, I]);
    quark_matmul(&mut b, "act", I);
    b
}

fn fused_layout(src: Src) -> (Vec<String>, AttrValue) {
    let (report, g) = slice_model(src).rewrite();
    assert_eq!(report.counts["swiglu_mxquant_matmul"], 1, "{report:#?}");
    let n = only(&g, "SwiGluMxQuant");
    let ins = g
        .inputs(n)
        .iter()
        .map(|v| v.map_or(String::new(), |v| g.value_name(v).to_string()))
        .collect();
    (ins, g.attr(n, "layout").expect("layout"))
}

#[test]
fn even_odd_slices_become_the_interleaved_layout() {
    let (ins, layout) = fused_layout(Src::Slices(sl(0, OPEN_END, 2), sl(1, OPEN_END, 2)));
    assert_eq!(ins, ["gu"]);
    assert_eq!(layout, AttrValue::String("interleaved".into()));
    // Bounds written as 2I, or counted from the end, select the same elements.
    let (_, layout) = fused_layout(Src::Slices(sl(-2 * I, 2 * I, 2), sl(1, 2 * I + 5, 2)));
    assert_eq!(layout, AttrValue::String("interleaved".into()));
}

#[test]
fn half_slices_become_split_halves() {
    let (ins, layout) = fused_layout(Src::Slices(sl(0, I, 1), sl(I, OPEN_END, 1)));
    assert_eq!(ins, ["gu"]);
    assert_eq!(layout, AttrValue::String("split_halves".into()));
    // No steps input; up counted from the end; gate's Slice also lists axis 0, kept whole.
    let gate = Sl {
        starts: vec![0, 0],
        ends: vec![OPEN_END, I],
        axes: Some(vec![0, 1]),
        steps: None,
    };
    let up = Sl {
        steps: None,
        ..sl(-I, OPEN_END, 1)
    };
    let (_, layout) = fused_layout(Src::Slices(gate, up));
    assert_eq!(layout, AttrValue::String("split_halves".into()));
}

#[test]
fn slice_1_attributes_are_read() {
    let (_, layout) = fused_layout(Src::AttrSlices {
        gate: (0, I),
        up: (I, 2 * I),
    });
    assert_eq!(layout, AttrValue::String("split_halves".into()));
}

/// Sources the fused op cannot read as one tensor: gate and up are read as they are
/// (`separate`) and their Slices / Split stay in the graph — a fusion, never a refusal.
#[test]
fn unabsorbable_sources_fuse_as_separate_inputs() {
    let leak_gate = |mut b: ModelBuilder| {
        b.output("gate", FLOAT, &[4, I]);
        b
    };
    let cases = [
        (
            "up on the even elements",
            slice_model(Src::Slices(sl(1, OPEN_END, 2), sl(0, OPEN_END, 2))),
        ),
        (
            "halves overlapping by one",
            slice_model(Src::Slices(sl(0, I + 1, 1), sl(I, OPEN_END, 1))),
        ),
        (
            "backward slices",
            slice_model(Src::Slices(sl(-1, -2 * I - 1, -2), sl(-2, -2 * I - 1, -2))),
        ),
        ("run-time starts", slice_model(Src::RuntimeStarts)),
        (
            "a Slice on one side only",
            slice_model(Src::GateSliceOnly(sl(0, OPEN_END, 2))),
        ),
        (
            "gate Slice also a graph output",
            leak_gate(slice_model(Src::Slices(
                sl(0, OPEN_END, 2),
                sl(1, OPEN_END, 2),
            ))),
        ),
        (
            "Split output also a graph output",
            leak_gate(slice_model(Src::SplitAttr(vec![I, I]))),
        ),
    ];
    for (what, b) in cases {
        let (report, g) = b.rewrite();
        assert_eq!(
            report.counts["swiglu_mxquant_matmul"], 1,
            "{what}: {report:#?}"
        );
        let n = only(&g, "SwiGluMxQuant");
        assert_eq!(
            g.attr(n, "layout"),
            Some(AttrValue::String("separate".into())),
            "{what}"
        );
        let ins: Vec<&str> = g
            .inputs(n)
            .iter()
            .map(|v| g.value_name(v.expect("input")))
            .collect();
        assert_eq!(ins, ["gate", "up"], "{what}");
        let kept = op_types(&g)
            .iter()
            .filter(|o| *o == "Slice" || *o == "Split")
            .count();
        assert!(kept >= 1, "{what}: the gate source stays");
    }
}

#[test]
fn split_11_sizes_attribute_is_read() {
    let (ins, layout) = fused_layout(Src::SplitAttr(vec![I, I]));
    assert_eq!(ins, ["gu"]);
    assert_eq!(layout, AttrValue::String("split_halves".into()));
}

// ---- single-op norms ----

/// How the norm before the quantizer is spelled.
enum Norm {
    /// `com.microsoft::SkipSimplifiedLayerNormalization(a, b, γ [, bias])`.
    Skip { bias: bool, ar: SkipAr },
    /// `RMSNormalization(sum, γ)` (opset 23) with these attributes.
    RmsNormalization {
        stash_type: Option<i64>,
        axis: Option<i64>,
    },
    /// ONNX-domain `SimplifiedLayerNormalization(sum, γ, axis)`.
    Simplified { axis: i64 },
    /// `Add(AllReduce(x), residual) → RMSNormalization`, AllReduce also read elsewhere.
    AddSharedAllReduce,
}

/// The AllReduce around the Skip norm's operands.
#[derive(Clone, Copy, PartialEq)]
enum SkipAr {
    None,
    /// `AllReduce(x)` as input 0, also read by another node.
    Shared,
    /// `AllReduce(x)` as input 0 (only the norm reads it) and the residual `AllReduce(r)` as
    /// input 1, also read by another node (a first layer's embedding).
    SoleAndSharedResidual,
}

/// `x, residual [4, H] → norm → Quark MX → MatMul`; a skip norm's sum (output 3) is a graph
/// output, as is an Add's.
fn norm_model(norm: Norm) -> ModelBuilder {
    let mut b = ModelBuilder::new(23);
    b.opset("com.microsoft", 1).opset("com.amd.quark", 1);
    b.input("x", FLOAT, &[4, H])
        .input("residual", FLOAT, &[4, H]);
    b.init_f32("gamma", &[H], &vec![1.5; H as usize]);
    let allreduce = |b: &mut ModelBuilder, x: &str, out: &str, shared: bool| {
        b.node_in("com.microsoft", "AllReduce", &[x], &[out], &[])
            .value_info(out, FLOAT, &[4, H]);
        if shared {
            let other = format!("{out}_other");
            b.node("Relu", &[out], &[&other])
                .output(&other, FLOAT, &[4, H]);
        }
    };
    match norm {
        Norm::Skip { bias, ar } => {
            let (a, r) = match ar {
                SkipAr::None => ("x", "residual"),
                SkipAr::Shared => {
                    allreduce(&mut b, "x", "x_ar", true);
                    ("x_ar", "residual")
                }
                SkipAr::SoleAndSharedResidual => {
                    allreduce(&mut b, "x", "x_ar", false);
                    allreduce(&mut b, "residual", "res_ar", true);
                    ("x_ar", "res_ar")
                }
            };
            let mut ins = vec![a, r, "gamma"];
            if bias {
                b.init_f32("bias", &[H], &vec![0.125; H as usize]);
                ins.push("bias");
            }
            b.node_in(
                "com.microsoft",
                "SkipSimplifiedLayerNormalization",
                &ins,
                &["y", "", "", "sum"],
                &[("epsilon", Attr::F(1e-6))],
            );
            b.output("sum", FLOAT, &[4, H]);
        }
        Norm::RmsNormalization { stash_type, axis } => {
            b.node("Add", &["x", "residual"], &["sum"])
                .output("sum", FLOAT, &[4, H]);
            let mut attrs = vec![("epsilon", Attr::F(1e-6))];
            if let Some(s) = stash_type {
                attrs.push(("stash_type", Attr::I(s)));
            }
            if let Some(a) = axis {
                attrs.push(("axis", Attr::I(a)));
            }
            b.node_in("", "RMSNormalization", &["sum", "gamma"], &["y"], &attrs);
        }
        Norm::Simplified { axis } => {
            b.node("Add", &["x", "residual"], &["sum"])
                .output("sum", FLOAT, &[4, H]);
            let attrs = [("epsilon", Attr::F(1e-6)), ("axis", Attr::I(axis))];
            b.node_in(
                "",
                "SimplifiedLayerNormalization",
                &["sum", "gamma"],
                &["y"],
                &attrs,
            );
        }
        Norm::AddSharedAllReduce => {
            allreduce(&mut b, "x", "x_ar", true);
            b.node("Add", &["x_ar", "residual"], &["sum"])
                .output("sum", FLOAT, &[4, H]);
            let attrs = [("epsilon", Attr::F(1e-6))];
            b.node_in("", "RMSNormalization", &["sum", "gamma"], &["y"], &attrs);
        }
    }
    b.value_info("y", FLOAT, &[4, H]);
    quark_matmul(&mut b, "y", H);
    b
}

const NORM: &str = "add_rmsnorm_mxquant";

#[test]
fn skip_norm_without_bias_fuses() {
    let (report, g) = norm_model(Norm::Skip {
        bias: false,
        ar: SkipAr::None,
    })
    .rewrite();
    assert_eq!(report.counts[NORM], 1, "{report:#?}");
    let n = only(&g, "AddRmsNormMxQuant");
    assert_eq!(g.attr(n, "inv_form"), Some(AttrValue::String("div".into())));
}

#[test]
fn refuses_skip_norm_with_bias() {
    let b = norm_model(Norm::Skip {
        bias: true,
        ar: SkipAr::None,
    });
    let why = b.refusal(NORM);
    assert!(
        why.contains("has a bias input 'bias'") && why.contains("no bias operand"),
        "{why}"
    );
    let (_, g) = b.rewrite();
    only(&g, "SkipSimplifiedLayerNormalization");
}

/// An AllReduce that something else reads cannot be absorbed; the Skip path refuses the site
/// exactly like the Add path instead of fusing around it.
#[test]
fn shared_allreduce_is_refused_on_the_skip_and_the_add_path() {
    for (what, norm) in [
        (
            "skip",
            Norm::Skip {
                bias: false,
                ar: SkipAr::Shared,
            },
        ),
        ("add", Norm::AddSharedAllReduce),
    ] {
        let b = norm_model(norm);
        let why = b.refusal(NORM);
        assert!(
            why.contains("collective AllReduce") && why.contains("reader outside the fusion"),
            "{what}: {why}"
        );
        let (_, g) = b.rewrite();
        only(&g, "AllReduce");
        assert!(
            !op_types(&g).iter().any(|o| o == "AddRmsNormMxQuant"),
            "{what}"
        );
    }
}

/// First layer: the residual operand is the embedding's AllReduce (read elsewhere too); the
/// branch AllReduce, read only by the norm, is the one absorbed.
#[test]
fn skip_norm_absorbs_the_single_use_allreduce_next_to_a_shared_one() {
    let (report, g) = norm_model(Norm::Skip {
        bias: false,
        ar: SkipAr::SoleAndSharedResidual,
    })
    .rewrite();
    assert_eq!(report.counts[NORM], 1, "{report:#?}");
    let n = only(&g, "AddRmsNormMxQuant");
    assert_eq!(g.attr(n, "allreduce"), Some(AttrValue::Int(1)));
    let ins: Vec<&str> = g.inputs(n)[..2]
        .iter()
        .map(|v| g.value_name(v.expect("input")))
        .collect();
    assert_eq!(ins, ["x", "res_ar"]);
    // The embedding's AllReduce stays; the branch's is gone.
    let ar = only(&g, "AllReduce");
    assert_eq!(g.value_name(g.outputs(ar)[0]), "res_ar");
}

#[test]
fn rms_normalization_stash_type_must_be_fp32() {
    let ok = norm_model(Norm::RmsNormalization {
        stash_type: Some(1),
        axis: None,
    });
    assert_eq!(ok.rewrite().0.counts[NORM], 1);
    let why = norm_model(Norm::RmsNormalization {
        stash_type: Some(0),
        axis: None,
    })
    .refusal(NORM);
    assert!(
        why.contains("stash_type=0") && why.contains("only fp32 computation (1)"),
        "{why}"
    );
}

#[test]
fn single_op_norms_must_normalize_only_the_last_axis() {
    // axis = rank - 1 is the last axis written positively.
    let last = norm_model(Norm::RmsNormalization {
        stash_type: None,
        axis: Some(1),
    });
    assert_eq!(last.rewrite().0.counts[NORM], 1);
    for norm in [
        Norm::RmsNormalization {
            stash_type: None,
            axis: Some(0),
        },
        Norm::RmsNormalization {
            stash_type: None,
            axis: Some(-2),
        },
        Norm::Simplified { axis: 0 },
    ] {
        let why = norm_model(norm).refusal(NORM);
        assert!(why.contains("not only the last axis"), "{why}");
    }
}

// ---- decomposed norm as torch exports it at opset 13 ----

/// f16 `x → Cast(f32) → Pow → ReduceMean(axes attribute, opset 13) → Add(eps) → Sqrt →
/// Reciprocal → Mul → Mul(·, Add(1, Cast(w_f16))) → Cast(f16)` (torch's Gemma
/// `(1.0 + weight.float())`), quantized for a MatMul.
fn opset13_gemma_norm(axes: &[i64]) -> ModelBuilder {
    const F16: i32 = 10;
    let mut b = ModelBuilder::new(13);
    b.opset("com.amd.quark", 1);
    b.input("x", F16, &[4, H]);
    // f16 γ bytes of 0.5 (0x3800).
    b.init_raw("w", F16, &[H], [0x00, 0x38].repeat(H as usize));
    b.init_f32("two", &[], &[2.0])
        .init_f32("eps", &[], &[1e-6])
        .init_f32("one", &[], &[1.0]);
    let to_f32 = [("to", Attr::I(FLOAT as i64))];
    b.node_in("", "Cast", &["x"], &["xf"], &to_f32)
        .node("Pow", &["xf", "two"], &["sq"]);
    let rm = [("axes", Attr::Is(axes)), ("keepdims", Attr::I(1))];
    b.node_in("", "ReduceMean", &["sq"], &["ms"], &rm)
        .node("Add", &["ms", "eps"], &["ve"])
        .node("Sqrt", &["ve"], &["sd"])
        .node("Reciprocal", &["sd"], &["inv"])
        .node("Mul", &["xf", "inv"], &["n"]);
    b.node_in("", "Cast", &["w"], &["wf"], &to_f32)
        .node("Add", &["one", "wf"], &["g1"])
        .node("Mul", &["n", "g1"], &["yf"]);
    b.node_in("", "Cast", &["yf"], &["y"], &[("to", Attr::I(F16 as i64))]);
    for (v, t, d) in [
        ("xf", FLOAT, [4, H]),
        ("sq", FLOAT, [4, H]),
        ("ms", FLOAT, [4, 1]),
        ("ve", FLOAT, [4, 1]),
        ("sd", FLOAT, [4, 1]),
        ("inv", FLOAT, [4, 1]),
        ("n", FLOAT, [4, H]),
        ("yf", FLOAT, [4, H]),
        ("y", F16, [4, H]),
    ] {
        b.value_info(v, t, &d);
    }
    b.value_info("wf", FLOAT, &[H])
        .value_info("g1", FLOAT, &[H]);
    b.quark_fake_quant("y", "yq", 32, -1);
    b.init_raw("wm", F16, &[H, 16], [0x00, 0x34].repeat((H * 16) as usize));
    b.node("MatMul", &["yq", "wm"], &["out"])
        .output("out", F16, &[4, 16]);
    b
}

#[test]
fn opset13_reduce_mean_axes_attribute_and_cast_gemma_weight_fuse() {
    let (report, g) = opset13_gemma_norm(&[-1]).rewrite();
    assert_eq!(report.counts[NORM], 1, "{report:#?}");
    let n = only(&g, "AddRmsNormMxQuant");
    assert_eq!(g.attr(n, "gemma"), Some(AttrValue::Int(1)));
    assert_eq!(g.attr(n, "gamma_in_f32"), Some(AttrValue::Int(1)));
    // γ is the f32 cast of w (the Cast stays: the fused op forms 1 + γ in fp32 itself).
    // Inputs: x, no residual (a first layer), γ.
    let gamma = g.inputs(n)[2].expect("gamma");
    assert_eq!(g.value_name(gamma), "wf");
    let why = opset13_gemma_norm(&[0]).refusal(NORM);
    assert!(why.contains("are not the last axis"), "{why}");
}

// ---- single-op norm kept in fp32 between Casts ----

/// `x + residual` (T) → `Cast(f32)` → `op(·, γ)` (γ of `gamma_type`) → `Cast(T)` → Quark MX →
/// MatMul: the form fp16 conversions give a norm they keep in fp32.
fn cast_norm_model(op: &str, t: i32, gamma_type: i32, norm_out: i32) -> ModelBuilder {
    let mut b = ModelBuilder::new(23);
    b.opset("com.amd.quark", 1);
    b.input("x", t, &[4, H]).input("residual", t, &[4, H]);
    b.init_raw("gamma", gamma_type, &[H], vec![0; (H * 4) as usize]);
    b.node("Add", &["x", "residual"], &["sum"])
        .output("sum", t, &[4, H]);
    b.node_in(
        "",
        "Cast",
        &["sum"],
        &["sum_f32"],
        &[("to", Attr::I(FLOAT as i64))],
    );
    let attrs = [("epsilon", Attr::F(1e-6))];
    b.node_in("", op, &["sum_f32", "gamma"], &["y_f32"], &attrs)
        .value_info("y_f32", norm_out, &[4, H]);
    b.node_in("", "Cast", &["y_f32"], &["y"], &[("to", Attr::I(t as i64))])
        .value_info("y", t, &[4, H]);
    b.quark_fake_quant("y", "yq", 32, -1);
    b.init_raw("w", t, &[H, 16], vec![0; (H * 16 * 2) as usize]);
    b.node("MatMul", &["yq", "w"], &["out"])
        .output("out", t, &[4, 16]);
    b
}

/// The Casts are absorbed (the fused op computes in fp32 and rounds y once); a norm writing
/// float16 between them is refused.
#[test]
fn single_op_norm_between_casts_fuses() {
    use graph_rewrites::pattern::predicates::dtype::{BFLOAT16, FLOAT16};
    for op in ["RMSNormalization", "SimplifiedLayerNormalization"] {
        for t in [FLOAT16, BFLOAT16] {
            let (report, g) = cast_norm_model(op, t, FLOAT, FLOAT).rewrite();
            assert_eq!(report.counts[NORM], 1, "{op} {t}: {report:#?}");
            assert!(
                !op_types(&g).iter().any(|o| o == "Cast" || o == op),
                "{:?}",
                op_types(&g)
            );
            let n = only(&g, "AddRmsNormMxQuant");
            assert_eq!(g.attr(n, "gamma_in_f32"), Some(AttrValue::Int(1)));
            assert_eq!(
                g.attr(n, "inv_form"),
                Some(AttrValue::String("rsqrt".into()))
            );
        }
        // RMSNormalization-23 writes its scale's type: a float16 γ gives a float16 y, rounded
        // before the Cast (to bfloat16: twice; to float16: a mixed-type op).
        for t in [BFLOAT16, FLOAT16] {
            let why = cast_norm_model(op, t, FLOAT16, FLOAT16).refusal(NORM);
            assert!(
                why.contains("between Casts writes float16, not float"),
                "{why}"
            );
        }
    }
}
