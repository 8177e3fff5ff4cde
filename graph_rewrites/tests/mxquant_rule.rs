//! Rule `mxquant` on the shared real samples and on built standard-MX graphs.

use std::path::PathBuf;

use graph_rewrites::io::load_graph;
use graph_rewrites::pattern::predicates::dtype::{FLOAT, FLOAT8E4M3FN, FLOAT8E8M0};
use graph_rewrites::pipeline::{run_pipeline, PipelineOptions};
use graph_rewrites::testing::{op_types, value_names, Attr, ModelBuilder};
use graph_rewrites::view::GraphView;

fn sample(name: &str) -> Option<PathBuf> {
    Some(graph_rewrites::testing::samples_dir().join(name))
}

fn attr_s(g: &dyn GraphView, n: graph_rewrites::view::NodeId, name: &str) -> String {
    match g.attr(n, name) {
        Some(graph_rewrites::view::AttrValue::String(s)) => s,
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn standard_opset24_sample_becomes_one_mxquantize() {
    let Some(p) = sample("mxfp8_dynamic_quant_opset24.onnx") else {
        return;
    };
    let mut g = load_graph(&p).unwrap();
    let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
    assert_eq!(report.counts["mxquant"], 1, "{report:?}");
    assert_eq!(op_types(&g), ["MxQuantize"]);
    let n = g.nodes()[0];
    assert_eq!(attr_s(&g, n, "scale_rule"), "floor");
    // Both graph outputs keep their names and now come from the fused node.
    let outs: Vec<&str> = g.outputs(n).iter().map(|v| g.value_name(*v)).collect();
    assert_eq!(outs, ["y", "scale"]);
}

#[test]
fn quark_sample_activation_quantizers_feeding_matmuls_fuse() {
    let Some(p) = sample("tiny_swiglu_mlp_MXFP8E4M3.onnx") else {
        return;
    };
    let mut g = load_graph(&p).unwrap();
    let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
    // x → gate_up MatMul and act → down MatMul are last-axis MX activations read by MatMuls
    // with Quark-quantized weights. gu (read by a Split) and y (a graph output) are last-axis
    // too: MxQuantize + MxDequantize re-create them. The others quantize axis 1.
    assert_eq!(report.counts["mxquant"], 4, "{report:#?}");
    let ops = op_types(&g);
    let count = |op: &str| ops.iter().filter(|o| *o == op).count();
    assert_eq!(count("MxMatMul"), 2, "{ops:?}");
    assert_eq!(count("MxDequantize"), 2, "{ops:?}");
    let notes: Vec<&String> = report.fusions.iter().flat_map(|f| &f.notes).collect();
    assert!(
        notes.iter().any(|n| n.contains("read by Split"))
            && notes.iter().any(|n| n.contains("'y' is a graph output")),
        "{notes:?}"
    );
    assert!(
        report
            .rejections
            .iter()
            .any(|r| r.reason.contains("axis 1")),
        "{:#?}",
        report.rejections
    );
    // Weight quantizers (axis 0 of a constant) are folded into MxMatMul, not refused.
    assert!(
        !report.rejections.iter().any(|r| r.at.starts_with("w_")),
        "{:#?}",
        report.rejections
    );
}

/// x[4,64] → standard MX (rule chosen by `c`, `round`) → DequantizeLinear → MatMul(W[64,16]).
fn std_mx_matmul(c: f32, div: bool, round: &str) -> ModelBuilder {
    let mut b = std_mx_dequant(c, div, round);
    b.node("MatMul", &["xd", "w"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    b
}

/// `x [4, 64]` → standard MXFP8 quantize → `DequantizeLinear` = `xd`; `w [64, 16]` of 0.5.
fn std_mx_dequant(c: f32, div: bool, round: &str) -> ModelBuilder {
    std_mx_dequant_amax(c, div, round, Amax::Standard)
}

/// How the block amax is spelled (all the same `[4, 2]` values).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Amax {
    /// `Reshape → Abs → ReduceMax(keepdims=0)`.
    Standard,
    /// `Abs → Reshape → ReduceMax(keepdims=0)`.
    AbsFirst,
    /// `Reshape → Abs → ReduceMax(keepdims=1) → Squeeze(axes)`.
    Squeezed(&'static [i64]),
    /// `Reshape → Abs → ReduceMax(keepdims) → Reshape(shape)`: torch's `amax(-1,
    /// keepdim=True).view(*x.shape[:-1], K // 32)`.
    Reshaped(bool, &'static [i64]),
    /// Blocks as flat `[-1, 32]` rows, the E8M0 scale reshaped back to `[4, 2]` after the Cast:
    /// the same bytes, but a spelling the pattern does not know.
    FlatRows,
}

fn std_mx_dequant_amax(c: f32, div: bool, round: &str, amax: Amax) -> ModelBuilder {
    std_mx_dequant_with(c, div, round, amax, &[], None)
}

/// [`std_mx_dequant_amax`] with `q_extra` added to the QuantizeLinear's attributes and, with
/// `q_zp`, a float8e4m3fn zero point of that byte (output_dtype then left to it).
fn std_mx_dequant_with(
    c: f32,
    div: bool,
    round: &str,
    amax: Amax,
    q_extra: &[(&str, Attr)],
    q_zp: Option<u8>,
) -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.input("x", FLOAT, &[4, 64]);
    if amax == Amax::FlatRows {
        b.init_i64("shape", &[2], &[-1, 32])
            .init_i64("back", &[2], &[4, 2]);
    } else {
        b.init_i64("shape", &[3], &[0, 2, 32]);
    }
    b.init_i64("axes", &[1], &[-1]).init_f32("c", &[], &[c]);
    b.init_f32("w", &[64, 16], &vec![0.5; 64 * 16]);
    if amax == Amax::AbsFirst {
        b.node("Abs", &["x"], &["ax"])
            .node("Reshape", &["ax", "shape"], &["ab"]);
    } else {
        b.node("Reshape", &["x", "shape"], &["xb"])
            .node("Abs", &["xb"], &["ab"]);
    }
    let keep = matches!(amax, Amax::Squeezed(_) | Amax::Reshaped(true, _));
    let reshaped = matches!(amax, Amax::Reshaped(..));
    b.node_in(
        "",
        "ReduceMax",
        &["ab", "axes"],
        &[if keep || reshaped { "amax_k" } else { "amax" }],
        &[("keepdims", Attr::I(keep as i64))],
    );
    if let Amax::Squeezed(axes) = amax {
        b.init_i64("sq_axes", &[axes.len() as i64], axes);
        b.node("Squeeze", &["amax_k", "sq_axes"], &["amax"]);
    }
    if let Amax::Reshaped(_, shape) = amax {
        b.init_i64("amax_shape", &[shape.len() as i64], shape);
        b.node("Reshape", &["amax_k", "amax_shape"], &["amax"]);
    }
    b.node(if div { "Div" } else { "Mul" }, &["amax", "c"], &["s32"]);
    b.node_in(
        "",
        "Cast",
        &["s32"],
        &[if amax == Amax::FlatRows {
            "sflat"
        } else {
            "scale"
        }],
        &[
            ("to", Attr::I(FLOAT8E8M0 as i64)),
            ("round_mode", Attr::S(round)),
        ],
    );
    if amax == Amax::FlatRows {
        b.node("Reshape", &["sflat", "back"], &["scale"]);
    }
    let mut qattrs = vec![
        ("axis", Attr::I(-1)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT8E4M3FN as i64)),
    ];
    qattrs.extend(q_extra.iter().cloned());
    if let Some(zp) = q_zp {
        b.init_raw("q_zp", FLOAT8E4M3FN, &[], vec![zp]);
        qattrs.retain(|(name, _)| *name != "output_dtype");
        b.node_in(
            "",
            "QuantizeLinear",
            &["x", "scale", "q_zp"],
            &["q"],
            &qattrs,
        );
    } else {
        b.node_in("", "QuantizeLinear", &["x", "scale"], &["q"], &qattrs);
    }
    let dattrs = [
        ("axis", Attr::I(-1)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT as i64)),
    ];
    b.node_in("", "DequantizeLinear", &["q", "scale"], &["xd"], &dattrs);
    b
}

/// The same amax spelled `Abs` before the block `Reshape` (elementwise: they commute) or as
/// torch's `amax(-1, keepdim=True).squeeze(-1)` or `.view(*x.shape[:-1], K // 32)` fuses like
/// the standard spelling; a Squeeze of another axis, or of every size-1 axis, or a Reshape to
/// another shape, is no block amax and is left alone.
#[test]
fn amax_spelled_abs_first_or_kept_and_squeezed_fuses() {
    for (amax, fuses) in [
        (Amax::AbsFirst, true),
        (Amax::Squeezed(&[-1]), true),
        (Amax::Squeezed(&[2]), true),
        (Amax::Squeezed(&[1]), false),
        (Amax::Squeezed(&[]), false),
        // A Reshape to the scale's [4, 2] after either keepdims (0 copies x's rows, -1 is them).
        (Amax::Reshaped(true, &[0, 2]), true),
        (Amax::Reshaped(true, &[4, 2]), true),
        (Amax::Reshaped(true, &[-1, 2]), true),
        (Amax::Reshaped(true, &[4, -1]), true),
        (Amax::Reshaped(false, &[0, 2]), true),
        // Not the scale's shape: the unfused QuantizeLinear would fail, so nothing fuses.
        (Amax::Reshaped(true, &[2, 4]), false),
        (Amax::Reshaped(true, &[8]), false),
        (Amax::Reshaped(true, &[]), false),
        (Amax::Reshaped(true, &[0, 2, 1]), false),
        (Amax::Reshaped(true, &[-1, -1]), false),
    ] {
        let mut g = {
            let mut b = std_mx_dequant_amax(2f32.powi(-8), false, "down", amax);
            b.node("MatMul", &["xd", "w"], &["y"])
                .output("y", FLOAT, &[4, 16]);
            b.graph().unwrap()
        };
        let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
        assert_eq!(
            report.counts["mxquant"], fuses as usize,
            "{amax:?}: {report:#?}"
        );
        if fuses {
            assert_eq!(op_types(&g), ["MxQuantize", "MxMatMul"], "{amax:?}");
        }
    }
}

/// torch's `nn.Linear` on a rank-2 activation exports `Gemm(x, W [N, K], transB = 1)`: a
/// bias-free Gemm with alpha 1 is the MatMul MxMatMul computes (trans_b from transB).
#[test]
fn bias_free_gemm_consumer_becomes_mxmatmul() {
    for trans_b in [0i64, 1] {
        let mut b = std_mx_dequant(2f32.powi(-8), false, "down");
        let w_dims: &[i64] = if trans_b == 1 { &[16, 64] } else { &[64, 16] };
        b.init_f32("wg", w_dims, &vec![0.25; 64 * 16]);
        b.node_in(
            "",
            "Gemm",
            &["xd", "wg"],
            &["y"],
            &[("transB", Attr::I(trans_b))],
        )
        .output("y", FLOAT, &[4, 16]);
        let mut g = b.graph().unwrap();
        let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
        assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
        assert_eq!(op_types(&g), ["MxQuantize", "MxMatMul"]);
        let mm = g.producer(g.value_by_name("y").unwrap()).unwrap().0;
        assert_eq!(
            g.attr(mm, "trans_b"),
            Some(graph_rewrites::view::AttrValue::Int(trans_b))
        );
    }
}

/// The fused `MxMatMul` producing `y`, as `op(inputs) attrs` (sorted), "" for a skipped input.
fn mxmatmul_snapshot(g: &graph_rewrites::ir::Graph) -> String {
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

/// torch's `nn.Linear` with bias (`Gemm(x, W [N, K], C [N], transB = 1)`) and the other
/// broadcastable biases, alpha and beta, after the standard quantizer and after Quark's: one
/// `MxMatMul` with C as its fifth input (an empty `b_scale` for a float weight) and the Gemm's
/// alpha / beta where they are not 1.
#[test]
fn gemm_with_bias_and_scales_becomes_mxmatmul_with_the_epilogue() {
    type Bias = (&'static [i64], &'static [(&'static str, f32)]);
    let cases: [(Bias, &str); 5] = [
        (
            (&[16], &[]),
            "MxMatMul(x_mxfp8, x_mxfp8_scale, wg, , bias) output_dtype=Int(1) trans_b=Int(1)",
        ),
        (
            (&[1, 16], &[("alpha", 0.5), ("beta", 2.0)]),
            "MxMatMul(x_mxfp8, x_mxfp8_scale, wg, , bias) alpha=Float(0.5) beta=Float(2.0) output_dtype=Int(1) trans_b=Int(1)",
        ),
        (
            (&[], &[("beta", -1.0)]),
            "MxMatMul(x_mxfp8, x_mxfp8_scale, wg, , bias) beta=Float(-1.0) output_dtype=Int(1) trans_b=Int(1)",
        ),
        (
            (&[4, 16], &[]),
            "MxMatMul(x_mxfp8, x_mxfp8_scale, wg, , bias) output_dtype=Int(1) trans_b=Int(1)",
        ),
        (
            (&[4, 1], &[("alpha", 3.0)]),
            "MxMatMul(x_mxfp8, x_mxfp8_scale, wg, , bias) alpha=Float(3.0) output_dtype=Int(1) trans_b=Int(1)",
        ),
    ];
    for quark in [false, true] {
        for ((dims, attrs), want) in cases {
            let mut b = if quark {
                let mut b = ModelBuilder::new(24);
                b.opset("com.amd.quark", 1).input("x", FLOAT, &[4, 64]);
                b.quark_fake_quant("x", "xd", 32, 1);
                b
            } else {
                std_mx_dequant(2f32.powi(-8), false, "down")
            };
            b.init_f32("wg", &[16, 64], &vec![0.25; 64 * 16]);
            let len = dims.iter().product::<i64>() as usize;
            b.init_f32("bias", dims, &vec![1.5; len]);
            let mut attrs: Vec<(&str, Attr)> =
                attrs.iter().map(|&(k, v)| (k, Attr::F(v))).collect();
            attrs.push(("transB", Attr::I(1)));
            b.node_in("", "Gemm", &["xd", "wg", "bias"], &["y"], &attrs)
                .output("y", FLOAT, &[4, 16]);
            let (report, g) = b.rewrite();
            assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
            assert_eq!(op_types(&g), ["MxQuantize", "MxMatMul"]);
            assert_eq!(mxmatmul_snapshot(&g), want, "quark={quark} {dims:?}");
        }
    }
}

/// A standard MX weight keeps its `b_scale` in front of the bias.
#[test]
fn gemm_with_bias_on_an_mx_weight_keeps_both_scales() {
    let mut b = std_mx_dequant(2f32.powi(-8), false, "down");
    b.init_raw("wq", FLOAT8E4M3FN, &[64, 16], vec![0x38; 64 * 16])
        .init_raw("ws", FLOAT8E8M0, &[2, 16], vec![127; 32])
        .init_f32("bias", &[16], &[0.5; 16]);
    let dq = [("axis", Attr::I(0)), ("block_size", Attr::I(32))];
    b.node_in("", "DequantizeLinear", &["wq", "ws"], &["wd"], &dq)
        .node("Gemm", &["xd", "wd", "bias"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
    assert_eq!(
        mxmatmul_snapshot(&g),
        "MxMatMul(x_mxfp8, x_mxfp8_scale, wq, ws, bias) output_dtype=Int(1) trans_b=Int(0)"
    );
}

/// An MX weight stored `[N, K]` (torch's Linear layout, blocked along axis 1) reaching a MatMul
/// through `Transpose` is that weight read with `trans_b = 1`: the Transpose and the
/// DequantizeLinear go with the fusion. When something else also reads the Transpose, both stay
/// for it and the MatMul still reads the MX constants.
#[test]
fn transposed_nk_mx_weight_is_read_with_trans_b() {
    for (perm, other_reader) in [
        (Some(&[1i64, 0][..]), false),
        (None, false),
        (Some(&[1, 0][..]), true),
    ] {
        let mut b = std_mx_dequant(2f32.powi(-8), false, "down");
        b.init_raw("wq", FLOAT8E4M3FN, &[16, 64], vec![0x38; 64 * 16])
            .init_raw("ws", FLOAT8E8M0, &[16, 2], vec![127; 32]);
        let dq = [("axis", Attr::I(1)), ("block_size", Attr::I(32))];
        b.node_in("", "DequantizeLinear", &["wq", "ws"], &["wd"], &dq);
        match &perm {
            Some(p) => b.node_in("", "Transpose", &["wd"], &["wt"], &[("perm", Attr::Is(p))]),
            None => b.node("Transpose", &["wd"], &["wt"]),
        };
        b.node("MatMul", &["xd", "wt"], &["y"])
            .output("y", FLOAT, &[4, 16]);
        if other_reader {
            b.node("Relu", &["wt"], &["r"])
                .output("r", FLOAT, &[64, 16]);
        }
        let (report, g) = b.rewrite();
        assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
        assert_eq!(
            mxmatmul_snapshot(&g),
            "MxMatMul(x_mxfp8, x_mxfp8_scale, wq, ws) output_dtype=Int(1) trans_b=Int(1)",
            "{perm:?} {other_reader}"
        );
        let ops = op_types(&g);
        assert_eq!(
            ops.contains(&"Transpose".to_string()),
            other_reader,
            "{ops:?}"
        );
    }
}

/// Stacked expert weights `[E, K, N]` dequantized whole and picked by a Gather: the MatMul is
/// absorbed with a float weight, and a note says the MX weight behind it is dequantized at run
/// time (a silent slow path before).
#[test]
fn mx_weight_reached_through_a_gather_is_noted() {
    let mut b = std_mx_dequant(2f32.powi(-8), false, "down");
    b.init_raw("wq", FLOAT8E4M3FN, &[2, 64, 16], vec![0x38; 2 * 64 * 16])
        .init_raw("ws", FLOAT8E8M0, &[2, 2, 16], vec![127; 64])
        .init_i64("e", &[], &[1]);
    let dq = [
        ("axis", Attr::I(1)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT as i64)),
    ];
    b.node_in("", "DequantizeLinear", &["wq", "ws"], &["wd"], &dq)
        .node("Gather", &["wd", "e"], &["we"])
        .node("MatMul", &["xd", "we"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    let (report, _) = b.rewrite();
    assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
    let notes: Vec<&String> = report.fusions.iter().flat_map(|f| &f.notes).collect();
    assert!(
        notes.iter().any(|n| n
            .contains("reads weight 'we' as floats computed from MX DequantizeLinear")
            && n.contains("through Gather")),
        "{notes:?}"
    );
}

/// A standard MX `DequantizeLinear` that cannot be absorbed (its reader is a Gemm whose bias
/// does not broadcast to [M, N] or has another type, a Gemm with transA, a non-MatMul, or it
/// is a graph output) no longer refuses the site: the quantizer still becomes `MxQuantize`,
/// MatMul readers `MxMatMul`, and the DequantizeLinear stays for the rest as `MxDequantize`
/// (ONNX Runtime's CPU EP has no E8M0 DequantizeLinear kernel). The reason is a note of the
/// fusion.
#[test]
fn unabsorbable_mx_dequant_stays_as_mx_dequantize_with_the_reason() {
    type Reader = fn(&mut ModelBuilder);
    // (reader, why it is not absorbed, how many MxMatMul the fusion makes)
    let cases: [(Reader, &str, usize); 7] = [
        (
            |b| {
                b.init_f32("bias", &[8], &[1.0; 8]);
                b.node("Gemm", &["xd", "w", "bias"], &["y"]);
                b.output("y", FLOAT, &[4, 16]);
            },
            "bias 'bias' has shape",
            0,
        ),
        (
            |b| {
                b.init_f32("bias", &[2, 16], &[1.0; 32]);
                b.node("Gemm", &["xd", "w", "bias"], &["y"]);
                b.output("y", FLOAT, &[4, 16]);
            },
            "bias 'bias' has shape",
            0,
        ),
        (
            |b| {
                b.input("bias", FLOAT, &[1, 1, 16]);
                b.node("Gemm", &["xd", "w", "bias"], &["y"]);
                b.output("y", FLOAT, &[4, 16]);
            },
            "bias 'bias' has shape",
            0,
        ),
        (
            |b| {
                b.input(
                    "bias",
                    graph_rewrites::pattern::predicates::dtype::FLOAT16,
                    &[16],
                );
                b.node("Gemm", &["xd", "w", "bias"], &["y"]);
                b.output("y", FLOAT, &[4, 16]);
            },
            "bias 'bias' is float16",
            0,
        ),
        (
            |b| {
                b.init_f32("wt", &[4, 16], &[0.5; 64]);
                b.node_in("", "Gemm", &["xd", "wt"], &["y"], &[("transA", Attr::I(1))]);
                b.output("y", FLOAT, &[64, 16]);
            },
            "transA = 1",
            0,
        ),
        (
            |b| {
                b.node("MatMul", &["xd", "w"], &["y0"])
                    .node("Add", &["xd", "x"], &["y"]);
                b.output("y0", FLOAT, &[4, 16]).output("y", FLOAT, &[4, 64]);
            },
            "read by Add",
            1,
        ),
        (
            |b| {
                b.node("MatMul", &["xd", "w"], &["y"]);
                b.output("y", FLOAT, &[4, 16]).output("xd", FLOAT, &[4, 64]);
            },
            "is a graph output",
            1,
        ),
    ];
    for (reader, why, matmuls) in cases {
        let mut b = std_mx_dequant(2f32.powi(-8), false, "down");
        reader(&mut b);
        let mut g = b.graph().unwrap();
        let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
        assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
        assert_eq!(report.counts["mx_dequant"], 1, "{report:#?}");
        assert!(report.rejections.is_empty(), "{report:#?}");
        let ops = op_types(&g);
        let count = |op: &str| ops.iter().filter(|o| *o == op).count();
        assert_eq!(count("MxQuantize"), 1, "{ops:?}");
        assert_eq!(count("MxDequantize"), 1, "{ops:?}");
        assert_eq!(count("MxMatMul"), matmuls, "{ops:?}");
        assert_eq!(
            count("DequantizeLinear") + count("QuantizeLinear"),
            0,
            "{ops:?}"
        );
        // The MxDequantize reads the MxQuantize outputs and writes the DequantizeLinear's value.
        let xd = g.value_by_name("xd").unwrap();
        let dq = g.producer(xd).unwrap().0;
        assert_eq!(g.op_type(dq), "MxDequantize");
        for input in g.inputs(dq).iter().flatten() {
            assert_eq!(g.op_type(g.producer(*input).unwrap().0), "MxQuantize");
        }
        let notes: Vec<&String> = report.fusions.iter().flat_map(|f| &f.notes).collect();
        assert!(notes.iter().any(|n| n.contains(why)), "{why}: {notes:?}");
    }
}

#[test]
fn standard_quant_dequant_matmul_becomes_mxquantize_mxmatmul() {
    for (c, div, round, rule) in [
        (2f32.powi(-8), false, "down", "floor"),
        (1.0 / 448.0, false, "up", "rceil"),
        (448.0, true, "up", "rceil"),
        // amax / 256 is amax · 2^-8 exactly.
        (256.0, true, "down", "floor"),
    ] {
        let mut g = std_mx_matmul(c, div, round).graph().unwrap();
        let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
        assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
        assert_eq!(op_types(&g), ["MxQuantize", "MxMatMul"]);
        assert_eq!(attr_s(&g, g.nodes()[0], "scale_rule"), rule);
        let y = g.value_by_name("y").unwrap();
        assert_eq!(g.op_type(g.producer(y).unwrap().0), "MxMatMul");
    }
}

/// A DequantizeLinear with an explicit constant zero zero point (+0 or -0 E4M3FN) is the same
/// dequantization: absorbed like one without. A DequantizeLinear the fusion cannot absorb is
/// named in a note with the reason.
#[test]
fn zero_zero_point_dequantize_is_absorbed_and_others_are_noted() {
    for (zp, absorbed) in [(0x00u8, true), (0x80, true), (0x38, false)] {
        let mut b = std_mx_dequant(2f32.powi(-8), false, "down");
        b.init_raw("zp", FLOAT8E4M3FN, &[], vec![zp]);
        let dattrs = [("axis", Attr::I(-1)), ("block_size", Attr::I(32))];
        b.node_in(
            "",
            "DequantizeLinear",
            &["q", "scale", "zp"],
            &["xz"],
            &dattrs,
        );
        b.node("MatMul", &["xz", "w"], &["y"])
            .output("y", FLOAT, &[4, 16]);
        let mut g = b.graph().unwrap();
        let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
        assert_eq!(report.counts["mxquant"], 1, "{zp:#x}: {report:#?}");
        let ops = op_types(&g);
        let y = g.value_by_name("y").unwrap();
        let y_op = g.op_type(g.producer(y).unwrap().0).to_string();
        if absorbed {
            assert_eq!(y_op, "MxMatMul", "{zp:#x}: {ops:?}");
        } else {
            assert_eq!(y_op, "MatMul", "{zp:#x}: {ops:?}");
            let notes: Vec<&String> = report.fusions.iter().flat_map(|f| &f.notes).collect();
            assert!(
                notes
                    .iter()
                    .any(|n| n.contains("zero point is not a constant zero")),
                "{notes:?}"
            );
        }
    }
}

/// A QuantizeLinear zero point of +0 or -0 (0x80; both zero, as for the DequantizeLinear above)
/// fuses; any other byte is refused and the quantize runs unfused.
#[test]
fn signed_zero_quantize_zero_point_fuses() {
    for (zp, fuses) in [(0x00u8, true), (0x80, true), (0x38, false)] {
        let mut b =
            std_mx_dequant_with(2f32.powi(-8), false, "down", Amax::Standard, &[], Some(zp));
        b.node("MatMul", &["xd", "w"], &["y"])
            .output("y", FLOAT, &[4, 16]);
        let mut g = b.graph().unwrap();
        let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
        assert_eq!(
            report.counts["mxquant"], fuses as usize,
            "{zp:#x}: {report:#?}"
        );
    }
}

/// A run-time E8M0 scale computed by a subgraph the pattern does not know (here blocks as flat
/// `[-1, 32]` rows and the scale reshaped back) is not silent: mxquant records a refusal naming
/// where the match stopped, and the quantize runs unfused as `MxQuantizeLinear`.
#[test]
fn unrecognised_runtime_scale_spelling_is_reported() {
    let mut b = std_mx_dequant_amax(2f32.powi(-8), false, "down", Amax::FlatRows);
    b.node("MatMul", &["xd", "w"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    let mut g = b.graph().unwrap();
    let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
    assert_eq!(report.counts["mxquant"], 0);
    assert_eq!(report.counts["mx_quant_linear"], 1, "{report:#?}");
    let why: Vec<&str> = report
        .rejections
        .iter()
        .filter(|r| r.rule == "mxquant")
        .map(|r| r.reason.as_str())
        .collect();
    assert!(
        why.len() == 1 && why[0].starts_with("run-time E8M0 scale of a spelling not recognised"),
        "{why:?}"
    );
}

/// The block Reshape must keep x's leading dims: `[4, 2, 2, 32]` of an `x [2, 4, 64]` has the
/// right element count and blocks, but its amax `[4, 2, 2]` is not the `[2, 4, 2]` scale the
/// QuantizeLinear needs, so the unfused model fails at run time (onnx.reference: "Invalid shapes
/// for Blocked Quantization"); fusing it would make it run. 0, the known dim and one -1 keep them.
#[test]
fn block_reshape_must_keep_the_leading_dims() {
    for (shape, fuses) in [
        (&[0i64, 0, 2, 32][..], true),
        (&[2, 4, 2, 32][..], true),
        (&[-1, 4, 2, 32][..], true),
        (&[2, -1, 2, 32][..], true),
        (&[4, 2, 2, 32][..], false),
        (&[1, 8, 2, 32][..], false),
        (&[-1, 2, 2, 32][..], false),
    ] {
        let mut b = ModelBuilder::new(24);
        b.input("x", FLOAT, &[2, 4, 64])
            .init_i64("shape", &[4], shape)
            .mx_quant_floor("x", "shape", "")
            .output("q", FLOAT8E4M3FN, &[2, 4, 64]);
        let mut g = b.graph().unwrap();
        let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
        assert_eq!(
            report.counts["mxquant"], fuses as usize,
            "{shape:?}: {report:#?}"
        );
        if !fuses {
            assert!(
                report.rejections.iter().any(|r| r.rule == "mxquant"
                    && r.reason
                        .contains("is not shown to keep the leading dims [2, 4] of 'x'")),
                "{shape:?}: {:#?}",
                report.rejections
            );
        }
    }
}

/// How a test builds the block Reshape's shape of `x [batch, 8, 64]` at run time.
#[derive(Clone, Copy, Debug)]
enum RunTimeShape {
    /// `Concat(Shape(x, end=-1), [2, 32])` (Shape-15 attributes).
    ShapeEnd,
    /// `Concat(Slice(Shape(x), [0], [-1]), [2, 32])`.
    Slice,
    /// `Concat(Unsqueeze(Gather(Shape(x), i)) for i in dims, [2, 32])` (TorchScript's spelling;
    /// here with axes -1, the only axis of these 1-D vectors, as 0 is).
    Gather(&'static [i64]),
}

/// `x [batch, 8, 64] → [RMSNormalization] → MXFP8 quantize (block shape computed from
/// Shape(y)) → DequantizeLinear → MatMul`; `shape_reader`: a Relu also reads the Shape.
fn run_time_shape_model(form: RunTimeShape, norm: bool, shape_reader: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.input("x", FLOAT, &[-2, 8, 64]);
    let y = if norm {
        b.init_f32("gamma", &[64], &[1.5; 64]);
        b.node("RMSNormalization", &["x", "gamma"], &["y"]);
        "y"
    } else {
        "x"
    };
    b.init_i64("tail", &[2], &[2, 32])
        .init_i64("zero", &[1], &[0])
        .init_i64("minus_one", &[1], &[-1]);
    match form {
        RunTimeShape::ShapeEnd => {
            b.node_in("", "Shape", &[y], &["lead"], &[("end", Attr::I(-1))]);
        }
        RunTimeShape::Slice => {
            b.node("Shape", &[y], &["full"]).node(
                "Slice",
                &["full", "zero", "minus_one"],
                &["lead"],
            );
        }
        RunTimeShape::Gather(dims) => {
            b.node("Shape", &[y], &["full"]);
            let mut parts = Vec::new();
            for (j, d) in dims.iter().enumerate() {
                let (idx, g, u) = (format!("i{j}"), format!("g{j}"), format!("u{j}"));
                b.init_i64(&idx, &[], &[*d])
                    .node_in(
                        "",
                        "Gather",
                        &["full", &idx],
                        &[&g],
                        &[("axis", Attr::I(0))],
                    )
                    .node("Unsqueeze", &[&g, "minus_one"], &[&u]);
                parts.push(u);
            }
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            b.node_in("", "Concat", &parts, &["lead"], &[("axis", Attr::I(-1))]);
        }
    }
    b.node_in(
        "",
        "Concat",
        &["lead", "tail"],
        &["block_shape"],
        &[("axis", Attr::I(0))],
    );
    let full = if matches!(form, RunTimeShape::ShapeEnd) {
        "lead"
    } else {
        "full"
    };
    if shape_reader {
        b.node("Identity", &[full], &["shape_f"]);
        b.output(
            "shape_f",
            graph_rewrites::pattern::predicates::dtype::INT64,
            &[-1],
        );
    }
    b.init_f32("w", &[64, 16], &vec![0.5; 64 * 16])
        .mx_quant_floor(y, "block_shape", "");
    let d = [
        ("axis", Attr::I(-1)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT as i64)),
    ];
    b.node_in("", "DequantizeLinear", &["q", "scale"], &["yd"], &d)
        .node("MatMul", &["yd", "w"], &["out"])
        .output("out", FLOAT, &[-2, 8, 16]);
    b
}

/// Exporters spell a block Reshape of symbolic batch / sequence dims with a shape computed from
/// `Shape(x)`: it fuses like a constant one, and the shape computation goes with the fusion
/// (left outside, it would read the fused norm's output and feed the fused node: ONNX Runtime
/// refuses such a claim). Dims in another order are not x's leading dims; a shape computation
/// something else reads cannot go with a norm fusion (refused), and stays for a standalone one.
#[test]
fn block_shape_computed_from_shape_of_x_fuses() {
    use RunTimeShape::*;
    for form in [ShapeEnd, Slice, Gather(&[0, 1])] {
        let (report, g) = run_time_shape_model(form, true, false).rewrite();
        assert_eq!(
            report.counts["add_rmsnorm_mxquant"], 1,
            "{form:?}: {report:#?}"
        );
        assert_eq!(op_types(&g), ["AddRmsNormMxQuant", "MxMatMul"], "{form:?}");
    }
    // [8, batch]: batch at position 1 is not provably x's dim 1.
    let why = run_time_shape_model(Gather(&[1, 0]), true, false).refusal("add_rmsnorm_mxquant");
    assert!(
        why.contains("nor computed from Shape(x) as x's own leading dims"),
        "{why}"
    );
    let why = run_time_shape_model(Gather(&[1, 1]), true, false).refusal("add_rmsnorm_mxquant");
    assert!(
        why.contains("is not shown to keep the leading dims [batch, 8]"),
        "{why}"
    );
    let why = run_time_shape_model(Slice, true, true).refusal("add_rmsnorm_mxquant");
    assert!(why.contains("is read outside the fusion as well"), "{why}");
    // Standalone: x comes from outside, the shared Shape stays and the quantizer fuses.
    let (report, g) = run_time_shape_model(Slice, false, true).rewrite();
    assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
    let ops = op_types(&g);
    assert!(
        ops.contains(&"Shape".to_string()) && ops.contains(&"MxMatMul".to_string()),
        "{ops:?}"
    );
}

/// q, k and v each quantize the normed tensor with their own chain and their own run-time block
/// shape (`Shape → Slice → Concat`): the duplicate chains merge, shape computation included (as
/// ONNX Runtime's CSE does online), and the one quantizer fuses into the norm.
#[test]
fn duplicate_chains_with_run_time_block_shapes_merge_and_fuse_once() {
    let mut b = ModelBuilder::new(24);
    b.input("x", FLOAT, &[-2, 8, 64])
        .init_f32("gamma", &[64], &[1.5; 64])
        .node("RMSNormalization", &["x", "gamma"], &["y"]);
    for p in ["q", "k", "v"] {
        let v = |s: &str| format!("{s}_{p}");
        b.init_i64(&v("tail"), &[2], &[2, 32])
            .init_i64(&v("zero"), &[1], &[0])
            .init_i64(&v("minus_one"), &[1], &[-1])
            .init_f32(&v("w"), &[64, 16], &vec![0.5; 64 * 16])
            .node("Shape", &["y"], &[&v("full")])
            .node(
                "Slice",
                &[&v("full"), &v("zero"), &v("minus_one")],
                &[&v("lead")],
            )
            .node_in(
                "",
                "Concat",
                &[&v("lead"), &v("tail")],
                &[&v("shape")],
                &[("axis", Attr::I(0))],
            )
            .mx_quant_floor("y", &v("shape"), &format!("_{p}"));
        let d = [
            ("axis", Attr::I(-1)),
            ("block_size", Attr::I(32)),
            ("output_dtype", Attr::I(FLOAT as i64)),
        ];
        b.node_in(
            "",
            "DequantizeLinear",
            &[&v("q"), &v("scale")],
            &[&v("yd")],
            &d,
        )
        .node("MatMul", &[&v("yd"), &v("w")], &[&v("out")])
        .output(&v("out"), FLOAT, &[-2, 8, 16]);
    }
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["add_rmsnorm_mxquant"], 1, "{report:#?}");
    assert_eq!(report.counts["mxquant"], 0, "{report:#?}");
    let mm = op_types(&g).iter().filter(|o| *o == "MxMatMul").count();
    assert_eq!(op_types(&g).len(), 4, "{:?}", op_types(&g));
    assert_eq!(mm, 3);
}

/// QuantizeLinear-23+ `precision` is the dtype x and the scale are cast to before the division:
/// float16 / bfloat16 round an f32 x first, which the fused quantizers do not (onnx.reference
/// differs by up to a few percent). Only unset and float (1) fuse; the others are refused by
/// `mxquant` and by the `mx_quant_linear` fallback alike, with the reason.
#[test]
fn quantize_linear_dividing_in_another_precision_is_refused() {
    for (precision, fuses) in [
        (None, true),
        (Some(1), true),
        (Some(10), false),
        (Some(16), false),
    ] {
        let extra: Vec<(&str, Attr)> = precision
            .map(|p| ("precision", Attr::I(p)))
            .into_iter()
            .collect();
        let mut b = std_mx_dequant_with(2f32.powi(-8), false, "down", Amax::Standard, &extra, None);
        b.node("MatMul", &["xd", "w"], &["y"])
            .output("y", FLOAT, &[4, 16]);
        let mut g = b.graph().unwrap();
        let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
        assert_eq!(
            report.counts["mxquant"], fuses as usize,
            "{precision:?}: {report:#?}"
        );
        if fuses {
            continue;
        }
        assert_eq!(report.counts["mx_quant_linear"], 0, "{precision:?}");
        let why: Vec<(&str, &str)> = report
            .rejections
            .iter()
            .map(|r| (r.rule.as_str(), r.reason.as_str()))
            .collect();
        for rule in ["mxquant", "mx_quant_linear"] {
            assert!(
                why.iter().any(|(r, w)| *r == rule
                    && w.contains(&format!("divides in precision {}", precision.unwrap()))),
                "{rule}: {why:?}"
            );
        }
        assert!(
            op_types(&g).contains(&"QuantizeLinear".to_string()),
            "{:?}",
            op_types(&g)
        );
    }
}

#[test]
fn unknown_scale_rule_is_refused() {
    for (c, round) in [
        (2f32.powi(-8), "up"),
        (1.0 / 448.0, "down"),
        // fl32(1/448) + 1 ulp and − 4 ulps: within 1e-6 of 1/448, but they give amax = 448·2^j
        // (3.5, 448) another scale than the kernels' fl32(1/448) does.
        (f32::from_bits((1.0f32 / 448.0).to_bits() + 1), "up"),
        (f32::from_bits((1.0f32 / 448.0).to_bits() - 4), "up"),
        (2f32.powi(-7), "down"),
    ] {
        let mut g = std_mx_matmul(c, false, round).graph().unwrap();
        let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
        assert_eq!(report.counts["mxquant"], 0);
        assert!(
            report.rejections[0]
                .reason
                .contains("not a known MX scale rule"),
            "{:?}",
            report.rejections
        );
    }
}

/// A quantized value with no shape (an op mxfuse's inference does not know upstream, no
/// value_info) is refused with a reason naming that op, not only the value downstream of it;
/// com.microsoft::Gelu is known (same shape as its input).
#[test]
fn unknown_rank_refusal_names_the_op_inference_stops_at() {
    for (domain, op, fuses) in [
        ("my.domain", "MyOp", false),
        ("com.microsoft", "Gelu", true),
    ] {
        let mut b = ModelBuilder::new(24);
        b.opset(domain, 1).opset("com.amd.quark", 1);
        b.input("h", FLOAT, &[4, 64]);
        b.node_in(domain, op, &["h"], &["x"], &[]);
        b.node("Relu", &["x"], &["xr"]);
        b.quark_fake_quant("xr", "xq", 32, -1);
        b.init_f32("w", &[64, 16], &vec![0.5; 64 * 16]);
        b.node("MatMul", &["xq", "w"], &["y"])
            .output("y", FLOAT, &[4, 16]);
        if fuses {
            assert_eq!(b.rewrite().0.counts["mxquant"], 1);
        } else {
            let why = b.refusal("mxquant");
            assert!(
                why.contains("of 'xr' is unknown") && why.contains("my.domain::MyOp 'MyOp_0'"),
                "{why}"
            );
        }
    }
}

/// `x [4, H]` with a symbolic H quantized by the standard spelling whose block Reshape is
/// `block_shape` (its K/32 entry pins H = K): a Reshape stating K/32 after copied leading dims
/// fuses (the unfused graph runs only with exactly that H); a `-1` anywhere leaves H unknown and is
/// refused.
fn symbolic_hidden_model(block_shape: &[i64]) -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.input("x", FLOAT, &[4, -1]);
    b.init_i64("shape", &[3], block_shape)
        .init_i64("axes", &[1], &[-1])
        .init_f32("c", &[], &[2f32.powi(-8)]);
    b.node("Reshape", &["x", "shape"], &["xb"])
        .node("Abs", &["xb"], &["ab"]);
    b.node_in(
        "",
        "ReduceMax",
        &["ab", "axes"],
        &["amax"],
        &[("keepdims", Attr::I(0))],
    );
    b.node("Mul", &["amax", "c"], &["s32"]);
    b.node_in(
        "",
        "Cast",
        &["s32"],
        &["scale"],
        &[
            ("to", Attr::I(FLOAT8E8M0 as i64)),
            ("round_mode", Attr::S("down")),
        ],
    );
    let q = [
        ("axis", Attr::I(-1)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT8E4M3FN as i64)),
    ];
    b.node_in("", "QuantizeLinear", &["x", "scale"], &["q"], &q);
    b.output("q", FLOAT8E4M3FN, &[4, -1])
        .output("scale", FLOAT8E8M0, &[4, -1]);
    b
}

#[test]
fn symbolic_last_dim_pinned_by_the_block_reshape_fuses() {
    let mut g = symbolic_hidden_model(&[0, 2, 32]).graph().unwrap();
    let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
    assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
    assert_eq!(op_types(&g), ["MxQuantize"]);

    // -1 for K/32, or a leading -1 (it would absorb another last dim): H is not pinned.
    for shape in [[0, -1, 32], [-1, 2, 32]] {
        let mut g = symbolic_hidden_model(&shape).graph().unwrap();
        let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
        assert_eq!(
            report.counts.get("mxquant").copied().unwrap_or(0),
            0,
            "{shape:?}"
        );
        assert!(
            report
                .rejections
                .iter()
                .any(|r| r.reason.contains("not known statically")),
            "{shape:?}: {:#?}",
            report.rejections
        );
    }
}

/// New-user probe 12: a quantizer whose QuantizeLinear has no `output_dtype` (and no zero point)
/// writes uint8 (ONNX's default): refused, and the reason says so and what to set, where it said
/// "QuantizeLinear output is unknown"; a FLOAT8E4M3FNUZ one is named (was "other").
#[test]
fn a_quantize_linear_without_output_dtype_is_refused_naming_uint8() {
    let build = |q_attrs: &[(&str, Attr<'_>)]| {
        let mut b = ModelBuilder::new(24);
        b.input("x", FLOAT, &[4, 64])
            .init_i64("blk", &[3], &[0, 2, 32])
            .mx_scale_floor("x", "blk", "")
            .node_in("", "QuantizeLinear", &["x", "scale"], &["q"], q_attrs)
            .output("q", 0, &[4, 64]);
        b
    };
    let why = build(&[("axis", Attr::I(-1)), ("block_size", Attr::I(32))]).refusal("mxquant");
    assert!(
        why.contains(
            "QuantizeLinear output is uint8, not float8e4m3fn (QuantizeLinear without output_dtype"
        ),
        "{why}"
    );
    let why = build(&[
        ("axis", Attr::I(-1)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(18)),
    ])
    .refusal("mxquant");
    assert!(why.contains("output is float8e4m3fnuz"), "{why}");
}

/// `x [4, 64] → Reshape([-1, 32]) → Abs → ReduceMax(-1, keepdims) → [Reshape([-1, 2])] →
/// Mul(2^-8) → Cast(E8M0, down)` = scale, `QuantizeLinear(x, scale)`: torchao's `to_mx`
/// spelling (every block a row of its own, the amax viewed back to `[*x.shape[:-1], K // 32]`).
fn flat_block_quantizer(keepdims: i64, amax_reshape: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.input("x", FLOAT, &[4, 64])
        .init_i64("blk", &[2], &[-1, 32])
        .init_i64("amax_shape", &[2], &[-1, 2])
        .init_i64("axes", &[1], &[-1])
        .init_f32("c", &[], &[2f32.powi(-8)])
        .node("Reshape", &["x", "blk"], &["blocks"])
        .node("Abs", &["blocks"], &["ab"])
        .node_in(
            "",
            "ReduceMax",
            &["ab", "axes"],
            &["amax_r"],
            &[("keepdims", Attr::I(keepdims))],
        );
    let amax = if amax_reshape {
        b.node("Reshape", &["amax_r", "amax_shape"], &["amax"]);
        "amax"
    } else {
        "amax_r"
    };
    b.node("Mul", &[amax, "c"], &["s32"])
        .node_in(
            "",
            "Cast",
            &["s32"],
            &["scale"],
            &[
                ("to", Attr::I(FLOAT8E8M0 as i64)),
                ("round_mode", Attr::S("down")),
            ],
        )
        .node_in(
            "",
            "QuantizeLinear",
            &["x", "scale"],
            &["q"],
            &[
                ("axis", Attr::I(-1)),
                ("block_size", Attr::I(32)),
                ("output_dtype", Attr::I(FLOAT8E4M3FN as i64)),
            ],
        )
        .output("q", FLOAT8E4M3FN, &[4, 64]);
    b
}

/// New-user probe 12: the flattened block shape `[-1, 32]` was refused ("block Reshape [-1, 32]
/// does not split the last axis (64) into [2, 32]") and the quantizer ran unfused. With the amax
/// read back into `[.., K/32]` the blocks and their order are the standard spelling's: it fuses
/// (either keepdims). Without that Reshape it is refused saying what is missing.
#[test]
fn flattened_block_shape_with_the_amax_reshaped_back_fuses() {
    for keepdims in [0, 1] {
        let (report, g) = flat_block_quantizer(keepdims, true).rewrite();
        assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
        assert_eq!(op_types(&g), ["MxQuantize"], "keepdims {keepdims}");
    }
    let why = flat_block_quantizer(0, false).refusal("mxquant");
    assert!(
        why.contains(
            "flattens the rows of 'x': the block amax then needs a Reshape back to [..., 2]"
        ),
        "{why}"
    );
}
