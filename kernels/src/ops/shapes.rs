//! Output shapes of the ops (what the provider allocates before calling a kernel).

use crate::attrs::SwiGluLayout;
use crate::codec::BLOCK;
use crate::error::{shape_err, Result};
use crate::slices::check_block_multiple;

/// The last axis of `shape` (rank ≥ 1).
fn last(shape: &[usize]) -> Result<usize> {
    shape
        .last()
        .copied()
        .ok_or_else(|| shape_err!("a rank-0 tensor has no last axis"))
}

/// Scale shape `[..., K/32]` for values of shape `[..., K]` (K a multiple of 32).
pub fn scale_shape(values: &[usize]) -> Result<Vec<usize>> {
    let k = last(values)?;
    check_block_multiple("K", k)?;
    let mut s = values.to_vec();
    *s.last_mut().expect("rank checked") = k / BLOCK;
    Ok(s)
}

/// Shape of `AddRmsNormMxQuant`'s `q` and `normed` for `x` of shape `[..., H]`: `x`'s own, or
/// `[rows, H]` (its leading dims flattened) when `flatten_rows` — the rule read a flattening
/// `Reshape(normed, [-1, H])` of a MoE block into the op. The rows are the same contiguous
/// rows either way (`residual_out` keeps `x`'s shape).
pub fn norm_output_shape(x: &[usize], flatten_rows: bool) -> Result<Vec<usize>> {
    let h = last(x)?;
    Ok(if flatten_rows {
        vec![x[..x.len() - 1].iter().product(), h]
    } else {
        x.to_vec()
    })
}

/// Activation shape `[..., I]` of `SwiGluMxQuant` for its (first) input's shape.
pub fn swiglu_output_shape(input: &[usize], layout: SwiGluLayout) -> Result<Vec<usize>> {
    let n = last(input)?;
    let i = match layout {
        SwiGluLayout::Separate => n,
        _ if n % 2 == 0 => n / 2,
        _ => return Err(shape_err!("gate_up last axis {n} is odd")),
    };
    check_block_multiple("I", i)?;
    let mut s = input.to_vec();
    *s.last_mut().expect("rank checked") = i;
    Ok(s)
}

/// `(M, K, N)` and the output shape `[..., N]` of `MxMatMul` for A `[..., K]` and 2-D B.
pub fn mx_matmul_dims(
    a: &[usize],
    b: &[usize],
    trans_b: bool,
) -> Result<(usize, usize, usize, Vec<usize>)> {
    let k = last(a)?;
    check_block_multiple("K", k)?;
    let &[b0, b1] = b else {
        return Err(shape_err!("b must be 2-D, got {b:?}"));
    };
    let (bk, n) = if trans_b { (b1, b0) } else { (b0, b1) };
    if bk != k {
        return Err(shape_err!(
            "A has K = {k} but b {b:?} (trans_b = {trans_b}) has K = {bk}"
        ));
    }
    let m = a[..a.len() - 1].iter().product();
    let mut y = a.to_vec();
    *y.last_mut().expect("rank checked") = n;
    Ok((m, k, n, y))
}
