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
use graph_rewrites::view::{ConstTensor, GraphView, NodeId, ValueId};

/// `wd = DequantizeLinear(wq, ws, axis, block_size 32, output_dtype out)`.
fn dequantize_wq(b: &mut ModelBuilder, axis: i64, out: i32) -> &mut ModelBuilder {
    let dq = [
        ("axis", Attr::I(axis)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(out as i64)),
    ];
    b.node_in("", "DequantizeLinear", &["wq", "ws"], &["wd"], &dq)
}

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
    dequantize_wq(&mut b, axis, t);
    b
}

/// `x` of `t` with dims `x_dims`; a constant E4M3 weight `wq` of `wq_dims`, every byte `byte`,
/// with scales `ws` of `ws_dims`, every byte `scale`, dequantized along `axis` to `t` as `wd`.
fn constant_weight(
    t: i32,
    x_dims: &[i64],
    (wq_dims, byte): (&[i64], u8),
    (ws_dims, scale): (&[i64], u8),
    axis: i64,
) -> ModelBuilder {
    let len = |d: &[i64]| d.iter().product::<i64>() as usize;
    let mut b = ModelBuilder::new(24);
    b.input("x", t, x_dims);
    b.init_raw("wq", FLOAT8E4M3FN, wq_dims, vec![byte; len(wq_dims)]);
    b.init_raw("ws", FLOAT8E8M0, ws_dims, vec![scale; len(ws_dims)]);
    dequantize_wq(&mut b, axis, t);
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

/// A weight two float MatMuls read (tied / shared weights): both become MxMatMuls reading the
/// weight in place. The first fusion re-creates the DequantizeLinear as `MxDequantize` for the
/// second reader, which the next pass takes too — as the plugin EP does, where ONNX Runtime gives
/// each reader its own DequantizeLinear first (before, the second reader kept dequantizing the
/// weight every step offline while the EP fused it: the two paths' bits differed). Likewise for a
/// Quark weight fake-quant read twice.
#[test]
fn every_float_reader_of_a_shared_weight_is_taken() {
    let mut b = model(FLOAT, FLOAT8E4M3FN, false, 120);
    b.node("MatMul", &["x", "wd"], &["y"])
        .node("Relu", &["x"], &["x2"])
        .node("MatMul", &["x2", "wd"], &["y2"])
        .output("y", FLOAT, &[4, 16])
        .output("y2", FLOAT, &[4, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 2, "{report:#?}");
    let mut ops = op_types(&g);
    ops.sort();
    assert_eq!(ops, ["MxMatMul", "MxMatMul", "Relu"]);
    assert_eq!(
        snapshot(&g),
        "MxMatMul(x, , wq, ws) output_dtype=Int(1) trans_b=Int(0)"
    );
    let y2 = g.producer(g.value_by_name("y2").unwrap()).unwrap().0;
    assert_eq!(value_names(&g, g.inputs(y2)), ["x2", "", "wq", "ws"]);

    let mut b = quark_model(FLOAT, &quark_weight_values());
    b.node("MatMul", &["x", "wf"], &["y"])
        .node("Relu", &["x"], &["x2"])
        .node("MatMul", &["x2", "wf"], &["y2"])
        .output("y", FLOAT, &[4, 16])
        .output("y2", FLOAT, &[4, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 2, "{report:#?}");
    let mut ops = op_types(&g);
    ops.sort();
    assert_eq!(ops, ["MxMatMul", "MxMatMul", "Relu"]);
    let y2 = g.producer(g.value_by_name("y2").unwrap()).unwrap().0;
    assert_eq!(
        value_names(&g, g.inputs(y2)),
        ["x2", "", "w_mxfp8_kn", "w_mxfp8_kn_scale"]
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
                dequantize_wq(&mut b, 0, FLOAT);
                b
            },
            "MX weight is not constant",
        ),
        (
            "blocked along N",
            constant_weight(FLOAT, &[4, 64], (&[64, 64], 0x3a), (&[64, 2], 120), 1),
            "not MXFP8/MXFP4 along K",
        ),
        (
            "K not a multiple of 32",
            constant_weight(FLOAT, &[4, 48], (&[48, 16], 0x3a), (&[2, 16], 120), 0),
            "K = 48",
        ),
        (
            "unknown K",
            constant_weight(FLOAT, &[4, -1], (&[64, 16], 0x3a), (&[2, 16], 120), 0),
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
            constant_weight(BFLOAT16, &[4, 64], (&[64, 16], 0x01), (&[2, 16], 2), 0),
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
    let mut b = constant_weight(FLOAT16, &[4, 64], (&[64, 16], 0x30), (&[2, 16], 135), 0);
    b.node("MatMul", &["x", "wd"], &["y"])
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

/// A standard MXFP8 activation `x → Q(scale) → DQ` whose scale is `Cast(op(amax, c),
/// round_mode=round)` in `t`, read by a MatMul of the MX weight: `Mul(2^-8)` + down is a
/// quantizer `mxquant` takes (in float16 as the `floor_f16` rule); `Div(448)` + up in float16
/// (RCEIL's quotient rounded to float16 first: no kernel rule) or `Mul(2^-7)` (no MX rule)
/// `mxquant` refuses, and the fallbacks take the Q / DQ.
fn mx_activation_model(t: i32, op: &str, c: f32, round: &str) -> ModelBuilder {
    let mut b = model(t, FLOAT8E4M3FN, false, 120);
    b.init_i64("blk", &[3], &[0, 2, 32])
        .init_i64("axes", &[1], &[-1]);
    if t == FLOAT16 {
        b.init_raw(
            "c",
            FLOAT16,
            &[],
            half::f16::from_f32(c).to_le_bytes().to_vec(),
        );
    } else {
        b.init_f32("c", &[], &[c]);
    }
    b.node("Reshape", &["x", "blk"], &["xb"])
        .node("Abs", &["xb"], &["ab"])
        .node_in(
            "",
            "ReduceMax",
            &["ab", "axes"],
            &["amax"],
            &[("keepdims", Attr::I(0))],
        )
        .node(op, &["amax", "c"], &["s"])
        .node_in(
            "",
            "Cast",
            &["s"],
            &["scale"],
            &[
                ("to", Attr::I(FLOAT8E8M0 as i64)),
                ("round_mode", Attr::S(round)),
            ],
        );
    let qa = [
        ("axis", Attr::I(-1)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT8E4M3FN as i64)),
    ];
    let da = [
        ("axis", Attr::I(-1)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(t as i64)),
    ];
    b.node_in("", "QuantizeLinear", &["x", "scale"], &["q"], &qa)
        .node_in("", "DequantizeLinear", &["q", "scale"], &["xd"], &da)
        .node("MatMul", &["xd", "wd"], &["y"])
        .output("y", t, &[4, 16]);
    b
}

/// An MXFP8 activation whose quantizer no activation fusion takes (an RCEIL scale computed in
/// float16, or an unknown scale rule) is a float activation to this rule, in the one scan the
/// plugin EP runs as in the pipeline: before, the EP left the MatMul to ORT and dequantized the
/// MX weight on every step (`mx_dequant`) while the offline rewrite, one iteration later, read
/// it in place: the two paths computed different GEMMs (new-user probe 11).
#[test]
fn a_matmul_behind_a_refused_mx_activation_quantizer_is_taken_in_one_scan() {
    for (t, op, c, round) in [
        (FLOAT16, "Div", 448.0, "up"),
        (FLOAT, "Mul", 2f32.powi(-7), "down"),
    ] {
        let b = mx_activation_model(t, op, c, round);
        let g = b.graph().unwrap();
        let sites = graph_rewrites::pipeline::find_sites(&g, &Default::default()).unwrap();
        let ok = |rule: &str| {
            sites
                .iter()
                .filter(|s| s.rule == rule && s.verdict.is_ok())
                .count()
        };
        assert_eq!(ok("mxquant"), 0, "{t} {op} {c}: {sites:#?}");
        assert_eq!(ok("mx_weight_matmul"), 1, "{t} {op} {c}: {sites:#?}");
        assert_eq!(ok("mx_quant_linear"), 1, "{t} {op} {c}: {sites:#?}");
        // The activation's DequantizeLinear only: the weight's goes with the MatMul.
        assert_eq!(ok("mx_dequant"), 1, "{t} {op} {c}: {sites:#?}");
        let (report, g) = b.rewrite();
        assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
        if t == FLOAT16 {
            // The refusal says what the export can change.
            let why = &report
                .rejections
                .iter()
                .find(|r| r.rule == "mxquant")
                .unwrap()
                .reason;
            assert!(
                why.contains("computed in float16") && why.contains("Cast the block amax to float"),
                "{why}"
            );
        }
        let mm = graph_rewrites::testing::first_node(&g, "MxMatMul");
        let a = g.inputs(mm)[0].unwrap();
        assert_eq!(g.op_type(g.producer(a).unwrap().0), "MxDequantize");
    }
    // The quantizers mxquant takes keep their MatMul (MxQuantize + MxMatMul on the MXFP8
    // bytes); the float16 floor spelling as the `floor_f16` rule.
    for (t, rule) in [(FLOAT, "floor"), (FLOAT16, "floor_f16")] {
        let (report, g) = mx_activation_model(t, "Mul", 2f32.powi(-8), "down").rewrite();
        assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
        assert_eq!(report.counts["mx_weight_matmul"], 0, "{report:#?}");
        assert_eq!(op_types(&g), ["MxQuantize", "MxMatMul"]);
        let q = graph_rewrites::testing::first_node(&g, "MxQuantize");
        assert_eq!(
            graph_rewrites::testing::node_attr(&g, q, "scale_rule"),
            graph_rewrites::view::AttrValue::String(rule.into()),
            "{t}"
        );
    }
}

/// Whether the activation fusions take a quantizer is judged once per scan, however many
/// MatMuls read its DequantizeLinear (before, each MatMul ran the three fusions' matchers at the
/// quantizer again): the quantizer's scale constant is read as often with three readers as with
/// one, and all three MatMuls are taken.
#[test]
fn a_refused_quantizer_is_judged_once_per_scan_for_all_its_matmuls() {
    let reads_of_c = |readers: usize| {
        let mut b = mx_activation_model(FLOAT16, "Div", 448.0, "up");
        for i in 1..readers {
            let y = format!("y{i}");
            b.node("MatMul", &["xd", "wd"], &[&y])
                .output(&y, FLOAT16, &[4, 16]);
        }
        let g = b.graph().unwrap();
        let view = CountingReads {
            g: &g,
            reads: Default::default(),
        };
        let sites = graph_rewrites::pipeline::find_sites(&view, &Default::default()).unwrap();
        let taken = sites
            .iter()
            .filter(|s| s.rule == "mx_weight_matmul" && s.verdict.is_ok())
            .count();
        assert_eq!(taken, readers, "{sites:#?}");
        let reads = view.reads.borrow().get("c").copied().unwrap_or(0);
        reads
    };
    let one = reads_of_c(1);
    assert!(one > 0);
    assert_eq!(reads_of_c(3), one);
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
    dequantize_wq(&mut b, 0, FLOAT)
        .node("MatMul", &["x", "wd"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
    assert_eq!(
        snapshot(&g),
        "MxMatMul(x, , wq, ws) output_dtype=Int(1) trans_b=Int(0)"
    );
}

/// `x [4, 64]` of `t`; `wf = MXQuantizeDequantize(w [64, 16] of t, fp8_e4m3, block 32, axis 0)`
/// (Quark's weight-only export), `w` holding `vals` (row-major, widened).
fn quark_model(t: i32, vals: &[f32]) -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.opset("com.amd.quark", 1);
    b.input("x", t, &[4, 64]);
    let raw: Vec<u8> = match t {
        FLOAT16 => vals
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect(),
        BFLOAT16 => vals
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
        _ => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    b.init_raw("w", t, &[64, 16], raw);
    b.quark_fake_quant("w", "wf", 32, 0);
    b
}

/// Ordinary weight values: a spread of magnitudes, some on E4M3 ties.
fn quark_weight_values() -> Vec<f32> {
    (0..64 * 16)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013 * (1.0 + (i % 7) as f32))
        .collect()
}

/// The stored E4M3 values / E8M0 scales of the fused weight, dequantized in `[K, N]` order.
fn stored_weight(g: &graph_rewrites::ir::Graph) -> Vec<f32> {
    let mm = graph_rewrites::testing::first_node(g, "MxMatMul");
    let ins = g.inputs(mm);
    let v = g.const_value(ins[2].unwrap()).unwrap();
    let s = g.const_value(ins[3].unwrap()).unwrap();
    assert_eq!(v.dims, [16, 64]);
    assert_eq!(s.dims, [16, 2]);
    let mut out = vec![0f32; 64 * 16];
    for n in 0..16 {
        for k in 0..64 {
            out[k * 16 + n] = kernels::codec::e4m3_to_f32(v.raw[n * 64 + k])
                * kernels::codec::e8m0::e8m0_to_f32(s.raw[n * 2 + k / 32]);
        }
    }
    out
}

/// Quark's fake-quant of `vals` (`[64, 16]`, blocks along axis 0), rounded to `t`.
fn quark_reference(vals: &[f32], t: i32) -> Vec<f32> {
    use kernels::reference::quark_mx::{quark_mx_fake_quant, IntRounding, QuarkElement};
    let widen = |v: f32| match t {
        FLOAT16 => half::f16::from_f32(v).to_f32(),
        BFLOAT16 => half::bf16::from_f32(v).to_f32(),
        _ => v,
    };
    let mut rows = vec![0f32; vals.len()];
    for k in 0..64 {
        for n in 0..16 {
            rows[n * 64 + k] = widen(vals[k * 16 + n]);
        }
    }
    let mut y = vec![0f32; rows.len()];
    quark_mx_fake_quant(
        &rows,
        &mut y,
        64,
        32,
        QuarkElement::Fp8E4M3,
        IntRounding::HalfEven,
    )
    .unwrap();
    let mut out = vec![0f32; vals.len()];
    for k in 0..64 {
        for n in 0..16 {
            out[k * 16 + n] = widen(y[n * 64 + k]);
        }
    }
    out
}

/// Quark weight-only: `MatMul(x, MXQuantizeDequantize(W))` / `Gemm(x, .., C)` read the weight
/// quantized at rewrite time — values that dequantize to exactly the fake-quant's output — and
/// the fake-quant goes.
#[test]
fn quark_fake_quantized_weight_becomes_a_weight_only_mxmatmul() {
    let vals = quark_weight_values();
    for t in [FLOAT, FLOAT16, BFLOAT16] {
        for gemm in [false, true] {
            let mut b = quark_model(t, &vals);
            if gemm {
                let bias: Vec<u8> = match t {
                    FLOAT => [0.25f32; 16].iter().flat_map(|v| v.to_le_bytes()).collect(),
                    FLOAT16 => vec![0; 32],
                    _ => vec![0; 32],
                };
                b.init_raw("bias", t, &[16], bias);
                b.node_in(
                    "",
                    "Gemm",
                    &["x", "wf", "bias"],
                    &["y"],
                    &[("alpha", Attr::F(0.5))],
                );
            } else {
                b.node("MatMul", &["x", "wf"], &["y"]);
            }
            b.output("y", t, &[4, 16]);
            let (report, g) = b.rewrite();
            assert_eq!(
                report.counts["mx_weight_matmul"], 1,
                "{t} {gemm}: {report:#?}"
            );
            assert_eq!(op_types(&g), ["MxMatMul"], "{t} {gemm}");
            let want = if gemm {
                format!(
                    "MxMatMul(x, , w_mxfp8, w_mxfp8_scale, bias) alpha=Float(0.5) output_dtype=Int({t}) trans_b=Int(1)"
                )
            } else {
                format!(
                    "MxMatMul(x, , w_mxfp8, w_mxfp8_scale) output_dtype=Int({t}) trans_b=Int(1)"
                )
            };
            assert_eq!(snapshot(&g), want);
            assert_eq!(stored_weight(&g), quark_reference(&vals, t), "{t} {gemm}");
        }
    }
}

/// A fake-quant something else also reads stays for it — re-created as `MxDequantize` of the
/// weight quantized at rewrite time (`[K, N]`, the same values, checked exact), which the
/// MxMatMul reads too (`trans_b = 0`), so a claim of the replacement carries the constants.
#[test]
fn a_quark_weight_fake_quant_with_other_readers_stays() {
    let mut b = quark_model(FLOAT, &quark_weight_values());
    b.init_f32("one", &[], &[1.0]);
    b.node("MatMul", &["x", "wf"], &["y"])
        .node("Add", &["wf", "one"], &["w1"])
        .output("y", FLOAT, &[4, 16])
        .output("w1", FLOAT, &[64, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
    let mut ops = op_types(&g);
    ops.sort();
    assert_eq!(ops, ["Add", "MxDequantize", "MxMatMul"]);
    assert_eq!(
        snapshot(&g),
        "MxMatMul(x, , w_mxfp8_kn, w_mxfp8_kn_scale) output_dtype=Int(1) trans_b=Int(0)"
    );
    let dq = graph_rewrites::testing::first_node(&g, "MxDequantize");
    assert_eq!(
        value_names(&g, g.inputs(dq)),
        ["w_mxfp8_kn", "w_mxfp8_kn_scale"]
    );
    assert_eq!(g.value_name(g.outputs(dq)[0]), "wf");
    assert_eq!(
        g.attr(dq, "axis").map(|v| format!("{v:?}")),
        Some("Int(0)".into())
    );
    // The [K, N] bytes dequantize to Quark's output.
    let v = g.const_value(g.inputs(dq)[0].unwrap()).unwrap();
    let sc = g.const_value(g.inputs(dq)[1].unwrap()).unwrap();
    assert_eq!(
        (v.dims.clone(), sc.dims.clone()),
        (vec![64, 16], vec![2, 16])
    );
    let deq: Vec<f32> = (0..64 * 16)
        .map(|i| {
            kernels::codec::e4m3_to_f32(v.raw[i])
                * kernels::codec::e8m0::e8m0_to_f32(sc.raw[(i / 16 / 32) * 16 + i % 16])
        })
        .collect();
    assert_eq!(deq, quark_reference(&quark_weight_values(), FLOAT));
    assert!(
        report.fusions[0]
            .notes
            .iter()
            .any(|n| n.contains("stays for its other readers (as MxDequantize")),
        "{report:#?}"
    );
}

/// Zero blocks and blocks of ordinary magnitude next to them are exact and taken.
#[test]
fn a_quark_weight_with_zero_blocks_is_taken() {
    let mut vals = quark_weight_values();
    for v in vals.iter_mut().take(32 * 16) {
        *v = 0.0; // rows 0..32 of [64, 16]: block 0 of every column
    }
    let mut b = quark_model(FLOAT, &vals);
    b.node("MatMul", &["x", "wf"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
    assert_eq!(stored_weight(&g), quark_reference(&vals, FLOAT));
}

/// A NaN in the weight: Quark passes it through and scales its block from the other elements;
/// the rewrite-time quantizer ignores it for the scale too and stores a NaN element — the same
/// values, so it is taken (f32 and f16).
#[test]
fn a_quark_weight_with_nan_is_taken() {
    let mut vals = quark_weight_values();
    vals[5] = f32::NAN;
    vals[16 * 40 + 3] = -f32::NAN;
    for t in [FLOAT, FLOAT16, BFLOAT16] {
        let mut b = quark_model(t, &vals);
        b.node("MatMul", &["x", "wf"], &["y"])
            .output("y", t, &[4, 16]);
        let (report, g) = b.rewrite();
        assert_eq!(report.counts["mx_weight_matmul"], 1, "{t}: {report:#?}");
        let (got, want) = (stored_weight(&g), quark_reference(&vals, t));
        let same = |a: f32, b: f32| a == b || (a.is_nan() && b.is_nan());
        assert!(got.iter().zip(&want).all(|(a, b)| same(*a, *b)), "{t}");
        assert_eq!(got.iter().filter(|v| v.is_nan()).count(), 2, "{t}");
    }
}

/// Each weight whose MXFP8 form would not dequantize to exactly the fake-quant's output — or
/// that is not an MXFP8 weight along K — is refused with the reason, and the fake-quant stays.
#[test]
fn quark_weights_that_are_not_exactly_mxfp8_are_refused() {
    let base = quark_weight_values();
    let with = |i: usize, v: f32| {
        let mut w = base.clone();
        w[i] = v;
        w
    };
    // Every element tiny (largest exponent below 2^-119), with bits below 2^-127 · 2^-9.
    let tiny: Vec<f32> = base.iter().map(|v| v * 1e-37).collect();
    let cases: Vec<(&str, i32, Vec<f32>, &str)> = vec![
        ("Inf", FLOAT, with(5, f32::INFINITY), "holds an Inf"),
        ("tiny", FLOAT, tiny.clone(), "below 2^-119"),
        ("f16 Inf", FLOAT16, with(5, f32::INFINITY), "holds an Inf"),
        (
            "bf16 Inf",
            BFLOAT16,
            with(5, f32::NEG_INFINITY),
            "holds an Inf",
        ),
        ("bf16 tiny", BFLOAT16, tiny.clone(), "below 2^-119"),
    ];
    for (what, t, vals, want) in cases {
        let mut b = quark_model(t, &vals);
        b.node("MatMul", &["x", "wf"], &["y"])
            .output("y", t, &[4, 16]);
        let why = b.refusal("mx_weight_matmul");
        assert!(why.contains(want), "{what}: {why}");
        let (report, g) = b.rewrite();
        assert_eq!(report.counts["mx_weight_matmul"], 0, "{what}: {report:#?}");
        let mut ops = op_types(&g);
        ops.sort();
        assert_eq!(ops, ["MXQuantizeDequantize", "MatMul"], "{what}");
    }
    // Structural refusals: a Gemm reading it with transB = 1, another axis, a runtime weight.
    let mut b = quark_model(FLOAT, &base);
    b.node_in("", "Gemm", &["x", "wf"], &["y"], &[("transB", Attr::I(1))])
        .output("y", FLOAT, &[4, 64]);
    assert!(b.refusal("mx_weight_matmul").contains("transB = 1"));
    let mut b = ModelBuilder::new(24);
    b.opset("com.amd.quark", 1);
    b.input("x", FLOAT, &[4, 64]).input("w", FLOAT, &[64, 16]);
    b.quark_fake_quant("w", "wf", 32, 0)
        .node("MatMul", &["x", "wf"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    assert!(b.refusal("mx_weight_matmul").contains("not a constant"));
    let mut b = ModelBuilder::new(24);
    b.opset("com.amd.quark", 1);
    b.input("x", FLOAT, &[4, 64]);
    b.init_f32("w", &[64, 16], &base);
    b.quark_fake_quant("w", "wf", 32, 1)
        .node("MatMul", &["x", "wf"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    assert!(b.refusal("mx_weight_matmul").contains("not MXFP8 along K"));
}

/// A Quark-quantized activation's MatMul of a Quark weight stays the MXFP8 fusions'.
#[test]
fn quark_activation_and_weight_stay_with_the_activation_fusion() {
    let mut b = quark_model(FLOAT, &quark_weight_values());
    b.quark_fake_quant("x", "xq", 32, -1)
        .node("MatMul", &["xq", "wf"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
    assert_eq!(report.counts["mx_weight_matmul"], 0, "{report:#?}");
    assert_eq!(op_types(&g), ["MxQuantize", "MxMatMul"]);
}

/// A view over a graph that counts the reads of each constant's bytes.
struct CountingReads<'a> {
    g: &'a graph_rewrites::ir::Graph,
    reads: std::cell::RefCell<std::collections::HashMap<String, usize>>,
}

impl GraphView for CountingReads<'_> {
    graph_rewrites::forward_graph_view!(g);
    fn const_value(&self, v: ValueId) -> Option<ConstTensor> {
        *self
            .reads
            .borrow_mut()
            .entry(self.g.value_name(v).to_string())
            .or_default() += 1;
        self.g.const_value(v)
    }
}

/// A Quark weight several MatMuls read is read, quantized and checked against Quark's kernel
/// once per scan of the rules, not once per reader (the check reads the whole weight: on a 4-layer
/// TP4 f32 model the repeated reads and quantizations were over half of the rewrite time). Both
/// readers still get the same bytes.
#[test]
fn a_shared_quark_weight_is_quantized_once_per_scan() {
    let mut b = quark_model(FLOAT, &quark_weight_values());
    b.node("MatMul", &["x", "wf"], &["y"])
        .node("Relu", &["x"], &["x2"])
        .node("MatMul", &["x2", "wf"], &["y2"])
        .output("y", FLOAT, &[4, 16])
        .output("y2", FLOAT, &[4, 16]);
    let g = b.graph().unwrap();
    let view = CountingReads {
        g: &g,
        reads: Default::default(),
    };
    let sites = graph_rewrites::pipeline::find_sites(&view, &Default::default()).unwrap();
    let ok: Vec<_> = sites
        .iter()
        .filter(|s| s.rule == "mx_weight_matmul" && s.verdict.is_ok())
        .collect();
    assert_eq!(ok.len(), 2, "{sites:#?}");
    assert_eq!(view.reads.borrow().get("w"), Some(&1), "{:?}", view.reads);

    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 2, "{report:#?}");
    let mms: Vec<_> = g
        .nodes()
        .iter()
        .copied()
        .filter(|&n| g.op_type(n) == "MxMatMul")
        .collect();
    let bytes = |n: NodeId, i: usize| g.const_value(g.inputs(n)[i].unwrap()).unwrap().raw;
    assert_eq!(mms.len(), 2);
    assert_eq!(bytes(mms[0], 2), bytes(mms[1], 2));
    assert_eq!(bytes(mms[0], 3), bytes(mms[1], 3));
}

/// A refused Quark weight is checked once per pipeline run, not once per iteration: here a good
/// weight's fusion makes the pipeline scan twice, and the second scan finds the refused site
/// again (before, each scan quantized and compared the whole refused weight anew).
#[test]
fn a_refused_quark_weight_is_checked_once_per_pipeline_run() {
    use graph_rewrites::pipeline::run_pipeline_with_checks;
    use graph_rewrites::pipeline::weight_checks::{CheckCounts, WeightChecks};
    let good = quark_weight_values();
    let mut bad = good.clone();
    bad[5] = f32::INFINITY;
    let mut b = quark_model(FLOAT, &bad);
    b.init_f32("w2", &[64, 16], &good);
    b.quark_fake_quant("w2", "wf2", 32, 0)
        .node("MatMul", &["x", "wf"], &["y"])
        .node("MatMul", &["x", "wf2"], &["y2"])
        .output("y", FLOAT, &[4, 16])
        .output("y2", FLOAT, &[4, 16]);
    let mut g = b.graph().unwrap();
    let checks = std::sync::Arc::new(WeightChecks::refusals());
    let report = run_pipeline_with_checks(&mut g, &Default::default(), &checks).unwrap();
    assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
    assert!(
        report.rejections[0].reason.contains("holds an Inf"),
        "{report:#?}"
    );
    // Two weights checked once each; the refusal found again in the second scan is reused.
    assert_eq!(checks.counts(), CheckCounts { run: 2, reused: 1 });
    assert_eq!(checks.len(), 1, "only the refusal is kept");
    // The same report and graph as without the kept refusals.
    let (plain, g2) = b.rewrite();
    assert_eq!(report, plain);
    assert_eq!(op_types(&g), op_types(&g2));
}

/// What a kept verdict is keyed by: a weight of the same name with other bytes (another graph,
/// or one a graph optimization changed) is checked anew and gets its own bytes, never the kept
/// ones; the same bytes under the same name reuse them.
#[test]
fn a_kept_weight_check_is_reused_only_for_the_same_bytes() {
    use graph_rewrites::pipeline::weight_checks::{CheckCounts, WeightChecks};
    use graph_rewrites::pipeline::{find_sites_with_checks, run_pipeline_with_checks};
    let vals = quark_weight_values();
    let scaled: Vec<f32> = vals.iter().map(|v| v * 2.0).collect();
    let model = |vals: &[f32]| {
        let mut b = quark_model(FLOAT, vals);
        b.node("MatMul", &["x", "wf"], &["y"])
            .output("y", FLOAT, &[4, 16]);
        b
    };
    let checks = std::sync::Arc::new(WeightChecks::for_session());
    let g = model(&vals).graph().unwrap();
    find_sites_with_checks(&g, &Default::default(), &checks).unwrap();
    assert_eq!(checks.counts(), CheckCounts { run: 1, reused: 0 });
    // The same weight in a fresh graph (as the EP's Compile builds): reused.
    let mut same = model(&vals).graph().unwrap();
    run_pipeline_with_checks(&mut same, &Default::default(), &checks).unwrap();
    assert_eq!(checks.counts(), CheckCounts { run: 1, reused: 1 });
    // Another weight named `w`: checked, and its own bytes stored.
    let mut other = model(&scaled).graph().unwrap();
    run_pipeline_with_checks(&mut other, &Default::default(), &checks).unwrap();
    assert_eq!(checks.counts(), CheckCounts { run: 2, reused: 1 });
    let (_, want) = model(&scaled).rewrite();
    assert_eq!(stored_weight(&other), stored_weight(&want));
    assert_ne!(stored_weight(&other), stored_weight(&same));
    checks.clear();
    assert!(checks.is_empty());
}

/// A rewrite's cache that takes from a session's (the EP's `Compile` after `GetCapability`)
/// takes an accepted verdict out of it — the session no longer holds those bytes — and copies a
/// refusal (small, and another rewrite may meet the same weight).
#[test]
fn a_rewrite_takes_accepted_verdicts_out_of_the_session_and_copies_refusals() {
    use graph_rewrites::pipeline::weight_checks::{CheckCounts, WeightChecks};
    use graph_rewrites::pipeline::{find_sites_with_checks, run_pipeline_with_checks};
    use std::sync::Arc;
    let good = quark_weight_values();
    let mut bad = good.clone();
    bad[5] = f32::INFINITY;
    let model = |vals: &[f32]| {
        let mut b = quark_model(FLOAT, vals);
        b.node("MatMul", &["x", "wf"], &["y"])
            .output("y", FLOAT, &[4, 16]);
        b.graph().unwrap()
    };
    let session = Arc::new(WeightChecks::for_session());
    find_sites_with_checks(&model(&good), &Default::default(), &session).unwrap();
    assert_eq!(session.len(), 1);
    let rewrite = Arc::new(WeightChecks::taking_from(session.clone()));
    run_pipeline_with_checks(&mut model(&good), &Default::default(), &rewrite).unwrap();
    assert!(session.is_empty());
    assert_eq!(rewrite.counts(), CheckCounts { run: 0, reused: 1 });

    find_sites_with_checks(&model(&bad), &Default::default(), &session).unwrap();
    for _ in 0..2 {
        let rewrite = Arc::new(WeightChecks::taking_from(session.clone()));
        let report =
            run_pipeline_with_checks(&mut model(&bad), &Default::default(), &rewrite).unwrap();
        assert!(report.rejections[0].reason.contains("holds an Inf"));
        assert_eq!(rewrite.counts().run, 0);
    }
    assert_eq!(session.len(), 1, "the refusal stays");
    assert_eq!(session.counts(), CheckCounts { run: 2, reused: 0 });
}

/// A weight DequantizeLinear whose blocked scale does not fit its values (`[1, 16]` for a
/// `[64, 16]` weight blocked 32 along K: ONNX wants `[2, 16]`; an invalid model) was fused: the
/// session then failed at run time with "b_scale has shape [16, 1], expected [16, 2]" (new-user
/// probe 7; the EP and the offline rewrite alike). Now `classify_weight` checks the layout with
/// `predicates::mx_scale_layout`, as `mx_gather_dequant` and `mx_dequant` do.
#[test]
fn a_weight_scale_that_does_not_fit_the_values_is_refused() {
    let mut b = constant_weight(FLOAT, &[4, 64], (&[64, 16], 0x3a), (&[1, 16], 127), 0);
    b.node("MatMul", &["x", "wd"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    let why = b.refusal("mx_weight_matmul");
    assert!(
        why.contains("blocked scale has shape [1, 16], expected [2, 16]"),
        "{why}"
    );
}
