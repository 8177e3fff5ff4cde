//! Numeric differential tests of the two fusion rules: each spelling's unfused graph (built by
//! `models`) runs op by op through the reference evaluator (`graph_eval`, over
//! `kernels::reference::onnx_ops`), the rewritten graph through our kernels (`kernels::ops`),
//! on fresh random rows plus edge rows (all zero, a huge outlier, a NaN). q, scales, the residual
//! sum and the normed tensor must be bit-identical; GEMM outputs agree within fp32-accumulation
//! tolerance (the reference accumulates in f64).

mod graph_eval;

use std::collections::HashMap;

use clap::ValueEnum;
use graph_eval::Val;
use graph_rewrites::ir::Graph;
use graph_rewrites::pipeline::{run_pipeline, PipelineOptions};
use graph_rewrites::view::GraphView;
use kernels::reference::onnx_ops::Tensor;
use models::builder::{elem_of, Dim, GraphBuilder, Tensor as BTensor};
use models::mx_quant::{matmul, matmul_weight, quantize_activation};
use models::{
    DType, DecoderConfig, GammaForm, GateUpForm, NormSpelling, QuantSpelling, SwigluSpelling,
};

const ROWS: usize = 8;

fn kdtype(d: DType) -> kernels::DType {
    match d {
        DType::F32 => kernels::DType::F32,
        DType::F16 => kernels::DType::F16,
        DType::Bf16 => kernels::DType::BF16,
    }
}

/// The huge outlier of the edge rows: as large as the dtype allows without the SwiGLU product
/// overflowing to Inf (Inf has its own test: `inf_in_activation_matches_the_graph`).
fn outlier(dt: DType) -> f32 {
    if dt == DType::F16 {
        600.0
    } else {
        2.0e4
    }
}

/// `ROWS` rows of `width`: random normals (std `std`), then a zero row, a row with one huge
/// outlier and (unless `nan` is false) a row with one NaN.
fn rows(seed: u64, width: usize, std: f32, big: f32, nan: bool) -> Vec<f32> {
    let mut v = models::data::Rng::new(seed).normals(ROWS * width, 0.0, std);
    v[5 * width..6 * width].fill(0.0);
    v[6 * width + 3] = big;
    if nan {
        v[7 * width + 5] = f32::NAN;
    }
    v
}

fn feed(dt: DType, width: usize, data: Vec<f32>) -> Val {
    Val::F(Tensor::new(kdtype(dt), &[ROWS, width], data).expect("feed"))
}

fn finish(b: GraphBuilder) -> Graph {
    let model = models::external::into_inline(b.finish("numeric", "numeric differential test"));
    Graph::from_model(model, None).expect("graph loads")
}

/// `x [+ residual] → norm → quantize → q/k MatMuls`, plus a float router MatMul on the normed
/// tensor; outputs: the MatMuls, the router, the residual sum.
fn norm_graph(cfg: &DecoderConfig, residual: bool) -> Graph {
    let (dt, h) = (cfg.dtype, cfg.hidden);
    let mut b = GraphBuilder::new(cfg.seed, false);
    let shape = vec![Dim::Fixed(ROWS), Dim::Fixed(h)];
    let x = b.add_input("x", elem_of(dt), shape.clone());
    let res = residual.then(|| b.add_input("residual", elem_of(dt), shape));
    let n = models::norm::add_rms_norm(&mut b, cfg, "norm", &x, res.as_ref());
    let a = quantize_activation(&mut b, dt, cfg.spelling.quant, &n.normed, "qk_in");
    for (name, width) in [("q_proj", 64), ("k_proj", 32)] {
        let w = matmul_weight(
            &mut b,
            dt,
            cfg.spelling.weights,
            &format!("{name}.weight"),
            h,
            width,
        );
        let y = matmul(&mut b, &a, &w, width, name);
        b.add_output(&y);
    }
    let wr = b.random_weight("router.weight", dt, &[h, 4], 0.0, 0.1);
    let logits = matmul(&mut b, &n.normed, &wr, 4, "router");
    b.add_output(&logits);
    if residual {
        b.add_output(&n.residual);
    }
    finish(b)
}

/// `gate_up → Split | Slices, or gate, up → SwiGLU → quantize → down MatMul`.
fn swiglu_graph(cfg: &DecoderConfig) -> Graph {
    swiglu_graph_with(cfg, &|b, a, k, n| {
        let w = matmul_weight(b, cfg.dtype, cfg.spelling.weights, "down.weight", k, n);
        matmul(b, a, &w, n, "down")
    })
}

/// The consumer of a quantized activation `a [ROWS, k]`: builds `y [ROWS, n]` from it.
type Consumer<'a> = &'a dyn Fn(&mut GraphBuilder, &BTensor, usize, usize) -> BTensor;

/// [`swiglu_graph`] with `consume` as the down projection.
fn swiglu_graph_with(cfg: &DecoderConfig, consume: Consumer<'_>) -> Graph {
    let (dt, i) = (cfg.dtype, cfg.intermediate);
    let mut b = GraphBuilder::new(cfg.seed, false);
    let e = elem_of(dt);
    let half = vec![Dim::Fixed(ROWS), Dim::Fixed(i)];
    let (gate, up) = match cfg.spelling.gate_up {
        GateUpForm::FusedSplit => {
            let gu = b.add_input("gate_up", e, vec![Dim::Fixed(ROWS), Dim::Fixed(2 * i)]);
            let attrs = vec![
                models::builder::attr_i("axis", -1),
                models::builder::attr_i("num_outputs", 2),
            ];
            let o = b.node(
                "Split",
                "",
                &[&gu.name],
                &[("gate", e, half.clone()), ("up", e, half)],
                attrs,
            );
            (o[0].clone(), o[1].clone())
        }
        GateUpForm::TwoMatmuls => (
            b.add_input("gate", e, half.clone()),
            b.add_input("up", e, half),
        ),
        GateUpForm::FusedSlices | GateUpForm::Interleaved => {
            let gu = b.add_input("gate_up", e, vec![Dim::Fixed(ROWS), Dim::Fixed(2 * i)]);
            let interleaved = cfg.spelling.gate_up == GateUpForm::Interleaved;
            models::swiglu::slice_gate_up(&mut b, &gu, i, interleaved, "mlp")
        }
    };
    let act = models::swiglu::swiglu(&mut b, cfg, "mlp", &gate, &up);
    let a = quantize_activation(&mut b, dt, cfg.spelling.quant, &act, "down_in");
    let y = consume(&mut b, &a, i, cfg.hidden);
    b.add_output(&y);
    finish(b)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// Rewrites `g`, checks `rule` fired `sites` times, evaluates both graphs and compares.
fn differential(g: Graph, feeds: &HashMap<String, Val>, rule: &str, sites: usize, ctx: &str) {
    let before = graph_eval::run(&g, feeds).unwrap_or_else(|e| panic!("{ctx}: original: {e}"));
    let mut r = g.clone();
    let report = run_pipeline(&mut r, &PipelineOptions::default()).expect("pipeline");
    assert_eq!(
        report.counts[rule], sites,
        "{ctx}: {:#?}",
        report.rejections
    );
    let after = graph_eval::run(&r, feeds).unwrap_or_else(|e| panic!("{ctx}: rewritten: {e}"));
    let mut compared_q = 0;
    for &n in r.nodes().iter() {
        if r.op_type(n) != "MxMatMul" {
            continue;
        }
        let mut y = r.value_name(r.outputs(n)[0]);
        if g.value_by_name(y).is_none() {
            // Read through the activation's `Reshape([.., K])`: the MxMatMul's output is
            // reshaped back to the MatMul's, which keeps its name.
            let (re, _) = r.consumers(r.outputs(n)[0])[0];
            assert_eq!(r.op_type(re), "Reshape", "{ctx}");
            y = r.value_name(r.outputs(re)[0]);
        }
        // The original MatMul (same output name) reads DequantizeLinear(q, scale) in the
        // standard spelling (maybe through a Reshape): its q and scale must equal the fused
        // op's bytes.
        let mut mm = g
            .producer(g.value_by_name(y).expect("output kept"))
            .expect("produced")
            .0;
        if g.op_type(mm) == "Reshape" {
            // The linear's trailing Reshape back to [B, S, N] went with the fusion (the
            // MxMatMul writes its output): the linear is behind it.
            let flat = g.inputs(mm)[0].expect("Reshape input");
            mm = g.producer(flat).expect("linear").0;
        }
        let mut a = g.inputs(mm)[0].expect("MatMul input");
        if let Some((re, _)) = g.producer(a).filter(|(p, _)| g.op_type(*p) == "Reshape") {
            a = g.inputs(re)[0].expect("Reshape input");
        }
        if let Some((dq, _)) = g
            .producer(a)
            .filter(|(p, _)| g.op_type(*p) == "DequantizeLinear")
        {
            for slot in 0..2 {
                let old = &before[g.value_name(g.inputs(dq)[slot].expect("dq input"))];
                let new = &after[r.value_name(r.inputs(n)[slot].expect("mxmatmul input"))];
                if let (Val::Bytes { data: o, .. }, Val::Bytes { data: w, .. }) = (old, new) {
                    let diff: Vec<_> = o
                        .iter()
                        .zip(w)
                        .enumerate()
                        .filter(|(_, (a, b))| a != b)
                        .collect();
                    assert!(
                        diff.is_empty(),
                        "{ctx}: {} of {y} differs at (index, (reference, fused)) {diff:?}",
                        ["q", "scale"][slot]
                    );
                }
                assert_eq!(old, new, "{ctx}: {} of {y}", ["q", "scale"][slot]);
            }
            compared_q += 1;
        }
    }
    let outputs = g.to_model().graph.map(|gp| gp.output).unwrap_or_default();
    for name in outputs.iter().filter_map(|o| o.name.as_deref()) {
        let (Val::F(old), Val::F(new)) = (&before[name], &after[name]) else {
            panic!("{ctx}: {name} not float")
        };
        // An MxMatMul's output, maybe through Reshapes (a linear read through `view(-1, K)`).
        let mut v = r.value_by_name(name).expect("kept");
        while let Some((p, _)) = r.producer(v).filter(|(p, _)| r.op_type(*p) == "Reshape") {
            v = r.inputs(p)[0].expect("Reshape input");
        }
        let fused_gemm = r
            .producer(v)
            .is_some_and(|(p, _)| r.op_type(p) == "MxMatMul");
        if !fused_gemm {
            // Residual sum, router over the normed tensor: bit-exact.
            assert!(
                same_bits(&old.data, &new.data),
                "{ctx}: {name}\n{:?}\n{:?}",
                old.data,
                new.data
            );
            continue;
        }
        let rtol = if old.dtype == kernels::DType::F32 {
            1e-5
        } else {
            1e-2
        };
        let big = old
            .data
            .iter()
            .filter(|x| x.is_finite())
            .fold(0f32, |m, x| m.max(x.abs()));
        for (k, (a, b)) in old.data.iter().zip(&new.data).enumerate() {
            let ok = (a.is_nan() && b.is_nan()) || (a - b).abs() <= rtol * a.abs() + 1e-5 * big;
            assert!(ok, "{ctx}: {name}[{k}]: reference {a}, fused {b}");
        }
    }
    let standard = g.nodes().iter().any(|n| g.op_type(*n) == "QuantizeLinear");
    assert!(!standard || compared_q > 0, "{ctx}: no q/scale compared");
}

fn norm_case(
    dt: DType,
    norm: NormSpelling,
    gamma: GammaForm,
    quant: QuantSpelling,
    residual: bool,
) {
    let mut cfg = DecoderConfig::tiny();
    cfg.dtype = dt;
    cfg.spelling.norm = norm;
    cfg.spelling.gamma = gamma;
    cfg.spelling.quant = quant;
    cfg.spelling.norm_f32_casts = true;
    cfg.seed = 7;
    let h = cfg.hidden;
    let nan = quant != QuantSpelling::Quark; // Quark's op passes NaN through; ours does not
    let mut feeds = HashMap::from([(
        "x".to_string(),
        feed(dt, h, rows(1, h, 1.0, outlier(dt), nan)),
    )]);
    if residual {
        feeds.insert(
            "residual".into(),
            feed(dt, h, rows(2, h, 1.0, outlier(dt), false)),
        );
    }
    let ctx = format!("{dt:?} {norm:?} {gamma:?} {quant:?} residual={residual}");
    differential(
        norm_graph(&cfg, residual),
        &feeds,
        "add_rmsnorm_mxquant",
        1,
        &ctx,
    );
}

#[test]
fn norm_spellings_match_the_reference_bit_for_bit() {
    for &norm in NormSpelling::value_variants() {
        for &gamma in GammaForm::value_variants() {
            for residual in [true, false] {
                norm_case(DType::F32, norm, gamma, QuantSpelling::StdFloor, residual);
            }
        }
    }
}

#[test]
fn norm_half_precision_and_other_quantizers_match() {
    for norm in [
        NormSpelling::PowRecip,
        NormSpelling::MulDiv,
        NormSpelling::RmsNormalization,
        NormSpelling::SkipSimplified,
    ] {
        for gamma in [
            GammaForm::Plain,
            GammaForm::GemmaAddOne,
            GammaForm::GemmaCastAddOne,
        ] {
            norm_case(DType::Bf16, norm, gamma, QuantSpelling::StdFloor, true);
            norm_case(DType::F16, norm, gamma, QuantSpelling::StdFloor, true);
            norm_case(DType::F32, norm, gamma, QuantSpelling::StdRceilDiv, true);
            norm_case(DType::F32, norm, gamma, QuantSpelling::Quark, true);
        }
    }
}

#[test]
fn swiglu_spellings_match_the_reference_bit_for_bit() {
    let cases = [
        (DType::F32, QuantSpelling::StdFloor),
        (DType::Bf16, QuantSpelling::StdFloor),
        (DType::F16, QuantSpelling::StdFloor),
        (DType::F32, QuantSpelling::StdRceilMul),
        (DType::F32, QuantSpelling::Quark),
    ];
    swiglu_grid(
        SwigluSpelling::value_variants(),
        &[GateUpForm::FusedSplit, GateUpForm::TwoMatmuls],
        &cases,
    );
}

/// [`swiglu_case`] on every spelling × gate/up form × (dtype, quantizer) of the lists.
fn swiglu_grid(
    spellings: &[SwigluSpelling],
    forms: &[GateUpForm],
    cases: &[(DType, QuantSpelling)],
) {
    for &s in spellings {
        for &gu in forms {
            for &(dt, quant) in cases {
                let mut cfg = DecoderConfig::tiny();
                (
                    cfg.dtype,
                    cfg.spelling.swiglu,
                    cfg.spelling.gate_up,
                    cfg.spelling.quant,
                    cfg.seed,
                ) = (dt, s, gu, quant, 11);
                swiglu_case(&cfg);
            }
        }
    }
}

/// Runs one SwiGLU differential on `cfg`'s spelling, gate/up form, dtype and quantizer.
fn swiglu_case(cfg: &DecoderConfig) {
    let (dt, quant) = (cfg.dtype, cfg.spelling.quant);
    let feeds = swiglu_feeds(cfg);
    let s = &cfg.spelling;
    let ctx = format!("{dt:?} {:?} {:?} {quant:?}", s.swiglu, s.gate_up);
    differential(swiglu_graph(cfg), &feeds, "swiglu_mxquant_matmul", 1, &ctx);
}

/// The SwiGLU inputs of `cfg` (gate and up, or the one gate_up tensor): an outlier in the gate
/// rows, and NaNs there too except for Quark (its `nan_policy = ignore` differs from the graph).
fn swiglu_feeds(cfg: &DecoderConfig) -> HashMap<String, Val> {
    let (dt, i, quant) = (cfg.dtype, cfg.intermediate, cfg.spelling.quant);
    let nan = quant != QuantSpelling::Quark;
    match cfg.spelling.gate_up {
        GateUpForm::TwoMatmuls => HashMap::from([
            (
                "gate".into(),
                feed(dt, i, rows(3, i, 3.0, outlier(dt), nan)),
            ),
            ("up".into(), feed(dt, i, rows(4, i, 3.0, 3.0, false))),
        ]),
        _ => HashMap::from([(
            "gate_up".into(),
            feed(dt, 2 * i, rows(3, 2 * i, 3.0, outlier(dt), nan)),
        )]),
    }
}

/// The tiny decoder's `SiLU(gate) · up` on two MatMuls, of `dt` with quantizer `quant`.
fn silu_two_matmuls(dt: DType, quant: QuantSpelling, seed: u64) -> DecoderConfig {
    let mut cfg = DecoderConfig::tiny();
    (
        cfg.dtype,
        cfg.spelling.swiglu,
        cfg.spelling.gate_up,
        cfg.spelling.quant,
        cfg.seed,
    ) = (
        dt,
        SwigluSpelling::SiluMul,
        GateUpForm::TwoMatmuls,
        quant,
        seed,
    );
    cfg
}

/// gate/up sliced out of one tensor (halves, and even/odd = the kernels' `interleaved` layout):
/// the fused op reads the right elements as gate and up, bit for bit.
#[test]
fn sliced_gate_up_matches_the_reference_bit_for_bit() {
    let spellings = [
        SwigluSpelling::SiluMul,
        SwigluSpelling::OaiClip,
        SwigluSpelling::QuickGelu,
        SwigluSpelling::Swiglu,
    ];
    let cases = [
        (DType::F32, QuantSpelling::StdFloor),
        (DType::Bf16, QuantSpelling::StdFloor),
        (DType::F16, QuantSpelling::StdRceilMul),
        (DType::F32, QuantSpelling::Quark),
    ];
    swiglu_grid(
        &spellings,
        &[GateUpForm::FusedSlices, GateUpForm::Interleaved],
        &cases,
    );
}

/// An f16 SwiGLU product that overflows to Inf: the graph's `Cast` to E8M0 of the Inf amax is
/// NaN (as `onnx.reference` computes it), so the whole block quantizes to NaN, and the kernels'
/// `propagate` policy must give the same bytes.
#[test]
fn inf_in_activation_matches_the_graph() {
    let mut cfg = DecoderConfig::tiny();
    (
        cfg.dtype,
        cfg.spelling.swiglu,
        cfg.spelling.gate_up,
        cfg.seed,
    ) = (
        DType::F16,
        SwigluSpelling::SiluMul,
        GateUpForm::TwoMatmuls,
        11,
    );
    let i = cfg.intermediate;
    let feeds = HashMap::from([
        (
            "gate".to_string(),
            feed(DType::F16, i, rows(3, i, 3.0, 2.0e4, false)),
        ),
        (
            "up".to_string(),
            feed(DType::F16, i, rows(4, i, 3.0, 2.0e4, false)),
        ),
    ]);
    differential(
        swiglu_graph(&cfg),
        &feeds,
        "swiglu_mxquant_matmul",
        1,
        "f16 Inf",
    );
}

/// `x → MXFP8 quantize → DequantizeLinear = a`, read by a MatMul *and* an Add (both graph
/// outputs): the MatMul becomes MxMatMul, the DequantizeLinear stays for the Add as
/// MxDequantize (rule `mx_dequant`), and the Add's output is bit-identical to the graph's.
#[test]
fn dequantize_kept_for_a_non_matmul_reader_matches_bit_for_bit() {
    for dt in [DType::F32, DType::F16, DType::Bf16] {
        for quant in [QuantSpelling::StdFloor, QuantSpelling::StdRceilDiv] {
            let k = 64;
            let mut b = GraphBuilder::new(11, false);
            let x = b.add_input("x", elem_of(dt), vec![Dim::Fixed(ROWS), Dim::Fixed(k)]);
            let a = quantize_activation(&mut b, dt, quant, &x, "act");
            let w = matmul_weight(&mut b, dt, models::WeightForm::StdMx, "w", k, 32);
            let y = matmul(&mut b, &a, &w, 32, "proj");
            let sum = b.op("Add", &[&a.name, &x.name], "sum", a.elem, a.shape.clone());
            b.add_output(&y);
            b.add_output(&sum);
            let g = finish(b);
            let feeds = HashMap::from([(
                "x".to_string(),
                feed(dt, k, rows(3, k, 1.0, outlier(dt), true)),
            )]);
            let ctx = format!("{dt:?} {quant:?}");
            differential(g.clone(), &feeds, "mxquant", 1, &ctx);
            let mut r = g;
            let report = run_pipeline(&mut r, &PipelineOptions::default()).expect("pipeline");
            assert_eq!(report.counts["mx_dequant"], 1, "{ctx}: {report:#?}");
            let ops: Vec<&str> = r.nodes().iter().map(|n| r.op_type(*n)).collect();
            assert!(
                ops.contains(&"MxDequantize") && !ops.contains(&"DequantizeLinear"),
                "{ctx}: {ops:?}"
            );
        }
    }
}

/// MXFP4 weights (FLOAT4E2M1 + E8M0, blocked along K) behind an MXFP8 activation: the rewrite
/// reads the 4-bit weights in `MxMatMul`; q/scale bit for bit, the products to f32 order, and
/// the same weight also read by an Add stays `MxDequantize`, bit for bit.
#[test]
fn mxfp4_weights_fuse_and_match_the_reference() {
    for dt in [DType::F32, DType::F16, DType::Bf16] {
        let k = 64;
        let mut b = GraphBuilder::new(13, false);
        let x = b.add_input("x", elem_of(dt), vec![Dim::Fixed(ROWS), Dim::Fixed(k)]);
        let a = quantize_activation(&mut b, dt, QuantSpelling::StdFloor, &x, "act");
        let w = matmul_weight(&mut b, dt, models::WeightForm::StdMxfp4, "w", k, 32);
        let y = matmul(&mut b, &a, &w, 32, "proj");
        let w2 = matmul_weight(&mut b, dt, models::WeightForm::StdMxfp4, "w2", k, 64);
        let y2 = matmul(&mut b, &a, &w2, 64, "proj2");
        let wsum = b.op(
            "Add",
            &[&w2.name, &w2.name],
            "wsum",
            w2.elem,
            w2.shape.clone(),
        );
        b.add_output(&y);
        b.add_output(&y2);
        b.add_output(&wsum);
        let g = finish(b);
        let feeds = HashMap::from([(
            "x".to_string(),
            feed(dt, k, rows(5, k, 1.0, outlier(dt), true)),
        )]);
        let ctx = format!("{dt:?} MXFP4");
        differential(g.clone(), &feeds, "mxquant", 1, &ctx);
        let mut r = g;
        let report = run_pipeline(&mut r, &PipelineOptions::default()).expect("pipeline");
        assert_eq!(report.counts["mx_dequant"], 1, "{ctx}: {report:#?}");
        let ops: Vec<&str> = r.nodes().iter().map(|n| r.op_type(*n)).collect();
        assert_eq!(
            ops.iter().filter(|o| **o == "MxMatMul").count(),
            2,
            "{ctx}: {ops:?}"
        );
        assert!(!ops.contains(&"DequantizeLinear"), "{ctx}: {ops:?}");
    }
}

/// A random MXFP8 weight `[N, K]` (E4M3 values, E8M0 scales `[N, K/32]`) whose rows each have
/// their own magnitude (a uniform weight would hide a layout error), quantized along K.
fn nk_mx_weight(n: usize, k: usize, seed: u64) -> (Vec<u8>, Vec<u8>) {
    use kernels::codec::{mx::quantize_block, QuantConfig};
    let w = models::data::Rng::new(seed).normals(n * k, 0.0, 1.0);
    let (mut q, mut sc) = (vec![0u8; n * k], Vec::new());
    for (r, (src, dst)) in w.chunks_exact(32).zip(q.chunks_exact_mut(32)).enumerate() {
        let row_scale = 2f32.powi((r / (k / 32)) as i32 % 7 - 3);
        let block: [f32; 32] = std::array::from_fn(|j| src[j] * row_scale);
        sc.push(quantize_block(
            &block,
            dst.try_into().unwrap(),
            QuantConfig::default(),
        ));
    }
    (q, sc)
}

/// An MX weight stored `[N, K]` (torch's Linear layout: blocks along axis 1) read by a MatMul
/// through `Transpose`: absorbed with `trans_b = 1`, and the GEMM agrees with the unfused graph
/// on random weights with a scale per block and row (a uniform weight would hide a layout error).
#[test]
fn transposed_nk_mx_weight_matches_the_reference() {
    let (k, n) = (96, 40);
    for dt in [DType::F32, DType::F16] {
        let mut b = GraphBuilder::new(17, false);
        let x = b.add_input("x", elem_of(dt), vec![Dim::Fixed(ROWS), Dim::Fixed(k)]);
        let a = quantize_activation(&mut b, dt, QuantSpelling::StdFloor, &x, "act");
        let (q, sc) = nk_mx_weight(n, k, 9);
        b.require_opset("", 24);
        let wq = b.add_initializer("w.e4m3", 17, &[n, k], models::builder::Payload::Bytes(q));
        let ws = b.add_initializer(
            "w.e8m0",
            24,
            &[n, k / 32],
            models::builder::Payload::Bytes(sc),
        );
        let dq = b.op_attrs(
            "DequantizeLinear",
            &[&wq.name, &ws.name],
            "w.dq",
            elem_of(dt),
            vec![n.into(), k.into()],
            vec![
                models::builder::attr_i("axis", 1),
                models::builder::attr_i("block_size", 32),
                models::builder::attr_i("output_dtype", i64::from(elem_of(dt))),
            ],
        );
        let wt = b.op(
            "Transpose",
            &[&dq.name],
            "w.t",
            dq.elem,
            vec![k.into(), n.into()],
        );
        let y = matmul(&mut b, &a, &wt, n, "proj");
        b.add_output(&y);
        let g = finish(b);
        let mut r = g.clone();
        run_pipeline(&mut r, &PipelineOptions::default()).expect("pipeline");
        let ops: Vec<&str> = r.nodes().iter().map(|&m| r.op_type(m)).collect();
        assert!(
            !ops.contains(&"Transpose") && !ops.contains(&"MxDequantize"),
            "{ops:?}"
        );
        let feeds = HashMap::from([(
            "x".to_string(),
            feed(dt, k, rows(3, k, 1.0, outlier(dt), true)),
        )]);
        differential(
            g,
            &feeds,
            "mxquant",
            1,
            &format!("{dt:?} [N, K] through Transpose"),
        );
    }
}

/// Weight-only MX (rule `mx_weight_matmul`): a float activation (f32, f16, bf16) times a
/// constant MX weight, `[K, N]` read directly and `[N, K]` through a Transpose, random values
/// with a scale per block and row: the fused `MxMatMul` (float `a`, no `a_scale`) agrees with
/// the unfused DequantizeLinear → MatMul within float order, NaN and outlier rows included.
/// A weight-only model `g` (activation `x` of `dt`, last dim `k`) rewrites to one `MxMatMul` and
/// computes what the unfused graph computes, on 5 rows with an outlier.
fn weight_only_differential(g: Graph, dt: DType, k: usize, ctx: &str) {
    let mut r = g.clone();
    run_pipeline(&mut r, &PipelineOptions::default()).expect("pipeline");
    let ops: Vec<&str> = r.nodes().iter().map(|&m| r.op_type(m)).collect();
    assert_eq!(ops, ["MxMatMul"], "{ctx}");
    let feeds = HashMap::from([(
        "x".to_string(),
        feed(dt, k, rows(5, k, 1.0, outlier(dt), true)),
    )]);
    differential(g, &feeds, "mx_weight_matmul", 1, ctx);
}

#[test]
fn weight_only_mx_matmul_matches_the_unfused_graph() {
    let (k, n) = (96, 40);
    for dt in [DType::F32, DType::F16, DType::Bf16] {
        for nk in [false, true] {
            let mut b = GraphBuilder::new(17, false);
            let x = b.add_input("x", elem_of(dt), vec![Dim::Fixed(ROWS), Dim::Fixed(k)]);
            let (mut q, mut sc) = nk_mx_weight(n, k, 11);
            let (dims, sdims, axis) = if nk {
                ([n, k], [n, k / 32], 1)
            } else {
                let t = |v: &[u8], rows: usize, cols: usize| {
                    let mut o = vec![0u8; v.len()];
                    for r in 0..rows {
                        for c in 0..cols {
                            o[c * rows + r] = v[r * cols + c];
                        }
                    }
                    o
                };
                (q, sc) = (t(&q, n, k), t(&sc, n, k / 32));
                ([k, n], [k / 32, n], 0)
            };
            b.require_opset("", 24);
            let wq = b.add_initializer("w.e4m3", 17, &dims, models::builder::Payload::Bytes(q));
            let ws = b.add_initializer("w.e8m0", 24, &sdims, models::builder::Payload::Bytes(sc));
            let dq = b.op_attrs(
                "DequantizeLinear",
                &[&wq.name, &ws.name],
                "w.dq",
                elem_of(dt),
                vec![dims[0].into(), dims[1].into()],
                vec![
                    models::builder::attr_i("axis", axis),
                    models::builder::attr_i("block_size", 32),
                    models::builder::attr_i("output_dtype", i64::from(elem_of(dt))),
                ],
            );
            let wt = if nk {
                b.op(
                    "Transpose",
                    &[&dq.name],
                    "w.t",
                    dq.elem,
                    vec![k.into(), n.into()],
                )
            } else {
                dq
            };
            let y = matmul(&mut b, &x, &wt, n, "proj");
            b.add_output(&y);
            let ctx = format!("{dt:?} weight-only, [N, K] through Transpose: {nk}");
            weight_only_differential(finish(b), dt, k, &ctx);
        }
    }
}

/// Quark weight-only (rule `mx_weight_matmul`): a float activation (f32, f16, bf16) times
/// `MXQuantizeDequantize(W)` of a constant float weight (fp8_e4m3, block 32 along K), read by a
/// MatMul or a Gemm with a bias: the fused `MxMatMul` reads the weight quantized at rewrite time
/// and agrees with the unfused graph — evaluated with the project's Quark reference kernel
/// (`kernels::reference::quark_mx`) — within float order. The weight's columns have magnitudes
/// from 2^-3 to 2^3, one all-zero block and a NaN; the activation has NaN and outlier rows.
/// Both spellings of Quark's op (`QUARK_MX_OPS`: `MXQuantizeDequantize` and its deprecated name
/// `com.vai.quantize::MXFixNeuron`).
#[test]
fn quark_weight_only_mx_matmul_matches_the_unfused_graph() {
    use graph_rewrites::view::QUARK_MX_OPS;
    use models::builder::{attr_f, attr_i, attr_s, Payload};
    let (k, n) = (96, 40);
    for (dt, &(domain, op)) in [DType::F32, DType::F16, DType::Bf16]
        .into_iter()
        .flat_map(|dt| QUARK_MX_OPS.iter().map(move |s| (dt, s)))
    {
        for gemm in [false, true] {
            let mut b = GraphBuilder::new(17, false);
            let x = b.add_input("x", elem_of(dt), vec![Dim::Fixed(ROWS), Dim::Fixed(k)]);
            let mut w = models::data::Rng::new(13).normals(k * n, 0.0, 0.2);
            for (i, v) in w.iter_mut().enumerate() {
                *v *= 2f32.powi((i % n) as i32 % 7 - 3); // column magnitude
            }
            for kk in 32..64 {
                w[kk * n + 7] = 0.0; // block 1 of column 7
            }
            w[70 * n + 11] = f32::NAN; // passed through by Quark, a NaN element here
            let payload = Payload::Bytes(models::data::encode_floats(dt, &w));
            let wt = b.add_initializer("w", elem_of(dt), &[k, n], payload);
            b.require_opset(domain, 1);
            let wq = b
                .node(
                    op,
                    domain,
                    &[&wt.name],
                    &[("w.qdq", wt.elem, wt.shape.clone())],
                    vec![
                        attr_i("axis", 0),
                        attr_i("block_size", 32),
                        attr_s("element_dtype", "fp8_e4m3"),
                        attr_i("rounding_mode", 2),
                    ],
                )
                .remove(0);
            let y = if gemm {
                let c = models::data::Rng::new(5).normals(n, 0.0, 1.0);
                let c = b.add_initializer(
                    "c",
                    elem_of(dt),
                    &[n],
                    Payload::Bytes(models::data::encode_floats(dt, &c)),
                );
                b.op_attrs(
                    "Gemm",
                    &[&x.name, &wq.name, &c.name],
                    "proj",
                    x.elem,
                    x.with_last(n),
                    vec![attr_f("alpha", 0.5), attr_f("beta", 2.0)],
                )
            } else {
                matmul(&mut b, &x, &wq, n, "proj")
            };
            b.add_output(&y);
            let ctx = format!("{dt:?} Quark weight-only ({op}), Gemm: {gemm}");
            weight_only_differential(finish(b), dt, k, &ctx);
        }
    }
}

/// One `Gemm` consumer: `transB`, bias shape (`None`: no C), alpha, beta, MX weight
/// (`cfg.spelling.weights`, `[K, N]` only) or float, and whether C holds a NaN.
#[derive(Clone, Copy, Debug)]
struct GemmCase {
    trans_b: bool,
    bias: Option<&'static [usize]>,
    alpha: f32,
    beta: f32,
    spelled_weight: bool,
    nan_bias: bool,
}

const LINEAR: GemmCase = GemmCase {
    trans_b: true,
    bias: Some(&[0]), // [N]
    alpha: 1.0,
    beta: 1.0,
    spelled_weight: false,
    nan_bias: false,
};

/// The bias-shape placeholders: 0 = N, 1 = 1, 2 = M (ROWS).
fn gemm_cases() -> Vec<GemmCase> {
    vec![
        LINEAR,
        GemmCase {
            trans_b: false,
            bias: Some(&[1, 0]),
            spelled_weight: true,
            ..LINEAR
        },
        GemmCase {
            bias: Some(&[]),
            alpha: 0.5,
            beta: -2.0,
            ..LINEAR
        },
        GemmCase {
            bias: Some(&[2, 0]),
            beta: 0.25,
            ..LINEAR
        },
        GemmCase {
            bias: Some(&[2, 1]),
            ..LINEAR
        },
        GemmCase {
            bias: Some(&[1]),
            nan_bias: true,
            ..LINEAR
        },
        GemmCase {
            bias: None,
            alpha: 3.0,
            ..LINEAR
        },
    ]
}

/// `Gemm(a, W, [C])` per `case` for `a [ROWS, k]`, N = `n`.
fn gemm_consumer(
    b: &mut GraphBuilder,
    cfg: &DecoderConfig,
    case: GemmCase,
    a: &BTensor,
    (k, n): (usize, usize),
) -> BTensor {
    let dt = cfg.dtype;
    let w = if case.spelled_weight {
        matmul_weight(b, dt, cfg.spelling.weights, "proj.weight", k, n)
    } else {
        let dims = if case.trans_b { [n, k] } else { [k, n] };
        b.random_weight("proj.weight", dt, &dims, 0.0, 1.0 / (k as f32).sqrt())
    };
    let mut inputs = vec![a.name.clone(), w.name.clone()];
    if let Some(spec) = case.bias {
        let dims: Vec<usize> = spec.iter().map(|&d| [n, 1, ROWS][d]).collect();
        let len = dims.iter().product();
        let mut v = models::data::Rng::new(5).normals(len, 0.5, 1.0);
        if case.nan_bias {
            v[0] = f32::NAN;
        }
        inputs.push(b.const_float("proj.bias", dt, &dims, &v).name);
    }
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let attrs = vec![
        models::builder::attr_i("transB", case.trans_b as i64),
        models::builder::attr_f("alpha", case.alpha),
        models::builder::attr_f("beta", case.beta),
    ];
    b.op_attrs("Gemm", &refs, "proj", a.elem, a.with_last(n), attrs)
}

/// `x → norm → quantize → Gemm(·, W, C)` (torch's `nn.Linear` with bias on a rank-2
/// activation and other Gemm forms), rewritten and compared with the unfused graph.
fn norm_gemm_case(dt: DType, quant: QuantSpelling, case: GemmCase) {
    let mut cfg = DecoderConfig::tiny();
    (cfg.dtype, cfg.spelling.quant, cfg.seed) = (dt, quant, 7);
    cfg.spelling.norm_f32_casts = true;
    let h = cfg.hidden;
    let mut b = GraphBuilder::new(cfg.seed, false);
    let shape = vec![Dim::Fixed(ROWS), Dim::Fixed(h)];
    let x = b.add_input("x", elem_of(dt), shape.clone());
    let res = b.add_input("residual", elem_of(dt), shape);
    let n = models::norm::add_rms_norm(&mut b, &cfg, "norm", &x, Some(&res));
    let a = quantize_activation(&mut b, dt, quant, &n.normed, "proj_in");
    let y = gemm_consumer(&mut b, &cfg, case, &a, (h, 48));
    b.add_output(&y);
    b.add_output(&n.residual);
    let nan = quant != QuantSpelling::Quark;
    let feeds = HashMap::from([
        (
            "x".to_string(),
            feed(dt, h, rows(1, h, 1.0, outlier(dt), nan)),
        ),
        (
            "residual".to_string(),
            feed(dt, h, rows(2, h, 1.0, outlier(dt), false)),
        ),
    ]);
    let ctx = format!("norm {dt:?} {quant:?} {case:?}");
    let g = finish(b);
    assert_gemm_fused(&g, case, "AddRmsNormMxQuant", &ctx);
    differential(g, &feeds, "add_rmsnorm_mxquant", 1, &ctx);
}

/// The rewrite of `g` has `fused` and an `MxMatMul` for the Gemm that reads its bias as the
/// fifth input and carries alpha / beta where they are not 1.
fn assert_gemm_fused(g: &Graph, case: GemmCase, fused: &str, ctx: &str) {
    let mut r = g.clone();
    run_pipeline(&mut r, &PipelineOptions::default()).expect("pipeline");
    let ops: Vec<&str> = r.nodes().iter().map(|&n| r.op_type(n)).collect();
    assert!(ops.contains(&fused), "{ctx}: {ops:?}");
    let (mm, _) = r
        .producer(r.value_by_name("proj").expect("y"))
        .expect("produced");
    assert_eq!(r.op_type(mm), "MxMatMul", "{ctx}");
    let bias = r
        .inputs(mm)
        .get(4)
        .copied()
        .flatten()
        .map(|v| r.value_name(v));
    assert_eq!(bias, case.bias.map(|_| "proj.bias"), "{ctx}");
    let f = |name: &str| match r.attr(mm, name) {
        Some(graph_rewrites::view::AttrValue::Float(v)) => v,
        _ => 1.0,
    };
    assert_eq!(f("alpha"), case.alpha, "{ctx}");
    if case.bias.is_some() {
        assert_eq!(f("beta"), case.beta, "{ctx}");
    }
}

#[test]
fn gemm_with_bias_after_the_norm_matches_the_reference() {
    for case in gemm_cases() {
        for (dt, quant) in [
            (DType::F32, QuantSpelling::StdFloor),
            (DType::Bf16, QuantSpelling::StdFloor),
            (DType::F16, QuantSpelling::StdRceilMul),
            (DType::F32, QuantSpelling::Quark),
        ] {
            norm_gemm_case(dt, quant, case);
        }
    }
}

#[test]
fn gemm_with_bias_after_swiglu_matches_the_reference() {
    for case in gemm_cases() {
        for (dt, quant) in [
            (DType::F32, QuantSpelling::StdFloor),
            (DType::Bf16, QuantSpelling::StdRceilDiv),
            (DType::F16, QuantSpelling::StdFloor),
            (DType::F32, QuantSpelling::Quark),
        ] {
            let cfg = silu_two_matmuls(dt, quant, 11);
            let feeds = swiglu_feeds(&cfg);
            let g = swiglu_graph_with(&cfg, &|b, a, k, n| gemm_consumer(b, &cfg, case, a, (k, n)));
            let ctx = format!("swiglu {dt:?} {quant:?} {case:?}");
            assert_gemm_fused(&g, case, "SwiGluMxQuant", &ctx);
            differential(g, &feeds, "swiglu_mxquant_matmul", 1, &ctx);
        }
    }
}

/// `x + residual` (f16/bf16) → `Cast(f32)` → `RMSNormalization` | `SimplifiedLayerNormalization`
/// (γ f32) → `Cast` back → quantize → MatMuls: an fp16 conversion that keeps the norm in fp32
/// (onnxconverter-common's `op_block_list`). The fused op computes in fp32 with γ in f32 and
/// rounds y to T once, as the graph does: q, scales and the sum bit for bit.
/// The norm tests' consumers: `y` quantized (`quant`) and read by a q and a k projection (MX
/// weights), the projections and the residual sum `sum` as outputs; returns feeds of x and
/// residual (`nan`: x carries a NaN element).
fn qk_consumers(
    b: &mut GraphBuilder,
    (dt, h): (DType, usize),
    quant: QuantSpelling,
    (y, sum): (&BTensor, &BTensor),
    nan: bool,
) -> HashMap<String, Val> {
    let a = quantize_activation(b, dt, quant, y, "qk_in");
    for (name, width) in [("q_proj", 64), ("k_proj", 32)] {
        let w = matmul_weight(
            b,
            dt,
            models::WeightForm::StdMx,
            &format!("{name}.weight"),
            h,
            width,
        );
        let out = matmul(b, &a, &w, width, name);
        b.add_output(&out);
    }
    b.add_output(sum);
    HashMap::from([
        (
            "x".to_string(),
            feed(dt, h, rows(1, h, 1.0, outlier(dt), nan)),
        ),
        (
            "residual".to_string(),
            feed(dt, h, rows(2, h, 1.0, outlier(dt), false)),
        ),
    ])
}

#[test]
fn single_op_norm_between_casts_matches_the_reference() {
    for dt in [DType::F16, DType::Bf16] {
        for (op, quant) in [
            ("RMSNormalization", QuantSpelling::StdFloor),
            ("SimplifiedLayerNormalization", QuantSpelling::Quark),
        ] {
            let h = 64;
            let mut b = GraphBuilder::new(5, false);
            b.require_opset("", 24);
            let shape = vec![Dim::Fixed(ROWS), Dim::Fixed(h)];
            let (t, f) = (elem_of(dt), elem_of(DType::F32));
            let x = b.add_input("x", t, shape.clone());
            let r = b.add_input("residual", t, shape.clone());
            let sum = b.op("Add", &[&x.name, &r.name], "sum", t, shape.clone());
            let up = b.op_attrs(
                "Cast",
                &[&sum.name],
                "sum_f32",
                f,
                shape.clone(),
                vec![models::builder::attr_i("to", f as i64)],
            );
            let w = b.random_weight("norm.weight", DType::F32, &[h], 1.0, 0.2);
            let y32 = b.op_attrs(
                op,
                &[&up.name, &w.name],
                "normed_f32",
                f,
                shape.clone(),
                vec![models::builder::attr_f("epsilon", 1e-6)],
            );
            let y = b.op_attrs(
                "Cast",
                &[&y32.name],
                "normed",
                t,
                shape.clone(),
                vec![models::builder::attr_i("to", t as i64)],
            );
            let feeds = qk_consumers(&mut b, (dt, h), quant, (&y, &sum), false);
            let ctx = format!("{dt:?} Cast → {op} → Cast, {quant:?}");
            differential(finish(b), &feeds, "add_rmsnorm_mxquant", 1, &ctx);
        }
    }
}

/// `x + residual → [Cast f32] → Mul(s, s) → ReduceSum(-1) → Div(·, H) | Mul(·, 1/H) → Add(eps) →
/// Sqrt → Reciprocal → Mul → Mul(γ f32) → [Cast T] → quantize → MatMuls`: the mean written as a
/// sum over the hidden size (`x.pow(2).sum(-1, keepdim=True) / H`). H is a power of two, where the
/// graph's f32 sum divided by H is the fused kernel's mean bit for bit, so q, scales and the sum
/// must match exactly (for another H the graph rounds the sum before dividing, as ORT's own
/// ReduceMean does: the float-order tolerance docs/ops.md describes, compared in
/// tests/python/test_probe12.py).
#[test]
fn norm_mean_as_sum_over_h_matches_the_reference() {
    for (dt, h, count_op, quant) in [
        (DType::F32, 64, "Div", QuantSpelling::StdFloor),
        (DType::F32, 128, "Mul", QuantSpelling::Quark),
        (DType::Bf16, 64, "Div", QuantSpelling::StdRceilDiv),
        (DType::F16, 128, "Mul", QuantSpelling::StdFloor),
    ] {
        let mut b = GraphBuilder::new(11, false);
        let shape = vec![Dim::Fixed(ROWS), Dim::Fixed(h)];
        let col = vec![Dim::Fixed(ROWS), Dim::Fixed(1)];
        let (t, f) = (elem_of(dt), elem_of(DType::F32));
        let x = b.add_input("x", t, shape.clone());
        let r = b.add_input("residual", t, shape.clone());
        let sum = b.op("Add", &[&x.name, &r.name], "sum", t, shape.clone());
        let s = if dt == DType::F32 {
            sum.clone()
        } else {
            let to = vec![models::builder::attr_i("to", f as i64)];
            b.op_attrs("Cast", &[&sum.name], "sum_f32", f, shape.clone(), to)
        };
        let sq = b.op("Mul", &[&s.name, &s.name], "sq", f, shape.clone());
        let axes = b.const_i64("axes", &[-1]);
        let ss = b.op("ReduceSum", &[&sq.name, &axes.name], "ss", f, col.clone());
        let count = match count_op {
            "Div" => h as f32,
            _ => 1.0 / h as f32,
        };
        let c = b.scalar("count", DType::F32, count);
        let ms = b.op(count_op, &[&ss.name, &c.name], "ms", f, col.clone());
        let eps = b.scalar("eps", DType::F32, 1e-6);
        let ve = b.op("Add", &[&ms.name, &eps.name], "ve", f, col.clone());
        let sd = b.op("Sqrt", &[&ve.name], "sd", f, col.clone());
        let inv = b.op("Reciprocal", &[&sd.name], "inv", f, col);
        let n = b.op("Mul", &[&s.name, &inv.name], "n", f, shape.clone());
        let w = b.random_weight("norm.weight", DType::F32, &[h], 1.0, 0.2);
        let y32 = b.op("Mul", &[&n.name, &w.name], "y32", f, shape.clone());
        let y = if dt == DType::F32 {
            y32
        } else {
            let to = vec![models::builder::attr_i("to", t as i64)];
            b.op_attrs("Cast", &[&y32.name], "normed", t, shape.clone(), to)
        };
        let nan = quant != QuantSpelling::Quark;
        let feeds = qk_consumers(&mut b, (dt, h), quant, (&y, &sum), nan);
        let ctx = format!("{dt:?} H={h} {count_op}(ReduceSum, {count}) {quant:?}");
        let g = finish(b);
        let reduces = |g: &Graph| {
            g.nodes()
                .iter()
                .filter(|n| g.op_type(**n) == "ReduceSum")
                .count()
        };
        assert_eq!(reduces(&g), 1, "{ctx}");
        differential(g, &feeds, "add_rmsnorm_mxquant", 1, &ctx);
    }
}

/// torch.export's `nn.Linear` on a `[B, S, K]` activation: norm → quantize → `Reshape([-1, K])`
/// → `Gemm(transB = 1, bias)` (addmm) or `MatMul` (mm) → `Reshape([B, S, N])`. The rule reads
/// the linear through the first Reshape (`MxMatMul` on the `[B, S, K]` MXFP8 values, a Reshape
/// of its output to `[B·S, N]`) and the rewrite computes what the unfused graph does.
fn flat_linear_case(dt: DType, quant: QuantSpelling, (bsz, seq): (usize, usize), gemm: bool) {
    let mut cfg = DecoderConfig::tiny();
    (cfg.dtype, cfg.spelling.quant, cfg.seed) = (dt, quant, 7);
    cfg.spelling.norm_f32_casts = true;
    let (h, n_out) = (cfg.hidden, 48);
    let mut b = GraphBuilder::new(cfg.seed, false);
    let shape = vec![Dim::Fixed(bsz), Dim::Fixed(seq), Dim::Fixed(h)];
    let x = b.add_input("x", elem_of(dt), shape.clone());
    let res = b.add_input("residual", elem_of(dt), shape);
    let n = models::norm::add_rms_norm(&mut b, &cfg, "norm", &x, Some(&res));
    let a = quantize_activation(&mut b, dt, quant, &n.normed, "proj_in");
    let flat = b.const_i64("proj_in.flat", &[-1, h as i64]);
    let rows2 = vec![Dim::Fixed(bsz * seq), Dim::Fixed(h)];
    let af = b.op(
        "Reshape",
        &[&a.name, &flat.name],
        "proj_in.flat_out",
        a.elem,
        rows2,
    );
    let y = if gemm {
        gemm_consumer(&mut b, &cfg, LINEAR, &af, (h, n_out))
    } else {
        let w = b.random_weight("proj.weight", dt, &[h, n_out], 0.0, 1.0 / (h as f32).sqrt());
        b.op(
            "MatMul",
            &[&af.name, &w.name],
            "proj",
            af.elem,
            af.with_last(n_out),
        )
    };
    let unflat = b.const_i64("proj.unflat", &[bsz as i64, seq as i64, n_out as i64]);
    let out_shape = vec![Dim::Fixed(bsz), Dim::Fixed(seq), Dim::Fixed(n_out)];
    let out = b.op(
        "Reshape",
        &[&y.name, &unflat.name],
        "out",
        y.elem,
        out_shape,
    );
    b.add_output(&out);
    b.add_output(&n.residual);
    let nan = quant != QuantSpelling::Quark;
    let m = bsz * seq;
    let feed3 = |seed: u64, nan: bool| {
        let mut v = rows(seed, h, 1.0, outlier(dt), nan);
        v.truncate(m * h);
        Val::F(Tensor::new(kdtype(dt), &[bsz, seq, h], v).expect("feed"))
    };
    let feeds = HashMap::from([
        ("x".to_string(), feed3(1, nan)),
        ("residual".to_string(), feed3(2, false)),
    ]);
    let ctx = format!("flat linear {dt:?} {quant:?} [{bsz}, {seq}] gemm={gemm}");
    let g = finish(b);
    let mut r = g.clone();
    let report = run_pipeline(&mut r, &PipelineOptions::default()).expect("pipeline");
    let notes: Vec<&String> = report.fusions.iter().flat_map(|f| &f.notes).collect();
    assert!(notes.is_empty(), "{ctx}: {notes:?}");
    let ops: Vec<&str> = r.nodes().iter().map(|&n| r.op_type(n)).collect();
    assert!(
        !ops.contains(&"MxDequantize") && !ops.contains(&"DequantizeLinear"),
        "{ctx}: {ops:?}"
    );
    // The trailing constant Reshape back to [B, S, N] cancels with the fusion's output Reshape:
    // MxMatMul writes `out` ([B, S, N]) and the linear's flat output is gone.
    let proj = r.value_by_name("proj").and_then(|v| r.producer(v));
    assert!(proj.is_none(), "{ctx}: {ops:?}");
    let (mm, _) = r
        .producer(r.value_by_name("out").expect("out"))
        .expect("mm");
    assert_eq!(r.op_type(mm), "MxMatMul", "{ctx}");
    assert!(!ops.contains(&"Reshape"), "{ctx}: {ops:?}");
    differential(g, &feeds, "add_rmsnorm_mxquant", 1, &ctx);
}

#[test]
fn flattened_linear_on_a_3d_activation_matches_the_reference() {
    for (bs, gemm) in [
        ((1, 5), true),
        ((5, 1), false),
        ((1, 1), true),
        ((2, 4), true),
        ((1, 1), false),
    ] {
        for (dt, quant) in [
            (DType::F32, QuantSpelling::StdFloor),
            (DType::Bf16, QuantSpelling::StdRceilMul),
            (DType::F16, QuantSpelling::StdFloor),
            (DType::F32, QuantSpelling::Quark),
        ] {
            flat_linear_case(dt, quant, bs, gemm);
        }
    }
}

/// The SwiGLU fusion's down projection read through `Reshape([ROWS, I])` (a constant M', not -1)
/// into `Gemm(transB = 1, bias)`: fused, and the same numbers as the unfused graph.
#[test]
fn swiglu_down_projection_through_a_reshape_matches_the_reference() {
    for (dt, quant) in [
        (DType::F32, QuantSpelling::StdFloor),
        (DType::Bf16, QuantSpelling::StdRceilDiv),
        (DType::F32, QuantSpelling::Quark),
    ] {
        let cfg = silu_two_matmuls(dt, quant, 13);
        let feeds = swiglu_feeds(&cfg);
        let g = swiglu_graph_with(&cfg, &|b, a, k, n| {
            let flat = b.const_i64("down_in.flat", &[ROWS as i64, k as i64]);
            let af = b.op(
                "Reshape",
                &[&a.name, &flat.name],
                "down_in.flat_out",
                a.elem,
                a.shape.clone(),
            );
            gemm_consumer(b, &cfg, LINEAR, &af, (k, n))
        });
        let ctx = format!("swiglu flat {dt:?} {quant:?}");
        let mut r = g.clone();
        let report = run_pipeline(&mut r, &PipelineOptions::default()).expect("pipeline");
        assert_eq!(report.counts["swiglu_mxquant_matmul"], 1, "{ctx}");
        let (re, _) = r.producer(r.value_by_name("proj").expect("y")).expect("y");
        assert_eq!(r.op_type(re), "Reshape", "{ctx}");
        let (mm, _) = r.producer(r.inputs(re)[0].expect("in")).expect("mm");
        assert_eq!(r.op_type(mm), "MxMatMul", "{ctx}");
        differential(g, &feeds, "swiglu_mxquant_matmul", 1, &ctx);
    }
}
