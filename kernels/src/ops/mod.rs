//! The op-level API: one function per `com.mxfuse` op (docs/ops.md) over dtype-tagged tensor
//! views, checking dtypes and shapes and dispatching to the typed fast kernels.
//!
//! ```
//! use kernels::ops::{mx_quantize, TensorMut, TensorRef};
//! use kernels::{DType, MxQuantAttrs, Serial};
//! let x = vec![0u8; 2 * 64 * 4]; // f32 [2, 64]
//! let (mut q, mut s) = (vec![0u8; 128], vec![0u8; 4]);
//! mx_quantize(
//!     TensorRef::new(DType::F32, &[2, 64], &x).unwrap(),
//!     TensorMut::new(DType::E4M3, &[2, 64], &mut q).unwrap(),
//!     TensorMut::new(DType::E8M0, &[2, 2], &mut s).unwrap(),
//!     &MxQuantAttrs::default(),
//!     &Serial,
//! ).unwrap();
//! ```

mod gather;
mod gather_matmul;
mod shapes;
mod tensor;

pub use gather::{gather_shape, mx_gather_dequantize};
pub use gather_matmul::{mx_gather_matmul, mx_gather_matmul_laid_out};
pub use shapes::{mx_matmul_dims, norm_output_shape, scale_shape, swiglu_output_shape};
pub use tensor::{Pod, TensorMut, TensorRef};

use half::{bf16, f16};

use crate::attrs::{
    AddRmsNormAttrs, MxDequantAttrs, MxMatMulAttrs, MxQuantAttrs, MxQuantLinearAttrs, SwiGluAttrs,
    SwiGluLayout,
};
use crate::element::DType;
use crate::epilogue::Epilogue;
use crate::error::{shape_err, KernelError, Result};
use crate::fast::{self, FastElement};
use crate::parallel::Parallel;
use crate::slices::{MatA, MatB, NormOutputs, SwiGluInput};

fn expect_dtype(what: &str, t: DType, want: DType) -> Result<()> {
    if t != want {
        return Err(KernelError::DType(format!(
            "{what} must be {want:?}, got {t:?}"
        )));
    }
    Ok(())
}

fn expect_shape(what: &str, got: &[usize], want: &[usize]) -> Result<()> {
    if got != want {
        return Err(shape_err!("{what} has shape {got:?}, expected {want:?}"));
    }
    Ok(())
}

/// Checks `q` (E4M3, shape `values`) and `scale` (E8M0, `[..., K/32]`); returns K, the last
/// dim of `values`.
fn expect_quant_outputs(
    values: &[usize],
    q: &TensorMut<'_>,
    scale: &TensorMut<'_>,
) -> Result<usize> {
    expect_dtype("q", q.dtype, DType::E4M3)?;
    expect_dtype("scale", scale.dtype, DType::E8M0)?;
    expect_shape("q", q.shape, values)?;
    expect_shape("scale", scale.shape, &scale_shape(values)?)?;
    Ok(*values.last().expect("scale_shape checked the rank"))
}

fn unsupported_dtype(what: &str, d: DType) -> KernelError {
    KernelError::DType(format!(
        "{what} must be float, float16 or bfloat16, got {d:?}"
    ))
}

/// `MxQuantize(x) -> (q, scale)`.
pub fn mx_quantize(
    x: TensorRef<'_>,
    q: TensorMut<'_>,
    scale: TensorMut<'_>,
    attrs: &MxQuantAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    let k = expect_quant_outputs(x.shape, &q, &scale)?;
    let (q, s) = (q.view_mut::<u8>()?, scale.view_mut::<u8>()?);
    match x.dtype {
        DType::F32 => fast::mx_quantize(x.view::<f32>()?, k, q, s, attrs.quant, par),
        DType::F16 => fast::mx_quantize(x.view::<f16>()?, k, q, s, attrs.quant, par),
        DType::BF16 => fast::mx_quantize(x.view::<bf16>()?, k, q, s, attrs.quant, par),
        d => Err(unsupported_dtype("x", d)),
    }
}

/// `MxDequantize(x, scale) -> y`: x FLOAT8E4M3FN, FLOAT8E5M2 or FLOAT4E2M1 (packed two per byte),
/// scale FLOAT8E8M0 (per-tensor, per-axis or blocked, see [`crate::ScaleMap`]), y of
/// `attrs.output_dtype` and x's shape.
pub fn mx_dequantize(
    x: TensorRef<'_>,
    scale: TensorRef<'_>,
    y: TensorMut<'_>,
    attrs: &MxDequantAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    if !matches!(x.dtype, DType::E4M3 | DType::E5M2 | DType::E2M1) {
        return Err(KernelError::DType(format!(
            "x must be FLOAT8E4M3FN, FLOAT8E5M2 or FLOAT4E2M1, got {:?}",
            x.dtype
        )));
    }
    expect_dtype("scale", scale.dtype, DType::E8M0)?;
    expect_dtype("y", y.dtype, attrs.output_dtype)?;
    expect_shape("y", y.shape, x.shape)?;
    let map = crate::ScaleMap::new(x.shape, scale.shape, attrs.axis, attrs.block_size)?;
    let (xb, sb) = (x.view::<u8>()?, scale.view::<u8>()?);
    match y.dtype {
        DType::F32 => fast::mx_dequantize(xb, x.dtype, sb, &map, y.view_mut::<f32>()?, par),
        DType::F16 => fast::mx_dequantize(xb, x.dtype, sb, &map, y.view_mut::<f16>()?, par),
        DType::BF16 => fast::mx_dequantize(xb, x.dtype, sb, &map, y.view_mut::<bf16>()?, par),
        d => Err(unsupported_dtype("y", d)),
    }
}

/// `MxQuantizeLinear(x, scale) -> y`: x float, float16 or bfloat16, scale FLOAT8E8M0
/// (per-tensor, per-axis or blocked, see [`crate::ScaleMap`]), y of `attrs.output_dtype`
/// (FLOAT8E4M3FN or FLOAT8E5M2) and x's shape.
pub fn mx_quantize_linear(
    x: TensorRef<'_>,
    scale: TensorRef<'_>,
    y: TensorMut<'_>,
    attrs: &MxQuantLinearAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    if !x.dtype.is_float() {
        return Err(unsupported_dtype("x", x.dtype));
    }
    expect_dtype("scale", scale.dtype, DType::E8M0)?;
    expect_dtype("y", y.dtype, attrs.output_dtype)?;
    expect_shape("y", y.shape, x.shape)?;
    let map = crate::ScaleMap::new(x.shape, scale.shape, attrs.axis, attrs.block_size)?;
    let (sb, (dt, sat)) = (scale.view::<u8>()?, (attrs.output_dtype, attrs.saturate));
    let yb = y.view_mut::<u8>()?;
    match x.dtype {
        DType::F32 => fast::mx_quantize_linear(x.view::<f32>()?, sb, &map, dt, sat, yb, par),
        DType::F16 => fast::mx_quantize_linear(x.view::<f16>()?, sb, &map, dt, sat, yb, par),
        DType::BF16 => fast::mx_quantize_linear(x.view::<bf16>()?, sb, &map, dt, sat, yb, par),
        d => Err(unsupported_dtype("x", d)),
    }
}

/// The outputs of [`add_rms_norm_mx_quant`]; `residual_out` and `normed` are optional.
pub struct NormTensors<'a> {
    pub q: TensorMut<'a>,
    pub scale: TensorMut<'a>,
    pub residual_out: Option<TensorMut<'a>>,
    pub normed: Option<TensorMut<'a>>,
}

fn norm_typed<T: FastElement + Pod>(
    x: TensorRef<'_>,
    residual: Option<TensorRef<'_>>,
    gamma: TensorRef<'_>,
    h: usize,
    out: NormTensors<'_>,
    attrs: &AddRmsNormAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    let residual = residual.map(|r| r.view::<T>()).transpose()?;
    let outs = NormOutputs {
        q: out.q.view_mut::<u8>()?,
        scales: out.scale.view_mut::<u8>()?,
        residual_out: out.residual_out.map(|t| t.view_mut::<T>()).transpose()?,
        normed: out.normed.map(|t| t.view_mut::<T>()).transpose()?,
    };
    let x = x.view::<T>()?;
    if gamma.dtype == DType::F32 {
        fast::add_rms_norm_mx_quant(x, residual, gamma.view::<f32>()?, h, attrs, outs, par)
    } else {
        fast::add_rms_norm_mx_quant(x, residual, gamma.view::<T>()?, h, attrs, outs, par)
    }
}

/// `AddRmsNormMxQuant(x, [residual], gamma) -> (q, scale, [residual_out], [normed])`.
/// `gamma` is T or float; an absorbed AllReduce (`attrs.allreduce`) is the identity at world
/// size 1, the only world size this build runs.
pub fn add_rms_norm_mx_quant(
    x: TensorRef<'_>,
    residual: Option<TensorRef<'_>>,
    gamma: TensorRef<'_>,
    out: NormTensors<'_>,
    attrs: &AddRmsNormAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    let rows_shape = norm_output_shape(x.shape, attrs.flatten_rows)?;
    let h = expect_quant_outputs(&rows_shape, &out.q, &out.scale)?;
    if let Some(r) = &residual {
        expect_dtype("residual", r.dtype, x.dtype)?;
        expect_shape("residual", r.shape, x.shape)?;
    }
    if gamma.dtype != x.dtype && gamma.dtype != DType::F32 {
        return Err(KernelError::DType(format!(
            "gamma must be {:?} or F32, got {:?}",
            x.dtype, gamma.dtype
        )));
    }
    // H values: `[H]`, or `[1, .., 1, H]` — the broadcast shape some exporters give the norm
    // weight (`Mul(n, γ[1, 1, H])`), which rule `add_rmsnorm_mxquant` passes as it is.
    let vector = gamma
        .shape
        .split_last()
        .is_some_and(|(&last, lead)| last == h && lead.iter().all(|&d| d == 1));
    if !vector {
        return Err(shape_err!(
            "gamma has shape {:?}, expected [{h}] or [1, .., 1, {h}]",
            gamma.shape
        ));
    }
    for (name, t, want) in [
        ("residual_out", &out.residual_out, x.shape),
        ("normed", &out.normed, &rows_shape[..]),
    ] {
        if let Some(t) = t {
            expect_dtype(name, t.dtype, x.dtype)?;
            expect_shape(name, t.shape, want)?;
        }
    }
    match x.dtype {
        DType::F32 => norm_typed::<f32>(x, residual, gamma, h, out, attrs, par),
        DType::F16 => norm_typed::<f16>(x, residual, gamma, h, out, attrs, par),
        DType::BF16 => norm_typed::<bf16>(x, residual, gamma, h, out, attrs, par),
        d => Err(unsupported_dtype("x", d)),
    }
}

/// The input(s) of [`swiglu_mx_quant`].
pub enum SwiGluTensors<'a> {
    /// `gate_up [..., 2I]` (layout `split_halves` or `interleaved`).
    Fused(TensorRef<'a>),
    /// `gate [..., I]`, `up [..., I]` (layout `separate`).
    Separate {
        gate: TensorRef<'a>,
        up: TensorRef<'a>,
    },
}

fn swiglu_typed<T: FastElement + Pod>(
    input: &SwiGluTensors<'_>,
    i: usize,
    q: &mut [u8],
    s: &mut [u8],
    attrs: &SwiGluAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    let typed = match input {
        SwiGluTensors::Fused(gu) => SwiGluInput::Fused(gu.view::<T>()?),
        SwiGluTensors::Separate { gate, up } => SwiGluInput::Separate {
            gate: gate.view::<T>()?,
            up: up.view::<T>()?,
        },
    };
    fast::swiglu_mx_quant(typed, i, attrs, q, s, par)
}

/// `SwiGluMxQuant(gate_up | gate, up) -> (q, scale)`.
pub fn swiglu_mx_quant(
    input: SwiGluTensors<'_>,
    q: TensorMut<'_>,
    scale: TensorMut<'_>,
    attrs: &SwiGluAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    let first = match &input {
        SwiGluTensors::Fused(gu) => {
            if attrs.layout == SwiGluLayout::Separate {
                return Err(crate::reference::layout_mismatch(attrs.layout));
            }
            *gu
        }
        SwiGluTensors::Separate { gate, up } => {
            if attrs.layout != SwiGluLayout::Separate {
                return Err(crate::reference::layout_mismatch(attrs.layout));
            }
            expect_dtype("up", up.dtype, gate.dtype)?;
            expect_shape("up", up.shape, gate.shape)?;
            *gate
        }
    };
    let act_shape = swiglu_output_shape(first.shape, attrs.layout)?;
    let i = expect_quant_outputs(&act_shape, &q, &scale)?;
    let (q, s) = (q.view_mut::<u8>()?, scale.view_mut::<u8>()?);
    match first.dtype {
        DType::F32 => swiglu_typed::<f32>(&input, i, q, s, attrs, par),
        DType::F16 => swiglu_typed::<f16>(&input, i, q, s, attrs, par),
        DType::BF16 => swiglu_typed::<bf16>(&input, i, q, s, attrs, par),
        d => Err(unsupported_dtype("gate_up", d)),
    }
}

/// `MxMatMul(a_q, a_scale, b, [b_scale], [bias]) -> y` with `y` of dtype `attrs.output_dtype`;
/// b is float (no `b_scale`) or MX — FLOAT8E4M3FN or FLOAT4E2M1 values with E8M0 `b_scale`:
/// `y = alpha · acc + beta · bias` ([`Epilogue`]); the bias has y's dtype and broadcasts
/// unidirectionally to `[M, N]` (M the product of A's leading dims).
#[allow(clippy::too_many_arguments)]
pub fn mx_matmul(
    a_q: TensorRef<'_>,
    a_scale: TensorRef<'_>,
    b: TensorRef<'_>,
    b_scale: Option<TensorRef<'_>>,
    bias: Option<TensorRef<'_>>,
    y: TensorMut<'_>,
    attrs: &MxMatMulAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    let a = mx_a(&a_q, &a_scale)?;
    mx_matmul_with(a, a_q.shape, b, b_scale, bias, y, attrs, par)
}

/// `MxMatMul(a, "", b, b_scale, [bias]) -> y` with a float `a` (float, float16 or bfloat16,
/// `[..., K]`) and no `a_scale`: `y = alpha · Σ_k a · deq(b) + beta · bias`, the values of `a`
/// widened exactly to f32, f32 accumulation (docs/ops.md, MxMatMul). `b` as [`mx_matmul`]; `y`
/// of dtype `attrs.output_dtype`.
#[allow(clippy::too_many_arguments)]
pub fn mx_matmul_float_a(
    a: TensorRef<'_>,
    b: TensorRef<'_>,
    b_scale: Option<TensorRef<'_>>,
    bias: Option<TensorRef<'_>>,
    y: TensorMut<'_>,
    attrs: &MxMatMulAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    mx_matmul_with(float_a(&a)?, a.shape, b, b_scale, bias, y, attrs, par)
}

/// A float `a` as the kernels' [`MatA`].
fn float_a<'a>(a: &TensorRef<'a>) -> Result<MatA<'a>> {
    Ok(match a.dtype {
        DType::F32 => MatA::F32(a.view::<f32>()?),
        DType::F16 => MatA::F16(a.view::<f16>()?),
        DType::BF16 => MatA::BF16(a.view::<bf16>()?),
        d => return Err(unsupported_dtype("a (without a_scale)", d)),
    })
}

/// [`mx_matmul`] / [`mx_matmul_float_a`] once A is checked.
#[allow(clippy::too_many_arguments)]
fn mx_matmul_with(
    a: MatA<'_>,
    a_shape: &[usize],
    b: TensorRef<'_>,
    b_scale: Option<TensorRef<'_>>,
    bias: Option<TensorRef<'_>>,
    y: TensorMut<'_>,
    attrs: &MxMatMulAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    let (m, k, n) = check_mx_matmul_out(a_shape, b.shape, attrs.trans_b, &y, attrs)?;
    // An MXFP4 weight is the MXFP8 weight of the same values (every E2M1 value is an E4M3 one,
    // same blocks and scales): widened here per call. The provider widens a constant one once,
    // at prepack, so this copy is the fallback for a weight that was not a session constant.
    let widened;
    let (b_dtype, b_bytes) = if b.dtype == DType::E2M1 {
        widened = crate::codec::widened_e4m3(b.view::<u8>()?, k * n);
        (DType::E4M3, widened.as_slice())
    } else {
        (b.dtype, b.bytes())
    };
    let mat_b = match (b_dtype, b_scale) {
        (DType::E4M3, Some(bs)) => {
            expect_dtype("b_scale", bs.dtype, DType::E8M0)?;
            let want = if attrs.trans_b {
                vec![n, k / 32]
            } else {
                vec![k / 32, n]
            };
            expect_shape("b_scale", bs.shape, &want)?;
            MatB::Mx {
                q: b_bytes,
                scales: bs.view::<u8>()?,
            }
        }
        (DType::E4M3, None) => {
            let name = if b.dtype == DType::E2M1 {
                "FLOAT4E2M1"
            } else {
                "FLOAT8E4M3FN"
            };
            return Err(KernelError::DType(format!("{name} b needs b_scale")));
        }
        (_, Some(_)) => {
            return Err(KernelError::DType(format!(
                "b_scale given with {:?} b",
                b.dtype
            )))
        }
        (DType::F32, None) => MatB::F32(b.view::<f32>()?),
        (DType::F16, None) => MatB::F16(b.view::<f16>()?),
        (DType::BF16, None) => MatB::BF16(b.view::<bf16>()?),
        (d, None) => return Err(unsupported_dtype("b", d)),
    };
    let ep = mx_matmul_epilogue(bias, attrs, m, n)?;
    let tb = attrs.trans_b;
    match y.dtype {
        DType::F32 => fast::mx_matmul_a(a, m, k, n, mat_b, tb, y.view_mut::<f32>()?, &ep, par),
        DType::F16 => fast::mx_matmul_a(a, m, k, n, mat_b, tb, y.view_mut::<f16>()?, &ep, par),
        DType::BF16 => fast::mx_matmul_a(a, m, k, n, mat_b, tb, y.view_mut::<bf16>()?, &ep, par),
        d => Err(unsupported_dtype("y", d)),
    }
}

/// `MxMatMul` with a constant MXFP8 weight prepacked in the column-group layout
/// ([`fast::cols_layout::pack`], where [`fast::cols_layout::wanted`]): `y = a · wᵀ` as
/// [`mx_matmul`] with `trans_b = 1`; `attrs.trans_b` is not read.
pub fn mx_matmul_cols(
    a_q: TensorRef<'_>,
    a_scale: TensorRef<'_>,
    w: fast::cols_layout::MxColWeights<'_>,
    bias: Option<TensorRef<'_>>,
    y: TensorMut<'_>,
    attrs: &MxMatMulAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    let a = mx_a(&a_q, &a_scale)?;
    mx_matmul_cols_with(a, a_q.shape, w, bias, y, attrs, par)
}

/// [`mx_matmul_cols`] with a float `a` and no `a_scale` (as [`mx_matmul_float_a`]).
pub fn mx_matmul_cols_float_a(
    a: TensorRef<'_>,
    w: fast::cols_layout::MxColWeights<'_>,
    bias: Option<TensorRef<'_>>,
    y: TensorMut<'_>,
    attrs: &MxMatMulAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    mx_matmul_cols_with(float_a(&a)?, a.shape, w, bias, y, attrs, par)
}

fn mx_matmul_cols_with(
    a: MatA<'_>,
    a_shape: &[usize],
    w: fast::cols_layout::MxColWeights<'_>,
    bias: Option<TensorRef<'_>>,
    y: TensorMut<'_>,
    attrs: &MxMatMulAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    let (m, _, n) = check_mx_matmul_out(a_shape, &[w.n, w.k], true, &y, attrs)?;
    let ep = mx_matmul_epilogue(bias, attrs, m, n)?;
    use fast::cols_layout::mx_matmul_cols_a as run;
    match y.dtype {
        DType::F32 => run(a, m, w, y.view_mut::<f32>()?, &ep, par),
        DType::F16 => run(a, m, w, y.view_mut::<f16>()?, &ep, par),
        DType::BF16 => run(a, m, w, y.view_mut::<bf16>()?, &ep, par),
        d => Err(unsupported_dtype("y", d)),
    }
}

/// `MxMatMul`'s MXFP8 A, checked (E4M3 values and E8M0 scales `[..., K/32]`), as the kernels'
/// [`MatA`].
fn mx_a<'a>(a_q: &TensorRef<'a>, a_scale: &TensorRef<'a>) -> Result<MatA<'a>> {
    expect_dtype("a_q", a_q.dtype, DType::E4M3)?;
    expect_dtype("a_scale", a_scale.dtype, DType::E8M0)?;
    expect_shape("a_scale", a_scale.shape, &scale_shape(a_q.shape)?)?;
    Ok(MatA::Mx {
        q: a_q.view::<u8>()?,
        scales: a_scale.view::<u8>()?,
    })
}

/// The checks of y against A of shape `a_shape` and a weight of shape `b_shape`: (M, K, N).
fn check_mx_matmul_out(
    a_shape: &[usize],
    b_shape: &[usize],
    trans_b: bool,
    y: &TensorMut<'_>,
    attrs: &MxMatMulAttrs,
) -> Result<(usize, usize, usize)> {
    let (m, k, n, y_shape) = mx_matmul_dims(a_shape, b_shape, trans_b)?;
    expect_dtype("y", y.dtype, attrs.output_dtype)?;
    expect_shape("y", y.shape, &y_shape)?;
    Ok((m, k, n))
}

/// The [`Epilogue`] of an `m × n` `MxMatMul`: `bias` must have the output dtype (ONNX `Gemm`'s
/// C is T) and a shape that broadcasts to `[m, n]`.
fn mx_matmul_epilogue(
    bias: Option<TensorRef<'_>>,
    attrs: &MxMatMulAttrs,
    m: usize,
    n: usize,
) -> Result<Epilogue> {
    let Some(c) = bias else {
        return Epilogue::new::<f32>(attrs.alpha, attrs.beta, None, m, n);
    };
    expect_dtype("bias", c.dtype, attrs.output_dtype)?;
    let (al, be) = (attrs.alpha, attrs.beta);
    match c.dtype {
        DType::F32 => Epilogue::new(al, be, Some((c.view::<f32>()?, c.shape)), m, n),
        DType::F16 => Epilogue::new(al, be, Some((c.view::<f16>()?, c.shape)), m, n),
        DType::BF16 => Epilogue::new(al, be, Some((c.view::<bf16>()?, c.shape)), m, n),
        d => Err(unsupported_dtype("bias", d)),
    }
}
