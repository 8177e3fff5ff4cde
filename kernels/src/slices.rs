//! The typed slice interface shared by the reference and the fast kernels: input/output bundles
//! and the length checks that turn bad shapes into errors before any indexing happens.

use half::{bf16, f16};

use crate::codec::BLOCK;
use crate::element::Element;
use crate::error::{shape_err, Result};

/// Outputs of `AddRmsNormMxQuant` for `rows × h` inputs.
pub struct NormOutputs<'a, T> {
    /// `rows × h` E4M3FN bytes.
    pub q: &'a mut [u8],
    /// `rows × h/32` E8M0 bytes.
    pub scales: &'a mut [u8],
    /// `rows × h`: round_T(x + residual), or x when there is no residual.
    pub residual_out: Option<&'a mut [T]>,
    /// `rows × h`: the normed rows in T (what the quantizer read).
    pub normed: Option<&'a mut [T]>,
}

/// The SwiGLU activation input(s).
#[derive(Clone, Copy)]
pub enum SwiGluInput<'a, T> {
    /// One `rows × 2I` tensor, split per the `layout` attribute.
    Fused(&'a [T]),
    /// Two `rows × I` tensors.
    Separate { gate: &'a [T], up: &'a [T] },
}

/// The B operand of `MxMatMul`; its layout (`[K, N]` or `[N, K]`) follows `trans_b`.
#[derive(Clone, Copy)]
pub enum MatB<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
    /// MXFP8 weights: values and E8M0 scales (`[K/32, N]` when not transposed, `[N, K/32]` when
    /// transposed).
    Mx {
        q: &'a [u8],
        scales: &'a [u8],
    },
}

/// The A operand of `MxMatMul`: MXFP8 values with row-major E8M0 scales (`m × k/32`), or float
/// rows (a float activation against an MX weight: docs/ops.md, MxMatMul, "float `a`").
#[derive(Clone, Copy)]
pub enum MatA<'a> {
    Mx { q: &'a [u8], scales: &'a [u8] },
    F32(&'a [f32]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
}

impl MatA<'_> {
    /// Row `r` (`k` values) as f32: deq(A) for MX values (exact), the float values widened
    /// (exact). Scalar; the fast kernels decode MX rows with their own (bit-identical) code.
    pub fn row_f32(&self, r: usize, k: usize, dst: &mut [f32]) {
        let rows = r * k..(r + 1) * k;
        match self {
            MatA::Mx { q, scales } => {
                let kb = k / BLOCK;
                for (i, (d, &b)) in dst.iter_mut().zip(&q[rows]).enumerate() {
                    *d = crate::codec::e4m3_to_f32(b)
                        * crate::codec::e8m0_to_f32(scales[r * kb + i / BLOCK]);
                }
            }
            MatA::F32(a) => dst.copy_from_slice(&a[rows]),
            MatA::F16(a) => dst
                .iter_mut()
                .zip(&a[rows])
                .for_each(|(d, x)| *d = x.to_f32()),
            MatA::BF16(a) => dst
                .iter_mut()
                .zip(&a[rows])
                .for_each(|(d, x)| *d = x.to_f32()),
        }
    }

    /// A as `m × k` f32 values (see [`MatA::row_f32`]).
    pub fn to_f32(&self, m: usize, k: usize) -> Vec<f32> {
        let mut a = vec![0f32; m * k];
        for (r, row) in a.chunks_exact_mut(k.max(1)).enumerate().take(m) {
            self.row_f32(r, k, row);
        }
        a
    }
}

/// Checks that a last-axis length is a positive multiple of the MX block.
pub fn check_block_multiple(what: &str, k: usize) -> Result<()> {
    if k == 0 || !k.is_multiple_of(BLOCK) {
        return Err(shape_err!(
            "{what} = {k} must be a positive multiple of {BLOCK}"
        ));
    }
    Ok(())
}

/// `a · b` elements, or an error when the product overflows `usize` (a shape that large has no
/// buffer; unchecked, it would wrap to a small count a short buffer then passes).
pub fn elems(what: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| shape_err!("{what}: {a} × {b} elements overflow the address space"))
}

/// Checks a buffer length against its expected element count.
pub fn check_len(what: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(shape_err!("{what} has {got} elements, expected {want}"));
    }
    Ok(())
}

/// Rows of a flat `rows × k` tensor, checking that `len` is a whole number of rows.
pub fn rows_of(what: &str, len: usize, k: usize) -> Result<usize> {
    if k == 0 || !len.is_multiple_of(k) {
        return Err(shape_err!(
            "{what} has {len} elements, not a whole number of rows of {k}"
        ));
    }
    Ok(len / k)
}

/// Validates quantizer buffers for `x.len()` inputs in rows of `k`; returns the row count.
pub fn check_quant_io(x_len: usize, k: usize, q_len: usize, s_len: usize) -> Result<usize> {
    check_block_multiple("K", k)?;
    let rows = rows_of("x", x_len, k)?;
    check_len("q", q_len, x_len)?;
    check_len("scales", s_len, rows * (k / BLOCK))?;
    Ok(rows)
}

/// Validates the `AddRmsNormMxQuant` buffers; returns the row count.
pub fn check_norm_io<T, G>(
    x: &[T],
    residual: Option<&[T]>,
    gamma: &[G],
    h: usize,
    out: &NormOutputs<'_, T>,
) -> Result<usize> {
    let rows = check_quant_io(x.len(), h, out.q.len(), out.scales.len())?;
    if let Some(r) = residual {
        check_len("residual", r.len(), x.len())?;
    }
    check_len("gamma", gamma.len(), h)?;
    if let Some(r) = &out.residual_out {
        check_len("residual_out", r.len(), x.len())?;
    }
    if let Some(n) = &out.normed {
        check_len("normed", n.len(), x.len())?;
    }
    Ok(rows)
}

/// Validates the SwiGLU buffers for an output row length `i`; returns the row count.
pub fn check_swiglu_io<T: Element>(
    input: &SwiGluInput<'_, T>,
    i: usize,
    q_len: usize,
    s_len: usize,
) -> Result<usize> {
    check_block_multiple("I", i)?;
    let rows = match input {
        SwiGluInput::Fused(gu) => rows_of("gate_up", gu.len(), elems("gate_up row", 2, i)?)?,
        SwiGluInput::Separate { gate, up } => {
            check_len("up", up.len(), gate.len())?;
            rows_of("gate", gate.len(), i)?
        }
    };
    check_len("q", q_len, rows * i)?;
    check_len("scales", s_len, rows * (i / BLOCK))?;
    Ok(rows)
}

/// Validates the `MxMatMul` buffers for `m × k` A, `k × n` B and `m × n` y.
pub fn check_matmul_io(
    m: usize,
    k: usize,
    n: usize,
    a_q: &[u8],
    a_scales: &[u8],
    b: &MatB<'_>,
    y_len: usize,
) -> Result<()> {
    let a = MatA::Mx {
        q: a_q,
        scales: a_scales,
    };
    check_matmul_a_io(m, k, n, &a, b, y_len)
}

/// Checks A's buffers for `m × k` A (`k` a multiple of 32, checked by the caller).
pub fn check_matmul_a(a: &MatA<'_>, m: usize, k: usize) -> Result<()> {
    let mk = elems("A", m, k)?;
    match a {
        MatA::Mx { q, scales } => {
            check_len("a_q", q.len(), mk)?;
            check_len("a_scale", scales.len(), mk / BLOCK)
        }
        MatA::F32(v) => check_len("a", v.len(), mk),
        MatA::F16(v) => check_len("a", v.len(), mk),
        MatA::BF16(v) => check_len("a", v.len(), mk),
    }
}

/// [`check_matmul_io`] for either form of A.
pub fn check_matmul_a_io(
    m: usize,
    k: usize,
    n: usize,
    a: &MatA<'_>,
    b: &MatB<'_>,
    y_len: usize,
) -> Result<()> {
    check_block_multiple("K", k)?;
    let (kn, mn) = (elems("B", k, n)?, elems("y", m, n)?);
    check_matmul_a(a, m, k)?;
    let b_len = match b {
        MatB::F32(b) => b.len(),
        MatB::F16(b) => b.len(),
        MatB::BF16(b) => b.len(),
        MatB::Mx { q, scales } => {
            check_len("b_scale", scales.len(), kn / BLOCK)?;
            q.len()
        }
    };
    check_len("b", b_len, kn)?;
    check_len("y", y_len, mn)
}
