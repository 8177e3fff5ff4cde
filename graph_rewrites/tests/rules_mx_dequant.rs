//! Rule `mx_dequant`: E8M0-scaled `DequantizeLinear`s no fusion absorbed become `MxDequantize`
//! (weights read by a Gather or a Gemm with a bias, E5M2 values, a weight shared by an absorbed
//! MatMul and a Gather); what `MxDequantize` cannot compute is refused with the reason.

use graph_rewrites::pattern::predicates::dtype::{
    FLOAT, FLOAT16, FLOAT4E2M1, FLOAT8E4M3FN, FLOAT8E5M2, FLOAT8E8M0, INT8,
};
use graph_rewrites::testing::{node_attr, op_types, Attr, ModelBuilder};
use graph_rewrites::view::{AttrValue, GraphView};

/// `W = DequantizeLinear(values [64, 16] of `elem`, scales [2, 16], axis 0, block 32)`.
fn mx_weight(b: &mut ModelBuilder, elem: i32, out_dtype: Option<i64>) {
    b.init_raw("wq", elem, &[64, 16], vec![0x38; 64 * 16]);
    b.init_raw("ws", FLOAT8E8M0, &[2, 16], vec![126; 32]);
    let mut attrs = vec![("axis", Attr::I(0)), ("block_size", Attr::I(32))];
    if let Some(t) = out_dtype {
        attrs.push(("output_dtype", Attr::I(t)));
    }
    b.node_in("", "DequantizeLinear", &["wq", "ws"], &["w"], &attrs);
}

fn count(g: &dyn GraphView, op: &str) -> usize {
    op_types(g).iter().filter(|o| *o == op).count()
}

#[test]
fn weight_read_by_gather_and_by_gemm_with_bias_becomes_mx_dequantize() {
    // Gather (an embedding table) and a float-activation Gemm with a bias: the Gemm becomes a
    // weight-only MxMatMul (rule mx_weight_matmul), which re-creates the weight as
    // MxDequantize for the Gather.
    let mut b = ModelBuilder::new(24);
    b.input("ids", 7, &[3]).input("a", FLOAT, &[4, 64]);
    mx_weight(&mut b, FLOAT8E4M3FN, Some(FLOAT as i64));
    b.init_f32("bias", &[16], &[1.0; 16]);
    b.node("Gather", &["w", "ids"], &["emb"])
        .node("Gemm", &["a", "w", "bias"], &["y"]);
    b.output("emb", FLOAT, &[3, 16])
        .output("y", FLOAT, &[4, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
    assert_eq!(count(&g, "DequantizeLinear"), 0);
    assert_eq!(count(&g, "MxMatMul"), 1);
    assert_eq!(count(&g, "Gather"), 1);
    let dq = graph_rewrites::testing::first_node(&g, "MxDequantize");
    assert_eq!(node_attr(&g, dq, "axis"), AttrValue::Int(0));
    assert_eq!(node_attr(&g, dq, "block_size"), AttrValue::Int(32));
    assert_eq!(
        node_attr(&g, dq, "output_dtype"),
        AttrValue::Int(FLOAT as i64)
    );
    assert_eq!(g.value_name(g.outputs(dq)[0]), "w");
}

#[test]
fn fp4_values_are_taken() {
    // MXFP4 (packed two per byte): 64 x 16 values in 512 bytes.
    let mut b = ModelBuilder::new(24);
    b.init_raw("wq", FLOAT4E2M1, &[64, 16], vec![0x21; 512]);
    b.init_raw("ws", FLOAT8E8M0, &[2, 16], vec![126; 32]);
    let attrs = [
        ("axis", Attr::I(0)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT16 as i64)),
    ];
    b.node_in("", "DequantizeLinear", &["wq", "ws"], &["w"], &attrs);
    b.output("w", FLOAT16, &[64, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_dequant"], 1, "{report:#?}");
    assert_eq!(op_types(&g), ["MxDequantize"]);
}

#[test]
fn e5m2_values_and_float16_output_are_taken() {
    let mut b = ModelBuilder::new(24);
    mx_weight(&mut b, FLOAT8E5M2, Some(FLOAT16 as i64));
    b.output("w", FLOAT16, &[64, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_dequant"], 1, "{report:#?}");
    assert_eq!(op_types(&g), ["MxDequantize"]);
}

#[test]
fn weight_shared_by_an_absorbed_matmul_and_a_gather_stays_for_the_gather() {
    // A tied embedding: the MatMul reads the E4M3 bytes directly (MxMatMul), the Gather gets
    // the dequantized table from MxDequantize.
    let mut b = ModelBuilder::new(24);
    b.opset("com.amd.quark", 1);
    b.input("x", FLOAT, &[4, 64]).input("ids", 7, &[3]);
    mx_weight(&mut b, FLOAT8E4M3FN, Some(FLOAT as i64));
    b.quark_fake_quant("x", "xq", 32, -1);
    b.node("MatMul", &["xq", "w"], &["y"])
        .node("Gather", &["w", "ids"], &["emb"]);
    b.output("y", FLOAT, &[4, 16])
        .output("emb", FLOAT, &[3, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
    assert_eq!(report.counts["mx_dequant"], 1, "{report:#?}");
    assert_eq!(count(&g, "MxMatMul"), 1);
    assert_eq!(count(&g, "MxDequantize"), 1);
    let mm = graph_rewrites::testing::first_node(&g, "MxMatMul");
    let b_in = g.inputs(mm)[2].expect("weight");
    assert_eq!(
        g.value_name(b_in),
        "wq",
        "MxMatMul reads the E4M3 values in place"
    );
}

#[test]
fn what_mx_dequantize_cannot_compute_is_refused_with_the_reason() {
    let cases: [(i32, Option<i64>, &str); 3] = [
        (INT8, Some(FLOAT as i64), "reads int8 values"),
        (FLOAT8E4M3FN, None, "output_dtype 0"),
        (FLOAT8E4M3FN, Some(FLOAT8E8M0 as i64), "output_dtype 24"),
    ];
    for (elem, out, why) in cases {
        let mut b = ModelBuilder::new(24);
        mx_weight(&mut b, elem, out);
        b.output("w", FLOAT, &[64, 16]);
        let reason = b.refusal("mx_dequant");
        assert!(reason.contains(why), "{why}: {reason}");
    }
    // A scale whose shape does not fit the block size.
    let mut b = ModelBuilder::new(24);
    b.init_raw("wq", FLOAT8E4M3FN, &[64, 16], vec![0x38; 64 * 16]);
    b.init_raw("ws", FLOAT8E8M0, &[3, 16], vec![126; 48]);
    let attrs = [
        ("axis", Attr::I(0)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT as i64)),
    ];
    b.node_in("", "DequantizeLinear", &["wq", "ws"], &["w"], &attrs);
    b.output("w", FLOAT, &[64, 16]);
    let reason = b.refusal("mx_dequant");
    assert!(
        reason.contains("blocked scale has shape [3, 16]"),
        "{reason}"
    );
}

#[test]
fn float_scaled_dequantize_is_not_a_candidate() {
    let mut b = ModelBuilder::new(24);
    b.init_raw("wq", FLOAT8E4M3FN, &[64, 16], vec![0x38; 64 * 16]);
    b.init_f32("ws", &[], &[0.5]);
    b.node("DequantizeLinear", &["wq", "ws"], &["w"]);
    b.output("w", FLOAT, &[64, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_dequant"], 0);
    assert!(report.rejections.is_empty(), "{report:#?}");
    assert_eq!(op_types(&g), ["DequantizeLinear"]);
}
