//! `MxGatherDequantize(x, scale, indices) -> y`: ONNX `Gather(DequantizeLinear(x, scale),
//! indices, axis = gather_axis)` as one op that dequantizes only the slices the gather selects.
//!
//! Why it is exact: along any axis but the quantized one, gathering commutes with an MX
//! dequantize. Output element (…, j, …) is x[…, indices[j], …] times the scale of that same
//! element. A blocked scale (x's rank, x's dims off the quantized axis) is gathered the same
//! way, and per-axis and per-tensor scales do not change. So the op gathers the bytes of x and
//! of the scale, then runs [`super::mx_dequantize`] on them. The bits are those of
//! DequantizeLinear → Gather, and the work is that of the gathered slices: 4 of 128 stacked
//! experts is 1/32 of it.
//!
//! Gathering along the quantized axis itself would split blocks: refused with an error.

use super::{expect_shape, mx_dequantize, TensorMut, TensorRef};
use crate::attrs::{MxDequantAttrs, MxGatherDequantAttrs};
use crate::codec::e2m1::{nibble, packed_len};
use crate::element::DType;
use crate::error::{shape_err, KernelError, Result};
use crate::parallel::Parallel;

/// `axis` of a rank-`rank` tensor as an index (ONNX: negative counts from the back).
fn normalize_axis(axis: i64, rank: usize, what: &str) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(shape_err!("{what} {axis} is out of range for rank {rank}"));
    }
    Ok(axis.rem_euclid(r) as usize)
}

/// ONNX `Gather`'s output shape: `x[..axis] ++ indices ++ x[axis + 1..]`.
pub fn gather_shape(x: &[usize], indices: &[usize], axis: i64) -> Result<Vec<usize>> {
    let g = normalize_axis(axis, x.len(), "gather_axis")?;
    Ok([&x[..g], indices, &x[g + 1..]].concat())
}

/// The elements of row-major `src` (dims `dims`) at `idx` along axis `g`, in Gather's order.
/// `nibbles`: FLOAT4E2M1, two elements a byte, low nibble first.
fn gather_elements(src: &[u8], dims: &[usize], g: usize, idx: &[usize], nibbles: bool) -> Vec<u8> {
    let outer: usize = dims[..g].iter().product();
    let n = dims[g];
    let inner: usize = dims[g + 1..].iter().product();
    let total = outer * idx.len() * inner;
    if !nibbles || inner.is_multiple_of(2) {
        // Whole bytes per slice (an even slice of nibbles starts on a byte too).
        let (slice, total) = if nibbles {
            (inner / 2, total / 2)
        } else {
            (inner, total)
        };
        let mut out = Vec::with_capacity(total);
        for o in 0..outer {
            for &j in idx {
                let s = (o * n + j) * slice;
                out.extend_from_slice(&src[s..s + slice]);
            }
        }
        return out;
    }
    let mut out = vec![0u8; packed_len(total)];
    let mut e = 0;
    for o in 0..outer {
        for &j in idx {
            let s = (o * n + j) * inner;
            for i in 0..inner {
                out[e / 2] |= nibble(src, s + i) << (4 * (e % 2));
                e += 1;
            }
        }
    }
    out
}

/// `MxGatherDequantize`: x FLOAT8E4M3FN, FLOAT8E5M2 or FLOAT4E2M1, scale FLOAT8E8M0 (per-tensor,
/// per-axis or blocked along `attrs.dequant.axis`), `indices` (any shape, values in
/// `[-D, D)` for `D = x.shape[gather_axis]`), y of `attrs.dequant.output_dtype` and
/// [`gather_shape`].
pub fn mx_gather_dequantize(
    x: TensorRef<'_>,
    scale: TensorRef<'_>,
    indices: &[i64],
    indices_shape: &[usize],
    y: TensorMut<'_>,
    attrs: &MxGatherDequantAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    let count = indices_shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d));
    if count != Some(indices.len()) {
        return Err(shape_err!(
            "indices hold {} values, their shape {indices_shape:?} says otherwise",
            indices.len()
        ));
    }
    let dq = &attrs.dequant;
    // Validates the scale against x (and the axis) before anything is read.
    crate::ScaleMap::new(x.shape, scale.shape, dq.axis, dq.block_size)?;
    let rank = x.shape.len();
    let g = normalize_axis(attrs.gather_axis, rank, "gather_axis")?;
    let out_shape = gather_shape(x.shape, indices_shape, attrs.gather_axis)?;
    expect_shape("y", y.shape, &out_shape)?;
    let n = x.shape[g];
    let idx = indices
        .iter()
        .map(|&v| {
            if v >= -(n as i64) && v < n as i64 {
                Ok(v.rem_euclid(n as i64) as usize)
            } else {
                Err(shape_err!(
                    "index {v} is out of range for axis {g} of x {:?} (size {n})",
                    x.shape
                ))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let per_tensor = dq.block_size == 0 && (scale.shape.is_empty() || scale.shape == [1]);
    let (gscale, gscale_shape, axis) = if per_tensor {
        (scale.bytes().to_vec(), scale.shape.to_vec(), dq.axis)
    } else {
        let a = normalize_axis(dq.axis, rank, "axis")?;
        if a == g {
            return Err(KernelError::Attribute(format!(
                "gather_axis {} is the quantized axis {}: gathering there would split scale blocks",
                attrs.gather_axis, dq.axis
            )));
        }
        // The quantized axis in y: the gathered axis became the indices' dims.
        let a_out = if a < g {
            a
        } else {
            a + indices_shape.len() - 1
        };
        if dq.block_size == 0 {
            (scale.bytes().to_vec(), scale.shape.to_vec(), a_out as i64)
        } else {
            let shape = gather_shape(scale.shape, indices_shape, g as i64)?;
            let bytes = gather_elements(scale.bytes(), scale.shape, g, &idx, false);
            (bytes, shape, a_out as i64)
        }
    };
    let gx = gather_elements(x.bytes(), x.shape, g, &idx, x.dtype == DType::E2M1);
    let attrs = MxDequantAttrs { axis, ..*dq };
    mx_dequantize(
        TensorRef::new(x.dtype, &out_shape, &gx)?,
        TensorRef::new(DType::E8M0, &gscale_shape, &gscale)?,
        y,
        &attrs,
        par,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Serial;

    /// DequantizeLinear of the whole x, then Gather of its f32 elements (the op's definition).
    fn reference(
        x: TensorRef<'_>,
        s: TensorRef<'_>,
        a: &MxGatherDequantAttrs,
        idx: &[i64],
    ) -> Vec<f32> {
        let n: usize = x.shape.iter().product();
        let mut full = vec![0u8; n * 4];
        let fs = x.shape.to_vec();
        mx_dequantize(
            x,
            s,
            TensorMut::new(DType::F32, &fs, &mut full).unwrap(),
            &a.dequant,
            &Serial,
        )
        .unwrap();
        let full: Vec<f32> = full
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let g = normalize_axis(a.gather_axis, fs.len(), "").unwrap();
        let (outer, d): (usize, usize) = (fs[..g].iter().product(), fs[g]);
        let inner: usize = fs[g + 1..].iter().product();
        let mut out = Vec::new();
        for o in 0..outer {
            for &j in idx {
                let j = j.rem_euclid(d as i64) as usize;
                out.extend_from_slice(&full[(o * d + j) * inner..][..inner]);
            }
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        x: &[u8],
        dt: DType,
        xs: &[usize],
        s: &[u8],
        ss: &[usize],
        a: &MxGatherDequantAttrs,
        idx: &[i64],
        is: &[usize],
    ) -> Result<Vec<f32>> {
        let ys = gather_shape(xs, is, a.gather_axis)?;
        let mut y = vec![0u8; ys.iter().product::<usize>() * 4];
        mx_gather_dequantize(
            TensorRef::new(dt, xs, x)?,
            TensorRef::new(DType::E8M0, ss, s)?,
            idx,
            is,
            TensorMut::new(DType::F32, &ys, &mut y)?,
            a,
            &Serial,
        )?;
        Ok(y.chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect())
    }

    fn attrs(axis: i64, block: usize, gather_axis: i64) -> MxGatherDequantAttrs {
        MxGatherDequantAttrs {
            dequant: MxDequantAttrs {
                axis,
                block_size: block,
                output_dtype: DType::F32,
            },
            gather_axis,
        }
    }

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 13) as u8)
            .collect()
    }

    fn scales(n: usize) -> Vec<u8> {
        (0..n).map(|i| 120 + (i % 15) as u8).collect()
    }

    fn check(
        dt: DType,
        xs: &[usize],
        ss: &[usize],
        a: MxGatherDequantAttrs,
        idx: &[i64],
        is: &[usize],
    ) {
        let n: usize = xs.iter().product();
        let x = bytes(dt.byte_len(n).unwrap(), 7);
        let x: Vec<u8> = if dt == DType::E2M1 {
            x
        } else {
            // No NaN codes: the comparison below is bit for bit, NaN payloads aside.
            x.iter().map(|b| b & 0x7e).collect()
        };
        let s = scales(ss.iter().product());
        let got = run(&x, dt, xs, &s, ss, &a, idx, is).unwrap();
        let want = reference(
            TensorRef::new(dt, xs, &x).unwrap(),
            TensorRef::new(DType::E8M0, ss, &s).unwrap(),
            &a,
            idx,
        );
        assert_eq!(got.len(), want.len());
        assert!(got.iter().any(|v| *v != 0.0));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "element {i}");
        }
    }

    #[test]
    fn stacked_experts_blocked_along_k() {
        // [E = 5, K = 64, N = 3] blocked along K (axis 1), gather experts (axis 0) by a [2, 2]
        // index tensor with a negative index.
        check(
            DType::E4M3,
            &[5, 64, 3],
            &[5, 2, 3],
            attrs(1, 32, 0),
            &[4, 0, -1, 2],
            &[2, 2],
        );
        // Transposed experts [E, N, K] blocked along the last axis, one expert (scalar index).
        check(
            DType::E5M2,
            &[4, 3, 64],
            &[4, 3, 2],
            attrs(-1, 32, 0),
            &[2],
            &[],
        );
        // Embedding rows: [V = 6, H = 64] blocked along H, gathered by token ids [1, 3].
        check(
            DType::E4M3,
            &[6, 64],
            &[6, 2],
            attrs(1, 32, 0),
            &[5, 0, 5],
            &[1, 3],
        );
    }

    #[test]
    fn fp4_odd_and_even_slices() {
        // Even slice (whole bytes) and odd slices (nibble by nibble).
        check(
            DType::E2M1,
            &[3, 32, 2],
            &[3, 1, 2],
            attrs(1, 32, 0),
            &[2, 0],
            &[2],
        );
        check(
            DType::E2M1,
            &[3, 32, 1],
            &[3, 1, 1],
            attrs(1, 32, 0),
            &[1, 2, 1],
            &[3],
        );
        check(
            DType::E2M1,
            &[2, 3, 32],
            &[2, 3, 1],
            attrs(2, 32, 1),
            &[2, 0],
            &[2],
        );
    }

    #[test]
    fn per_axis_and_per_tensor_scales() {
        check(DType::E4M3, &[4, 6], &[6], attrs(1, 0, 0), &[3, 1], &[2]);
        check(DType::E4M3, &[4, 6], &[], attrs(1, 0, 1), &[5, 5, 0], &[3]);
        check(DType::E4M3, &[4, 6], &[1], attrs(0, 0, 0), &[0], &[1]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = vec![0u8; 5 * 64];
        let s = vec![127u8; 5 * 2];
        let a = attrs(1, 32, 0);
        let e = run(&x, DType::E4M3, &[5, 64], &s, &[5, 2], &a, &[5], &[1]).unwrap_err();
        assert!(e.to_string().contains("index 5 is out of range"), "{e}");
        assert!(run(&x, DType::E4M3, &[5, 64], &s, &[5, 2], &a, &[-6], &[1]).is_err());
        // Gathering along the quantized axis.
        let e = run(
            &x,
            DType::E4M3,
            &[5, 64],
            &s,
            &[5, 2],
            &attrs(1, 32, 1),
            &[0],
            &[1],
        )
        .unwrap_err();
        assert!(e.to_string().contains("split scale blocks"), "{e}");
        // Gather axis out of range; indices' shape disagreeing with their count.
        assert!(run(
            &x,
            DType::E4M3,
            &[5, 64],
            &s,
            &[5, 2],
            &attrs(1, 32, 2),
            &[0],
            &[1]
        )
        .is_err());
        let mut y = vec![0u8; 2 * 64 * 4];
        let r = mx_gather_dequantize(
            TensorRef::new(DType::E4M3, &[5, 64], &x).unwrap(),
            TensorRef::new(DType::E8M0, &[5, 2], &s).unwrap(),
            &[0, 1],
            &[3],
            TensorMut::new(DType::F32, &[2, 64], &mut y).unwrap(),
            &a,
            &Serial,
        );
        assert!(r.is_err());
        // A float x.
        let xf = vec![0u8; 5 * 64 * 4];
        assert!(run(&xf, DType::F32, &[5, 64], &s, &[5, 2], &a, &[0], &[1]).is_err());
    }
}
