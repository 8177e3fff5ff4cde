//! Which scale each element of a quantized tensor is multiplied by: ONNX `DequantizeLinear`'s
//! three granularities (opset 21+), as `MxDequantize` reads them.
//!
//! * per-tensor: `block_size = 0`, scale of rank 0 (or shape `[1]`);
//! * per-axis: `block_size = 0`, scale of rank 1 with `D_axis` elements;
//! * blocked: `block_size = B ≥ 1`, scale of x's rank, equal dims except
//!   `S_axis = ceil(D_axis / B)` (ONNX's accepted range `ceil(D/S) ≤ B ≤ ceil(D/(S−1))−1` says
//!   exactly that); element `d` along the axis reads scale `d / B`, the last block may be short.
//!
//! An empty x with an empty blocked scale of another shape is accepted (nothing reads a scale):
//! ONNX Runtime 1.31's CPU `ReduceMax` keeps the reduced axis of an empty input (`[0, 2, 32]`
//! → `[0, 2, 32]` with `keepdims = 0`, not `[0, 2]`), so a standard MXFP8 quantizer whose scale
//! ORT computes gave that shape to `MxQuantizeLinear` / `MxDequantize` whenever a MoE expert was
//! routed no token (new-user probe 7).
//!
//! x is seen as `[outer, D_axis, inner]`; scale index = `o·stride_outer + (d / block)·stride_block
//! + i·stride_inner`, with zero strides for the dims a scale is broadcast over.

use crate::error::{shape_err, Result};

/// The index map from x's elements to the scale's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScaleMap {
    pub outer: usize,
    pub axis_len: usize,
    pub inner: usize,
    /// Elements per scale along the axis (1 for per-axis; `axis_len` or more for per-tensor).
    pub block: usize,
    pub stride_outer: usize,
    pub stride_block: usize,
    pub stride_inner: usize,
}

fn numel(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| shape_err!("shape {shape:?} overflows usize"))
}

impl ScaleMap {
    /// The map for values of shape `x` and a scale of shape `scale`, or why they do not fit.
    pub fn new(x: &[usize], scale: &[usize], axis: i64, block_size: usize) -> Result<Self> {
        let total = numel(x)?;
        let per_tensor = block_size == 0 && (scale.is_empty() || scale == [1]);
        if per_tensor {
            // One scale for everything: a single "block" covering the whole tensor.
            return Ok(ScaleMap {
                outer: 1,
                axis_len: total,
                inner: 1,
                block: total.max(1),
                stride_outer: 0,
                stride_block: 0,
                stride_inner: 0,
            });
        }
        let rank = x.len() as i64;
        if rank == 0 || axis < -rank || axis >= rank {
            return Err(shape_err!(
                "axis {axis} is out of range for x of shape {x:?}"
            ));
        }
        let a = axis.rem_euclid(rank) as usize;
        let outer = numel(&x[..a])?;
        let inner = numel(&x[a + 1..])?;
        let axis_len = x[a];
        if block_size == 0 {
            if scale != [axis_len] {
                return Err(shape_err!(
                    "per-axis scale has shape {scale:?}, expected [{axis_len}] (axis {axis} of x {x:?})"
                ));
            }
            return Ok(ScaleMap {
                outer,
                axis_len,
                inner,
                block: 1,
                stride_outer: 0,
                stride_block: 1,
                stride_inner: 0,
            });
        }
        let mut want = x.to_vec();
        want[a] = axis_len.div_ceil(block_size);
        if scale != want.as_slice() && !(total == 0 && numel(scale)? == 0) {
            return Err(shape_err!(
                "blocked scale has shape {scale:?}, expected {want:?} (x {x:?}, axis {axis}, block_size {block_size})"
            ));
        }
        Ok(ScaleMap {
            outer,
            axis_len,
            inner,
            block: block_size,
            stride_outer: want[a] * inner,
            stride_block: inner,
            stride_inner: 1,
        })
    }

    /// Elements of x.
    pub fn len(&self) -> usize {
        self.outer * self.axis_len * self.inner
    }

    /// Whether x is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements of the scale tensor the map reads.
    pub fn scale_len(&self) -> usize {
        if self.stride_outer == 0 && self.stride_block == 0 {
            1
        } else if self.stride_outer == 0 {
            self.axis_len
        } else {
            self.outer * self.stride_outer
        }
    }

    /// The scale index of x's element `e` (row-major).
    pub fn scale_index(&self, e: usize) -> usize {
        let i = e % self.inner;
        let d = (e / self.inner) % self.axis_len;
        let o = e / (self.inner * self.axis_len);
        o * self.stride_outer + (d / self.block) * self.stride_block + i * self.stride_inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_x_takes_any_empty_blocked_scale() {
        // ORT's ReduceMax of an empty [0, 2, 32] block view keeps the reduced axis.
        let m = ScaleMap::new(&[0, 64], &[0, 2, 32], -1, 32).unwrap();
        assert!(m.is_empty());
        // A non-empty scale for an empty x, or an empty scale for a non-empty x, stays an error.
        assert!(ScaleMap::new(&[0, 64], &[1, 2], -1, 32).is_err());
        assert!(ScaleMap::new(&[1, 64], &[0, 2], -1, 32).is_err());
    }

    #[test]
    fn blocked_last_axis_and_axis_zero() {
        let m = ScaleMap::new(&[2, 64], &[2, 2], -1, 32).unwrap();
        assert_eq!(m.scale_index(0), 0);
        assert_eq!(m.scale_index(31), 0);
        assert_eq!(m.scale_index(32), 1);
        assert_eq!(m.scale_index(64 + 33), 3);
        assert_eq!(m.scale_len(), 4);
        // [K = 64, N = 3] blocked along K (an MX weight): element (k, n) reads scale (k/32, n).
        let w = ScaleMap::new(&[64, 3], &[2, 3], 0, 32).unwrap();
        assert_eq!(w.scale_index(33 * 3 + 2), 3 + 2);
        assert_eq!(w.scale_len(), 6);
    }

    #[test]
    fn ragged_block_per_axis_and_per_tensor() {
        // 40 elements in blocks of 32: two scales, the last block holds 8.
        let m = ScaleMap::new(&[3, 40], &[3, 2], 1, 32).unwrap();
        assert_eq!(m.scale_index(39), 1);
        assert_eq!(m.scale_index(40), 2);
        let p = ScaleMap::new(&[4, 5], &[5], 1, 0).unwrap();
        assert_eq!(p.scale_index(7), 2);
        assert_eq!(p.scale_len(), 5);
        let t = ScaleMap::new(&[4, 5], &[], 1, 0).unwrap();
        assert_eq!((t.scale_index(19), t.scale_len()), (0, 1));
        assert!(ScaleMap::new(&[], &[], 0, 0).is_ok());
    }

    #[test]
    fn mismatches_are_errors() {
        assert!(ScaleMap::new(&[2, 64], &[2, 3], -1, 32).is_err());
        assert!(ScaleMap::new(&[2, 64], &[2, 2], 2, 32).is_err());
        assert!(ScaleMap::new(&[2, 64], &[2, 2, 1], -1, 32).is_err());
        assert!(ScaleMap::new(&[2, 64], &[3], 1, 0).is_err());
        assert!(ScaleMap::new(&[2, 64], &[1, 2], 0, 32).is_err());
    }
}
