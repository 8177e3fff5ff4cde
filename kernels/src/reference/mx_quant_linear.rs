//! `MxQuantizeLinear`, one element at a time: `y = cast_sat(fl32(x / 2^(s − 127)))`, ONNX
//! `QuantizeLinear`-24 with a FLOAT8E8M0 scale and an FP8 (E4M3FN or E5M2) output.
//!
//! Where rounding happens (docs/ops.md): x (f32, or f16/bf16 widened exactly) is divided by the
//! scale in f32, as `onnx.reference` does (numpy promotes x and the E8M0 scale to f32). Division
//! by 2^k equals multiplication by the exact 2^-k (`pow2_inverse`, an f32 for every byte 0..=254):
//! both are the correctly rounded f32 of the same real number. That f32 is exact unless it
//! overflows (→ ±Inf, then saturated or not like any out-of-range value) or lands below 2^-126
//! (an f32 subnormal, far below half the smallest FP8 subnormal, so it encodes as ±0 either way).
//! The FP8 cast (RNE, `saturate`) is therefore the only rounding that shows.
//!
//! A NaN scale (byte 0xFF) makes the element NaN: x's own NaN (its sign kept) if x is NaN,
//! else +NaN — what IEEE division by NaN gives on x86, and so what `onnx.reference` gives.

use crate::codec::{f32_to_e4m3, f32_to_e5m2, pow2_inverse, E8M0_NAN};
use crate::element::{DType, Element};
use crate::error::{KernelError, Result};
use crate::scale_map::ScaleMap;
use crate::slices::check_len;

/// An FP8 encoder: `(value, saturate) -> byte`.
pub type Fp8Encoder = fn(f32, bool) -> u8;

/// The codec's encoder of FP8 `dtype` (E4M3FN or E5M2).
pub fn fp8_encoder(dtype: DType) -> Result<Fp8Encoder> {
    match dtype {
        DType::E4M3 => Ok(f32_to_e4m3),
        DType::E5M2 => Ok(f32_to_e5m2),
        d => Err(KernelError::DType(format!(
            "y must be FLOAT8E4M3FN or FLOAT8E5M2, got {d:?}"
        ))),
    }
}

/// `x / 2^(s − 127)` in f32 (see the module doc for the NaN scale).
#[inline]
pub fn divide_by_e8m0(x: f32, s: u8) -> f32 {
    if s == E8M0_NAN {
        if x.is_nan() {
            x
        } else {
            f32::NAN
        }
    } else {
        x * pow2_inverse(s)
    }
}

/// `MxQuantizeLinear(x, scale) -> y`, y of FP8 `dtype` laid out as `map` says.
pub fn mx_quantize_linear<T: Element>(
    x: &[T],
    scale: &[u8],
    map: &ScaleMap,
    dtype: DType,
    saturate: bool,
    y: &mut [u8],
) -> Result<()> {
    check_len("x", x.len(), map.len())?;
    check_len("y", y.len(), map.len())?;
    check_len("scale", scale.len(), map.scale_len())?;
    let encode = fp8_encoder(dtype)?;
    for (e, (&v, out)) in x.iter().zip(y.iter_mut()).enumerate() {
        let s = scale[map.scale_index(e)];
        *out = encode(divide_by_e8m0(v.to_f32(), s), saturate);
    }
    Ok(())
}
