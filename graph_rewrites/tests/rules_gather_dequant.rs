//! Rule `mx_gather_dequant`: `Gather(DequantizeLinear(x, s: E8M0))` along an axis other than the
//! quantized one becomes one `MxGatherDequantize` (stacked MoE experts selected by id, MX
//! embedding tables); what it cannot take is refused with the reason and left to `mx_dequant`.

use graph_rewrites::pattern::predicates::dtype::{FLOAT, FLOAT8E4M3FN, FLOAT8E8M0, INT32, INT64};
use graph_rewrites::testing::{first_node, node_attr, op_types, value_names, Attr, ModelBuilder};
use graph_rewrites::view::{AttrValue, GraphView, NodeId};

/// Stacked experts `W = DequantizeLinear(values [4, 16, 64], scales [4, 16, 2], axis 2,
/// block 32)` (`[E, N, K]`, blocked along K).
fn experts(b: &mut ModelBuilder) {
    b.init_raw("wq", FLOAT8E4M3FN, &[4, 16, 64], vec![0x38; 4 * 16 * 64]);
    b.init_raw("ws", FLOAT8E8M0, &[4, 16, 2], vec![126; 4 * 16 * 2]);
    let attrs = [
        ("axis", Attr::I(2)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT as i64)),
    ];
    b.node_in("", "DequantizeLinear", &["wq", "ws"], &["w"], &attrs);
}

/// `y = MatMul(Gather(W, ids [3]), xu [3, 64, cols])`: the experts' bmm, the weight first.
fn expert_bmm(cols: i64) -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.input("ids", INT64, &[3])
        .input("xu", FLOAT, &[3, 64, cols]);
    experts(&mut b);
    b.node("Gather", &["w", "ids"], &["wsel"])
        .node("MatMul", &["wsel", "xu"], &["y"]);
    b.output("y", FLOAT, &[3, 16, cols]);
    b
}

fn rejections(report: &graph_rewrites::pipeline::RewriteReport) -> Vec<String> {
    report
        .rejections
        .iter()
        .filter(|r| r.rule == "mx_gather_dequant")
        .map(|r| r.reason.clone())
        .collect()
}

#[test]
fn stacked_experts_selected_by_id_become_one_gather_dequantize() {
    let mut b = ModelBuilder::new(24);
    b.input("ids", INT64, &[2, 3]);
    experts(&mut b);
    b.node_in(
        "",
        "Gather",
        &["w", "ids"],
        &["wsel"],
        &[("axis", Attr::I(-3))],
    );
    b.output("wsel", FLOAT, &[2, 3, 16, 64]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_gather_dequant"], 1, "{report:#?}");
    assert_eq!(report.counts["mx_dequant"], 0, "{report:#?}");
    assert_eq!(op_types(&g), ["MxGatherDequantize"]);
    let n = first_node(&g, "MxGatherDequantize");
    // The quantized axis stays counted on x; the gather axis is normalized.
    assert_eq!(node_attr(&g, n, "axis"), AttrValue::Int(2));
    assert_eq!(node_attr(&g, n, "gather_axis"), AttrValue::Int(0));
    assert_eq!(node_attr(&g, n, "block_size"), AttrValue::Int(32));
    assert_eq!(value_names(&g, g.inputs(n)), ["wq", "ws", "ids"]);
    assert_eq!(g.value_name(g.outputs(n)[0]), "wsel");
}

#[test]
fn gather_along_the_quantized_axis_is_refused() {
    let mut b = ModelBuilder::new(24);
    b.input("ids", INT32, &[5]);
    experts(&mut b);
    b.node_in(
        "",
        "Gather",
        &["w", "ids"],
        &["wk"],
        &[("axis", Attr::I(2))],
    );
    b.output("wk", FLOAT, &[4, 16, 5]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_gather_dequant"], 0);
    assert_eq!(report.counts["mx_dequant"], 1);
    assert_eq!(op_types(&g), ["MxDequantize", "Gather"]);
    let why = rejections(&report);
    assert!(
        why.iter()
            .any(|r| r.contains("gathers along the quantized axis 2")),
        "{why:?}"
    );
}

#[test]
fn dequantize_with_another_reader_stays_for_it() {
    // The dequantized experts are also a graph output: the Gather cannot take the
    // DequantizeLinear away (mx_dequant takes it; ORT's Gather reads its output).
    let mut b = ModelBuilder::new(24);
    b.input("ids", INT64, &[2]);
    experts(&mut b);
    b.node("Gather", &["w", "ids"], &["wsel"]);
    b.output("wsel", FLOAT, &[2, 16, 64])
        .output("w", FLOAT, &[4, 16, 64]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_gather_dequant"], 0, "{report:#?}");
    assert_eq!(op_types(&g), ["MxDequantize", "Gather"]);
}

#[test]
fn tied_weight_gather_takes_the_dequantize_the_matmul_fusion_left() {
    // Tied embedding / lm head: W [V = 16, K = 64] blocked along K feeds a Gather (rows by id)
    // and, transposed, a float-activation MatMul. The MatMul fuses (weight-only MxMatMul) and
    // re-creates the dequantize for the Gather; the next pass takes that with the Gather.
    let mut b = ModelBuilder::new(24);
    b.input("ids", INT64, &[3]).input("a", FLOAT, &[2, 64]);
    b.init_raw("wq", FLOAT8E4M3FN, &[16, 64], vec![0x38; 16 * 64]);
    b.init_raw("ws", FLOAT8E8M0, &[16, 2], vec![126; 32]);
    let attrs = [
        ("axis", Attr::I(1)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT as i64)),
    ];
    b.node_in("", "DequantizeLinear", &["wq", "ws"], &["w"], &attrs);
    b.node("Gather", &["w", "ids"], &["emb"]);
    b.node_in(
        "",
        "Transpose",
        &["w"],
        &["wt"],
        &[("perm", Attr::Is(&[1, 0]))],
    );
    b.node("MatMul", &["a", "wt"], &["y"]);
    b.output("emb", FLOAT, &[3, 64])
        .output("y", FLOAT, &[2, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
    assert_eq!(report.counts["mx_gather_dequant"], 1, "{report:#?}");
    let mut ops = op_types(&g);
    ops.sort();
    assert_eq!(ops, ["MxGatherDequantize", "MxMatMul"]);
}

#[test]
fn float_indices_are_refused() {
    let mut b = ModelBuilder::new(24);
    b.input("ids", FLOAT, &[2]);
    experts(&mut b);
    b.node("Gather", &["w", "ids"], &["wsel"]);
    b.output("wsel", FLOAT, &[2, 16, 64]);
    let (report, _) = b.rewrite();
    assert_eq!(report.counts["mx_gather_dequant"], 0);
    assert!(
        rejections(&report)
            .iter()
            .any(|r| r.contains("float indices")),
        "{report:#?}"
    );
}

#[test]
fn the_expert_bmm_is_taken_too_and_reads_the_stacked_weights() {
    // bmm(W[ids], x [S, K, 1]) with W [E, N, K] blocked along K: one MxGatherMatMul, weight
    // first (trans_b = 1), reading the activation as it is.
    let (report, g) = expert_bmm(1).rewrite();
    assert_eq!(report.counts["mx_gather_dequant"], 1, "{report:#?}");
    assert_eq!(op_types(&g), ["MxGatherMatMul"]);
    let n = first_node(&g, "MxGatherMatMul");
    assert_eq!(node_attr(&g, n, "trans_b"), AttrValue::Int(1));
    assert_eq!(value_names(&g, g.inputs(n)), ["xu", "wq", "ws", "ids"]);
    assert_eq!(g.value_name(g.outputs(n)[0]), "y");
}

#[test]
fn an_activation_of_the_wrong_shape_leaves_the_matmul_with_a_note() {
    // [S, K, 2]: two columns per sample, not the one MxGatherMatMul takes.
    let (report, g) = expert_bmm(2).rewrite();
    let mut ops = op_types(&g);
    ops.sort();
    assert_eq!(ops, ["MatMul", "MxGatherDequantize"]);
    let notes: Vec<&String> = report.fusions.iter().flat_map(|f| &f.notes).collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("MatMul stays") && n.contains("[S, K, 1]")),
        "{notes:?}"
    );
}

// ---- The AMD Quark spelling: a float constant fake-quantized by MXQuantizeDequantize, gathered
// before or after the fake quant; quantized at rewrite time (rules/gathered_quark.rs).

/// `[E, A, B]` float experts with blocks of different magnitudes (one zero block).
fn quark_values(dims: [usize; 3]) -> Vec<f32> {
    let n = dims.iter().product::<usize>();
    (0..n)
        .map(|i| {
            let v = ((i * 37 % 101) as f32 - 50.0) * 0.013;
            if i / 32 == 5 {
                0.0
            } else {
                v * (1 << (i / 64 % 5)) as f32
            }
        })
        .collect()
}

/// `y = Gather(MXQuantizeDequantize(w, axis), ids [3])` (`after`: `MXQuantizeDequantize(Gather(w,
/// ids), axis)`), the stacked float experts `w` of `dims` a constant holding `vals`; `y` is not
/// a graph output yet.
fn quark_gathered(dims: [usize; 3], axis: i64, after: bool, vals: &[f32]) -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.opset("com.amd.quark", 1);
    b.input("ids", INT64, &[3]);
    let d: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    b.init_f32("w", &d, vals);
    if after {
        b.node("Gather", &["w", "ids"], &["wg"]);
        b.quark_fake_quant("wg", "wsel", 32, axis);
    } else {
        b.quark_fake_quant("w", "wf", 32, axis);
        b.node("Gather", &["wf", "ids"], &["wsel"]);
    }
    b
}

/// [`quark_gathered`] with `y` the graph output.
fn quark_gather(dims: [usize; 3], axis: i64, after: bool, vals: &[f32]) -> ModelBuilder {
    let mut b = quark_gathered(dims, axis, after, vals);
    b.output("wsel", FLOAT, &[3, dims[1] as i64, dims[2] as i64]);
    b
}

/// Quark's fake-quant of `vals` (`dims`) along `axis` (`kernels::reference::quark_mx`).
fn quark_fake_quantized(vals: &[f32], dims: [usize; 3], axis: usize) -> Vec<f32> {
    use kernels::reference::quark_mx::{quark_mx_fake_quant, IntRounding, QuarkElement};
    let (k, inner) = (dims[axis], dims[axis + 1..].iter().product::<usize>());
    let at = |o: usize, kk: usize, i: usize| (o * k + kk) * inner + i;
    let outer = vals.len() / (k * inner);
    let mut lines = Vec::with_capacity(vals.len());
    for o in 0..outer {
        for i in 0..inner {
            lines.extend((0..k).map(|kk| vals[at(o, kk, i)]));
        }
    }
    let mut y = vec![0f32; lines.len()];
    let (e, r) = (QuarkElement::Fp8E4M3, IntRounding::HalfEven);
    quark_mx_fake_quant(&lines, &mut y, k, 32, e, r).unwrap();
    let mut out = vec![0f32; vals.len()];
    for o in 0..outer {
        for i in 0..inner {
            for kk in 0..k {
                out[at(o, kk, i)] = y[(o * inner + i) * k + kk];
            }
        }
    }
    out
}

/// The stored values and scales of `n`'s first two inputs dequantized along `axis`
/// (`DequantizeLinear(axis, block_size = 32)`).
fn stored_dequantized(g: &dyn GraphView, n: NodeId, axis: usize) -> Vec<f32> {
    use kernels::codec::{e4m3_to_f32, e8m0::e8m0_to_f32};
    let v = g.const_value(g.inputs(n)[0].unwrap()).unwrap();
    let s = g.const_value(g.inputs(n)[1].unwrap()).unwrap();
    let dims: Vec<usize> = v.dims.iter().map(|&d| d as usize).collect();
    let mut sdims = dims.clone();
    sdims[axis] /= 32;
    assert_eq!(s.dims, sdims.iter().map(|&d| d as i64).collect::<Vec<_>>());
    let inner = dims[axis + 1..].iter().product::<usize>();
    let k = dims[axis];
    (0..v.raw.len())
        .map(|i| {
            let (o, kk, ii) = (i / (k * inner), i / inner % k, i % inner);
            let si = (o * (k / 32) + kk / 32) * inner + ii;
            e4m3_to_f32(v.raw[i]) * e8m0_to_f32(s.raw[si])
        })
        .collect()
}

#[test]
fn quark_fake_quantized_experts_gathered_become_one_gather_dequantize() {
    // Both spellings, [E, N, K] along K (2) and [E, K, N] along K (1; the stored bytes are laid
    // out as DequantizeLinear reads them).
    for (dims, axis) in [([4, 16, 64], 2usize), ([4, 64, 16], 1)] {
        let vals = quark_values(dims);
        for after in [false, true] {
            let (report, g) = quark_gather(dims, axis as i64, after, &vals).rewrite();
            assert_eq!(report.counts["mx_gather_dequant"], 1, "{report:#?}");
            assert_eq!(op_types(&g), ["MxGatherDequantize"], "{after}");
            let n = first_node(&g, "MxGatherDequantize");
            assert_eq!(node_attr(&g, n, "axis"), AttrValue::Int(axis as i64));
            assert_eq!(node_attr(&g, n, "gather_axis"), AttrValue::Int(0));
            assert_eq!(
                node_attr(&g, n, "output_dtype"),
                AttrValue::Int(FLOAT as i64)
            );
            assert_eq!(
                value_names(&g, g.inputs(n)),
                ["w_mxfp8", "w_mxfp8_scale", "ids"]
            );
            assert_eq!(g.value_name(g.outputs(n)[0]), "wsel");
            assert_eq!(
                stored_dequantized(&g, n, axis),
                quark_fake_quantized(&vals, dims, axis)
            );
        }
    }
}

#[test]
fn quark_fake_quant_after_a_2d_index_counts_the_gathered_axes() {
    // MXQuantizeDequantize(Gather(w [4, 16, 64], ids [2, 3]), axis = -1): axis 3 of the
    // gathered [2, 3, 16, 64] is axis 2 of w.
    let vals = quark_values([4, 16, 64]);
    let mut b = ModelBuilder::new(24);
    b.opset("com.amd.quark", 1);
    b.input("ids", INT32, &[2, 3]);
    b.init_f32("w", &[4, 16, 64], &vals);
    b.node("Gather", &["w", "ids"], &["wg"]);
    b.quark_fake_quant("wg", "wsel", 32, -1);
    b.output("wsel", FLOAT, &[2, 3, 16, 64]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_gather_dequant"], 1, "{report:#?}");
    let n = first_node(&g, "MxGatherDequantize");
    assert_eq!(node_attr(&g, n, "axis"), AttrValue::Int(2));
}

#[test]
fn quark_expert_bmm_reads_the_stacked_weights_quantized_at_rewrite_time() {
    // Weight second: bmm(x [3, 1, 64], W[ids]) with W [E, K, N] fake-quantized along K, in both
    // spellings: one MxGatherMatMul (trans_b = 0) reading the stored [E, K, N] bytes.
    let dims = [4, 64, 16];
    let vals = quark_values(dims);
    for after in [false, true] {
        let mut b = quark_gathered(dims, 1, after, &vals);
        b.input("xu", FLOAT, &[3, 1, 64]);
        b.node("MatMul", &["xu", "wsel"], &["y"]);
        b.output("y", FLOAT, &[3, 1, 16]);
        let (report, g) = b.rewrite();
        assert_eq!(report.counts["mx_gather_dequant"], 1, "{report:#?}");
        assert_eq!(op_types(&g), ["MxGatherMatMul"]);
        let n = first_node(&g, "MxGatherMatMul");
        assert_eq!(node_attr(&g, n, "trans_b"), AttrValue::Int(0));
        assert_eq!(
            value_names(&g, g.inputs(n)),
            ["xu", "w_mxfp8", "w_mxfp8_scale", "ids"]
        );
    }
}

#[test]
fn quark_gather_along_the_quantized_axis_is_refused() {
    // Before the Gather: w fake-quantized along 0, gathered along 0. After it: the fake-quant's
    // axis 0 is the ids' axis (blocks across the selected experts).
    let vals = quark_values([64, 16, 64]);
    for after in [false, true] {
        let why = quark_gather([64, 16, 64], 0, after, &vals).refusal("mx_gather_dequant");
        let want = if after {
            "along the ids' axis 0"
        } else {
            "gathers along the quantized axis 0"
        };
        assert!(why.contains(want), "{why}");
    }
}

#[test]
fn quark_experts_that_are_not_a_constant_are_refused() {
    let mut b = ModelBuilder::new(24);
    b.opset("com.amd.quark", 1);
    b.input("ids", INT64, &[3]).input("w", FLOAT, &[4, 16, 64]);
    b.quark_fake_quant("w", "wf", 32, 2);
    b.node("Gather", &["wf", "ids"], &["wsel"]);
    b.output("wsel", FLOAT, &[3, 16, 64]);
    // Refused; the fake quant is then an activation quantizer (`mxquant`: MxQuantize at run
    // time), whose MxDequantize the rule gathers in the next pass.
    let (report, g) = b.rewrite();
    let why = rejections(&report);
    assert!(
        why.iter().any(|r| r.contains("'w' is not a constant")),
        "{why:?}"
    );
    assert_eq!(op_types(&g), ["MxQuantize", "MxGatherDequantize"]);
}

#[test]
fn quark_experts_not_exactly_mxfp8_are_refused_with_the_checks_reason() {
    // An Inf in expert 2 (its block: [2, 3, 32..64]): Quark passes it through and scales the
    // block from the finite elements; E4M3 has no Inf.
    let dims = [4, 16, 64];
    let mut vals = quark_values(dims);
    vals[2 * 16 * 64 + 3 * 64 + 40] = f32::INFINITY;
    // Refused with the check's reason; the fake quant then stays `mxquant`'s, as before this
    // spelling was fused (MxQuantize at run time), and its MxDequantize is gathered.
    let (report, g) = quark_gather(dims, 2, false, &vals).rewrite();
    let why = rejections(&report);
    assert!(
        why.iter().any(
            |r| r.contains("not exactly an MXFP8 weight: element [2, 3, 32]") && r.contains("Inf")
        ),
        "{why:?}"
    );
    assert_eq!(op_types(&g), ["MxQuantize", "MxGatherDequantize"]);
}

#[test]
fn quark_fake_quant_with_another_reader_is_not_taken() {
    // The fake-quantized experts are also a graph output: the Gather cannot take the fake quant.
    let dims = [4, 16, 64];
    let mut b = quark_gather(dims, 2, false, &quark_values(dims));
    b.output("wf", FLOAT, &[4, 16, 64]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_gather_dequant"], 0, "{report:#?}");
    assert!(
        op_types(&g).contains(&"Gather".to_string()),
        "{:?}",
        op_types(&g)
    );
}

#[test]
fn quark_experts_over_the_quark_weight_cap_are_refused_with_their_size() {
    // 17 MiB of f32 experts over a 16 MiB cap (setting quark_weight_max_mib; zeros: only the
    // size can refuse them). Stacks above other constants' 64 MiB: tests/quark_big_weights.rs.
    let dims = [17, 512, 512];
    let vals = vec![0f32; dims.iter().product()];
    let mut g = quark_gather(dims, 2, false, &vals)
        .graph()
        .expect("test graph loads");
    let opts = graph_rewrites::pipeline::PipelineOptions {
        settings: [("quark_weight_max_mib".to_string(), "16".to_string())].into(),
        ..Default::default()
    };
    let report = graph_rewrites::pipeline::run_pipeline(&mut g, &opts).expect("pipeline runs");
    let why = rejections(&report);
    assert!(
        why.iter().any(|r| r.contains(
            "'w' is 17 MiB, over the 16 MiB the rewrite reads for a Quark weight (setting quark_weight_max_mib)"
        )),
        "{why:?}"
    );
    assert_eq!(op_types(&g), ["MxQuantize", "MxGatherDequantize"]);
}

#[test]
fn with_the_rule_off_a_quark_experts_fake_quant_stays_mxquants() {
    // A device placement drops mx_gather_dequant: the fake quant is then an activation
    // quantizer (MxQuantize of every expert at run time), as before this spelling was fused.
    let dims = [4, 16, 64];
    let b = quark_gather(dims, 2, false, &quark_values(dims));
    let mut g = b.graph().expect("test graph loads");
    let opts = graph_rewrites::pipeline::PipelineOptions {
        disable: vec!["mx_gather_dequant".into()],
        ..Default::default()
    };
    let report = graph_rewrites::pipeline::run_pipeline(&mut g, &opts).expect("pipeline runs");
    assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
    assert_eq!(op_types(&g), ["MxQuantize", "MxDequantize", "Gather"]);
}
