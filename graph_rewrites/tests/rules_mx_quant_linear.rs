//! Rule `mx_quant_linear`: E8M0-scaled `QuantizeLinear`s no fusion absorbed (static scales of
//! every granularity, E5M2 outputs, a constant zero zero point) become `MxQuantizeLinear`, the
//! rewritten graph checked as a snapshot; what it cannot compute is refused with the reason.

use graph_rewrites::pattern::predicates::dtype::{
    FLOAT, FLOAT16, FLOAT4E2M1, FLOAT8E4M3FN, FLOAT8E5M2, FLOAT8E8M0,
};
use graph_rewrites::testing::{op_types, Attr, ModelBuilder};
use graph_rewrites::view::{AttrValue, GraphView};

/// One line per node: `op(inputs) -> outputs [attrs]`, attributes sorted by name.
fn snapshot(g: &dyn GraphView) -> String {
    let mut out = String::new();
    for &n in g.nodes().iter() {
        let ins: Vec<&str> = g
            .inputs(n)
            .iter()
            .map(|v| v.map_or("", |v| g.value_name(v)))
            .collect();
        let outs: Vec<&str> = g.outputs(n).iter().map(|&v| g.value_name(v)).collect();
        let mut attrs: Vec<String> = ["axis", "block_size", "output_dtype", "saturate"]
            .iter()
            .filter_map(|k| match g.attr(n, k) {
                Some(AttrValue::Int(v)) => Some(format!("{k}={v}")),
                _ => None,
            })
            .collect();
        attrs.sort();
        out += &format!(
            "{}({}) -> {} [{}]\n",
            g.op_type(n),
            ins.join(", "),
            outs.join(", "),
            attrs.join(" ")
        );
    }
    out
}

/// `y = DQ(Q(x, sc), sc)` with x [rows, cols], the given scale and attributes on both.
fn static_qdq(
    x_type: i32,
    x_dims: &[i64],
    scale_dims: &[i64],
    attrs: &[(&str, Attr<'static>)],
) -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.input("x", x_type, x_dims);
    let n: i64 = scale_dims.iter().product();
    b.init_raw("sc", FLOAT8E8M0, scale_dims, vec![127; n as usize]);
    b.node_in("", "QuantizeLinear", &["x", "sc"], &["q"], attrs);
    let mut dq: Vec<(&str, Attr)> = attrs
        .iter()
        .filter(|(k, _)| *k == "axis" || *k == "block_size")
        .cloned()
        .collect();
    dq.push(("output_dtype", Attr::I(x_type as i64)));
    b.node_in("", "DequantizeLinear", &["q", "sc"], &["y"], &dq);
    b.output("y", x_type, x_dims);
    b
}

const E4M3: Attr<'static> = Attr::I(FLOAT8E4M3FN as i64);

/// Attributes of a test node.
type Attrs = Vec<(&'static str, Attr<'static>)>;

#[test]
fn static_blocked_scale_becomes_mx_quantize_linear() {
    // The reproducer: x [2, 64], a constant [2, 2] E8M0 scale, blocks of 32 along the last axis.
    let b = static_qdq(
        FLOAT,
        &[2, 64],
        &[2, 2],
        &[
            ("axis", Attr::I(-1)),
            ("block_size", Attr::I(32)),
            ("output_dtype", E4M3),
        ],
    );
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_quant_linear"], 1, "{report:#?}");
    assert_eq!(report.counts["mx_dequant"], 1, "{report:#?}");
    assert_eq!(report.counts["mxquant"], 0, "{report:#?}");
    assert_eq!(
        snapshot(&g),
        "MxQuantizeLinear(x, sc) -> q [axis=-1 block_size=32 output_dtype=17 saturate=1]\n\
         MxDequantize(q, sc) -> y [axis=-1 block_size=32 output_dtype=1]\n"
    );
    // Still one standalone quantizer: the count the fusions are measured by.
    assert_eq!(
        (report.quantize_ops.before, report.quantize_ops.after),
        (1, 1)
    );
}

#[test]
fn per_axis_and_per_tensor_scales_are_taken() {
    let b = static_qdq(
        FLOAT16,
        &[4, 6],
        &[6],
        &[("axis", Attr::I(1)), ("output_dtype", E4M3)],
    );
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_quant_linear"], 1, "{report:#?}");
    assert_eq!(
        snapshot(&g),
        "MxQuantizeLinear(x, sc) -> q [axis=1 block_size=0 output_dtype=17 saturate=1]\n\
         MxDequantize(q, sc) -> y [axis=1 block_size=0 output_dtype=10]\n"
    );
    let b = static_qdq(FLOAT, &[4, 6], &[], &[("output_dtype", E4M3)]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_quant_linear"], 1, "{report:#?}");
    assert_eq!(
        snapshot(&g),
        "MxQuantizeLinear(x, sc) -> q [axis=1 block_size=0 output_dtype=17 saturate=1]\n\
         MxDequantize(q, sc) -> y [axis=1 block_size=0 output_dtype=1]\n"
    );
}

#[test]
fn e5m2_output_without_saturation_is_taken() {
    let b = static_qdq(
        FLOAT,
        &[3, 40],
        &[3, 2],
        &[
            ("axis", Attr::I(1)),
            ("block_size", Attr::I(32)),
            ("output_dtype", Attr::I(FLOAT8E5M2 as i64)),
            ("saturate", Attr::I(0)),
        ],
    );
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_quant_linear"], 1, "{report:#?}");
    assert_eq!(
        snapshot(&g),
        "MxQuantizeLinear(x, sc) -> q [axis=1 block_size=32 output_dtype=19 saturate=0]\n\
         MxDequantize(q, sc) -> y [axis=1 block_size=32 output_dtype=1]\n"
    );
}

/// `q = QuantizeLinear(x [2, 64], sc [2, 2], zp)` with a constant zero point of `zp_type`
/// holding `zp_byte`, and `output_dtype` when given.
fn with_zero_point(zp_type: i32, zp_byte: u8, output_dtype: Option<i64>) -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.input("x", FLOAT, &[2, 64]);
    b.init_raw("sc", FLOAT8E8M0, &[2, 2], vec![127; 4]);
    b.init_raw("zp", zp_type, &[2, 2], vec![0, zp_byte, 0, 0]);
    let mut attrs = vec![("axis", Attr::I(-1)), ("block_size", Attr::I(32))];
    if let Some(t) = output_dtype {
        attrs.push(("output_dtype", Attr::I(t)));
    }
    b.node_in("", "QuantizeLinear", &["x", "sc", "zp"], &["q"], &attrs);
    b.output("q", zp_type, &[2, 64]);
    b
}

#[test]
fn zero_zero_point_gives_the_type_and_is_dropped() {
    // +0 and -0 (0x80) are both zero; the output type is the zero point's.
    let (report, g) = with_zero_point(FLOAT8E5M2, 0x80, None).rewrite();
    assert_eq!(report.counts["mx_quant_linear"], 1, "{report:#?}");
    assert_eq!(
        snapshot(&g),
        "MxQuantizeLinear(x, sc) -> q [axis=-1 block_size=32 output_dtype=19 saturate=1]\n"
    );
}

#[test]
fn what_mx_quantize_linear_cannot_compute_is_refused_with_the_reason() {
    let reason = with_zero_point(FLOAT8E4M3FN, 0x38, None).refusal("mx_quant_linear");
    assert!(
        reason.contains("zero point that is not a constant zero"),
        "{reason}"
    );
    let reason =
        with_zero_point(FLOAT8E4M3FN, 0, Some(FLOAT8E5M2 as i64)).refusal("mx_quant_linear");
    assert!(
        reason.contains("output_dtype 19 but a zero point of type 17"),
        "{reason}"
    );
    let cases: [(i32, Attrs, &str); 5] = [
        (FLOAT, vec![], "uint8"),
        (
            FLOAT,
            vec![("output_dtype", Attr::I(FLOAT4E2M1 as i64))],
            "float4e2m1",
        ),
        (
            FLOAT,
            vec![("output_dtype", E4M3), ("precision", Attr::I(10))],
            "precision 10",
        ),
        (
            FLOAT,
            vec![("output_dtype", E4M3), ("saturate", Attr::I(2))],
            "saturate is not 0 or 1",
        ),
        (6, vec![("output_dtype", E4M3)], "int32 x"),
    ];
    for (x_type, attrs, why) in cases {
        let mut b = ModelBuilder::new(24);
        b.input("x", x_type, &[2, 64]);
        b.init_raw("sc", FLOAT8E8M0, &[], vec![127]);
        b.node_in("", "QuantizeLinear", &["x", "sc"], &["q"], &attrs);
        b.output("q", FLOAT8E4M3FN, &[2, 64]);
        let reason = b.refusal("mx_quant_linear");
        assert!(reason.contains(why), "{why}: {reason}");
    }
    // A scale whose shape does not fit the block size.
    let b = static_qdq(
        FLOAT,
        &[2, 64],
        &[2, 3],
        &[
            ("axis", Attr::I(-1)),
            ("block_size", Attr::I(32)),
            ("output_dtype", E4M3),
        ],
    );
    let reason = b.refusal("mx_quant_linear");
    assert!(
        reason.contains("blocked scale has shape [2, 3]"),
        "{reason}"
    );
}

#[test]
fn precision_float_is_the_same_division() {
    let b = static_qdq(
        FLOAT,
        &[2, 64],
        &[2, 2],
        &[
            ("axis", Attr::I(-1)),
            ("block_size", Attr::I(32)),
            ("output_dtype", E4M3),
            ("precision", Attr::I(FLOAT as i64)),
        ],
    );
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_quant_linear"], 1, "{report:#?}");
    assert_eq!(op_types(&g), ["MxQuantizeLinear", "MxDequantize"]);
}

#[test]
fn float_scaled_quantize_is_not_a_candidate() {
    let mut b = ModelBuilder::new(24);
    b.input("x", FLOAT, &[2, 64]);
    b.init_f32("sc", &[], &[0.5]);
    b.node_in(
        "",
        "QuantizeLinear",
        &["x", "sc"],
        &["q"],
        &[("output_dtype", E4M3)],
    );
    b.output("q", FLOAT8E4M3FN, &[2, 64]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mx_quant_linear"], 0);
    assert!(report.rejections.is_empty(), "{report:#?}");
    assert_eq!(op_types(&g), ["QuantizeLinear"]);
}
