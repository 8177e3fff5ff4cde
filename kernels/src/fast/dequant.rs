//! Fast `MxDequantize`: the codec's decode table of the value format, scales decoded once, rows of
//! the output split across tasks. Memory-bound (1 byte — or half a byte for FP4 — in, 2–4 out per
//! element), so no SIMD: the compiler's loop over a table lookup and one multiply is within reach
//! of the copy. Bit-exact with [`crate::reference::mx_dequantize`] (the same f32 product and
//! `round_T`). FP4 (E2M1) values are read nibble by nibble from their packed bytes, so a row may
//! start mid-byte (an odd row length).

use super::min_rows_per_task;
use super::shared::SharedMut;
use crate::codec::e2m1::{packed_len, E2M1_TABLE};
use crate::codec::e8m0_to_f32;
use crate::element::{DType, Element};
use crate::error::Result;
use crate::parallel::{for_row_chunks, Parallel};
use crate::reference::decode_table;
use crate::scale_map::ScaleMap;
use crate::slices::check_len;

/// The quantized values: FP8 bytes with their decode table, or packed E2M1 nibbles (element `e`
/// is nibble `e % 2` of byte `e / 2`). Element indices are global (row-major over x).
#[derive(Clone, Copy)]
enum Values<'a> {
    Fp8(&'a [u8], &'static [f32; 256]),
    Fp4(&'a [u8]),
}

impl Values<'_> {
    /// `out[j] = round_T(value(e0 + j) · s)`: one scale for the whole run.
    #[inline]
    fn one_scale<T: Element>(self, e0: usize, out: &mut [T], s: f32) {
        match self {
            Values::Fp8(x, table) => {
                for (&b, o) in x[e0..e0 + out.len()].iter().zip(out) {
                    *o = T::from_f32(table[b as usize] * s);
                }
            }
            Values::Fp4(x) => fp4_run(x, e0, out, |_| s),
        }
    }

    /// `out[j] = round_T(value(e0 + j) · scales[j])`: one scale per element.
    #[inline]
    fn per_element<T: Element>(self, e0: usize, out: &mut [T], scales: &[f32]) {
        match self {
            Values::Fp8(x, table) => {
                for ((&b, &s), o) in x[e0..e0 + out.len()].iter().zip(scales).zip(out) {
                    *o = T::from_f32(table[b as usize] * s);
                }
            }
            Values::Fp4(x) => fp4_run(x, e0, out, |j| scales[j]),
        }
    }
}

/// `out[j] = round_T(e2m1(element e0 + j) · scale(j))` over packed nibbles: an odd `e0` (a row
/// starting mid-byte) takes its first element alone, then whole bytes give two outputs each
/// (a per-element index and shift costs 3× the FP8 loop), then an odd last element.
#[inline]
fn fp4_run<T: Element>(x: &[u8], e0: usize, out: &mut [T], scale: impl Fn(usize) -> f32) {
    let (mut j, n) = (0, out.len());
    let value = |code: u8| E2M1_TABLE[(code & 0x0F) as usize];
    if n > 0 && e0 % 2 == 1 {
        out[0] = T::from_f32(value(x[e0 / 2] >> 4) * scale(0));
        j = 1;
    }
    let first_byte = (e0 + j) / 2;
    let pairs = (n - j) / 2;
    for (p, (&b, o)) in x[first_byte..first_byte + pairs]
        .iter()
        .zip(out[j..j + 2 * pairs].chunks_exact_mut(2))
        .enumerate()
    {
        let k = j + 2 * p;
        o[0] = T::from_f32(value(b) * scale(k));
        o[1] = T::from_f32(value(b >> 4) * scale(k + 1));
    }
    j += 2 * pairs;
    if j < n {
        out[j] = T::from_f32(value(x[(e0 + j) / 2]) * scale(j));
    }
}

/// `MxDequantize(x, scale) -> y` (see [`crate::reference::mx_dequantize`]).
pub fn mx_dequantize<T: Element>(
    x: &[u8],
    dtype: DType,
    scale: &[u8],
    map: &ScaleMap,
    y: &mut [T],
    par: &dyn Parallel,
) -> Result<()> {
    let values = if dtype == DType::E2M1 {
        check_len("x", x.len(), packed_len(map.len()))?;
        Values::Fp4(x)
    } else {
        check_len("x", x.len(), map.len())?;
        Values::Fp8(x, decode_table(dtype)?)
    };
    check_len("y", y.len(), map.len())?;
    check_len("scale", scale.len(), map.scale_len())?;
    if map.block == 0 {
        return Err(crate::error::shape_err!("scale map with block 0"));
    }
    if map.is_empty() {
        return Ok(());
    }
    let scales: Vec<f32> = scale.iter().map(|&s| e8m0_to_f32(s)).collect();
    let m = *map;
    let y = SharedMut::new(y);
    if m.inner == 1 {
        // Blocks run along the contiguous axis: one row per outer index, one scale per block.
        let row = m.axis_len;
        for_row_chunks(par, m.outer, min_rows_per_task(row), &|r0, r1| {
            // SAFETY: row chunks are disjoint, so these pieces are too.
            let out = unsafe { y.piece(r0 * row, r1 * row) };
            for (r, yr) in out.chunks_exact_mut(row).enumerate() {
                let srow = (r0 + r) * m.stride_outer;
                let e0 = (r0 + r) * row;
                for (j, yb) in yr.chunks_mut(m.block).enumerate() {
                    let s = scales[srow + j * m.stride_block];
                    values.one_scale(e0 + j * m.block, yb, s);
                }
            }
        });
    } else {
        // The axis is strided: one row of `inner` elements per (outer, axis) index.
        let (rows, row) = (m.outer * m.axis_len, m.inner);
        for_row_chunks(par, rows, min_rows_per_task(row), &|r0, r1| {
            // SAFETY: row chunks are disjoint, so these pieces are too.
            let out = unsafe { y.piece(r0 * row, r1 * row) };
            for (r, yr) in out.chunks_exact_mut(row).enumerate() {
                let (o, d) = ((r0 + r) / m.axis_len, (r0 + r) % m.axis_len);
                let base = o * m.stride_outer + (d / m.block) * m.stride_block;
                let e0 = (r0 + r) * row;
                if m.stride_inner == 0 {
                    values.one_scale(e0, yr, scales[base]);
                } else {
                    values.per_element(e0, yr, &scales[base..base + row]);
                }
            }
        });
    }
    Ok(())
}
