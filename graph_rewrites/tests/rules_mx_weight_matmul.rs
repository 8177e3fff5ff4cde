//! Rule `mx_weight_matmul`: a float activation times a constant MX weight (FP8 or FP4 values,
//! E8M0 scales blocked 32 along K) becomes `MxMatMul` with the float `a` and an empty
//! `a_scale`, reading the weight in place; every form the MXFP8-activation fusions read
//! (MatMul `[K, N]`, Gemm `transB = 1` + bias, MatMul through a Transpose of `[N, K]`); a shared
//! weight DequantizeLinear stays (re-created as `MxDequantize`); what is not provably the same
//! computation is refused with the reason; MXFP8-activation MatMuls stay the other rules'.

use graph_rewrites::pattern::predicates::dtype::{
    BFLOAT16, FLOAT, FLOAT16, FLOAT4E2M1, FLOAT8E4M3FN, FLOAT8E8M0,
};
use graph_rewrites::testing::{op_types, value_names, Attr, ModelBuilder};
use graph_rewrites::view::GraphView;

/// `x [4, 64]` of `t`; `wd = DequantizeLinear(wq [64, 16] (or [16, 64] when `nk`), ws, axis,
/// block 32, output_dtype t)`, all constants, every scale byte `scale`.
fn model(t: i32, values: i32, nk: bool, scale: u8) -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.input("x", t, &[4, 64]);
    let (wdims, sdims, axis) = if nk {
        ([16, 64], [16, 2], 1)
    } else {
        ([64, 16], [2, 16], 0)
    };
    let bytes = if values == FLOAT4E2M1 { 512 } else { 1024 };
    b.init_raw("wq", values, &wdims, vec![0x3a; bytes]);
    b.init_raw("ws", FLOAT8E8M0, &sdims, vec![scale; 32]);
    let dq = [
        ("axis", Attr::I(axis)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(t as i64)),
    ];
    b.node_in("", "DequantizeLinear", &["wq", "ws"], &["wd"], &dq);
    b
}

/// The `MxMatMul` producing `y`, as `op(inputs) attrs` (sorted), "" for a skipped input.
fn snapshot(g: &graph_rewrites::ir::Graph) -> String {
    let mm = g.producer(g.value_by_name("y").unwrap()).unwrap().0;
    let mut attrs: Vec<String> = ["trans_b", "output_dtype", "alpha", "beta"]
        .iter()
        .filter_map(|a| g.attr(mm, a).map(|v| format!("{a}={v:?}")))
        .collect();
    attrs.sort();
    format!(
        "{}({}) {}",
        g.op_type(mm),
        value_names(g, g.inputs(mm)).join(", "),
        attrs.join(" ")
    )
}

#[test]
fn matmul_of_a_float_activation_and_an_mx_weight_becomes_a_weight_only_mxmatmul() {
    for (t, values) in [
        (FLOAT, FLOAT8E4M3FN),
        (FLOAT16, FLOAT8E4M3FN),
        (BFLOAT16, FLOAT8E4M3FN),
        (FLOAT, FLOAT4E2M1),
        (FLOAT16, FLOAT4E2M1),
    ] {
        let mut b = model(t, values, false, 120);
        b.node("MatMul", &["x", "wd"], &["y"])
            .output("y", t, &[4, 16]);
        let (report, g) = b.rewrite();
        assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
        assert_eq!(report.counts["mx_dequant"], 0, "{report:#?}");
        assert_eq!(op_types(&g), ["MxMatMul"]);
        assert_eq!(
            snapshot(&g),
            format!("MxMatMul(x, , wq, ws) output_dtype=Int({t}) trans_b=Int(0)"),
            "{t} {values}"
        );
        assert!(report.fusions[0].replaced.len() == 2, "{report:#?}");
    }
}

#[test]
fn gemm_with_bias_and_trans_b_keeps_its_epilogue() {
    let mut b = model(FLOAT, FLOAT8E4M3FN, true, 120);
    b.init_f32("bias", &[16], &[0.5; 16]);
    b.node_in(
        "",
        "Gemm",
        &["x", "wd", "bias"],
        &["y"],
        &[
            ("transB", Attr::I(1)),
            ("alpha", Attr::F(0.5)),
            ("beta", Attr::F(2.0)),
        ],
    )
    .output("y", FLOAT, &[4, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
    assert_eq!(op_types(&g), ["MxMatMul"]);
    assert_eq!(
        snapshot(&g),
        "MxMatMul(x, , wq, ws, bias) alpha=Float(0.5) beta=Float(2.0) output_dtype=Int(1) trans_b=Int(1)"
    );
}

#[test]
fn transposed_nk_weight_is_read_with_trans_b_and_the_transpose_goes() {
    let mut b = model(FLOAT, FLOAT8E4M3FN, true, 120);
    b.node_in(
        "",
        "Transpose",
        &["wd"],
        &["wt"],
        &[("perm", Attr::Is(&[1, 0]))],
    )
    .node("MatMul", &["x", "wt"], &["y"])
    .output("y", FLOAT, &[4, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
    assert_eq!(op_types(&g), ["MxMatMul"]);
    assert_eq!(
        snapshot(&g),
        "MxMatMul(x, , wq, ws) output_dtype=Int(1) trans_b=Int(1)"
    );
}

#[test]
fn a_weight_dequantize_with_other_readers_stays_as_mx_dequantize() {
    let mut b = model(FLOAT, FLOAT8E4M3FN, false, 120);
    b.init_f32("one", &[], &[1.0]);
    b.node("MatMul", &["x", "wd"], &["y"])
        .node("Add", &["wd", "one"], &["w1"])
        .output("y", FLOAT, &[4, 16])
        .output("w1", FLOAT, &[64, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
    let mut ops = op_types(&g);
    ops.sort();
    assert_eq!(ops, ["Add", "MxDequantize", "MxMatMul"]);
    let dq = graph_rewrites::testing::first_node(&g, "MxDequantize");
    assert_eq!(value_names(&g, g.inputs(dq)), ["wq", "ws"]);
    assert_eq!(g.value_name(g.outputs(dq)[0]), "wd");
    assert_eq!(
        snapshot(&g),
        "MxMatMul(x, , wq, ws) output_dtype=Int(1) trans_b=Int(0)"
    );
    assert!(
        report.fusions[0]
            .notes
            .iter()
            .any(|n| n.contains("stays (as MxDequantize)")),
        "{report:#?}"
    );
}

#[test]
fn a_constant_zero_zero_point_is_taken() {
    let mut b = ModelBuilder::new(24);
    b.input("x", FLOAT, &[4, 64]);
    b.init_raw("wq", FLOAT8E4M3FN, &[64, 16], vec![0x3a; 1024]);
    b.init_raw("ws", FLOAT8E8M0, &[2, 16], vec![120; 32]);
    b.init_raw("zp", FLOAT8E4M3FN, &[2, 16], vec![0x80; 32]);
    let dq = [
        ("axis", Attr::I(0)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(1)),
    ];
    b.node_in("", "DequantizeLinear", &["wq", "ws", "zp"], &["wd"], &dq)
        .node("MatMul", &["x", "wd"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
    assert_eq!(op_types(&g), ["MxMatMul"]);
}

/// Each refusal names its reason; the model then runs as before (MxDequantize + MatMul).
#[test]
fn what_is_not_the_same_computation_is_refused_with_the_reason() {
    let cases: Vec<(&str, ModelBuilder, &str)> = vec![
        (
            "runtime weight",
            {
                let mut b = ModelBuilder::new(24);
                b.input("x", FLOAT, &[4, 64])
                    .input("wq", FLOAT8E4M3FN, &[64, 16]);
                b.init_raw("ws", FLOAT8E8M0, &[2, 16], vec![120; 32]);
                let dq = [
                    ("axis", Attr::I(0)),
                    ("block_size", Attr::I(32)),
                    ("output_dtype", Attr::I(1)),
                ];
                b.node_in("", "DequantizeLinear", &["wq", "ws"], &["wd"], &dq);
                b
            },
            "MX weight is not constant",
        ),
        (
            "blocked along N",
            {
                let mut b = ModelBuilder::new(24);
                b.input("x", FLOAT, &[4, 64]);
                b.init_raw("wq", FLOAT8E4M3FN, &[64, 64], vec![0x3a; 4096]);
                b.init_raw("ws", FLOAT8E8M0, &[64, 2], vec![120; 128]);
                let dq = [
                    ("axis", Attr::I(1)),
                    ("block_size", Attr::I(32)),
                    ("output_dtype", Attr::I(1)),
                ];
                b.node_in("", "DequantizeLinear", &["wq", "ws"], &["wd"], &dq);
                b
            },
            "not MXFP8/MXFP4 along K",
        ),
        (
            "K not a multiple of 32",
            {
                let mut b = ModelBuilder::new(24);
                b.input("x", FLOAT, &[4, 48]);
                b.init_raw("wq", FLOAT8E4M3FN, &[48, 16], vec![0x3a; 768]);
                b.init_raw("ws", FLOAT8E8M0, &[2, 16], vec![120; 32]);
                let dq = [
                    ("axis", Attr::I(0)),
                    ("block_size", Attr::I(32)),
                    ("output_dtype", Attr::I(1)),
                ];
                b.node_in("", "DequantizeLinear", &["wq", "ws"], &["wd"], &dq);
                b
            },
            "K = 48",
        ),
        (
            "unknown K",
            {
                let mut b = ModelBuilder::new(24);
                b.input("x", FLOAT, &[4, -1]);
                b.init_raw("wq", FLOAT8E4M3FN, &[64, 16], vec![0x3a; 1024]);
                b.init_raw("ws", FLOAT8E8M0, &[2, 16], vec![120; 32]);
                let dq = [
                    ("axis", Attr::I(0)),
                    ("block_size", Attr::I(32)),
                    ("output_dtype", Attr::I(1)),
                ];
                b.node_in("", "DequantizeLinear", &["wq", "ws"], &["wd"], &dq);
                b
            },
            "unknown shape or K",
        ),
        // 1.25 · 2^18 overflows float16: the unfused DequantizeLinear writes Inf.
        (
            "f16 overflow",
            model(FLOAT16, FLOAT8E4M3FN, false, 145),
            "not a float16 value",
        ),
        // E4M3 0x01 (2^-9) at scale byte 2 is 2^-134, below bfloat16's subnormal spacing.
        (
            "bf16 underflow",
            {
                let mut b = ModelBuilder::new(24);
                b.input("x", BFLOAT16, &[4, 64]);
                b.init_raw("wq", FLOAT8E4M3FN, &[64, 16], vec![0x01; 1024]);
                b.init_raw("ws", FLOAT8E8M0, &[2, 16], vec![2; 32]);
                let dq = [
                    ("axis", Attr::I(0)),
                    ("block_size", Attr::I(32)),
                    ("output_dtype", Attr::I(BFLOAT16 as i64)),
                ];
                b.node_in("", "DequantizeLinear", &["wq", "ws"], &["wd"], &dq);
                b
            },
            "not a bfloat16 value",
        ),
    ];
    for (what, mut b, want) in cases {
        let t = if what.starts_with("f16") {
            FLOAT16
        } else if what.starts_with("bf16") {
            BFLOAT16
        } else {
            FLOAT
        };
        b.node("MatMul", &["x", "wd"], &["y"])
            .output("y", t, &[4, 16]);
        let why = b.refusal("mx_weight_matmul");
        assert!(why.contains(want), "{what}: {why}");
        let (report, g) = b.rewrite();
        assert_eq!(report.counts["mx_dequant"], 1, "{what}: {report:#?}");
        assert!(op_types(&g).contains(&"MatMul".to_string()), "{what}");
    }
}

/// A f16 weight whose scales are outside the always-exact range is still taken when every
/// dequantized value is a float16 value (checked value by value).
#[test]
fn f16_weight_out_of_the_scale_range_is_checked_value_by_value() {
    // 0x30 = 0.5 at 2^8 = 128: a float16 value, though 448 at that scale would not be.
    let mut b = ModelBuilder::new(24);
    b.input("x", FLOAT16, &[4, 64]);
    b.init_raw("wq", FLOAT8E4M3FN, &[64, 16], vec![0x30; 1024]);
    b.init_raw("ws", FLOAT8E8M0, &[2, 16], vec![135; 32]);
    let dq = [
        ("axis", Attr::I(0)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT16 as i64)),
    ];
    b.node_in("", "DequantizeLinear", &["wq", "ws"], &["wd"], &dq)
        .node("MatMul", &["x", "wd"], &["y"])
        .output("y", FLOAT16, &[4, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
    assert_eq!(op_types(&g), ["MxMatMul"]);
}

/// The MXFP8-activation fusions keep their MatMuls: this rule does not even report them.
#[test]
fn mxfp8_activation_matmuls_stay_with_the_activation_fusions() {
    let mut b = model(FLOAT, FLOAT8E4M3FN, false, 120);
    b.opset("com.amd.quark", 1);
    b.quark_fake_quant("x", "xq", 32, -1);
    b.node("MatMul", &["xq", "wd"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
    assert_eq!(report.counts["mx_weight_matmul"], 0, "{report:#?}");
    assert!(
        report
            .rejections
            .iter()
            .all(|r| r.rule != "mx_weight_matmul"),
        "{report:#?}"
    );
    assert_eq!(op_types(&g), ["MxQuantize", "MxMatMul"]);
    assert_eq!(
        value_names(
            &g,
            g.inputs(graph_rewrites::testing::first_node(&g, "MxMatMul"))
        )[..2],
        ["x_mxfp8", "x_mxfp8_scale"]
    );
}

#[test]
fn the_rule_runs_after_the_activation_fusions_and_before_the_fallbacks() {
    let names = graph_rewrites::pipeline::rule_names();
    let at = |n: &str| names.iter().position(|x| *x == n).unwrap();
    assert!(at("mxquant") < at("mx_weight_matmul"));
    assert!(at("mx_weight_matmul") < at("mx_quant_linear"));
    assert!(at("mx_weight_matmul") < at("mx_dequant"));
}

/// An opset-23 model (FLOAT4E2M1 exists from opset 23) is taken the same way.
#[test]
fn opset_23_models_are_taken() {
    let mut b = ModelBuilder::new(23);
    b.input("x", FLOAT, &[4, 64]);
    b.init_raw("wq", FLOAT4E2M1, &[64, 16], vec![0x3a; 512]);
    b.init_raw("ws", FLOAT8E8M0, &[2, 16], vec![120; 32]);
    let dq = [
        ("axis", Attr::I(0)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT as i64)),
    ];
    b.node_in("", "DequantizeLinear", &["wq", "ws"], &["wd"], &dq)
        .node("MatMul", &["x", "wd"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
    assert_eq!(
        snapshot(&g),
        "MxMatMul(x, , wq, ws) output_dtype=Int(1) trans_b=Int(0)"
    );
}
