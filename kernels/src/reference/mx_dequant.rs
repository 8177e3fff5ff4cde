//! `MxDequantize`, one element at a time: `y = round_T(fl32(decode(x) · 2^(s − 127)))`.
//!
//! The f32 product is exact for every finite E4M3/E5M2/E2M1 value and every scale byte (a power
//! of two times at most 3 significant bits stays ≥ 2^-143, above f32's smallest subnormal 2^-149)
//! unless it reaches 2^128, where it is ±Inf; so `round_T` is the only rounding (f16/bf16: RNE).
//! E2M1 values are packed two per byte (element `e` is nibble `e % 2` of byte `e / 2`).

use crate::codec::e2m1::{e2m1_to_f32, nibble, packed_len};
use crate::codec::e4m3::E4M3_TABLE;
use crate::codec::e5m2::E5M2_TABLE;
use crate::codec::e8m0_to_f32;
use crate::element::{DType, Element};
use crate::error::{KernelError, Result};
use crate::scale_map::ScaleMap;
use crate::slices::check_len;

/// The codec's decode table of FP8 `dtype` (E4M3FN or E5M2): entry b is byte b as f32.
pub fn decode_table(dtype: DType) -> Result<&'static [f32; 256]> {
    match dtype {
        DType::E4M3 => Ok(&E4M3_TABLE),
        DType::E5M2 => Ok(&E5M2_TABLE),
        d => Err(KernelError::DType(format!(
            "x must be FLOAT8E4M3FN or FLOAT8E5M2, got {d:?}"
        ))),
    }
}

/// `MxDequantize(x, scale) -> y`, x of FP8 or FP4 (E2M1, packed) `dtype` laid out as `map` says.
pub fn mx_dequantize<T: Element>(
    x: &[u8],
    dtype: DType,
    scale: &[u8],
    map: &ScaleMap,
    y: &mut [T],
) -> Result<()> {
    check_len("y", y.len(), map.len())?;
    check_len("scale", scale.len(), map.scale_len())?;
    if dtype == DType::E2M1 {
        check_len("x", x.len(), packed_len(map.len()))?;
        for (e, out) in y.iter_mut().enumerate() {
            let s = e8m0_to_f32(scale[map.scale_index(e)]);
            *out = T::from_f32(e2m1_to_f32(nibble(x, e)) * s);
        }
        return Ok(());
    }
    check_len("x", x.len(), map.len())?;
    let table = decode_table(dtype)?;
    for (e, (&b, out)) in x.iter().zip(y.iter_mut()).enumerate() {
        let s = e8m0_to_f32(scale[map.scale_index(e)]);
        *out = T::from_f32(table[b as usize] * s);
    }
    Ok(())
}
