//! MXFP4 weights (FLOAT4E2M1 values + FLOAT8E8M0 scales, `DequantizeLinear` blocked along K):
//! absorbed into `MxMatMul` behind an MXFP8 activation, read in place (4-bit); kept as
//! `MxDequantize` for readers the fusion cannot absorb; a runtime (non-constant) FP4 weight is
//! not absorbed, with the reason in the fusion's notes.

use graph_rewrites::pattern::predicates::dtype::{FLOAT, FLOAT4E2M1, FLOAT8E8M0};
use graph_rewrites::testing::{first_node, node_attr, op_types, value_names, Attr, ModelBuilder};
use graph_rewrites::view::{AttrValue, GraphView};

/// `x [4, 64]` → Quark MXFP8 fake quant = `xq`; `wd = DequantizeLinear(wq [64, 16] FP4,
/// ws [2, 16] E8M0, axis 0, block 32)`. `wq` is an initializer when `constant`, else an input.
fn fp4_weight_model(constant: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.opset("com.amd.quark", 1);
    b.input("x", FLOAT, &[4, 64]);
    if constant {
        // 1024 values, two per byte: codes 2 (1.0) and 9 (-0.5).
        b.init_raw("wq", FLOAT4E2M1, &[64, 16], vec![0x92; 64 * 16 / 2]);
    } else {
        b.input("wq", FLOAT4E2M1, &[64, 16]);
    }
    b.init_raw("ws", FLOAT8E8M0, &[2, 16], vec![126; 32]);
    b.quark_fake_quant("x", "xq", 32, -1);
    let dq = [
        ("axis", Attr::I(0)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT as i64)),
    ];
    b.node_in("", "DequantizeLinear", &["wq", "ws"], &["wd"], &dq);
    b
}

fn count(g: &dyn GraphView, op: &str) -> usize {
    op_types(g).iter().filter(|o| *o == op).count()
}

#[test]
fn fp4_weight_dequant_into_matmul_becomes_mxmatmul_reading_the_fp4_values() {
    let mut b = fp4_weight_model(true);
    b.node("MatMul", &["xq", "wd"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
    assert_eq!(report.counts["mx_dequant"], 0, "{report:#?}");
    assert_eq!(op_types(&g), ["MxQuantize", "MxMatMul"]);
    let mm = first_node(&g, "MxMatMul");
    assert_eq!(
        value_names(&g, g.inputs(mm)),
        ["x_mxfp8", "x_mxfp8_scale", "wq", "ws"],
        "MxMatMul reads the packed FP4 values and their scales in place"
    );
    assert_eq!(node_attr(&g, mm, "trans_b"), AttrValue::Int(0));
    let wq = g.inputs(mm)[2].expect("weight");
    assert_eq!(g.tensor_info(wq).map(|i| i.elem_type), Some(FLOAT4E2M1));
}

#[test]
fn fp4_dequant_also_read_by_an_add_stays_as_mx_dequantize_for_it() {
    let mut b = fp4_weight_model(true);
    b.init_f32("one", &[], &[1.0]);
    b.node("MatMul", &["xq", "wd"], &["y"])
        .node("Add", &["wd", "one"], &["w1"])
        .output("y", FLOAT, &[4, 16])
        .output("w1", FLOAT, &[64, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
    assert_eq!(report.counts["mx_dequant"], 1, "{report:#?}");
    assert_eq!(count(&g, "MxMatMul"), 1);
    assert_eq!(count(&g, "DequantizeLinear"), 0);
    let dq = first_node(&g, "MxDequantize");
    assert_eq!(value_names(&g, g.inputs(dq)), ["wq", "ws"]);
    assert_eq!(node_attr(&g, dq, "axis"), AttrValue::Int(0));
    assert_eq!(node_attr(&g, dq, "block_size"), AttrValue::Int(32));
    assert_eq!(g.value_name(g.outputs(dq)[0]), "wd");
}

#[test]
fn runtime_fp4_weight_is_not_absorbed_and_the_note_says_why() {
    let mut b = fp4_weight_model(false);
    b.node("MatMul", &["xq", "wd"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    let (report, g) = b.rewrite();
    // The activation quantizer still fuses (it re-creates the fake-quantized float for the
    // MatMul it could not absorb); the FP4 DequantizeLinear runs as MxDequantize.
    assert_eq!(report.counts["mx_dequant"], 1, "{report:#?}");
    assert_eq!(count(&g, "MxMatMul"), 0);
    assert_eq!(count(&g, "MatMul"), 1);
    let notes: Vec<&String> = report.fusions.iter().flat_map(|f| &f.notes).collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("MatMul") && n.contains("MXFP4 weight is not constant")),
        "{report:#?}"
    );
}

#[test]
fn fp4_weight_of_a_float_activation_becomes_a_weight_only_mxmatmul() {
    // No MXFP8 activation: the float activation reads the 4-bit weight in place (rule
    // mx_weight_matmul: MxMatMul with an empty a_scale); nothing is dequantized per step.
    let mut b = ModelBuilder::new(24);
    b.input("x", FLOAT, &[4, 64]);
    b.init_raw("wq", FLOAT4E2M1, &[64, 16], vec![0x92; 512]);
    b.init_raw("ws", FLOAT8E8M0, &[2, 16], vec![126; 32]);
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
    assert_eq!(report.counts["mx_dequant"], 0, "{report:#?}");
    assert_eq!(op_types(&g), ["MxMatMul"]);
    let mm = first_node(&g, "MxMatMul");
    assert_eq!(value_names(&g, g.inputs(mm)), ["x", "", "wq", "ws"]);
}
