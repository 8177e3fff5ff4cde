//! The fused ops equal the unfused ONNX graphs they replace, evaluated op by op with
//! `reference::onnx_ops` (each op in f32, rounded to its dtype), bit for bit.

mod common;

use common::Rng;
use half::bf16;
use kernels::attrs::{Activation, AddRmsNormAttrs, InvForm, SwiGluAttrs, SwiGluLayout, SwishForm};
use kernels::codec::QuantConfig;
use kernels::reference::onnx_ops::{self as onnx, Tensor};
use kernels::slices::{NormOutputs, SwiGluInput};
use kernels::{reference, DType};

const B: DType = DType::BF16;
const F: DType = DType::F32;

fn t(dtype: DType, shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::new(dtype, shape, v).unwrap()
}

fn quantize(y: &Tensor, k: usize) -> (Vec<u8>, Vec<u8>) {
    let (mut q, mut s) = (vec![0u8; y.data.len()], vec![0u8; y.data.len() / 32]);
    reference::mx_quantize(&y.data, k, &mut q, &mut s, QuantConfig::default()).unwrap();
    (q, s)
}

struct NormCase {
    x: Tensor,
    r: Tensor,
    w: Tensor,
    h: usize,
}

fn norm_case(seed: u64) -> NormCase {
    let mut rng = Rng::new(seed);
    let (rows, h) = (4, 256);
    NormCase {
        x: t(
            B,
            &[rows, h],
            (0..rows * h).map(|_| rng.normal(1.5)).collect(),
        ),
        r: t(
            B,
            &[rows, h],
            (0..rows * h).map(|_| rng.normal(8.0)).collect(),
        ),
        w: t(B, &[h], (0..h).map(|_| rng.normal(0.05)).collect()),
        h,
    }
}

/// Runs the fused reference and returns (q, scales, residual_out, normed) as f32 values.
fn fused(c: &NormCase, attrs: &AddRmsNormAttrs) -> (Vec<u8>, Vec<u8>, Vec<f32>, Vec<f32>) {
    let to = |v: &[f32]| v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>();
    let (x, r, w) = (to(&c.x.data), to(&c.r.data), to(&c.w.data));
    let n = x.len();
    let (mut q, mut s) = (vec![0u8; n], vec![0u8; n / 32]);
    let (mut ro, mut nm) = (vec![bf16::ZERO; n], vec![bf16::ZERO; n]);
    let out = NormOutputs {
        q: &mut q,
        scales: &mut s,
        residual_out: Some(&mut ro),
        normed: Some(&mut nm),
    };
    reference::add_rms_norm_mx_quant(&x, Some(&r), &w, c.h, attrs, out).unwrap();
    let back = |v: &[bf16]| v.iter().map(|x| x.to_f32()).collect::<Vec<_>>();
    (q, s, back(&ro), back(&nm))
}

/// Add (bf16) → Cast f32 → Pow → ReduceMean → Add eps → Sqrt → [Reciprocal → Mul | Div].
fn unfused_normalise(c: &NormCase, eps: f32, div: bool) -> (Tensor, Tensor) {
    let s = onnx::add(&c.x, &c.r).unwrap();
    let sf = onnx::cast(&s, F).unwrap();
    let v = onnx::reduce_mean_last(&onnx::pow2(&sf), true).unwrap();
    let d = onnx::sqrt(&onnx::add(&v, &Tensor::scalar(F, eps)).unwrap());
    let n = if div {
        onnx::div(&sf, &d).unwrap()
    } else {
        onnx::mul(&sf, &onnx::reciprocal(&d)).unwrap()
    };
    (s, n)
}

#[test]
fn gemma_norm_graph_equals_fused() {
    for seed in 0..3 {
        let c = norm_case(seed);
        let (s, n) = unfused_normalise(&c, 1e-6, false);
        // Gemma: n · (1 + float(w)) in f32, then Cast to bf16.
        let g = onnx::add(&onnx::cast(&c.w, F).unwrap(), &Tensor::scalar(F, 1.0)).unwrap();
        let y = onnx::cast(&onnx::mul(&n, &g).unwrap(), B).unwrap();
        let (q, sc) = quantize(&y, c.h);
        let attrs = AddRmsNormAttrs {
            gemma: true,
            inv_form: InvForm::RecipMul,
            ..Default::default()
        };
        assert_eq!(fused(&c, &attrs), (q, sc, s.data, y.data), "seed {seed}");
    }
}

#[test]
fn llama_norm_graph_equals_fused() {
    for (seed, div) in [(5, false), (6, true)] {
        let c = norm_case(seed);
        let (s, n) = unfused_normalise(&c, 1e-5, div);
        // HF Llama: Cast the normalised row back to bf16, then multiply by w in bf16.
        let y = onnx::mul(&onnx::cast(&n, B).unwrap(), &c.w).unwrap();
        let (q, sc) = quantize(&y, c.h);
        let attrs = AddRmsNormAttrs {
            epsilon: 1e-5,
            gamma_in_f32: false,
            inv_form: if div { InvForm::Div } else { InvForm::RecipMul },
            ..Default::default()
        };
        assert_eq!(fused(&c, &attrs), (q, sc, s.data, y.data), "div = {div}");
    }
}

#[test]
fn rms_normalization_op_equals_fused() {
    let c = norm_case(9);
    let s = onnx::add(&c.x, &c.r).unwrap();
    let y = onnx::rms_normalization(&s, &c.w, 1e-6).unwrap();
    let (q, sc) = quantize(&y, c.h);
    assert_eq!(
        fused(&c, &AddRmsNormAttrs::default()),
        (q, sc, s.data, y.data)
    );
}

fn swiglu_fused(gate: &Tensor, up: &Tensor, i: usize, attrs: &SwiGluAttrs) -> (Vec<u8>, Vec<u8>) {
    let to = |v: &[f32]| v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>();
    let (g, u) = (to(&gate.data), to(&up.data));
    let (mut q, mut s) = (vec![0u8; g.len()], vec![0u8; g.len() / 32]);
    reference::swiglu_mx_quant(
        SwiGluInput::Separate { gate: &g, up: &u },
        i,
        attrs,
        &mut q,
        &mut s,
    )
    .unwrap();
    (q, s)
}

fn gate_up(seed: u64, rows: usize, i: usize) -> (Tensor, Tensor) {
    let mut rng = Rng::new(seed);
    (
        t(
            B,
            &[rows, i],
            (0..rows * i).map(|_| rng.normal(4.0)).collect(),
        ),
        t(
            B,
            &[rows, i],
            (0..rows * i).map(|_| rng.normal(4.0)).collect(),
        ),
    )
}

#[test]
fn swiglu_graphs_equal_fused() {
    let (rows, i) = (4, 128);
    let (g, u) = gate_up(21, rows, i);
    let base = SwiGluAttrs {
        layout: SwiGluLayout::Separate,
        ..Default::default()
    };

    // SiLU: Sigmoid(g) → Mul(g, ·) → Mul(·, up).
    let act = onnx::mul(&onnx::mul(&g, &onnx::sigmoid(&g)).unwrap(), &u).unwrap();
    assert_eq!(swiglu_fused(&g, &u, i, &base), quantize(&act, i), "silu");

    // SwiGLU-OAI unrolled: Min(g, 7), Clip(up, ±7), Mul(1.702), Sigmoid, Mul, Add(1), Mul.
    let gc = onnx::min(&g, &Tensor::scalar(B, 7.0)).unwrap();
    let uc = onnx::clip(&u, -7.0, 7.0);
    let z = onnx::mul(&gc, &Tensor::scalar(B, 1.702)).unwrap();
    let glu = onnx::mul(&gc, &onnx::sigmoid(&z)).unwrap();
    let act = onnx::mul(&glu, &onnx::add(&uc, &Tensor::scalar(B, 1.0)).unwrap()).unwrap();
    let oai = SwiGluAttrs {
        activation: Activation::Oai,
        alpha: 1.702,
        ..base
    };
    assert_eq!(
        swiglu_fused(&g, &u, i, &oai),
        quantize(&act, i),
        "oai unrolled"
    );

    // QuickGelu(alpha) as one op, then · (up + 1).
    let glu = onnx::quick_gelu(&gc, 1.702);
    let act = onnx::mul(&glu, &onnx::add(&uc, &Tensor::scalar(B, 1.0)).unwrap()).unwrap();
    let single = SwiGluAttrs {
        swish_form: SwishForm::SingleOp,
        ..oai
    };
    assert_eq!(
        swiglu_fused(&g, &u, i, &single),
        quantize(&act, i),
        "oai quick_gelu"
    );
}

/// fp32_activation (vLLM's fused kernel) is never less accurate than the unfused bf16 chain
/// against the f32 activation: on every block where both pick the same scale (same E4M3 grid),
/// each element rounds once to the nearest grid point instead of twice (bf16, then E4M3).
#[test]
fn fp32_activation_is_never_less_accurate() {
    use kernels::codec::{e4m3_to_f32, e8m0_to_f32};
    let (rows, i) = (8, 256);
    let (g, u) = gate_up(33, rows, i);
    let oai = SwiGluAttrs {
        activation: Activation::Oai,
        alpha: 1.702,
        ..Default::default()
    };
    let exact = SwiGluAttrs {
        fp32_activation: true,
        ..oai
    };
    let act32: Vec<f32> = g
        .data
        .iter()
        .zip(&u.data)
        .map(|(&a, &b)| reference::swiglu_value::<f32>(a, b, &exact))
        .collect();
    let (fq, fs) = swiglu_fused(&g, &u, i, &exact);
    let (uq, us) = swiglu_fused(&g, &u, i, &oai);
    let (mut better, mut same_grid_blocks) = (0, 0);
    for blk in 0..fs.len() {
        if fs[blk] != us[blk] {
            continue; // the bf16-rounded amax crossed a scale boundary: different grids
        }
        same_grid_blocks += 1;
        let s = e8m0_to_f32(fs[blk]);
        for j in blk * 32..(blk + 1) * 32 {
            let (ef, en) = (
                (e4m3_to_f32(fq[j]) * s - act32[j]).abs(),
                (e4m3_to_f32(uq[j]) * s - act32[j]).abs(),
            );
            assert!(
                ef <= en,
                "element {j}: act {}, fused err {ef}, unfused err {en}",
                act32[j]
            );
            better += usize::from(ef < en);
        }
    }
    assert!(
        same_grid_blocks > fs.len() / 2 && better > 0,
        "{same_grid_blocks} blocks, {better} better"
    );
}
