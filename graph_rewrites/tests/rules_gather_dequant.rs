//! Rule `mx_gather_dequant`: `Gather(DequantizeLinear(x, s: E8M0))` along an axis other than the
//! quantized one becomes one `MxGatherDequantize` (stacked MoE experts selected by id, MX
//! embedding tables); what it cannot take is refused with the reason and left to `mx_dequant`.

use graph_rewrites::pattern::predicates::dtype::{FLOAT, FLOAT8E4M3FN, FLOAT8E8M0, INT32, INT64};
use graph_rewrites::testing::{first_node, node_attr, op_types, value_names, Attr, ModelBuilder};
use graph_rewrites::view::{AttrValue, GraphView};

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
