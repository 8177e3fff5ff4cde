//! Fast `MxQuantizeLinear`: rows of the output split across tasks; a run of elements sharing one
//! finite scale is scaled into a small f32 buffer and cast by the vectorized E4M3 encoder
//! ([`super::codec`]); E5M2 outputs, NaN scales and per-element scales (a strided axis with a
//! blocked or per-axis scale) take the scalar reference step. Bit-exact with
//! [`crate::reference::mx_quantize_linear`]: the same f32 product, the same encoders.

use super::codec::encode_e4m3;
use super::min_rows_per_task;
use super::shared::SharedMut;
use super::FastElement;
use crate::codec::{pow2_inverse, E8M0_NAN};
use crate::element::DType;
use crate::error::{shape_err, Result};
use crate::parallel::{for_row_chunks, Parallel};
use crate::reference::{divide_by_e8m0, fp8_encoder, Fp8Encoder};
use crate::scale_map::ScaleMap;
use crate::slices::check_len;

/// Elements scaled per call of the vector encoder (a stack buffer of f32).
const RUN: usize = 256;

/// How one run of elements that share a scale byte is encoded.
#[derive(Clone, Copy)]
struct Encode {
    vector_e4m3: bool,
    encode: Fp8Encoder,
    saturate: bool,
}

impl Encode {
    fn run<T: FastElement>(&self, x: &[T], s: u8, out: &mut [u8]) {
        if self.vector_e4m3 && s != E8M0_NAN {
            let inv = pow2_inverse(s);
            let mut buf = [0f32; RUN];
            for (xc, oc) in x.chunks(RUN).zip(out.chunks_mut(RUN)) {
                for (b, v) in buf.iter_mut().zip(xc) {
                    *b = v.to_f32() * inv;
                }
                encode_e4m3(&buf[..xc.len()], oc, self.saturate);
            }
        } else {
            for (v, o) in x.iter().zip(out) {
                *o = (self.encode)(divide_by_e8m0(v.to_f32(), s), self.saturate);
            }
        }
    }
}

/// `MxQuantizeLinear(x, scale) -> y` (see [`crate::reference::mx_quantize_linear`]).
pub fn mx_quantize_linear<T: FastElement>(
    x: &[T],
    scale: &[u8],
    map: &ScaleMap,
    dtype: DType,
    saturate: bool,
    y: &mut [u8],
    par: &dyn Parallel,
) -> Result<()> {
    check_len("x", x.len(), map.len())?;
    check_len("y", y.len(), map.len())?;
    check_len("scale", scale.len(), map.scale_len())?;
    if map.block == 0 {
        return Err(shape_err!("scale map with block 0"));
    }
    let enc = Encode {
        vector_e4m3: dtype == DType::E4M3,
        encode: fp8_encoder(dtype)?,
        saturate,
    };
    if map.is_empty() {
        return Ok(());
    }
    let m = *map;
    let y = SharedMut::new(y);
    if m.inner == 1 {
        // Blocks run along the contiguous axis: one row per outer index, one scale per block.
        let row = m.axis_len;
        for_row_chunks(par, m.outer, min_rows_per_task(row), &|r0, r1| {
            // SAFETY: row chunks are disjoint, so these pieces are too.
            let out = unsafe { y.piece(r0 * row, r1 * row) };
            for (r, (xr, yr)) in x[r0 * row..r1 * row]
                .chunks_exact(row)
                .zip(out.chunks_exact_mut(row))
                .enumerate()
            {
                let srow = (r0 + r) * m.stride_outer;
                for (j, (xb, yb)) in xr.chunks(m.block).zip(yr.chunks_mut(m.block)).enumerate() {
                    enc.run(xb, scale[srow + j * m.stride_block], yb);
                }
            }
        });
    } else {
        // The axis is strided: one row of `inner` elements per (outer, axis) index.
        let (rows, row) = (m.outer * m.axis_len, m.inner);
        for_row_chunks(par, rows, min_rows_per_task(row), &|r0, r1| {
            // SAFETY: row chunks are disjoint, so these pieces are too.
            let out = unsafe { y.piece(r0 * row, r1 * row) };
            for (r, (xr, yr)) in x[r0 * row..r1 * row]
                .chunks_exact(row)
                .zip(out.chunks_exact_mut(row))
                .enumerate()
            {
                let (o, d) = ((r0 + r) / m.axis_len, (r0 + r) % m.axis_len);
                let base = o * m.stride_outer + (d / m.block) * m.stride_block;
                if m.stride_inner == 0 {
                    enc.run(xr, scale[base], yr);
                } else {
                    let sr = &scale[base..base + row];
                    for ((v, &s), out) in xr.iter().zip(sr).zip(yr) {
                        *out = (enc.encode)(divide_by_e8m0(v.to_f32(), s), saturate);
                    }
                }
            }
        });
    }
    Ok(())
}
