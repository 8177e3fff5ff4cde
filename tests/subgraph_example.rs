//! Testing a subgraph of your own, the third way to use mxfuse (README "In unit tests"): build
//! it with `graph_rewrites::testing::ModelBuilder`, rewrite it with `run_pipeline`, evaluate the
//! graph before and after with `graph_eval` (the unfused ONNX ops through
//! `kernels::reference::onnx_ops`, the fused `com.mxfuse` ops through the kernels the provider
//! runs), and compare: quantized values and scales bit for bit, GEMM outputs within float order
//! (docs/ops.md, `MxMatMul`: 1e-5 relative; the evaluator's MatMul accumulates in f64).
//!
//! To add your own: copy this file, add a `[[test]]` for it to tests/Cargo.toml, run
//! `cargo test -p mxfuse-tests --test <name>`. `graph_eval` implements the ops the fusion
//! patterns use (an op it lacks is an error naming it); dims in `ModelBuilder` are known (> 0),
//! unknown (-1) or the symbolic "batch" (-2); the feeds give the run-time shapes.

mod graph_eval;

use std::collections::HashMap;

use graph_eval::Val;
use graph_rewrites::ir::Graph;
use graph_rewrites::pattern::predicates::dtype::FLOAT;
use graph_rewrites::pipeline::{run_pipeline, PipelineOptions, RewriteReport};
use graph_rewrites::testing::{Attr, ModelBuilder};
use graph_rewrites::view::GraphView;
use kernels::reference::onnx_ops::Tensor;
use kernels::DType;

/// `rows × k` deterministic values in about ±3.5, with a zero row and a large outlier.
fn rows(n: usize, k: usize, scale: f32) -> Val {
    let mut v: Vec<f32> = (0..n * k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.07 * scale)
        .collect();
    v[k..2 * k].fill(0.0);
    v[2 * k + 5] = 900.0;
    Val::F(Tensor::new(DType::F32, &[n, k], v).expect("feed"))
}

/// A float weight `[k, n]` initializer `name`.
fn weight(b: &mut ModelBuilder, name: &str, k: usize, n: usize) {
    let v: Vec<f32> = (0..k * n)
        .map(|i| ((i * 13 % 29) as f32 - 14.0) * 0.01)
        .collect();
    b.init_f32(name, &[k as i64, n as i64], &v);
}

/// `DequantizeLinear(q, scale)` of `ModelBuilder::mx_quant_floor`'s outputs into `out`.
fn dequantize(b: &mut ModelBuilder, out: &str) {
    let attrs = [
        ("axis", Attr::I(-1)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT as i64)),
    ];
    b.node_in("", "DequantizeLinear", &["q", "scale"], &[out], &attrs);
}

/// The graph before and after the pipeline, both evaluated on `feeds`.
struct Run {
    before: HashMap<String, Val>,
    after: HashMap<String, Val>,
    rewritten: Graph,
    report: RewriteReport,
}

fn run(b: &ModelBuilder, feeds: &[(&str, Val)]) -> Run {
    let feeds: HashMap<String, Val> = feeds
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let g = b.graph().expect("graph loads");
    let before = graph_eval::run(&g, &feeds).expect("the original graph evaluates");
    let mut rewritten = g.clone();
    let report = run_pipeline(&mut rewritten, &PipelineOptions::default()).expect("pipeline");
    let after = graph_eval::run(&rewritten, &feeds).expect("the rewritten graph evaluates");
    Run {
        before,
        after,
        rewritten,
        report,
    }
}

impl Run {
    /// The fused op's MXFP8 values and scales (the `MxMatMul`'s `a_q`, `a_scale`) equal the
    /// original `QuantizeLinear`'s `q` and its `scale`, byte for byte.
    fn assert_same_quantized_bytes(&self) {
        let r = &self.rewritten;
        let mm = r
            .nodes()
            .iter()
            .copied()
            .find(|&n| r.op_type(n) == "MxMatMul")
            .expect("an MxMatMul");
        for (slot, original) in [(0, "q"), (1, "scale")] {
            let fused = r.value_name(r.inputs(mm)[slot].expect("input"));
            let bytes = |v: &Val| match v {
                Val::Bytes { data, .. } => data.clone(),
                other => panic!("{original}: not bytes: {other:?}"),
            };
            assert_eq!(
                bytes(&self.after[fused]),
                bytes(&self.before[original]),
                "{original}"
            );
        }
    }

    /// Output `name` agrees within float order (1e-5 of its largest magnitude).
    fn assert_close(&self, name: &str) {
        let (Val::F(a), Val::F(b)) = (&self.before[name], &self.after[name]) else {
            panic!("{name} is not a float tensor");
        };
        assert_eq!(a.shape, b.shape);
        let top = a.data.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (x, y) in a.data.iter().zip(&b.data) {
            assert!((x - y).abs() <= 1e-5 * top, "{name}: {x} vs {y}");
        }
    }
}

/// `x [rows, h] → RMSNorm (decomposed, as torch exports it) → MXFP8 → MatMul`. `block_shape`
/// names the quantizer's block Reshape shape; `None` makes it the constant `[-1, h/32, 32]`.
fn norm_quant(h: usize, dims: &[i64], block_shape: Option<&str>) -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.input("x", FLOAT, dims);
    b.init_i64("ax", &[1], &[-1])
        .init_f32("eps", &[], &[1e-6])
        .init_f32("gamma", &[h as i64], &vec![1.5; h])
        .init_i64("blk", &[3], &[-1, (h / 32) as i64, 32]);
    weight(&mut b, "w", h, 16);
    b.node("Mul", &["x", "x"], &["sq"])
        .node("ReduceMean", &["sq", "ax"], &["ms"])
        .node("Add", &["ms", "eps"], &["mse"])
        .node("Sqrt", &["mse"], &["rms"])
        .node("Reciprocal", &["rms"], &["inv"])
        .node("Mul", &["x", "inv"], &["n0"])
        .node("Mul", &["n0", "gamma"], &["n"]);
    if block_shape.is_some() {
        // Symbolic rows: the block shape computed at run time, Concat(Shape(n)[:-1], [h/32, 32]).
        b.init_i64("tail", &[2], &[(h / 32) as i64, 32])
            .init_i64("s0", &[1], &[0])
            .init_i64("s1", &[1], &[-1])
            .node("Shape", &["n"], &["n_shape"])
            .node("Slice", &["n_shape", "s0", "s1"], &["lead"])
            .node_in(
                "",
                "Concat",
                &["lead", "tail"],
                &["blk_rt"],
                &[("axis", Attr::I(0))],
            );
    }
    b.mx_quant_floor("n", block_shape.unwrap_or("blk"), "");
    dequantize(&mut b, "nd");
    b.node("MatMul", &["nd", "w"], &["y"]);
    b.output("y", FLOAT, &[dims[0], 16]);
    b
}

#[test]
fn norm_and_quantize_with_hidden_96_and_symbolic_rows_fuse_bit_exactly() {
    let r = run(&norm_quant(96, &[-2, 96], None), &[("x", rows(5, 96, 1.0))]);
    assert_eq!(r.report.counts["add_rmsnorm_mxquant"], 1, "{:?}", r.report);
    r.assert_same_quantized_bytes();
    r.assert_close("y");
}

#[test]
fn a_run_time_block_shape_and_unknown_dims_fuse_too() {
    // The graph evaluator runs the Shape / Slice / Concat of the run-time block shape.
    for dims in [[-2, 96], [-1, -1]] {
        let b = norm_quant(96, &dims, Some("blk_rt"));
        let r = run(&b, &[("x", rows(3, 96, 1.0))]);
        assert_eq!(r.report.counts["add_rmsnorm_mxquant"], 1, "{:?}", r.report);
        r.assert_same_quantized_bytes();
        r.assert_close("y");
    }
}

#[test]
fn swiglu_oai_quantize_matmul_fuses_bit_exactly() {
    // GPT-OSS / MiniMax-M3's SwiGLU: clamp(gate, max 7) · σ(1.702 · gate) · (clamp(up, ±7) + 1).
    let (i, n) = (64, 16);
    let mut b = ModelBuilder::new(24);
    b.input("gate", FLOAT, &[-2, i as i64])
        .input("up", FLOAT, &[-2, i as i64])
        .init_f32("seven", &[], &[7.0])
        .init_f32("minus_seven", &[], &[-7.0])
        .init_f32("alpha", &[], &[1.702])
        .init_f32("one", &[], &[1.0])
        .init_i64("blk", &[3], &[-1, (i / 32) as i64, 32]);
    weight(&mut b, "w", i, n);
    b.node("Clip", &["gate", "", "seven"], &["g"])
        .node("Clip", &["up", "minus_seven", "seven"], &["u"])
        .node("Mul", &["g", "alpha"], &["ga"])
        .node("Sigmoid", &["ga"], &["sg"])
        .node("Mul", &["g", "sg"], &["glu"])
        .node("Add", &["u", "one"], &["u1"])
        .node("Mul", &["u1", "glu"], &["act"])
        .mx_quant_floor("act", "blk", "");
    dequantize(&mut b, "ad");
    b.node("MatMul", &["ad", "w"], &["y"]);
    b.output("y", FLOAT, &[-2, n as i64]);
    let r = run(&b, &[("gate", rows(4, i, 3.0)), ("up", rows(4, i, -2.0))]);
    assert_eq!(
        r.report.counts["swiglu_mxquant_matmul"], 1,
        "{:?}",
        r.report
    );
    r.assert_same_quantized_bytes();
    r.assert_close("y");
}

#[test]
fn a_k_that_is_not_a_multiple_of_32_is_refused_with_the_reason() {
    let mut b = ModelBuilder::new(24);
    b.opset("com.amd.quark", 1).input("x", FLOAT, &[-2, 80]);
    weight(&mut b, "w", 80, 16);
    b.quark_fake_quant("x", "xq", 32, -1)
        .node("MatMul", &["xq", "w"], &["y"])
        .output("y", FLOAT, &[-2, 16]);
    assert_eq!(
        b.refusal("mxquant"),
        "last dim of 'x' is 80, not a multiple of 32"
    );
    // Nothing changed, so the two evaluations agree bit for bit.
    let r = run(&b, &[("x", rows(3, 80, 1.0))]);
    assert_eq!(r.before["y"], r.after["y"]);
}
