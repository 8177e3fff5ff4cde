//! FP8 E8M0 scales: a byte b stands for 2^(b-127); 0xFF is NaN. Byte 0 (2^-127) is an f32 subnormal.

/// The NaN scale byte.
pub const E8M0_NAN: u8 = 0xFF;

/// Decodes an E8M0 byte to f32 (exact; 0xFF → NaN).
#[inline]
pub fn e8m0_to_f32(b: u8) -> f32 {
    match b {
        E8M0_NAN => f32::NAN,
        0 => f32::from_bits(0x0040_0000),
        _ => f32::from_bits((b as u32) << 23),
    }
}

/// 2^(127-b) as f32, the exact reciprocal of a finite scale byte `b` (0..=254): multiplying by it
/// rounds exactly like dividing by the scale. Byte 254 gives the subnormal 2^-127.
#[inline]
pub fn pow2_inverse(b: u8) -> f32 {
    debug_assert!(b != E8M0_NAN);
    if b == 254 {
        f32::from_bits(0x0040_0000)
    } else {
        f32::from_bits((254 - b as u32) << 23)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_and_inverse_are_exact_powers_of_two() {
        for b in 0..=254u8 {
            let s = e8m0_to_f32(b) as f64;
            assert_eq!(s, 2f64.powi(b as i32 - 127));
            assert_eq!(pow2_inverse(b) as f64, 2f64.powi(127 - b as i32));
        }
        assert!(e8m0_to_f32(0xFF).is_nan());
    }
}
