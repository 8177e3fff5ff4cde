//! FP8 E4M3FN: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no Inf; 0x7F/0xFF are NaN; max 448.

/// Largest finite E4M3FN magnitude.
pub const E4M3_MAX: f32 = 448.0;
/// The positive NaN byte (what ONNX and torch write for NaN).
pub const E4M3_NAN: u8 = 0x7F;
/// Byte of +448.
const E4M3_MAX_BYTE: u8 = 0x7E;
/// f32 bit pattern of 2^-6, the smallest normal E4M3FN magnitude.
const MIN_NORMAL_BITS: u32 = 0x3C80_0000;

/// Converts an f32 to E4M3FN with round-to-nearest-even.
///
/// `saturate` follows ONNX `Cast`/`QuantizeLinear`: when true, finite values beyond the range and
/// ±Inf become ±448; when false they become NaN (0x7F/0xFF, sign kept). NaN keeps its sign bit
/// (0x7F or 0xFF), as ONNX's reference does.
#[inline]
pub fn f32_to_e4m3(x: f32, saturate: bool) -> u8 {
    let bits = x.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    let abs = bits & 0x7FFF_FFFF;
    if abs > 0x7F80_0000 {
        return sign | E4M3_NAN;
    }
    if abs == 0x7F80_0000 {
        return sign | if saturate { E4M3_MAX_BYTE } else { E4M3_NAN };
    }
    if abs < MIN_NORMAL_BITS {
        // Subnormal range: the E4M3 subnormals are m·2^-9, m = 0..7; m = 8 is exactly the
        // smallest normal (0x08), so the encoding stays continuous. |x|·512 is exact in f32.
        let m = (f32::from_bits(abs) * 512.0).round_ties_even() as u8;
        return sign | m;
    }
    // Normal range: round the 23-bit mantissa to 3 bits (ties to even), letting a carry bump
    // the exponent, then rebias from 127 to 7 (127 - 7 = 120, shifted by the 3 mantissa bits).
    let rounded = (abs + 0x7_FFFF + ((abs >> 20) & 1)) >> 20;
    let enc = rounded - (120 << 3);
    if enc > E4M3_MAX_BYTE as u32 {
        return sign | if saturate { E4M3_MAX_BYTE } else { E4M3_NAN };
    }
    sign | enc as u8
}

/// Decodes an E4M3FN byte to f32 (exact).
#[inline]
pub fn e4m3_to_f32(b: u8) -> f32 {
    E4M3_TABLE[b as usize]
}

/// Every E4M3FN byte decoded, built at compile time from integer bit manipulation.
pub(crate) static E4M3_TABLE: [f32; 256] = build_table();

const fn decode_bits(b: u8) -> u32 {
    let sign = ((b & 0x80) as u32) << 24;
    let exp = ((b >> 3) & 0xF) as u32;
    let man = (b & 0x7) as u32;
    if exp == 0xF && man == 0x7 {
        return sign | 0x7FC0_0000;
    }
    if exp != 0 {
        return sign | ((exp + 120) << 23) | (man << 20);
    }
    if man == 0 {
        return sign;
    }
    // Subnormal m·2^-9: normalise the mantissa so its leading one becomes the implicit bit.
    let mut e: u32 = 127 - 9;
    let mut m = man;
    while m < 8 {
        m <<= 1;
        e -= 1;
    }
    // m is now in [8, 16): value = m·2^(e-127-3) = 1.xxx · 2^(e-127).
    sign | (e + 3) << 23 | ((m & 7) << 20)
}

const fn build_table() -> [f32; 256] {
    let mut t = [0.0f32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = f32::from_bits(decode_bits(i as u8));
        i += 1;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_known_values() {
        assert_eq!(e4m3_to_f32(0x7E), 448.0);
        assert_eq!(e4m3_to_f32(0xFE), -448.0);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_to_f32(0x07), 7.0 * 2f32.powi(-9));
        assert_eq!(e4m3_to_f32(0x08), 2f32.powi(-6));
        assert_eq!(e4m3_to_f32(0x38), 1.0);
        assert!(e4m3_to_f32(0x7F).is_nan() && e4m3_to_f32(0xFF).is_nan());
        assert_eq!(e4m3_to_f32(0x80).to_bits(), 0x8000_0000);
    }

    #[test]
    fn every_byte_round_trips() {
        for b in 0..=255u8 {
            let v = e4m3_to_f32(b);
            let back = f32_to_e4m3(v, false);
            if v.is_nan() {
                assert_eq!(back & 0x7F, 0x7F);
            } else {
                assert_eq!(back, b, "byte {b:#x}");
            }
        }
    }

    #[test]
    fn rounding_and_saturation_match_onnx() {
        // 464 is the tie between 448 (even) and 480 (not representable): RNE keeps 448.
        assert_eq!(f32_to_e4m3(464.0, false), 0x7E);
        assert_eq!(f32_to_e4m3(464.01, false), 0x7F);
        assert_eq!(f32_to_e4m3(464.01, true), 0x7E);
        assert_eq!(f32_to_e4m3(-500.0, true), 0xFE);
        assert_eq!(f32_to_e4m3(f32::INFINITY, true), 0x7E);
        assert_eq!(f32_to_e4m3(f32::NEG_INFINITY, false), 0xFF);
        assert_eq!(f32_to_e4m3(f32::NAN, true), 0x7F);
        assert_eq!(f32_to_e4m3(-f32::NAN, true), 0xFF);
        // 2^-10 is the tie between 0 and the smallest subnormal 2^-9: ties to even gives 0.
        assert_eq!(f32_to_e4m3(2f32.powi(-10), true), 0x00);
        assert_eq!(f32_to_e4m3(-2f32.powi(-10), true), 0x80);
        assert_eq!(f32_to_e4m3(1e-3, true), 0x01);
    }

    #[test]
    fn matches_exhaustive_midpoint_rule() {
        // Independent oracle: the nearest representable value, ties to the even byte.
        let finite: Vec<(u8, f32)> = (0..=0x7Eu8).map(|b| (b, e4m3_to_f32(b))).collect();
        let mut bits = 0u32;
        while bits < 0x43F0_0000 {
            let x = f32::from_bits(bits);
            let mut best = finite[0];
            for &(b, v) in &finite {
                let (d, db) = ((x - v).abs(), (x - best.1).abs());
                if d < db || (d == db && b % 2 == 0) {
                    best = (b, v);
                }
            }
            let want = if x > 464.0 { 0x7E } else { best.0 };
            assert_eq!(f32_to_e4m3(x, true), want, "x = {x:e}");
            bits += 0x1357;
        }
    }
}
