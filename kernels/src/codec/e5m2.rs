//! FP8 E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits — the top byte of an f16. Has ±Inf
//! (0x7C/0xFC) and NaN (exponent 31, mantissa ≠ 0); max finite 57344. Decode only: mxfuse reads
//! E5M2 values (`MxDequantize`) but never writes them.

/// Decodes an E5M2 byte to f32 (exact: every E5M2 value is an f16, every f16 an f32).
#[inline]
pub fn e5m2_to_f32(b: u8) -> f32 {
    E5M2_TABLE[b as usize]
}

/// Every E5M2 byte decoded at compile time: the byte is the top byte of an f16, whose conversion
/// to f32 is exact (`half`'s const conversion; NaNs stay NaN with their sign).
pub(crate) static E5M2_TABLE: [f32; 256] = build_table();

const fn build_table() -> [f32; 256] {
    let mut t = [0.0f32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = half::f16::from_bits((i as u16) << 8).to_f32_const();
        i += 1;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_matches_the_format_definition() {
        // Independent oracle: (-1)^s · 2^(e-15) · (1 + m/4), subnormals (m/4) · 2^-14, in f64.
        for b in 0..=255u8 {
            let (s, e, m) = (b >> 7, (b >> 2) & 0x1F, b & 3);
            let got = e5m2_to_f32(b);
            assert_eq!(got.is_sign_negative(), s == 1, "byte {b:#x}");
            if e == 0x1F {
                assert!(
                    if m == 0 {
                        got.is_infinite()
                    } else {
                        got.is_nan()
                    },
                    "byte {b:#x}"
                );
                continue;
            }
            let mag = if e == 0 {
                m as f64 / 4.0 * 2f64.powi(-14)
            } else {
                (1.0 + m as f64 / 4.0) * 2f64.powi(e as i32 - 15)
            };
            assert_eq!(got.abs() as f64, mag, "byte {b:#x}");
        }
        assert_eq!(e5m2_to_f32(0x7B), 57344.0);
        assert_eq!(e5m2_to_f32(0x7C), f32::INFINITY);
        assert_eq!(e5m2_to_f32(0xFC), f32::NEG_INFINITY);
        assert_eq!(e5m2_to_f32(0x01), 2f32.powi(-16));
    }
}
