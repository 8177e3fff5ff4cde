//! FP8 E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits — the top byte of an f16. Has ±Inf
//! (0x7C/0xFC) and NaN (exponent 31, mantissa ≠ 0); max finite 57344. Decode only: mxfuse reads
//! E5M2 values (`MxDequantize`) but never writes them.

/// Decodes an E5M2 byte to f32 (exact: every E5M2 value is an f16, every f16 an f32).
#[inline]
pub fn e5m2_to_f32(b: u8) -> f32 {
    E5M2_TABLE[b as usize]
}

/// Every E5M2 byte decoded, built at compile time from integer bit manipulation.
static E5M2_TABLE: [f32; 256] = build_table();

const fn decode_bits(b: u8) -> u32 {
    let sign = ((b & 0x80) as u32) << 24;
    let exp = ((b >> 2) & 0x1F) as u32;
    let man = (b & 0x3) as u32;
    if exp == 0x1F {
        return sign | if man == 0 { 0x7F80_0000 } else { 0x7FC0_0000 };
    }
    if exp != 0 {
        return sign | ((exp + 112) << 23) | (man << 21);
    }
    if man == 0 {
        return sign;
    }
    // Subnormal m·2^-16 (m = 1..3): normalise so the leading one becomes the implicit bit.
    let mut e: u32 = 127 - 16;
    let mut m = man;
    while m < 4 {
        m <<= 1;
        e -= 1;
    }
    // m is now in [4, 8): value = 1.x · 2^(e + 2 - 127).
    sign | (e + 2) << 23 | ((m & 3) << 21)
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
    use half::f16;

    #[test]
    fn every_byte_is_the_top_byte_of_an_f16() {
        // Independent oracle: E5M2 is f16 with the low 8 mantissa bits dropped.
        for b in 0..=255u8 {
            let want = f16::from_bits((b as u16) << 8).to_f32();
            let got = e5m2_to_f32(b);
            if want.is_nan() {
                assert!(got.is_nan(), "byte {b:#x}");
                assert_eq!(got.is_sign_negative(), want.is_sign_negative());
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "byte {b:#x}");
            }
        }
        assert_eq!(e5m2_to_f32(0x7B), 57344.0);
        assert_eq!(e5m2_to_f32(0x7C), f32::INFINITY);
        assert_eq!(e5m2_to_f32(0xFC), f32::NEG_INFINITY);
        assert_eq!(e5m2_to_f32(0x01), 2f32.powi(-16));
    }
}
