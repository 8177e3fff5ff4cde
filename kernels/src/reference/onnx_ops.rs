//! A tiny evaluator of the standard ONNX ops the fusion patterns replace, with the numeric
//! conventions of the fused kernels, so an unfused graph evaluated here and the fused op agree
//! bit for bit (differential tests of the rewrite rules).
//!
//! Conventions:
//! * A [`Tensor`] holds f32 values that are exactly representable in its dtype (F32/F16/BF16).
//! * Every op computes each output element in f32 from the f32 values of its inputs (one IEEE
//!   operation unless stated) and rounds once to the output dtype (RNE, `Element::from_f32`).
//! * `Sigmoid` uses the pinned `sigmoid_f32` (`1/(1+exp(-z))` with the pinned `exp_f32`);
//!   `QuickGelu(x, alpha)`/`Swish` = `x·σ(alpha·x)` in f32, rounded once.
//! * `ReduceMean` (last axis) uses [`lane_mean`]: f64 sums over 16 lanes in a fixed order,
//!   divided in f64, rounded to f32 then to T. So `Pow(x,2) → ReduceMean` in f32 equals the
//!   fused kernels' `mean_of_squares`. `ReduceSum` (last axis) is the same f64 sum rounded to
//!   f32 then to T; a `Div` by H after it rounds once more, so it equals the mean bit for bit
//!   when H is a power of two (the division is then exact) and may differ in the last bit else.
//! * `RMSNormalization` / `SimplifiedLayerNormalization` (last axis, stash f32):
//!   `round_T(s · fl(1/fl(sqrt(mean_of_squares(s) + eps))) · scale_f32)` — the fused op with
//!   `inv_form = rsqrt`, `gamma_in_f32 = 1`.
//! * `MatMul` accumulates in f64 and rounds once to f32, then to T (as `reference::mx_matmul`).
//! * `Gemm` (`transA = 0`) as `MatMul`, then `fl(fl(alpha·acc) + fl(beta·c))` in f32 (no FMA)
//!   and rounded to T: the `MxMatMul` epilogue of docs/ops.md.
//! * Binary ops broadcast numpy-style.

use super::math::{lane_mean, lane_sum, mean_of_squares, sigmoid_f32};
use crate::element::{DType, Element};
use crate::error::{shape_err, KernelError, Result};
use half::{bf16, f16};

/// A dense tensor of values representable in `dtype`.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// round_T for a runtime dtype.
pub fn round_to(dtype: DType, v: f32) -> f32 {
    match dtype {
        DType::F16 => f16::round_f32(v),
        DType::BF16 => bf16::round_f32(v),
        _ => v,
    }
}

impl Tensor {
    /// A tensor from values, rounding each to `dtype`.
    pub fn new(dtype: DType, shape: &[usize], data: Vec<f32>) -> Result<Self> {
        if !dtype.is_float() {
            return Err(KernelError::DType(format!(
                "onnx_ops tensors are float, got {dtype:?}"
            )));
        }
        // A wrapping product would let an enormous shape pass with few values.
        let numel = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if numel != Some(data.len()) {
            return Err(shape_err!(
                "shape {shape:?} does not hold {} values",
                data.len()
            ));
        }
        let data = data.into_iter().map(|v| round_to(dtype, v)).collect();
        Ok(Self {
            dtype,
            shape: shape.to_vec(),
            data,
        })
    }

    /// A scalar constant of `dtype`.
    pub fn scalar(dtype: DType, v: f32) -> Self {
        Self {
            dtype,
            shape: Vec::new(),
            data: vec![round_to(dtype, v)],
        }
    }

    fn map(&self, f: impl Fn(f32) -> f32) -> Tensor {
        let data = self
            .data
            .iter()
            .map(|&v| round_to(self.dtype, f(v)))
            .collect();
        Tensor {
            dtype: self.dtype,
            shape: self.shape.clone(),
            data,
        }
    }

    fn last_axis(&self) -> Result<usize> {
        self.shape
            .last()
            .copied()
            .filter(|&n| n > 0)
            .ok_or_else(|| shape_err!("needs a non-empty last axis"))
    }
}

/// Numpy broadcast of two shapes.
fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let da = if i + a.len() >= n {
                a[i + a.len() - n]
            } else {
                1
            };
            let db = if i + b.len() >= n {
                b[i + b.len() - n]
            } else {
                1
            };
            match (da, db) {
                (x, y) if x == y => Ok(x),
                (1, y) => Ok(y),
                (x, 1) => Ok(x),
                _ => Err(shape_err!("shapes {a:?} and {b:?} do not broadcast")),
            }
        })
        .collect()
}

/// Index into a tensor of shape `src` for the multi-index `idx` of the broadcast shape `out`.
fn source_index(src: &[usize], out: &[usize], mut flat: usize) -> usize {
    let mut idx = 0;
    let mut stride = 1;
    for d in (0..out.len()).rev() {
        let coord = flat % out[d];
        flat /= out[d];
        if let Some(sd) = (d + src.len()).checked_sub(out.len()) {
            if src[sd] != 1 {
                idx += coord * stride;
            }
            stride *= src[sd];
        }
    }
    idx
}

fn binary(a: &Tensor, b: &Tensor, f: impl Fn(f32, f32) -> f32) -> Result<Tensor> {
    if a.dtype != b.dtype {
        return Err(KernelError::DType(format!(
            "operands are {:?} and {:?}",
            a.dtype, b.dtype
        )));
    }
    let shape = broadcast_shape(&a.shape, &b.shape)?;
    let n: usize = shape.iter().product();
    let data = (0..n)
        .map(|i| {
            let x = a.data[source_index(&a.shape, &shape, i)];
            let y = b.data[source_index(&b.shape, &shape, i)];
            round_to(a.dtype, f(x, y))
        })
        .collect();
    Ok(Tensor {
        dtype: a.dtype,
        shape,
        data,
    })
}

/// `Add`.
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(a, b, |x, y| x + y)
}
/// `Mul`.
pub fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(a, b, |x, y| x * y)
}
/// `Div`.
pub fn div(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(a, b, |x, y| x / y)
}
/// `Min` of two inputs (NaN propagates).
pub fn min(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(a, b, |x, y| {
        if x.is_nan() || y.is_nan() {
            f32::NAN
        } else {
            x.min(y)
        }
    })
}
/// `Pow(x, 2)`: x·x.
pub fn pow2(x: &Tensor) -> Tensor {
    x.map(|v| v * v)
}
/// `Sqrt`.
pub fn sqrt(x: &Tensor) -> Tensor {
    x.map(f32::sqrt)
}
/// `Reciprocal`.
pub fn reciprocal(x: &Tensor) -> Tensor {
    x.map(|v| 1.0 / v)
}
/// `Sigmoid` (pinned).
pub fn sigmoid(x: &Tensor) -> Tensor {
    x.map(sigmoid_f32)
}
/// `QuickGelu(alpha)` / `Swish(alpha)`: x·σ(alpha·x), rounded once.
pub fn quick_gelu(x: &Tensor, alpha: f32) -> Tensor {
    x.map(|v| v * sigmoid_f32(alpha * v))
}
/// `Clip(min, max)` (NaN stays NaN; bounds are rounded to the dtype as graph constants are).
pub fn clip(x: &Tensor, lo: f32, hi: f32) -> Tensor {
    let (lo, hi) = (round_to(x.dtype, lo), round_to(x.dtype, hi));
    x.map(|v| if v.is_nan() { v } else { v.max(lo).min(hi) })
}
/// `Cast(to)`.
pub fn cast(x: &Tensor, to: DType) -> Result<Tensor> {
    Tensor::new(to, &x.shape, x.data.clone())
}

/// `ReduceMean` over the last axis.
pub fn reduce_mean_last(x: &Tensor, keepdims: bool) -> Result<Tensor> {
    reduce_last(x, keepdims, |row| lane_mean(row.iter().copied()))
}

/// `ReduceSum` over the last axis: the same lane sums as `ReduceMean`, rounded once to f32.
pub fn reduce_sum_last(x: &Tensor, keepdims: bool) -> Result<Tensor> {
    reduce_last(x, keepdims, |row| lane_sum(row.iter().copied()).0 as f32)
}

/// Each last-axis row reduced to one f32 by `f`, rounded to the dtype.
fn reduce_last(x: &Tensor, keepdims: bool, f: impl Fn(&[f32]) -> f32) -> Result<Tensor> {
    let n = x.last_axis()?;
    let data = x
        .data
        .chunks_exact(n)
        .map(|row| round_to(x.dtype, f(row)))
        .collect();
    let mut shape = x.shape.clone();
    if keepdims {
        *shape.last_mut().expect("non-empty") = 1;
    } else {
        shape.pop();
    }
    Ok(Tensor {
        dtype: x.dtype,
        shape,
        data,
    })
}

/// `RMSNormalization(x, scale, axis=-1, epsilon, stash_type=1)`; also
/// `SimplifiedLayerNormalization` (same numerics).
pub fn rms_normalization(x: &Tensor, scale: &Tensor, epsilon: f32) -> Result<Tensor> {
    let n = x.last_axis()?;
    if scale.data.len() != n {
        return Err(shape_err!(
            "scale has {} values, the last axis {n}",
            scale.data.len()
        ));
    }
    let mut data = Vec::with_capacity(x.data.len());
    for row in x.data.chunks_exact(n) {
        let inv = 1.0 / (mean_of_squares(row) + epsilon).sqrt();
        data.extend(
            row.iter()
                .zip(&scale.data)
                .map(|(&s, &g)| round_to(x.dtype, s * inv * g)),
        );
    }
    Ok(Tensor {
        dtype: x.dtype,
        shape: x.shape.clone(),
        data,
    })
}

/// `SimplifiedLayerNormalization` (last axis, stash f32): the same numerics as
/// [`rms_normalization`].
pub fn simplified_layer_normalization(x: &Tensor, scale: &Tensor, epsilon: f32) -> Result<Tensor> {
    rms_normalization(x, scale, epsilon)
}

/// `MatMul` of `[..., M, K]` by a 2-D `[K, N]`.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let k = a.last_axis()?;
    let &[bk, n] = &b.shape[..] else {
        return Err(shape_err!("b must be 2-D, got {:?}", b.shape));
    };
    if bk != k || a.dtype != b.dtype {
        return Err(shape_err!("MatMul {:?} x {:?}", a.shape, b.shape));
    }
    let mut data = Vec::with_capacity(a.data.len() / k * n);
    for row in a.data.chunks_exact(k) {
        for j in 0..n {
            let acc: f64 = row
                .iter()
                .enumerate()
                .map(|(i, &v)| f64::from(v) * f64::from(b.data[i * n + j]))
                .sum();
            data.push(round_to(a.dtype, acc as f32));
        }
    }
    let mut shape = a.shape.clone();
    *shape.last_mut().expect("non-empty") = n;
    Ok(Tensor {
        dtype: a.dtype,
        shape,
        data,
    })
}

/// ONNX `Gemm(a, b, [c])` with `transA = 0`: `a [M, K]`, `b [K, N]` (`[N, K]` when `trans_b`),
/// `c` broadcasting unidirectionally to `[M, N]` (rank ≤ 2, each dim 1 or full).
pub fn gemm(
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
    alpha: f32,
    beta: f32,
    trans_b: bool,
) -> Result<Tensor> {
    let (&[m, k], &[b0, b1]) = (&a.shape[..], &b.shape[..]) else {
        return Err(shape_err!(
            "Gemm {:?} x {:?}: both must be 2-D",
            a.shape,
            b.shape
        ));
    };
    let (bk, n) = if trans_b { (b1, b0) } else { (b0, b1) };
    if bk != k || a.dtype != b.dtype {
        return Err(shape_err!("Gemm {:?} x {:?}", a.shape, b.shape));
    }
    // C's (rows, cols) as stored: each 1 (broadcast) or the full dim.
    let (cr, cc) = match c.map(|c| &c.shape[..]) {
        None | Some([]) => (1, 1),
        Some(&[d]) => (1, d),
        Some(&[r, d]) => (r, d),
        Some(s) => return Err(shape_err!("Gemm C of shape {s:?}")),
    };
    if !(cr == 1 || cr == m) || !(cc == 1 || cc == n) {
        return Err(shape_err!("Gemm C does not broadcast to [{m}, {n}]"));
    }
    let mut data = Vec::with_capacity(m * n);
    for (r, row) in a.data.chunks_exact(k).enumerate() {
        for j in 0..n {
            let acc: f64 = row
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let w = if trans_b {
                        b.data[j * k + i]
                    } else {
                        b.data[i * n + j]
                    };
                    f64::from(v) * f64::from(w)
                })
                .sum();
            let t = alpha * acc as f32;
            let y = match c {
                None => t,
                Some(c) => {
                    let cv = c.data[if cr == 1 { 0 } else { r * cc } + if cc == 1 { 0 } else { j }];
                    t + beta * cv
                }
            };
            data.push(round_to(a.dtype, y));
        }
    }
    Ok(Tensor {
        dtype: a.dtype,
        shape: vec![m, n],
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_and_rounding() {
        let a = Tensor::new(DType::BF16, &[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let b = Tensor::new(DType::BF16, &[3], vec![0.001, 0.0, 1.0]).unwrap();
        let c = add(&a, &b).unwrap();
        assert_eq!(c.shape, vec![2, 3]);
        // 1 + bf16(0.001) rounds back to 1 in bf16.
        assert_eq!(c.data, vec![1.0, 2.0, 4.0, 4.0, 5.0, 7.0]);
        let s = add(&a, &Tensor::scalar(DType::BF16, 1.0)).unwrap();
        assert_eq!(s.data[5], 7.0);
        assert!(add(&a, &Tensor::new(DType::BF16, &[2], vec![0.0, 0.0]).unwrap()).is_err());
    }

    #[test]
    fn reduce_mean_of_pow_equals_mean_of_squares() {
        let x = Tensor::new(
            DType::F32,
            &[1, 64],
            (0..64).map(|i| (i as f32).sin() * 3.0).collect(),
        )
        .unwrap();
        let m = reduce_mean_last(&pow2(&x), true).unwrap();
        assert_eq!(m.data[0], mean_of_squares(&x.data));
    }

    /// `Div(ReduceSum(x²), 64)`: the sum rounded to f32 then divided by a power of two, exactly,
    /// is the mean of squares bit for bit.
    #[test]
    fn reduce_sum_of_pow_over_a_power_of_two_equals_mean_of_squares() {
        let x = Tensor::new(
            DType::F32,
            &[3, 64],
            (0..192).map(|i| (i as f32 * 0.37).sin() * 5.0).collect(),
        )
        .unwrap();
        let s = reduce_sum_last(&pow2(&x), true).unwrap();
        assert_eq!(s.shape, [3, 1]);
        for (row, sum) in x.data.chunks_exact(64).zip(&s.data) {
            assert_eq!(sum / 64.0, mean_of_squares(row));
        }
    }
}
