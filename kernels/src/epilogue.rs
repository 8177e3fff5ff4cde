//! The `MxMatMul` epilogue (docs/ops.md): `y = round_T(alpha · acc + beta · C)`, applied to the
//! f32 accumulator where every GEMM path (reference, fast CPU, GPU) converts it to the output
//! type, so an ONNX `Gemm`'s bias and scales cost one multiply-add per output.
//!
//! f32 arithmetic, in this order and never contracted to an FMA (Rust does not contract; the GPU
//! kernels use `__fmul_rn` / `__fadd_rn`): `t = fl(alpha · acc)`, `u = fl(beta · c)`,
//! `y = round_T(fl(t + u))`; without C, `y = round_T(fl(alpha · acc))`. With the defaults
//! (alpha = beta = 1) both products are exact, so y is `round_T(fl(acc + c))`.

use crate::element::Element;
use crate::error::{shape_err, Result};

/// C as f32, broadcast unidirectionally to `[M, N]` (ONNX `Gemm`): `rows` is 1 or M, `cols` 1 or
/// N, stored `rows × cols` row-major.
#[derive(Clone, Debug, PartialEq)]
struct Bias {
    values: Vec<f32>,
    rows: usize,
    cols: usize,
}

/// `alpha`, `beta` and the optional bias C of one `MxMatMul` call.
#[derive(Clone, Debug, PartialEq)]
pub struct Epilogue {
    alpha: f32,
    beta: f32,
    bias: Option<Bias>,
}

impl Default for Epilogue {
    fn default() -> Self {
        Self::NONE
    }
}

impl Epilogue {
    /// `y = round_T(acc)`: a plain product.
    pub const NONE: Epilogue = Epilogue {
        alpha: 1.0,
        beta: 1.0,
        bias: None,
    };

    /// The epilogue of an `m × n` product with `bias` (values and shape) if given. The bias
    /// shape must broadcast unidirectionally to `[m, n]`: `[]`, `[1]`, `[n]`, or `[1|m, 1|n]`.
    pub fn new<E: Element>(
        alpha: f32,
        beta: f32,
        bias: Option<(&[E], &[usize])>,
        m: usize,
        n: usize,
    ) -> Result<Self> {
        let bias = match bias {
            None => None,
            Some((values, shape)) => {
                let (rows, cols) = broadcast_dims(shape, m, n)?;
                crate::slices::check_len("bias", values.len(), rows * cols)?;
                Some(Bias {
                    values: values.iter().map(|v| v.to_f32()).collect(),
                    rows,
                    cols,
                })
            }
        };
        Ok(Epilogue { alpha, beta, bias })
    }

    /// Checks that the bias fits an `m × n` product (the GEMMs call this before indexing it:
    /// an epilogue built for other dims is an error, not an out-of-bounds read).
    pub fn check_dims(&self, m: usize, n: usize) -> Result<()> {
        match &self.bias {
            Some(b) if !(b.rows == 1 || b.rows == m) || !(b.cols == 1 || b.cols == n) => {
                Err(shape_err!(
                    "bias of {} x {} does not broadcast to [M, N] = [{m}, {n}]",
                    b.rows,
                    b.cols
                ))
            }
            _ => Ok(()),
        }
    }

    /// Applies the epilogue in place to `acc`, the f32 sums of row `r`, columns `c0..` (what
    /// the GEMMs call where they round a run of outputs): nothing for [`Epilogue::NONE`], else
    /// loops the compiler vectorizes, with the same arithmetic as [`Epilogue::apply`] (a
    /// broadcast column's `fl(beta · c)` is the same product computed once).
    #[inline]
    pub fn apply_row(&self, r: usize, c0: usize, acc: &mut [f32]) {
        let (alpha, beta) = (self.alpha, self.beta);
        match &self.bias {
            None if alpha == 1.0 => {}
            None => acc.iter_mut().for_each(|x| *x *= alpha),
            Some(b) => {
                let row = if b.rows == 1 { 0 } else { r * b.cols };
                if b.cols == 1 {
                    let u = beta * b.values[row];
                    acc.iter_mut().for_each(|x| *x = alpha * *x + u);
                } else {
                    let c = &b.values[row + c0..row + c0 + acc.len()];
                    acc.iter_mut()
                        .zip(c)
                        .for_each(|(x, &c)| *x = alpha * *x + beta * c);
                }
            }
        }
    }

    /// [`Epilogue::apply_row`] on a register block: `rows[r][j]` is the sum of row `r`, column
    /// `c0 + j`, for `j < cols ≤ W` (columns past `cols` are scratch the caller drops). For a
    /// bias broadcast over rows (`[N]`, `[1, N]`, scalars: what `nn.Linear` exports) the W
    /// values of `fl(beta · c)` are formed once and every row costs one W-wide multiply-add, so a
    /// 4-column unit of the `[N, K]` GEMM pays no per-row call.
    #[inline]
    pub fn apply_block<const W: usize>(&self, c0: usize, cols: usize, rows: &mut [[f32; W]]) {
        let (alpha, beta) = (self.alpha, self.beta);
        match &self.bias {
            None if alpha == 1.0 => {}
            Some(b) if b.rows == 1 => {
                let mut u = [0f32; W];
                for (j, u) in u.iter_mut().enumerate().take(cols) {
                    *u = beta * b.values[if b.cols == 1 { 0 } else { c0 + j }];
                }
                for row in rows.iter_mut() {
                    for (x, u) in row.iter_mut().zip(u) {
                        *x = alpha * *x + u;
                    }
                }
            }
            _ => {
                for (r, row) in rows.iter_mut().enumerate() {
                    self.apply_row(r, c0, &mut row[..cols]);
                }
            }
        }
    }

    /// The output value at row `r`, column `c` for the f32 accumulator `acc`.
    #[inline(always)]
    pub fn apply(&self, r: usize, c: usize, acc: f32) -> f32 {
        let t = self.alpha * acc;
        match &self.bias {
            None => t,
            Some(b) => {
                let i = if b.rows == 1 { 0 } else { r * b.cols } + if b.cols == 1 { 0 } else { c };
                t + self.beta * b.values[i]
            }
        }
    }
}

/// `(rows, cols)` of a bias of shape `shape` that broadcasts unidirectionally to `[m, n]`
/// (rows 1 or m, cols 1 or n), or the shape error.
pub fn broadcast_dims(shape: &[usize], m: usize, n: usize) -> Result<(usize, usize)> {
    let fits = |d: usize, full: usize| d == 1 || d == full;
    let dims = match *shape {
        [] => Some((1, 1)),
        [c] if fits(c, n) => Some((1, c)),
        [r, c] if fits(r, m) && fits(c, n) => Some((r, c)),
        _ => None,
    };
    dims.ok_or_else(|| {
        shape_err!(
            "bias of shape {shape:?} does not broadcast to [M, N] = [{m}, {n}] (expected [], [1], [N], [1|M, 1|N])"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasts_like_onnx_gemm() {
        let (m, n) = (3, 4);
        let ok = |shape: &[usize], len: usize| {
            let v: Vec<f32> = (0..len).map(|i| i as f32).collect();
            Epilogue::new(1.0, 1.0, Some((&v[..], shape)), m, n)
        };
        assert_eq!(ok(&[], 1).unwrap().apply(2, 3, 10.0), 10.0);
        assert_eq!(ok(&[1], 1).unwrap().apply(2, 3, 10.0), 10.0);
        assert_eq!(ok(&[4], 4).unwrap().apply(2, 3, 10.0), 13.0);
        assert_eq!(ok(&[1, 4], 4).unwrap().apply(2, 1, 10.0), 11.0);
        assert_eq!(ok(&[3, 1], 3).unwrap().apply(2, 1, 10.0), 12.0);
        assert_eq!(ok(&[3, 4], 12).unwrap().apply(2, 1, 10.0), 19.0);
        assert_eq!(ok(&[1, 1], 1).unwrap().apply(1, 1, 10.0), 10.0);
        for (shape, len) in [(&[3][..], 3), (&[2, 4], 8), (&[3, 3], 9), (&[1, 1, 4], 4)] {
            assert!(ok(shape, len).is_err(), "{shape:?}");
        }
        assert!(ok(&[4], 3).is_err(), "short data");
        let full = ok(&[3, 4], 12).unwrap();
        assert!(full.check_dims(3, 4).is_ok());
        assert!(full.check_dims(5, 4).is_err() && full.check_dims(3, 5).is_err());
        assert!(ok(&[4], 4).unwrap().check_dims(9, 4).is_ok());
    }

    #[test]
    fn alpha_beta_in_the_documented_order() {
        let v = [0.1f32];
        let e = Epilogue::new(3.0, 0.7, Some((&v[..], &[][..])), 1, 1).unwrap();
        let acc = 1.0f32 / 3.0;
        assert_eq!(e.apply(0, 0, acc), 3.0 * acc + 0.7 * 0.1f32);
        assert_eq!(Epilogue::NONE.apply(5, 5, acc), acc);
        let e = Epilogue::new::<f32>(2.0, 5.0, None, 1, 1).unwrap();
        assert_eq!(e.apply(0, 0, acc), 2.0 * acc);
        let nan = [f32::NAN];
        let e = Epilogue::new(1.0, 1.0, Some((&nan[..], &[1][..])), 1, 1).unwrap();
        assert!(e.apply(0, 0, 1.0).is_nan());
    }
}
