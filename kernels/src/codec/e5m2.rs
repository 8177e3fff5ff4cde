//! FP8 E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits — the top byte of an f16. Has ±Inf
//! (0x7C/0xFC) and NaN (exponent 31, mantissa ≠ 0); max finite 57344. `MxDequantize` reads E5M2
//! values, `MxQuantizeLinear` writes them.

/// Largest finite E5M2 magnitude.
pub const E5M2_MAX: f32 = 57344.0;
/// The positive NaN byte ONNX's reference (ml_dtypes) writes.
pub const E5M2_NAN: u8 = 0x7E;
/// Byte of +57344.
const E5M2_MAX_BYTE: u8 = 0x7B;
/// Byte of +Inf.
const E5M2_INF: u8 = 0x7C;
/// f32 bit pattern of 2^-14, the smallest normal E5M2 magnitude.
const MIN_NORMAL_BITS: u32 = 0x3880_0000;

/// Converts an f32 to E5M2 with round-to-nearest-even.
///
/// `saturate` follows ONNX `Cast`/`QuantizeLinear`: when true, finite values beyond the range and
/// ±Inf become ±57344; when false values that round past 57344 (|x| ≥ 61440, the tie going to
/// the even Inf) and ±Inf become ±Inf. NaN keeps its sign bit (0x7E or 0xFE, ml_dtypes' bytes).
#[inline]
pub fn f32_to_e5m2(x: f32, saturate: bool) -> u8 {
    let bits = x.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    let abs = bits & 0x7FFF_FFFF;
    let overflow = sign | if saturate { E5M2_MAX_BYTE } else { E5M2_INF };
    if abs > 0x7F80_0000 {
        return sign | E5M2_NAN;
    }
    if abs == 0x7F80_0000 {
        return overflow;
    }
    if abs < MIN_NORMAL_BITS {
        // Subnormal range: the E5M2 subnormals are m·2^-16, m = 0..3; m = 4 is exactly the
        // smallest normal (0x04), so the encoding stays continuous. |x|·2^16 is exact in f32.
        let m = (f32::from_bits(abs) * 65536.0).round_ties_even() as u8;
        return sign | m;
    }
    // Normal range: round the 23-bit mantissa to 2 bits (ties to even), letting a carry bump
    // the exponent, then rebias from 127 to 15 (127 - 15 = 112, shifted by the 2 mantissa bits).
    let rounded = (abs + 0xF_FFFF + ((abs >> 21) & 1)) >> 21;
    let enc = rounded - (112 << 2);
    if enc > E5M2_MAX_BYTE as u32 {
        return overflow;
    }
    sign | enc as u8
}

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
    fn every_byte_round_trips() {
        for b in 0..=255u8 {
            let v = e5m2_to_f32(b);
            let back = f32_to_e5m2(v, false);
            if v.is_nan() {
                assert_eq!(back, (b & 0x80) | E5M2_NAN, "byte {b:#x}");
            } else {
                assert_eq!(back, b, "byte {b:#x}");
            }
        }
    }

    #[test]
    fn rounding_and_saturation_match_onnx() {
        // Bytes ml_dtypes (onnx.reference's cast) gives for these values.
        assert_eq!(f32_to_e5m2(61440.0, false), 0x7C); // tie between 57344 (odd) and Inf
        assert_eq!(f32_to_e5m2(61439.0, false), 0x7B);
        assert_eq!(f32_to_e5m2(61440.0, true), 0x7B);
        assert_eq!(f32_to_e5m2(-70000.0, false), 0xFC);
        assert_eq!(f32_to_e5m2(-70000.0, true), 0xFB);
        assert_eq!(f32_to_e5m2(f32::INFINITY, true), 0x7B);
        assert_eq!(f32_to_e5m2(f32::NEG_INFINITY, false), 0xFC);
        assert_eq!(f32_to_e5m2(f32::NAN, true), 0x7E);
        assert_eq!(f32_to_e5m2(-f32::NAN, false), 0xFE);
        assert_eq!(f32_to_e5m2(2f32.powi(-17), true), 0x00); // tie between 0 and 2^-16
        assert_eq!(f32_to_e5m2(3.0 * 2f32.powi(-18), true), 0x01);
        assert_eq!(f32_to_e5m2(2f32.powi(-10), true), 20);
        assert_eq!(f32_to_e5m2(3.0 * 2f32.powi(-11), true), 22);
        assert_eq!(f32_to_e5m2(1e-30, false), 0x00);
        assert_eq!(f32_to_e5m2(-1e-30, false), 0x80);
    }

    #[test]
    fn matches_exhaustive_midpoint_rule() {
        // Independent oracle: the nearest representable value, ties to the even byte; beyond
        // the largest finite value's half-step (61440) a non-saturating cast gives Inf.
        let finite: Vec<(u8, f32)> = (0..=0x7Bu8).map(|b| (b, e5m2_to_f32(b))).collect();
        let mut bits = 0u32;
        while bits < 0x4780_0000 {
            let x = f32::from_bits(bits);
            let mut best = finite[0];
            for &(b, v) in &finite {
                let (d, db) = ((x - v).abs(), (x - best.1).abs());
                if d < db || (d == db && b % 2 == 0) {
                    best = (b, v);
                }
            }
            let sat = if x > E5M2_MAX { 0x7B } else { best.0 };
            let inf = if x >= 61440.0 { 0x7C } else { best.0 };
            assert_eq!(f32_to_e5m2(x, true), sat, "x = {x:e}");
            assert_eq!(f32_to_e5m2(x, false), inf, "x = {x:e}");
            assert_eq!(f32_to_e5m2(-x, false), inf | 0x80, "x = -{x:e}");
            bits += 0x1357;
        }
    }

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
