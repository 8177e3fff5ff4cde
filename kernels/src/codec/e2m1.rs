//! FP4 E2M1 (ONNX `FLOAT4E2M1`, the MXFP4 element): 1 sign, 2 exponent (bias 1), 1 mantissa bit.
//! Sixteen codes, ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}; no Inf, no NaN. `MxDequantize` reads E2M1 values
//! and `MxMatMul` takes constant E2M1 weights.
//!
//! Packing (ONNX): two values per byte, element `2i` in the LOW nibble of byte `i`, element
//! `2i + 1` in the high nibble; an odd count leaves the last byte's high nibble as padding, so `n`
//! values take `ceil(n / 2)` bytes.
//!
//! Every E2M1 value is exactly an E4M3FN value (2 significant bits, exponents −1..2, well inside
//! E4M3's), so MXFP4 with its E8M0 block scales *is* MXFP8 after [`widen_to_e4m3`]: `MxMatMul`
//! reuses the E4M3 GEMMs on the widened bytes.

/// Bytes of `n` packed E2M1 values.
#[inline]
pub const fn packed_len(n: usize) -> usize {
    n.div_ceil(2)
}

/// The 4-bit code of element `e` of a packed E2M1 tensor.
#[inline]
pub fn nibble(packed: &[u8], e: usize) -> u8 {
    (packed[e / 2] >> ((e % 2) * 4)) & 0x0F
}

/// Decodes a 4-bit E2M1 code (the low nibble of `code`; the high one is ignored) to f32 (exact).
#[inline]
pub fn e2m1_to_f32(code: u8) -> f32 {
    E2M1_TABLE[(code & 0x0F) as usize]
}

/// Every E2M1 code decoded: `(-1)^s · 2^(e-1) · (1 + m/2)`, subnormal (e = 0) `(-1)^s · m/2`.
pub(crate) static E2M1_TABLE: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// The E4M3FN byte of every E2M1 code (same value, the sign bit moved from bit 3 to bit 7):
/// 0.5 = 2^-1 is exponent field 6 (bias 7), so code `0eem` maps to `0 eeee mmm` with the exponent
/// rebiased by +6 and the mantissa bit moved to the top of E4M3's three; code 1 (the E2M1
/// subnormal 0.5) is the normal 0x30. Checked against the decode tables in the tests.
pub(crate) static E2M1_TO_E4M3: [u8; 16] = [
    0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C, 0x80, 0xB0, 0xB8, 0xBC, 0xC0, 0xC4, 0xC8, 0xCC,
];

/// The E4M3FN byte with the value of E2M1 code `code` (low nibble).
#[inline]
pub fn e2m1_to_e4m3(code: u8) -> u8 {
    E2M1_TO_E4M3[(code & 0x0F) as usize]
}

/// Widens `n` packed E2M1 values into `n` E4M3FN bytes of the same values (a padding nibble past
/// `n` is not read).
///
/// # Panics
/// If `packed` holds fewer than `packed_len(n)` bytes or `out` fewer than `n` (the missing
/// values would otherwise come out as zeros).
pub fn widen_to_e4m3(packed: &[u8], n: usize, out: &mut [u8]) {
    assert!(
        packed.len() >= packed_len(n) && out.len() >= n,
        "widen_to_e4m3: {} packed bytes and {} outputs for {n} values",
        packed.len(),
        out.len()
    );
    for (pair, &b) in out[..n].chunks_mut(2).zip(packed) {
        pair[0] = E2M1_TO_E4M3[(b & 0x0F) as usize];
        if let Some(hi) = pair.get_mut(1) {
            *hi = E2M1_TO_E4M3[(b >> 4) as usize];
        }
    }
}

/// [`widen_to_e4m3`] into a new vector (panics as it does).
pub fn widened_e4m3(packed: &[u8], n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    widen_to_e4m3(packed, n, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{e4m3_to_f32, f32_to_e4m3};

    #[test]
    fn every_code_matches_the_format_definition() {
        // Independent oracle: fields decoded in f64 (bias 1; e = 0 is subnormal m/2 · 2^0).
        for c in 0..16u8 {
            let (s, e, m) = (c >> 3, (c >> 1) & 3, c & 1);
            let mag = if e == 0 {
                m as f64 * 0.5
            } else {
                (1.0 + m as f64 / 2.0) * 2f64.powi(e as i32 - 1)
            };
            let got = e2m1_to_f32(c);
            assert_eq!(got.abs() as f64, mag, "code {c:#x}");
            assert_eq!(got.is_sign_negative(), s == 1, "code {c:#x}");
            assert!(got.is_finite());
        }
        assert_eq!(e2m1_to_f32(0x7), 6.0);
        assert_eq!(e2m1_to_f32(0xF), -6.0);
        assert_eq!(e2m1_to_f32(0x17), 6.0, "the high nibble is ignored");
    }

    #[test]
    fn widening_keeps_every_value_and_sign() {
        for c in 0..16u8 {
            let b = e2m1_to_e4m3(c);
            let (v, w) = (e2m1_to_f32(c), e4m3_to_f32(b));
            assert_eq!(v.to_bits(), w.to_bits(), "code {c:#x} -> {b:#04x}");
            assert_eq!(f32_to_e4m3(v, true), b, "code {c:#x}");
        }
    }

    #[test]
    fn unpacking_is_low_nibble_first_and_skips_the_padding() {
        // Bytes 0x21, 0x43, 0xF5: elements 1, 2, 3, 4, 5 and the padding nibble 0xF.
        let packed = [0x21u8, 0x43, 0xF5];
        let codes: Vec<u8> = (0..5).map(|e| nibble(&packed, e)).collect();
        assert_eq!(codes, [1, 2, 3, 4, 5]);
        assert_eq!(packed_len(5), 3);
        assert_eq!(packed_len(0), 0);
        let mut out = [0xAAu8; 6];
        widen_to_e4m3(&packed, 5, &mut out);
        assert_eq!(out, [0x30, 0x38, 0x3C, 0x40, 0x44, 0xAA]);
        assert_eq!(widened_e4m3(&packed, 6)[5], e2m1_to_e4m3(0xF));
        assert!(widened_e4m3(&[], 0).is_empty());
    }
}
