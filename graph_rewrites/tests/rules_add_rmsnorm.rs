//! Rule `add_rmsnorm_mxquant`: before/after on small built graphs, and one refusal per check
//! with its reason. (Every spelling × quantizer combination of real exporters runs through the
//! rule in `tests/rules_matrix.rs`, built by the `models` crate.)

use graph_rewrites::ir::Graph;
use graph_rewrites::pattern::predicates::dtype::{
    DOUBLE, FLOAT, FLOAT16, FLOAT8E4M3FN, FLOAT8E8M0, INT64,
};
use graph_rewrites::pipeline::RewriteReport;
use graph_rewrites::testing::{first_node, node_attr, value_names, Attr, ModelBuilder};
use graph_rewrites::view::{AttrValue, Dim, GraphView, NodeId};

const H: i64 = 64;

/// How the test graph is spelled; `Default` is the torch-dynamo f32 export with a residual Add
/// and a Quark quantizer feeding one MatMul.
#[derive(Clone)]
struct Case {
    dtype: i32,
    /// Last dim (H); -1 = unknown.
    h: i64,
    residual: bool,
    /// 0 = none; 1 = `AllReduce(x)`; 2 = `AllReduce(x, x2)`.
    allreduce_inputs: usize,
    /// Something else reads the AllReduce output.
    allreduce_extra_reader: bool,
    /// Residual operand shape `[1, H]` (broadcast) instead of `[4, H]`.
    broadcast_residual: bool,
    /// `Add(AllReduce(x), AllReduce(x))`: the residual is the absorbed AllReduce's output.
    add_self: bool,
    /// The residual is itself an AllReduce output that something else reads too (a first
    /// layer's embedding AllReduce, also read by the input norm).
    residual_allreduce: bool,
    /// Epsilon as a graph input instead of an initializer.
    eps_input: bool,
    /// No `Add(eps)` at all (eps = 0; what ORT's optimizer leaves of an `Add(ms, 0)`).
    no_eps: bool,
    pow_exponent: f32,
    /// `Sqrt → Div` instead of `Sqrt → Reciprocal → Mul`.
    div: bool,
    /// `Div(c, Sqrt)` instead of `Reciprocal(Sqrt)`.
    recip_numerator: Option<f32>,
    /// `Pow(v, c)` instead of `Reciprocal(Sqrt(v))` (not with `div`).
    rsqrt_pow: Option<f32>,
    /// Gemma `Add(w, 1)` in front of the γ multiply.
    gemma_add: bool,
    gamma_len: i64,
    /// The reciprocal is also a graph output (an escaping interior value).
    leak_interior: bool,
    /// The normed tensor is also read by a float "router" MatMul.
    router: bool,
    quark_block: i64,
    quark_axis: i64,
    /// This one-element constant ("two", "eps", "one_num", "one", "count") stored as `[1, 1, 1]`
    /// (rank 3, the sum's 2).
    wide: Option<&'static str>,
    /// How the mean of squares is spelled.
    mean: MeanSpelling,
    /// The reduce's axis.
    reduce_axis: i64,
    /// The model's ONNX opset (a ReduceSum takes its axes as an attribute before 13).
    opset: i64,
}

/// The mean of squares: `ReduceMean(sq)`, or `ReduceSum(sq)` divided by / multiplied with the
/// constant `count` (`Mul(count, ·)` when `count_first`).
#[derive(Clone, Copy)]
enum MeanSpelling {
    ReduceMean,
    SumDiv(f32),
    SumMul { count: f32, count_first: bool },
}

impl Default for Case {
    fn default() -> Self {
        Case {
            dtype: FLOAT,
            h: H,
            residual: true,
            allreduce_inputs: 0,
            allreduce_extra_reader: false,
            broadcast_residual: false,
            residual_allreduce: false,
            recip_numerator: None,
            rsqrt_pow: None,
            add_self: false,
            eps_input: false,
            no_eps: false,
            pow_exponent: 2.0,
            div: false,
            gemma_add: false,
            gamma_len: H,
            leak_interior: false,
            router: false,
            quark_block: 32,
            quark_axis: -1,
            wide: None,
            mean: MeanSpelling::ReduceMean,
            reduce_axis: -1,
            opset: 18,
        }
    }
}

/// `x[4,H] → [AllReduce] → Add(·, residual) = sum → Pow/ReduceMean/Add(eps)/Sqrt/(Reciprocal+Mul
/// | Div) → Mul(γ) = y → Quark MX → MatMul(W[H,16])`, with `sum` a graph output (the residual
/// stream) and `out` the MatMul output. The mean is `ReduceMean` or `ReduceSum` then `Div` /
/// `Mul` by a constant ([`MeanSpelling`]).
fn build(c: &Case) -> ModelBuilder {
    let (t, h) = (c.dtype, c.h);
    let mut b = ModelBuilder::new(c.opset);
    b.opset("com.microsoft", 1).opset("com.amd.quark", 1);
    b.input("x", t, &[4, h]);
    let mut branch = "x";
    if c.allreduce_inputs > 0 {
        let mut ins = vec!["x"];
        if c.allreduce_inputs == 2 {
            b.input("x2", t, &[4, h]);
            ins.push("x2");
        }
        b.node_in("com.microsoft", "AllReduce", &ins, &["x_ar"], &[])
            .value_info("x_ar", t, &[4, h]);
        branch = "x_ar";
        if c.allreduce_extra_reader {
            b.node("Relu", &["x_ar"], &["x_ar_relu"])
                .output("x_ar_relu", t, &[4, h]);
        }
    }
    let s = if c.residual {
        let rshape: &[i64] = if c.broadcast_residual {
            &[1, h]
        } else {
            &[4, h]
        };
        b.input("residual", t, rshape);
        let mut residual = "residual";
        if c.residual_allreduce {
            b.node_in(
                "com.microsoft",
                "AllReduce",
                &["residual"],
                &["res_ar"],
                &[],
            )
            .value_info("res_ar", t, rshape);
            b.node("Relu", &["res_ar"], &["res_relu"])
                .output("res_relu", t, rshape);
            residual = "res_ar";
        }
        if c.add_self {
            residual = branch;
        }
        b.node("Add", &[residual, branch], &["sum"])
            .output("sum", t, &[4, h]);
        "sum"
    } else {
        branch
    };
    let dims = |name: &str| -> &[i64] {
        if c.wide == Some(name) {
            &[1, 1, 1]
        } else {
            &[]
        }
    };
    b.init_f32("two", dims("two"), &[c.pow_exponent])
        .init_i64("axes", &[1], &[c.reduce_axis]);
    if c.eps_input {
        b.input("eps", FLOAT, &[]);
    } else {
        b.init_f32("eps", dims("eps"), &[1e-6]);
    }
    b.node("Pow", &[s, "two"], &["sq"])
        .value_info("sq", t, &[4, h]);
    // The axes as an input (ReduceSum from opset 13, ReduceMean from 18) or an attribute.
    let axis = [c.reduce_axis];
    let as_attr = [("axes", Attr::Is(&axis))];
    let axes = |input_since: i64| -> (&[&str], &[(&str, Attr)]) {
        if c.opset >= input_since {
            (&["sq", "axes"], &[])
        } else {
            (&["sq"], &as_attr)
        }
    };
    use MeanSpelling as M;
    if let M::SumDiv(count) | M::SumMul { count, .. } = c.mean {
        let (ins, attrs) = axes(13);
        b.node_in("", "ReduceSum", ins, &["ss"], attrs)
            .value_info("ss", t, &[4, 1])
            .init_f32("count", dims("count"), &[count]);
    }
    match c.mean {
        M::ReduceMean => {
            let (ins, attrs) = axes(18);
            b.node_in("", "ReduceMean", ins, &["ms"], attrs)
        }
        M::SumDiv(_) => b.node("Div", &["ss", "count"], &["ms"]),
        M::SumMul {
            count_first: true, ..
        } => b.node("Mul", &["count", "ss"], &["ms"]),
        M::SumMul { .. } => b.node("Mul", &["ss", "count"], &["ms"]),
    }
    .value_info("ms", t, &[4, 1]);
    if !c.no_eps {
        b.node("Add", &["ms", "eps"], &["ve"])
            .value_info("ve", t, &[4, 1]);
    }
    let v = if c.no_eps { "ms" } else { "ve" };
    if c.rsqrt_pow.is_none() {
        b.node("Sqrt", &[v], &["sd"]).value_info("sd", t, &[4, 1]);
    }
    if c.div {
        b.node("Div", &[s, "sd"], &["n"]);
    } else {
        match (c.rsqrt_pow, c.recip_numerator) {
            (Some(e), _) => {
                b.init_f32("exponent", &[], &[e]);
                b.node("Pow", &[v, "exponent"], &["inv"])
            }
            // TorchScript's rsqrt: Div(1, Sqrt).
            (_, Some(one)) => {
                b.init_f32("one_num", dims("one_num"), &[one]);
                b.node("Div", &["one_num", "sd"], &["inv"])
            }
            _ => b.node("Reciprocal", &["sd"], &["inv"]),
        }
        .value_info("inv", t, &[4, 1]);
        b.node("Mul", &[s, "inv"], &["n"]);
        if c.leak_interior {
            b.output("inv", t, &[4, 1]);
        }
    }
    b.value_info("n", t, &[4, h]);
    b.init_f32("w", &[c.gamma_len], &vec![0.25; c.gamma_len as usize]);
    let g = if c.gemma_add {
        b.init_f32("one", dims("one"), &[1.0]);
        b.node("Add", &["w", "one"], &["w1"])
            .value_info("w1", FLOAT, &[c.gamma_len]);
        "w1"
    } else {
        "w"
    };
    b.node("Mul", &["n", g], &["y"]).value_info("y", t, &[4, h]);
    b.quark_fake_quant("y", "yq", c.quark_block, c.quark_axis)
        .value_info("yq", t, &[4, h]);
    let k = if h > 0 { h } else { H };
    b.init_f32("wq", &[k, 16], &vec![0.5; (k * 16) as usize]);
    b.node("MatMul", &["yq", "wq"], &["out"])
        .output("out", t, &[4, 16]);
    if c.router {
        b.init_f32("wr", &[H, 4], &vec![0.5; (H * 4) as usize]);
        b.node("MatMul", &["y", "wr"], &["logits"])
            .output("logits", t, &[4, 4]);
    }
    b
}

fn rewrite(c: &Case) -> (RewriteReport, Graph) {
    build(c).rewrite()
}

fn fused_node(g: &dyn GraphView) -> NodeId {
    first_node(g, "AddRmsNormMxQuant")
}

/// The refusal reason of `add_rmsnorm_mxquant`, asserting it did not fuse.
fn refusal(c: &Case) -> String {
    build(c).refusal("add_rmsnorm_mxquant")
}

#[test]
fn decomposed_norm_with_residual_becomes_one_fused_op() {
    let (report, g) = rewrite(&Case::default());
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
    let ops: Vec<&str> = g.nodes().iter().map(|n| g.op_type(*n)).collect();
    assert_eq!(ops, ["AddRmsNormMxQuant", "MxMatMul"]);
    let n = fused_node(&g);
    let ins: Vec<_> = g.inputs(n).to_vec();
    // Without an AllReduce the Add's operands keep their order (the sum is commutative).
    assert_eq!(value_names(&g, &ins), ["residual", "x", "w"]);
    // q, scale, and the residual sum keeping its name (it is a graph output).
    let outs: Vec<_> = g.outputs(n).iter().map(|v| Some(*v)).collect();
    let outs = value_names(&g, &outs);
    assert_eq!(outs[2], "sum");
    assert_eq!(outs.len(), 3);
    assert_eq!(
        g.tensor_info(g.outputs(n)[0]).unwrap().elem_type,
        FLOAT8E4M3FN
    );
    assert_eq!(
        g.tensor_info(g.outputs(n)[1]).unwrap().elem_type,
        FLOAT8E8M0
    );
    assert_eq!(
        node_attr(&g, n, "inv_form"),
        AttrValue::String("recip_mul".into())
    );
    assert_eq!(node_attr(&g, n, "gemma"), AttrValue::Int(0));
    assert_eq!(node_attr(&g, n, "allreduce"), AttrValue::Int(0));
    assert_eq!(node_attr(&g, n, "epsilon"), AttrValue::Float(1e-6));
    // Quark's quantizer: OCP floor, NaN ignored when picking the scale.
    assert_eq!(
        node_attr(&g, n, "scale_rule"),
        AttrValue::String("floor".into())
    );
    assert_eq!(
        node_attr(&g, n, "nan_policy"),
        AttrValue::String("ignore".into())
    );
}

#[test]
fn first_layer_div_and_gemma_add_one() {
    let c = Case {
        residual: false,
        div: true,
        gemma_add: true,
        ..Case::default()
    };
    let (report, g) = rewrite(&c);
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
    let n = fused_node(&g);
    let ins: Vec<_> = g.inputs(n).to_vec();
    // No residual: the optional input is empty; γ is w itself (the +1 is the `gemma` flag).
    assert_eq!(value_names(&g, &ins), ["x", "", "w"]);
    assert_eq!(g.outputs(n).len(), 2);
    assert_eq!(
        node_attr(&g, n, "inv_form"),
        AttrValue::String("div".into())
    );
    assert_eq!(node_attr(&g, n, "gemma"), AttrValue::Int(1));
    assert!(
        g.value_by_name("w1").and_then(|v| g.producer(v)).is_none(),
        "Add(w, 1) absorbed"
    );
}

#[test]
fn allreduce_is_absorbed() {
    let c = Case {
        allreduce_inputs: 1,
        ..Case::default()
    };
    let (report, g) = rewrite(&c);
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
    let n = fused_node(&g);
    assert_eq!(node_attr(&g, n, "allreduce"), AttrValue::Int(1));
    assert_eq!(g.value_name(g.inputs(n)[0].unwrap()), "x");
    assert!(g.nodes().iter().all(|n| g.op_type(*n) != "AllReduce"));
}

#[test]
fn absorbs_the_allreduce_only_the_add_reads() {
    // Add(AllReduce(residual) read elsewhere too, AllReduce(x)): the residual operand comes
    // first, but only x's AllReduce can be absorbed.
    let c = Case {
        allreduce_inputs: 1,
        residual_allreduce: true,
        ..Case::default()
    };
    let (report, g) = rewrite(&c);
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
    let n = fused_node(&g);
    let ins: Vec<_> = g.inputs(n).to_vec();
    assert_eq!(value_names(&g, &ins), ["x", "res_ar", "w"]);
    assert_eq!(node_attr(&g, n, "allreduce"), AttrValue::Int(1));
    let left: Vec<&str> = g
        .nodes()
        .iter()
        .map(|n| g.op_type(*n))
        .filter(|o| *o == "AllReduce")
        .collect();
    assert_eq!(left.len(), 1, "the residual's AllReduce stays");
}

#[test]
fn router_keeps_the_normed_tensor_as_fourth_output() {
    let c = Case {
        router: true,
        ..Case::default()
    };
    let (report, g) = rewrite(&c);
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
    let y = g.value_by_name("y").expect("normed value kept");
    let (p, slot) = g.producer(y).expect("normed produced");
    assert_eq!((g.op_type(p), slot), ("AddRmsNormMxQuant", 3));
    // The router still reads it as a float MatMul.
    let readers: Vec<&str> = g.consumers(y).iter().map(|(n, _)| g.op_type(*n)).collect();
    assert_eq!(readers, ["MatMul"]);
}

#[test]
fn router_in_first_layer_gets_a_placeholder_sum_slot() {
    let c = Case {
        router: true,
        residual: false,
        ..Case::default()
    };
    let (report, g) = rewrite(&c);
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
    let n = fused_node(&g);
    assert_eq!(g.outputs(n).len(), 4);
    assert_eq!(g.value_name(g.outputs(n)[3]), "y");
}

// ---- one refusal per check ----

#[test]
fn refuses_block_size_other_than_32() {
    let why = refusal(&Case {
        quark_block: 16,
        ..Case::default()
    });
    assert!(why.contains("block_size is 16"), "{why}");
}

#[test]
fn refuses_quantizing_another_axis() {
    let why = refusal(&Case {
        quark_axis: 0,
        ..Case::default()
    });
    assert!(why.contains("axis 0"), "{why}");
}

#[test]
fn refuses_last_dim_not_multiple_of_32() {
    let why = refusal(&Case {
        h: 48,
        gamma_len: 48,
        ..Case::default()
    });
    assert!(why.contains("not a multiple of 32"), "{why}");
}

#[test]
fn refuses_unknown_last_dim() {
    let why = refusal(&Case {
        h: -1,
        ..Case::default()
    });
    assert!(why.contains("not known statically"), "{why}");
}

#[test]
fn refuses_unsupported_dtype() {
    let why = refusal(&Case {
        dtype: DOUBLE,
        ..Case::default()
    });
    assert!(why.contains("only float, float16 and bfloat16"), "{why}");
}

/// A norm without `Add(eps)` (epsilon 0: ONNX Runtime's optimizer removes an `Add` of 0 before
/// the EP sees the graph) fuses with `epsilon = 0`.
/// A one-element constant of higher rank than the sum (eps, the Pow exponent, rsqrt's 1, Gemma's
/// 1 stored as `[1, 1, 1]` for a `[4, H]` sum) broadcasts the normed tensor to `[1, 4, H]`, which
/// the fused op does not write: refused (here the value_info states the un-broadcast shapes, so
/// the constant's rank says it). Before, it fused and the rewrite dropped a dim (new-user probe
/// 11).
#[test]
fn refuses_a_constant_that_broadcasts_the_normed_tensor_to_more_dims() {
    for name in ["two", "eps", "one_num", "one"] {
        let why = refusal(&Case {
            wide: Some(name),
            recip_numerator: (name == "one_num").then_some(1.0),
            gemma_add: name == "one",
            ..Case::default()
        });
        assert!(
            why.contains(&format!("constant '{name}' has rank 3, the sum 2")),
            "{name}: {why}"
        );
    }
}

#[test]
fn norm_without_an_eps_add_fuses_with_epsilon_zero() {
    let (report, g) = build(&Case {
        no_eps: true,
        ..Case::default()
    })
    .rewrite();
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
    let n = first_node(&g, "AddRmsNormMxQuant");
    assert_eq!(node_attr(&g, n, "epsilon"), AttrValue::Float(0.0));
}

#[test]
fn refuses_non_constant_epsilon() {
    let why = refusal(&Case {
        eps_input: true,
        ..Case::default()
    });
    assert!(why.contains("epsilon 'eps' is not a constant"), "{why}");
}

#[test]
fn refuses_escaping_interior_value() {
    let why = refusal(&Case {
        leak_interior: true,
        ..Case::default()
    });
    assert!(
        why.contains("interior value 'inv' is a graph output"),
        "{why}"
    );
}

/// `Pow(v, -0.5)` as the inverse RMS is a refusal with its reason (ORT's powf is not the kernel's
/// 1 / sqrt bit for bit), not a near miss that points elsewhere; another exponent is not an
/// inverse square root at all.
#[test]
fn refuses_the_inverse_rms_as_a_power() {
    let why = refusal(&Case {
        rsqrt_pow: Some(-0.5),
        ..Case::default()
    });
    assert!(
        why.contains("takes the inverse RMS as variance^-0.5"),
        "{why}"
    );
    assert!(why.contains("powf"), "{why}");
    let why = refusal(&Case {
        rsqrt_pow: Some(0.5),
        ..Case::default()
    });
    assert!(
        why.contains("raises the variance to 0.5: not an inverse square root"),
        "{why}"
    );
}

#[test]
fn refuses_allreduce_with_two_inputs() {
    let why = refusal(&Case {
        allreduce_inputs: 2,
        ..Case::default()
    });
    assert!(
        why.contains("AllReduce") && why.contains("2 inputs"),
        "{why}"
    );
}

#[test]
fn refuses_allreduce_read_elsewhere() {
    let why = refusal(&Case {
        allreduce_inputs: 1,
        allreduce_extra_reader: true,
        ..Case::default()
    });
    assert!(
        why.contains("collective AllReduce") && why.contains("reader outside the fusion"),
        "{why}"
    );
}

#[test]
fn refuses_broadcasting_residual_add() {
    let why = refusal(&Case {
        broadcast_residual: true,
        ..Case::default()
    });
    assert!(why.contains("broadcasting is not fused"), "{why}");
}

#[test]
fn refuses_pow_exponent_other_than_two() {
    let why = refusal(&Case {
        pow_exponent: 3.0,
        ..Case::default()
    });
    assert!(why.contains("exponent 3, not 2"), "{why}");
}

#[test]
fn refuses_gamma_of_wrong_length() {
    let why = refusal(&Case {
        gamma_len: 1,
        ..Case::default()
    });
    assert!(why.contains("expected [64]"), "{why}");
}

#[test]
fn refuses_decomposed_norm_computed_in_half() {
    // f16 graph without Casts: every intermediate is rounded to f16, which the kernel does
    // not reproduce. (The f32 initializers make the graph ill-typed for a runtime, but the
    // rule must refuse on the declared types before anything else.)
    let why = refusal(&Case {
        dtype: FLOAT16,
        ..Case::default()
    });
    assert!(why.contains("computes in float16"), "{why}");
}

#[test]
fn refuses_reading_a_value_the_fusion_removes() {
    let why = refusal(&Case {
        allreduce_inputs: 1,
        add_self: true,
        ..Case::default()
    });
    assert!(
        why.contains("'x_ar' is computed inside the fusion"),
        "{why}"
    );
}

#[test]
fn torchscript_div_one_is_a_reciprocal() {
    let (report, g) = rewrite(&Case {
        recip_numerator: Some(1.0),
        ..Case::default()
    });
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
    let n = fused_node(&g);
    assert_eq!(
        node_attr(&g, n, "inv_form"),
        AttrValue::String("recip_mul".into())
    );
    let why = refusal(&Case {
        recip_numerator: Some(2.0),
        ..Case::default()
    });
    assert!(why.contains("Div(2, Sqrt) is not a reciprocal"), "{why}");
}

/// The mean spelled as `Div(ReduceSum(x²), H)` (ORT's ReduceMean is its ReduceSum then a
/// division by H: the same computation) fuses as the ReduceMean spelling does, with the axes as
/// ReduceSum-13's input or ReduceSum-11's attribute, for a power-of-two H and for H = 96.
#[test]
fn mean_as_a_sum_divided_by_h_fuses() {
    let fused = |c: &Case| {
        let (report, g) = rewrite(c);
        assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
        let ops: Vec<&str> = g.nodes().iter().map(|n| g.op_type(*n)).collect();
        assert_eq!(ops, ["AddRmsNormMxQuant", "MxMatMul"]);
        let n = fused_node(&g);
        let ins: Vec<_> = g.inputs(n).to_vec();
        assert_eq!(value_names(&g, &ins), ["residual", "x", "w"]);
        // The attributes of the ReduceMean spelling: the mean is the kernel's either way.
        for (name, want) in [
            ("inv_form", AttrValue::String("recip_mul".into())),
            ("epsilon", AttrValue::Float(1e-6)),
            ("gamma_in_f32", AttrValue::Int(1)),
            ("round_sum", AttrValue::Int(1)),
        ] {
            assert_eq!(node_attr(&g, n, name), want, "{name}");
        }
    };
    for opset in [18, 13, 12] {
        fused(&Case {
            mean: MeanSpelling::SumDiv(64.0),
            opset,
            ..Case::default()
        });
    }
    fused(&Case {
        mean: MeanSpelling::SumDiv(96.0),
        h: 96,
        gamma_len: 96,
        ..Case::default()
    });
    // A positive axis naming the last one is the last axis.
    fused(&Case {
        mean: MeanSpelling::SumDiv(64.0),
        reduce_axis: 1,
        ..Case::default()
    });
}

/// `Mul(ReduceSum(x²), 1/H)`, either operand order, with H a power of two: 1/H is exact, so the
/// product is the quotient bit for bit.
#[test]
fn mean_as_a_sum_times_an_exact_reciprocal_fuses() {
    for count_first in [false, true] {
        let (report, g) = rewrite(&Case {
            mean: MeanSpelling::SumMul {
                count: 1.0 / 64.0,
                count_first,
            },
            ..Case::default()
        });
        assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
        let ops: Vec<&str> = g.nodes().iter().map(|n| g.op_type(*n)).collect();
        assert_eq!(ops, ["AddRmsNormMxQuant", "MxMatMul"], "{count_first}");
    }
}

/// Times 1/H rounded to float (H = 96, 6144: not powers of two) is not the kernel's division by
/// H in the last bit for some sums: refused, saying so.
#[test]
fn refuses_a_sum_times_a_rounded_reciprocal() {
    for h in [96i64, 6144] {
        let why = refusal(&Case {
            mean: MeanSpelling::SumMul {
                count: 1.0 / h as f32,
                count_first: h == 96,
            },
            h,
            gamma_len: h,
            ..Case::default()
        });
        assert!(
            why.contains(&format!("1/{h} rounded to float"))
                && why.contains(&format!("the fused kernel divides by {h}")),
            "{h}: {why}"
        );
    }
}

/// A constant that is not H (or 1/H) makes the quotient something other than the mean.
#[test]
fn refuses_a_sum_scaled_by_another_constant() {
    let why = refusal(&Case {
        mean: MeanSpelling::SumDiv(63.0),
        ..Case::default()
    });
    assert!(
        why.contains("divides the sum of squares by 63, not by its length 64"),
        "{why}"
    );
    // Dividing by H of another layer's width (32 of 64) is no mean either.
    let why = refusal(&Case {
        mean: MeanSpelling::SumMul {
            count: 1.0 / 32.0,
            count_first: false,
        },
        ..Case::default()
    });
    assert!(
        why.contains("by 0.03125, not 1/64 (its length 64): not a mean"),
        "{why}"
    );
    // The constant as `[1, 1, 1]` broadcasts the normed tensor to rank 3.
    let why = refusal(&Case {
        mean: MeanSpelling::SumDiv(64.0),
        wide: Some("count"),
        ..Case::default()
    });
    assert!(
        why.contains("constant 'count' has rank 3, the sum 2"),
        "{why}"
    );
}

/// The sum must run over the last axis only, as the ReduceMean spelling's mean does.
#[test]
fn refuses_a_sum_over_another_axis() {
    for opset in [18, 12] {
        let why = refusal(&Case {
            mean: MeanSpelling::SumDiv(4.0),
            reduce_axis: 0,
            opset,
            ..Case::default()
        });
        assert!(
            why.contains("ReduceSum") && why.contains("axes Some([0]) are not the last axis"),
            "{opset}: {why}"
        );
    }
}

/// A MoE block flattens the normed activation before its router and experts read it
/// (transformers' Mixtral / MiniMax sparse-MoE `hidden_states.view(-1, hidden_dim)`, exported
/// as `Reshape(normed, [-1, H])`): `norm → Reshape → MXFP8 quantize → MatMul`, the router
/// reading the flattened rows. New-user probe 7 found the norm unfused in every MoE layer.
struct Moe<'a> {
    opset: i64,
    x: &'a [i64],
    /// The Reshape's constant shape (`flat`); its last dim is the quantizer's too.
    flat: &'a [i64],
    allowzero: Option<i64>,
    residual: bool,
    /// Something besides the Reshape reads the un-flattened normed value.
    extra_reader: bool,
    /// `Shape(normed)` with these `start` / `end` (a TorchScript export's `batch, seq, hidden =
    /// hidden_states.shape`), read by a `Gather` of its first entry (`dim0`, a graph output).
    shape_reader: Option<(Option<i64>, Option<i64>)>,
    /// AMD Quark's fake quant instead of the opset-24 quantizer (any opset).
    quark: bool,
    /// The Reshape's shape is a graph input (computed at run time) instead of a constant.
    runtime_shape: bool,
    /// The normed value is declared with x's shape (value_info), whose last dim is unknown:
    /// offline inference would otherwise take H from γ's broadcast.
    unknown_h: bool,
}

impl Default for Moe<'_> {
    fn default() -> Self {
        Moe {
            opset: 24,
            x: &[-2, 4, H],
            flat: &[-1, H],
            allowzero: None,
            residual: false,
            extra_reader: false,
            shape_reader: None,
            quark: false,
            runtime_shape: false,
            unknown_h: false,
        }
    }
}

fn moe(c: &Moe) -> ModelBuilder {
    let (&k, lead) = c.flat.split_last().unwrap();
    let blk = [lead, &[k / 32, 32]].concat();
    let mut b = ModelBuilder::new(c.opset);
    b.input("x", FLOAT, c.x)
        .init_i64("ax", &[1], &[-1])
        .init_f32("eps", &[], &[1e-6])
        .init_f32("gamma", &[H], &[1.5; H as usize])
        .init_i64("blk", &[c.flat.len() as i64 + 1], &blk)
        .init_f32("w", &[k, 8], &vec![0.25; 8 * k as usize])
        .init_f32("router", &[k, 4], &vec![0.5; 4 * k as usize]);
    if c.runtime_shape {
        // With the flattened rows' shape recorded (an exporter's value_info).
        b.input("flat", INT64, &[c.flat.len() as i64])
            .value_info("nf", FLOAT, c.flat);
    } else {
        b.init_i64("flat", &[c.flat.len() as i64], c.flat);
    }
    let h = if c.residual {
        b.input("res", FLOAT, c.x)
            .node("Add", &["x", "res"], &["h"]);
        "h"
    } else {
        "x"
    };
    b.node("Mul", &[h, h], &["sq"])
        .node("ReduceMean", &["sq", "ax"], &["ms"])
        .node("Add", &["ms", "eps"], &["mse"])
        .node("Sqrt", &["mse"], &["rms"])
        .node("Reciprocal", &["rms"], &["inv"])
        .node("Mul", &[h, "inv"], &["n0"])
        .node("Mul", &["n0", "gamma"], &["n"]);
    let allowzero: Vec<_> = c
        .allowzero
        .map(|a| ("allowzero", graph_rewrites::testing::Attr::I(a)))
        .into_iter()
        .collect();
    b.node_in("", "Reshape", &["n", "flat"], &["nf"], &allowzero)
        .node("MatMul", &["nf", "router"], &["logits"]);
    if c.quark {
        b.opset("com.amd.quark", 1)
            .quark_fake_quant("nf", "nd", 32, -1);
    } else {
        let dq = [
            ("axis", graph_rewrites::testing::Attr::I(-1)),
            ("block_size", graph_rewrites::testing::Attr::I(32)),
            (
                "output_dtype",
                graph_rewrites::testing::Attr::I(FLOAT as i64),
            ),
        ];
        b.mx_quant_floor("nf", "blk", "").node_in(
            "",
            "DequantizeLinear",
            &["q", "scale"],
            &["nd"],
            &dq,
        );
    }
    b.node("MatMul", &["nd", "w"], &["y"])
        .output("y", FLOAT, &[-1, 8])
        .output("logits", FLOAT, &[-1, 4]);
    if c.residual {
        b.output("h", FLOAT, c.x);
    }
    if c.unknown_h {
        b.value_info("n", FLOAT, c.x);
    }
    if c.extra_reader {
        b.node("Relu", &["n"], &["side"]).output("side", FLOAT, c.x);
    }
    if let Some((start, end)) = c.shape_reader {
        let bounds: Vec<_> = [("start", start), ("end", end)]
            .into_iter()
            .filter_map(|(a, v)| Some((a, graph_rewrites::testing::Attr::I(v?))))
            .collect();
        b.node_in("", "Shape", &["n"], &["dims"], &bounds)
            .init_i64("i0", &[], &[0])
            .node_in(
                "",
                "Gather",
                &["dims", "i0"],
                &["dim0"],
                &[("axis", graph_rewrites::testing::Attr::I(0))],
            )
            .output("dim0", INT64, &[]);
    }
    b
}

/// A TorchScript export reads the un-flattened normed value's `Shape` too (transformers'
/// `batch, seq, hidden = hidden_states.shape` before the `view(-1, hidden)`; the MoE output's
/// reshape back uses those dims). The fused op writes only the flattened rows, so the Shape is
/// re-emitted on the norm's input x, which has the normed value's shape (the residual operands
/// are checked to be exactly the sum's shape), keeping its output's name and `start` / `end`.
#[test]
fn a_shape_reader_of_the_normed_value_is_re_read_from_x() {
    for (what, c) in [
        (
            "first layer",
            Moe {
                shape_reader: Some((None, None)),
                ..Moe::default()
            },
        ),
        (
            "residual Add, opset-15 start / end",
            Moe {
                residual: true,
                shape_reader: Some((Some(1), Some(-1))),
                ..Moe::default()
            },
        ),
        (
            "a Quark quantizer, opset 13",
            Moe {
                opset: 13,
                quark: true,
                shape_reader: Some((None, None)),
                ..Moe::default()
            },
        ),
    ] {
        let (report, g) = moe(&c).rewrite();
        assert_eq!(
            report.counts["add_rmsnorm_mxquant"], 1,
            "{what}: {report:#?}"
        );
        let mut ops: Vec<&str> = g.nodes().iter().map(|n| g.op_type(*n)).collect();
        ops.sort_unstable();
        assert_eq!(
            ops,
            ["AddRmsNormMxQuant", "Gather", "MatMul", "MxMatMul", "Shape"],
            "{what}"
        );
        let shape = first_node(&g, "Shape");
        let ins: Vec<_> = g.inputs(shape).to_vec();
        assert_eq!(value_names(&g, &ins), ["x"], "{what}");
        let outs: Vec<_> = g.outputs(shape).iter().map(|v| Some(*v)).collect();
        assert_eq!(value_names(&g, &outs), ["dims"], "{what}");
        let (start, end) = c.shape_reader.unwrap();
        for (a, want) in [("start", start), ("end", end)] {
            let got = g.attr(shape, a);
            assert_eq!(got, want.map(AttrValue::Int), "{what}: {a}");
        }
        let n = fused_node(&g);
        assert_eq!(node_attr(&g, n, "flatten_rows"), AttrValue::Int(1));
        // The router still reads the flattened rows.
        let outs: Vec<_> = g.outputs(n).iter().map(|v| Some(*v)).collect();
        assert_eq!(value_names(&g, &outs)[3], "nf", "{what}");
    }
}

/// Besides a Shape, any other reader of the un-flattened normed value is still refused.
#[test]
fn a_shape_reader_does_not_let_another_reader_through() {
    let why = moe(&Moe {
        shape_reader: Some((None, None)),
        extra_reader: true,
        ..Moe::default()
    })
    .refusal("add_rmsnorm_mxquant");
    assert!(
        why.contains("'n' is also read by Relu") && why.contains("only a Shape is re-read"),
        "{why}"
    );
}

/// The fused op runs on x's rows as they are and writes q, scale and the router's normed rows
/// flattened (`flatten_rows`): the Reshape goes, none is left on the E8M0 scale.
#[test]
fn a_flattening_reshape_between_norm_and_quantizer_fuses() {
    let (report, g) = moe(&Moe::default()).rewrite();
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
    let ops: Vec<&str> = g.nodes().iter().map(|n| g.op_type(*n)).collect();
    assert_eq!(ops, ["AddRmsNormMxQuant", "MatMul", "MxMatMul"]);
    let n = fused_node(&g);
    assert_eq!(node_attr(&g, n, "flatten_rows"), AttrValue::Int(1));
    let outs: Vec<_> = g.outputs(n).iter().map(|v| Some(*v)).collect();
    // A first layer: slot 2 is the unread sum placeholder (x's shape), slot 3 the router's rows.
    assert_eq!(value_names(&g, &outs)[3], "nf");
    let shape = |i: usize| g.tensor_info(g.outputs(n)[i]).and_then(|t| t.shape);
    let rows = |last| Some(vec![Dim::Symbolic("4*batch".into()), Dim::Known(last)]);
    assert_eq!(shape(0), rows(H), "q");
    assert_eq!(shape(1), rows(H / 32), "scale");
    assert_eq!(
        shape(2),
        Some(vec![
            Dim::Symbolic("batch".into()),
            Dim::Known(4),
            Dim::Known(H)
        ]),
        "residual_out keeps x's shape"
    );
    assert_eq!(shape(3), rows(H), "normed");
}

#[test]
fn flattening_spellings_fuse() {
    for (what, c) in [
        (
            "residual Add, the sum escaping",
            Moe {
                residual: true,
                ..Moe::default()
            },
        ),
        (
            "[N, H] with known leading dims",
            Moe {
                x: &[2, 4, H],
                flat: &[8, H],
                ..Moe::default()
            },
        ),
        (
            "an already flat [T, H] input",
            Moe {
                x: &[-1, H],
                ..Moe::default()
            },
        ),
        (
            "opset-13 Reshape (a Quark quantizer)",
            Moe {
                opset: 13,
                quark: true,
                ..Moe::default()
            },
        ),
        (
            "allowzero = 0 spelled out",
            Moe {
                allowzero: Some(0),
                ..Moe::default()
            },
        ),
    ] {
        let (report, g) = moe(&c).rewrite();
        assert_eq!(
            report.counts["add_rmsnorm_mxquant"], 1,
            "{what}: {report:#?}"
        );
        let n = fused_node(&g);
        assert_eq!(
            node_attr(&g, n, "flatten_rows"),
            AttrValue::Int(1),
            "{what}"
        );
        if c.residual {
            let outs: Vec<_> = g.outputs(n).iter().map(|v| Some(*v)).collect();
            assert_eq!(value_names(&g, &outs)[2..], ["h", "nf"], "{what}");
        }
    }
}

#[test]
fn refuses_a_reshape_that_is_not_a_row_flattening() {
    for (c, want) in [
        (
            Moe {
                flat: &[-1, 2, H],
                ..Moe::default()
            },
            "only a flattening to [rows, 64]",
        ),
        (
            Moe {
                x: &[-2, 4, H],
                flat: &[8, H],
                ..Moe::default()
            },
            "makes 8 rows, which the normed value's leading dims do not provably give",
        ),
        (
            Moe {
                x: &[-2, 4, -1],
                unknown_h: true,
                ..Moe::default()
            },
            "the last dim of the normed value 'n' is not known statically",
        ),
        (
            Moe {
                x: &[2, 4, H],
                flat: &[-1, 2 * H],
                ..Moe::default()
            },
            "changes the last dim",
        ),
        (
            Moe {
                allowzero: Some(1),
                ..Moe::default()
            },
            "allowzero = 1",
        ),
        (
            Moe {
                flat: &[0, H],
                ..Moe::default()
            },
            "has a 0 or a second -1",
        ),
        (
            Moe {
                extra_reader: true,
                ..Moe::default()
            },
            "'n' is also read by Relu",
        ),
        (
            Moe {
                runtime_shape: true,
                ..Moe::default()
            },
            "is computed at run time",
        ),
    ] {
        let why = moe(&c).refusal("add_rmsnorm_mxquant");
        assert!(why.contains(want), "{why}");
    }
}

/// `[-1, H/2, 2]` splits every quantization block across rows: the quantizer's own block shape
/// no longer divides the last axis, so nothing fuses the norm.
#[test]
fn a_reshape_splitting_the_last_dim_is_not_fused() {
    let (report, _) = moe(&Moe {
        flat: &[-1, H / 2, 2],
        ..Moe::default()
    })
    .rewrite();
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 0, "{report:#?}");
}

/// Two RMSNorms of one residual sum (a parallel attention / MLP block with a norm each, GPT-NeoX
/// style), each normed tensor MXFP8-quantized (standard opset-24 spelling) into a MatMul:
/// `sum = x + residual → norm_a → MXFP8 → MatMul`, `sum → norm_b → MXFP8 → MatMul`.
fn two_norms_of_one_sum() -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.input("x", FLOAT, &[4, H])
        .input("residual", FLOAT, &[4, H]);
    b.node("Add", &["x", "residual"], &["sum"])
        .output("sum", FLOAT, &[4, H]);
    b.init_f32("two", &[], &[2.0])
        .init_i64("axes", &[1], &[-1])
        .init_f32("eps", &[], &[1e-6])
        .init_i64("blk", &[3], &[0, H / 32, 32]);
    for (k, gamma) in [("a", 0.25f32), ("b", 0.75)] {
        let v = |s: &str| format!("{s}_{k}");
        b.node("Pow", &["sum", "two"], &[&v("sq")])
            .node("ReduceMean", &[&v("sq"), "axes"], &[&v("ms")])
            .node("Add", &[&v("ms"), "eps"], &[&v("ve")])
            .node("Sqrt", &[&v("ve")], &[&v("sd")])
            .node("Reciprocal", &[&v("sd")], &[&v("inv")])
            .node("Mul", &["sum", &v("inv")], &[&v("n")])
            .init_f32(&v("w"), &[H], &vec![gamma; H as usize])
            .node("Mul", &[&v("n"), &v("w")], &[&v("y")])
            .mx_quant_floor(&v("y"), "blk", &format!("_{k}"))
            .node_in(
                "",
                "DequantizeLinear",
                &[&v("q"), &v("scale")],
                &[&v("yq")],
                &[
                    ("axis", graph_rewrites::testing::Attr::I(-1)),
                    ("block_size", graph_rewrites::testing::Attr::I(32)),
                    (
                        "output_dtype",
                        graph_rewrites::testing::Attr::I(FLOAT as i64),
                    ),
                ],
            )
            .init_f32(&v("wq"), &[H, 16], &vec![0.5; (H * 16) as usize])
            .node("MatMul", &[&v("yq"), &v("wq")], &[&v("out")])
            .output(&v("out"), FLOAT, &[4, 16]);
    }
    b
}

/// New-user probe 12: the first norm's fusion absorbs the residual Add; the second norm's site
/// then overlapped it, was skipped in that scan, and the next rule (`mxquant`) took its quantizer
/// in the same scan, so the second norm never fused (offline, nor in the plugin EP, which scans
/// once) and nothing said why. Now the second site is matched again without the taken nodes: it
/// reads the first fused op's residual-sum output (`s = x`), in the same scan.
#[test]
fn two_norms_of_one_residual_sum_both_fuse() {
    let b = two_norms_of_one_sum();
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 2, "{report:#?}");
    assert_eq!(report.counts["mxquant"], 0, "{report:#?}");
    let fused: Vec<NodeId> = g
        .nodes()
        .iter()
        .copied()
        .filter(|n| g.op_type(*n) == "AddRmsNormMxQuant")
        .collect();
    assert_eq!(fused.len(), 2);
    // One absorbs the Add (x, residual) and writes `sum`; the other reads `sum`, no residual.
    let ins: Vec<Vec<String>> = fused
        .iter()
        .map(|n| value_names(&g, g.inputs(*n)))
        .collect();
    assert!(
        ins.contains(&vec!["x".into(), "residual".into(), "w_a".into()])
            || ins.contains(&vec!["residual".into(), "x".into(), "w_a".into()]),
        "{ins:?}"
    );
    assert!(
        ins.iter().any(|i| i[0] == "sum" && i[2] == "w_b"),
        "{ins:?}"
    );
    assert!(!g.nodes().iter().any(|n| g.op_type(*n) == "Add"));

    // The plugin EP's single pass (`find_sites`): two accepted norm sites, disjoint.
    let graph = b.graph().unwrap();
    let sites = graph_rewrites::pipeline::find_sites(&graph, &Default::default()).unwrap();
    let accepted: Vec<_> = sites
        .iter()
        .filter(|s| s.verdict.is_ok() && !s.nodes.is_empty())
        .collect();
    let rules: Vec<&str> = accepted.iter().map(|s| s.rule).collect();
    assert_eq!(
        rules,
        ["add_rmsnorm_mxquant", "add_rmsnorm_mxquant"],
        "{sites:#?}"
    );
    assert!(accepted[0]
        .nodes
        .iter()
        .all(|n| !accepted[1].nodes.contains(n)));
}

/// New-user probe 12: an initializer that is also a graph input (ONNX's overridable default;
/// older exporters and `keep_initializers_as_inputs=True` write every weight so) is a run-time
/// value: refused, and the reason now says why, instead of only "'eps' must be a constant" of a
/// value the user sees among the initializers.
#[test]
fn an_initializer_listed_as_graph_input_is_refused_saying_why() {
    let mut b = build(&Case::default());
    b.input("eps", FLOAT, &[]);
    let why = b.refusal("add_rmsnorm_mxquant");
    assert!(
        why.contains("epsilon 'eps' is not a constant (it is a graph input"),
        "{why}"
    );
    assert!(why.contains("a run may override it"), "{why}");
}
