//! Scalar reference kernels: the executable definition of the `com.mxfuse` ops (docs/ops.md).
//!
//! Written for obviousness, not speed: one row, one block, one element at a time, every rounding
//! spelled out. Tests and the GPU kernels use these as the oracle.

pub mod math;
mod mx_dequant;
mod mx_quant_linear;
pub mod onnx_ops;
pub mod quark_mx;

pub use mx_dequant::{decode_table, mx_dequantize};
pub use mx_quant_linear::{divide_by_e8m0, fp8_encoder, mx_quantize_linear, Fp8Encoder};

use crate::attrs::{Activation, AddRmsNormAttrs, InvForm, SwiGluAttrs, SwiGluLayout, SwishForm};
use crate::codec::{e4m3_to_f32, e8m0_to_f32, quantize_block, QuantConfig, BLOCK};
use crate::element::Element;
use crate::epilogue::Epilogue;
use crate::error::{KernelError, Result};
use crate::slices::{
    check_matmul_io, check_norm_io, check_quant_io, check_swiglu_io, MatB, NormOutputs, SwiGluInput,
};
use math::{mean_of_squares, sigmoid_f32};

/// Quantizes one f32 row (length a multiple of 32) block by block.
pub fn quantize_row_f32(row: &[f32], q: &mut [u8], scales: &mut [u8], cfg: QuantConfig) {
    for ((xb, qb), s) in row
        .chunks_exact(BLOCK)
        .zip(q.chunks_exact_mut(BLOCK))
        .zip(scales.iter_mut())
    {
        let xb: &[f32; BLOCK] = xb.try_into().expect("chunks_exact yields full blocks");
        let qb: &mut [u8; BLOCK] = qb.try_into().expect("chunks_exact yields full blocks");
        *s = quantize_block(xb, qb, cfg);
    }
}

/// `MxQuantize` over rows of `k`: `q` gets `x.len()` bytes, `scales` `x.len()/32`.
pub fn mx_quantize<T: Element>(
    x: &[T],
    k: usize,
    q: &mut [u8],
    scales: &mut [u8],
    cfg: QuantConfig,
) -> Result<()> {
    check_quant_io(x.len(), k, q.len(), scales.len())?;
    let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    quantize_row_f32(&xf, q, scales, cfg);
    Ok(())
}

/// The per-element weight g_i of the norm (see docs/ops.md "AddRmsNormMxQuant").
fn norm_weight<G: Element>(w: G, attrs: &AddRmsNormAttrs) -> f32 {
    let w = w.to_f32();
    match (attrs.gemma, attrs.gamma_in_f32) {
        (false, _) => w,
        (true, true) => 1.0 + w,
        // The graph adds 1 in the weight's own dtype before the multiply in T.
        (true, false) => G::round_f32(1.0 + w),
    }
}

/// `AddRmsNormMxQuant` over rows of `h`. An absorbed AllReduce (`attrs.allreduce`) is the
/// identity at world size 1, the only world size the kernels run.
pub fn add_rms_norm_mx_quant<T: Element, G: Element>(
    x: &[T],
    residual: Option<&[T]>,
    gamma: &[G],
    h: usize,
    attrs: &AddRmsNormAttrs,
    mut out: NormOutputs<'_, T>,
) -> Result<()> {
    let rows = check_norm_io(x, residual, gamma, h, &out)?;
    let g: Vec<f32> = gamma.iter().map(|&w| norm_weight(w, attrs)).collect();
    let mut s = vec![0f32; h];
    let mut y = vec![0f32; h];
    for r in 0..rows {
        let span = r * h..(r + 1) * h;
        for (i, si) in s.iter_mut().enumerate() {
            let xi = x[span.start + i].to_f32();
            let sum = match residual {
                Some(res) => xi + res[span.start + i].to_f32(),
                None => xi,
            };
            let rounded = T::from_f32(sum);
            if let Some(ro) = out.residual_out.as_deref_mut() {
                ro[span.start + i] = rounded;
            }
            *si = if attrs.round_sum {
                rounded.to_f32()
            } else {
                sum
            };
        }
        let v = mean_of_squares(&s);
        let d = (v + attrs.epsilon).sqrt();
        let inv = 1.0 / d;
        for i in 0..h {
            let n = match attrs.inv_form {
                InvForm::Div => s[i] / d,
                InvForm::Rsqrt | InvForm::RecipMul => s[i] * inv,
            };
            let yi = if attrs.gamma_in_f32 {
                T::from_f32(n * g[i])
            } else {
                T::from_f32(T::round_f32(n) * g[i])
            };
            if let Some(nm) = out.normed.as_deref_mut() {
                nm[span.start + i] = yi;
            }
            y[i] = yi.to_f32();
        }
        let nb = h / BLOCK;
        quantize_row_f32(
            &y,
            &mut out.q[span.clone()],
            &mut out.scales[r * nb..(r + 1) * nb],
            attrs.quant,
        );
    }
    Ok(())
}

/// `min(v, limit)` that keeps NaN (ONNX `Min` / torch `clamp`).
fn min_keep_nan(v: f32, limit: f32) -> f32 {
    if v.is_nan() {
        v
    } else {
        v.min(limit)
    }
}

/// `clamp(v, -limit, limit)` that keeps NaN.
fn clamp_keep_nan(v: f32, limit: f32) -> f32 {
    if v.is_nan() {
        v
    } else {
        v.clamp(-limit, limit)
    }
}

/// One SwiGLU activation value from T-valued gate and up (given as f32), per docs/ops.md.
pub fn swiglu_value<T: Element>(gate: f32, up: f32, attrs: &SwiGluAttrs) -> f32 {
    let oai = attrs.activation == Activation::Oai;
    if attrs.fp32_activation {
        let (g, u) = if oai {
            (
                min_keep_nan(gate, attrs.limit),
                clamp_keep_nan(up, attrs.limit) + attrs.beta,
            )
        } else {
            (gate, up)
        };
        return g * sigmoid_f32(attrs.alpha * g) * u;
    }
    // Graph spelling: every op output is rounded to T (round_T = T::round_f32).
    let r = T::round_f32;
    let (g, u) = if oai {
        // The clamp bound is a T constant in the graph.
        let lim = r(attrs.limit);
        (
            min_keep_nan(gate, lim),
            r(clamp_keep_nan(up, lim) + r(attrs.beta)),
        )
    } else {
        (gate, up)
    };
    let swish = match attrs.swish_form {
        SwishForm::SingleOp => r(g * sigmoid_f32(attrs.alpha * g)),
        SwishForm::Unrolled => {
            let z = if attrs.alpha == 1.0 {
                g
            } else {
                r(g * r(attrs.alpha))
            };
            r(g * r(sigmoid_f32(z)))
        }
    };
    r(swish * u)
}

/// `SwiGluMxQuant` producing rows of `i` activations.
pub fn swiglu_mx_quant<T: Element>(
    input: SwiGluInput<'_, T>,
    i: usize,
    attrs: &SwiGluAttrs,
    q: &mut [u8],
    scales: &mut [u8],
) -> Result<()> {
    let rows = check_swiglu_io(&input, i, q.len(), scales.len())?;
    let pair = |r: usize, j: usize| -> Result<(f32, f32)> {
        Ok(match (input, attrs.layout) {
            (SwiGluInput::Separate { gate, up }, SwiGluLayout::Separate) => {
                (gate[r * i + j].to_f32(), up[r * i + j].to_f32())
            }
            (SwiGluInput::Fused(gu), SwiGluLayout::SplitHalves) => {
                (gu[r * 2 * i + j].to_f32(), gu[r * 2 * i + i + j].to_f32())
            }
            (SwiGluInput::Fused(gu), SwiGluLayout::Interleaved) => (
                gu[r * 2 * i + 2 * j].to_f32(),
                gu[r * 2 * i + 2 * j + 1].to_f32(),
            ),
            _ => return Err(layout_mismatch(attrs.layout)),
        })
    };
    let nb = i / BLOCK;
    let mut act = vec![0f32; i];
    for r in 0..rows {
        for (j, a) in act.iter_mut().enumerate() {
            let (g, u) = pair(r, j)?;
            *a = swiglu_value::<T>(g, u, attrs);
        }
        quantize_row_f32(
            &act,
            &mut q[r * i..(r + 1) * i],
            &mut scales[r * nb..(r + 1) * nb],
            attrs.quant,
        );
    }
    Ok(())
}

/// The error for an input bundle that does not fit the `layout` attribute.
pub fn layout_mismatch(layout: SwiGluLayout) -> KernelError {
    KernelError::Shape(format!(
        "layout {layout:?} needs {}",
        if layout == SwiGluLayout::Separate {
            "separate gate and up inputs"
        } else {
            "one gate_up input"
        }
    ))
}

/// deq(b)[kk, nn] as f32 for a `k × n` product, for either layout of B.
pub(crate) fn b_value(
    b: &MatB<'_>,
    k: usize,
    n: usize,
    kk: usize,
    nn: usize,
    trans_b: bool,
) -> f32 {
    let idx = if trans_b { nn * k + kk } else { kk * n + nn };
    match b {
        MatB::F32(v) => v[idx],
        MatB::F16(v) => v[idx].to_f32(),
        MatB::BF16(v) => v[idx].to_f32(),
        MatB::Mx { q, scales } => {
            let s = if trans_b {
                scales[nn * (k / BLOCK) + kk / BLOCK]
            } else {
                scales[(kk / BLOCK) * n + nn]
            };
            e4m3_to_f32(q[idx]) * e8m0_to_f32(s)
        }
    }
}

/// `MxMatMul`: y[m, n] = round_out(ep(Σ_k deq(a)[m, k]·deq(b)[k, n])). The reference accumulates
/// in f64 (the exact-as-possible target the f32-accumulating fast path is compared against),
/// rounds once to f32, applies the epilogue (alpha, beta, bias; [`Epilogue`]) in f32, then
/// rounds to the output dtype.
#[allow(clippy::too_many_arguments)]
pub fn mx_matmul<O: Element>(
    a_q: &[u8],
    a_scales: &[u8],
    m: usize,
    k: usize,
    n: usize,
    b: MatB<'_>,
    trans_b: bool,
    y: &mut [O],
    ep: &Epilogue,
) -> Result<()> {
    check_matmul_io(m, k, n, a_q, a_scales, &b, y.len())?;
    ep.check_dims(m, n)?;
    let kb = k / BLOCK;
    for mm in 0..m {
        for nn in 0..n {
            let mut acc = 0f64;
            for kk in 0..k {
                let a = e4m3_to_f32(a_q[mm * k + kk]) * e8m0_to_f32(a_scales[mm * kb + kk / BLOCK]);
                acc += f64::from(a) * f64::from(b_value(&b, k, n, kk, nn, trans_b));
            }
            y[mm * n + nn] = O::from_f32(ep.apply(mm, nn, acc as f32));
        }
    }
    Ok(())
}
