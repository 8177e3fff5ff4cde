//! Fast `MxDequantize`: the codec's 256-entry decode table of the FP8 format, scales decoded once, rows of
//! the output split across tasks. Memory-bound (1 byte in, 2–4 out per element), so no SIMD:
//! the compiler's loop over a table lookup and one multiply is within reach of the copy.
//! Bit-exact with [`crate::reference::mx_dequantize`] (the same f32 product and `round_T`).
//! FP4 (E2M1) values are first widened to the E4M3 bytes of the same values
//! ([`crate::codec::e2m1`]), then run through the E4M3 path: an extra byte per element, but
//! packed nibbles never line up with a row that starts at an odd element.

use super::min_rows_per_task;
use super::shared::SharedMut;
use crate::codec::e2m1::{packed_len, widened_e4m3};
use crate::codec::e8m0_to_f32;
use crate::element::{DType, Element};
use crate::error::Result;
use crate::parallel::{for_row_chunks, Parallel};
use crate::reference::decode_table;
use crate::scale_map::ScaleMap;
use crate::slices::check_len;

/// `MxDequantize(x, scale) -> y` (see [`crate::reference::mx_dequantize`]).
pub fn mx_dequantize<T: Element>(
    x: &[u8],
    dtype: DType,
    scale: &[u8],
    map: &ScaleMap,
    y: &mut [T],
    par: &dyn Parallel,
) -> Result<()> {
    if dtype == DType::E2M1 {
        check_len("x", x.len(), packed_len(map.len()))?;
        let wide = widened_e4m3(x, map.len());
        return mx_dequantize(&wide, DType::E4M3, scale, map, y, par);
    }
    check_len("x", x.len(), map.len())?;
    check_len("y", y.len(), map.len())?;
    check_len("scale", scale.len(), map.scale_len())?;
    if map.block == 0 {
        return Err(crate::error::shape_err!("scale map with block 0"));
    }
    if map.is_empty() {
        return Ok(());
    }
    let table = decode_table(dtype)?;
    let scales: Vec<f32> = scale.iter().map(|&s| e8m0_to_f32(s)).collect();
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
                    let s = scales[srow + j * m.stride_block];
                    for (&b, o) in xb.iter().zip(yb) {
                        *o = T::from_f32(table[b as usize] * s);
                    }
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
                    let s = scales[base];
                    for (&b, out) in xr.iter().zip(yr) {
                        *out = T::from_f32(table[b as usize] * s);
                    }
                } else {
                    let sr = &scales[base..base + row];
                    for ((&b, &s), out) in xr.iter().zip(sr).zip(yr) {
                        *out = T::from_f32(table[b as usize] * s);
                    }
                }
            }
        });
    }
    Ok(())
}
