//! NVIDIA ModelOpt's MXFP8 spelling (`trt::TRT_MXFP8DynamicQuantize` →
//! `trt::TRT_MXFP8DequantizeLinear` → MatMul, weights through `TRT_MXFP8DequantizeLinear` of
//! E4M3 + uint8 constants): what fuses, and one refusal per check with its reason. The numbers
//! are checked end to end in `tests/python/test_modelopt.py`.

use graph_rewrites::ir::Graph;
use graph_rewrites::pattern::predicates::dtype::{BFLOAT16, FLOAT, FLOAT16, FLOAT8E8M0};
use graph_rewrites::pipeline::RewriteReport;
use graph_rewrites::testing::{first_node, node_attr, Attr, ModelBuilder};
use graph_rewrites::view::{AttrValue, GraphView};

const K: i64 = 64;
const N: i64 = 32;

/// How the test graph is spelled; `Default` is a float16 RMSNorm → ModelOpt quantize pair →
/// MatMul of a ModelOpt weight `[N, K]` read through a Transpose (torch's Linear).
#[derive(Clone)]
struct Case {
    dtype: i32,
    /// (block_size, axis) of the activation pair.
    act: (i64, i64),
    /// The DequantizeLinear's output_dtype (`None`: the activation's).
    dq_dtype: Option<i32>,
    norm: bool,
    /// The activation is not quantized (weight-only).
    weight_only: bool,
    /// Scale bytes of the weight (`[N, K/32]`).
    scales: Vec<u8>,
    /// Weight scale dims (`[N, K/32]` unless a layout test changes them).
    scale_dims: Vec<i64>,
    /// The weight's blocked axis (1 of `[N, K]`).
    w_axis: i64,
    /// A second Linear on the same activation with its own quantize pair (as ModelOpt exports
    /// every Linear), spelled with the attributes left at their defaults so that the offline
    /// chain merge does not see a duplicate: the fusion takes it as a sibling.
    sibling: bool,
}

impl Default for Case {
    fn default() -> Self {
        Case {
            dtype: FLOAT16,
            act: (32, -1),
            dq_dtype: None,
            norm: true,
            weight_only: false,
            scales: vec![127; (N * K / 32) as usize],
            scale_dims: vec![N, K / 32],
            w_axis: 1,
            sibling: false,
        }
    }
}

fn float_bytes(dtype: i32, v: f32, n: usize) -> Vec<u8> {
    let one: Vec<u8> = match dtype {
        FLOAT16 => half::f16::from_f32(v).to_le_bytes().to_vec(),
        BFLOAT16 => half::bf16::from_f32(v).to_le_bytes().to_vec(),
        _ => v.to_le_bytes().to_vec(),
    };
    one.repeat(n)
}

fn build(c: &Case) -> ModelBuilder {
    let mut b = ModelBuilder::new(23);
    b.opset("trt", 1)
        .input("x", c.dtype, &[4, K])
        .output("y", c.dtype, &[4, N]);
    let mut act = "x".to_string();
    if c.norm {
        b.init_raw(
            "gamma",
            c.dtype,
            &[K],
            float_bytes(c.dtype, 1.5, K as usize),
        )
        .node_in(
            "",
            "RMSNormalization",
            &["x", "gamma"],
            &["normed"],
            &[("axis", Attr::I(-1)), ("epsilon", Attr::F(1e-5))],
        );
        act = "normed".into();
    }
    if !c.weight_only {
        b.trt_mx_qdq(&act, "act_qdq", c.act, c.dq_dtype.unwrap_or(c.dtype));
        act = "act_qdq".into();
    }
    linear(&mut b, c, (&act, "w", "y"), 37);
    if c.sibling {
        let dq_attrs = [("output_dtype", Attr::I(c.dtype as i64))];
        b.output("y2", c.dtype, &[4, N])
            .node_in(
                "trt",
                "TRT_MXFP8DynamicQuantize",
                &["normed"],
                &["q2", "s2"],
                &[],
            )
            .node_in(
                "trt",
                "TRT_MXFP8DequantizeLinear",
                &["q2", "s2"],
                &["a2"],
                &dq_attrs,
            );
        linear(&mut b, c, ("a2", "w2", "y2"), 11);
    }
    b
}

/// `out = MatMul(act, Transpose(w))`, w a ModelOpt weight `[N, K]` (E4M3 bytes from `seed`,
/// avoiding the NaN codes 0x7F / 0xFF; the case's scales, dims and axis).
fn linear(b: &mut ModelBuilder, c: &Case, (act, w, out): (&str, &str, &str), seed: i64) {
    let values: Vec<u8> = (0..N * K).map(|i| ((i * seed) % 0x7E) as u8).collect();
    let wt = format!("{w}_t");
    let perm = [("perm", Attr::Is(&[1, 0]))];
    b.trt_mx_weight(
        w,
        (&[N, K], values),
        (&c.scale_dims, c.scales.clone()),
        c.w_axis,
        c.dtype,
    )
    .node_in("", "Transpose", &[w], &[&wt], &perm)
    .node("MatMul", &[act, &wt], &[out]);
}

fn rewrite(c: &Case) -> (RewriteReport, Graph) {
    build(c).rewrite()
}

fn has_trt_nodes(g: &dyn GraphView) -> bool {
    g.nodes().iter().any(|&n| g.domain(n) == "trt")
}

/// The E8M0 scale input (slot 3) of the graph's MxMatMul.
fn matmul_weight_scale_type(g: &Graph) -> i32 {
    let mm = first_node(g, "MxMatMul");
    let s = g.inputs(mm)[3].expect("b_scale");
    g.tensor_info(s).expect("typed").elem_type
}

#[test]
fn norm_and_matmul_fuse_with_the_rceil_rule() {
    let (report, g) = rewrite(&Case::default());
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
    assert!(
        !has_trt_nodes(&g),
        "{:?}",
        graph_rewrites::testing::op_types(&g)
    );
    let fused = first_node(&g, "AddRmsNormMxQuant");
    assert_eq!(
        node_attr(&g, fused, "scale_rule"),
        AttrValue::String("rceil".into())
    );
    assert_eq!(
        node_attr(&g, fused, "nan_policy"),
        AttrValue::String("propagate".into())
    );
    // The uint8 weight scales are re-typed to E8M0 for the MxMatMul (read with trans_b).
    assert_eq!(matmul_weight_scale_type(&g), FLOAT8E8M0);
    let mm = first_node(&g, "MxMatMul");
    assert_eq!(node_attr(&g, mm, "trans_b"), AttrValue::Int(1));
}

#[test]
fn a_sibling_quantizer_of_the_same_activation_goes_with_the_fusion() {
    let (report, g) = rewrite(&Case {
        sibling: true,
        ..Case::default()
    });
    assert_eq!(report.merged_duplicates, 0, "{report:#?}");
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
    assert_eq!(report.counts["mxquant"], 0, "{report:#?}");
    let ops = graph_rewrites::testing::op_types(&g);
    assert!(!has_trt_nodes(&g), "{ops:?}");
    assert_eq!(
        ops.iter().filter(|o| *o == "MxMatMul").count(),
        2,
        "{ops:?}"
    );
    assert!(!ops.iter().any(|o| o == "MxQuantize"), "{ops:?}");
}

#[test]
fn bfloat16_fuses_too() {
    let (report, g) = rewrite(&Case {
        dtype: BFLOAT16,
        ..Case::default()
    });
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
    assert!(!has_trt_nodes(&g));
}

#[test]
fn standalone_quantizer_becomes_mx_quantize() {
    let (report, g) = rewrite(&Case {
        norm: false,
        ..Case::default()
    });
    assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
    assert!(!has_trt_nodes(&g));
    let q = first_node(&g, "MxQuantize");
    assert_eq!(
        node_attr(&g, q, "scale_rule"),
        AttrValue::String("rceil".into())
    );
}

#[test]
fn weight_only_matmul_reads_the_weight_in_place() {
    let (report, g) = rewrite(&Case {
        norm: false,
        weight_only: true,
        ..Case::default()
    });
    assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
    assert!(!has_trt_nodes(&g));
    let mm = first_node(&g, "MxMatMul");
    assert!(g.inputs(mm)[1].is_none(), "no a_scale");
    assert_eq!(matmul_weight_scale_type(&g), FLOAT8E8M0);
}

#[test]
fn refuses_float_activations() {
    let why = build(&Case {
        dtype: FLOAT,
        norm: false,
        ..Case::default()
    })
    .refusal("mxquant");
    assert!(why.contains("float activation"), "{why}");
}

#[test]
fn refuses_another_axis() {
    let why = build(&Case {
        norm: false,
        act: (32, 0),
        ..Case::default()
    })
    .refusal("mxquant");
    assert!(why.contains("not the last axis"), "{why}");
}

#[test]
fn refuses_block_size_other_than_32() {
    let why = build(&Case {
        norm: false,
        act: (16, -1),
        ..Case::default()
    })
    .refusal("mxquant");
    assert!(why.contains("block_size 16"), "{why}");
}

#[test]
fn refuses_a_dequantize_to_another_type() {
    let why = build(&Case {
        norm: false,
        dq_dtype: Some(FLOAT),
        ..Case::default()
    })
    .refusal("mxquant");
    assert!(why.contains("output_dtype 1"), "{why}");
}

/// A weight the MatMul cannot read as MX leaves the MatMul unfused, with the reason in the
/// fusion's notes (the quantizer itself still fuses).
fn weight_note(c: &Case) -> String {
    let (report, _) = rewrite(c);
    let notes: Vec<&String> = report.fusions.iter().flat_map(|f| &f.notes).collect();
    notes
        .iter()
        .find(|n| n.contains("TRT_MXFP8DequantizeLinear") || n.contains("weight"))
        .map(|s| s.to_string())
        .unwrap_or_else(|| panic!("no weight note: {report:#?}"))
}

#[test]
fn refuses_a_weight_scale_of_the_wrong_layout() {
    let why = weight_note(&Case {
        scale_dims: vec![N / 32 * 2, K / 2],
        ..Case::default()
    });
    assert!(why.contains("TRT_MXFP8DequantizeLinear"), "{why}");
}

#[test]
fn refuses_a_weight_blocked_along_n() {
    let why = weight_note(&Case {
        w_axis: 0,
        scale_dims: vec![N / 32, K],
        ..Case::default()
    });
    assert!(why.contains("not MXFP8 along K"), "{why}");
}

#[test]
fn refuses_a_nan_weight_scale() {
    let mut scales = vec![127u8; (N * K / 32) as usize];
    scales[5] = 0xFF;
    let why = weight_note(&Case {
        scales,
        ..Case::default()
    });
    assert!(why.contains("byte 255"), "{why}");
}
