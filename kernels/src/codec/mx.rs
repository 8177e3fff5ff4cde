//! The MXFP8 block quantizer: 32 values → one E8M0 scale byte + 32 E4M3FN bytes.
//!
//! This scalar version is the definition (docs/ops.md, "Common attributes"); the reference ops
//! call it per block and the vectorized paths must agree with it bit for bit.

use super::e4m3::{f32_to_e4m3, E4M3_NAN};
use super::e8m0::{pow2_inverse, E8M0_NAN};
use crate::error::{KernelError, Result};

/// MX block size along the last axis. Only 32 is supported.
pub const BLOCK: usize = 32;

/// How the E8M0 scale byte is derived from the block's absolute maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScaleRule {
    /// OCP MX v1.0: the exponent of fl32(amax·2^-8), rounded down — ONNX
    /// `Cast(amax·2^-8, FLOAT8E8M0, round_mode=down, saturate=1)`. The scaled block max lands
    /// in [256, 512) and values above 448 saturate.
    #[default]
    Floor,
    /// Round-up of fl32(amax·fl32(1/448)) to a power of two (torchao RCEIL, vLLM ≥ #53110,
    /// FlashInfer): the scaled block max lands in (224, 448], never saturating.
    Rceil,
    /// The OCP floor rule as a float16 graph computes it: amax·2^-8 rounded to float16 (RNE,
    /// subnormals kept) before the round-down — ONNX `Cast(Mul(amax, 2^-8), FLOAT8E8M0,
    /// round_mode=down)` with amax and the product in float16. Equal to `Floor` for every
    /// float16 amax ≥ 2^-6 (the product is a normal float16, exact); below it the product lands on float16's
    /// subnormal grid (multiples of 2^-24) and may round up to the next power of two, or to 0
    /// (byte 0, as a zero block) below 2^-25·2^8.
    FloorF16,
}

/// What a NaN (or, under `Propagate`, an Inf) does to its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NanPolicy {
    /// As the standard ONNX spelling computes it (`onnx.reference`, torch): a NaN or ±Inf in the
    /// block makes the scale 0xFF (the E8M0 cast of a non-finite amax) and every value 0x7F.
    #[default]
    Propagate,
    /// As vLLM's Triton kernel: the scale comes from the non-NaN elements (an Inf gives byte
    /// 254); a NaN element becomes 0x7F, an Inf element 0x7F/0xFF (sign kept).
    Ignore,
}

impl ScaleRule {
    /// Parses the `scale_rule` attribute.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "floor" => Ok(Self::Floor),
            "rceil" => Ok(Self::Rceil),
            "floor_f16" => Ok(Self::FloorF16),
            _ => Err(KernelError::Attribute(format!(
                "scale_rule must be \"floor\", \"rceil\" or \"floor_f16\", got {s:?}"
            ))),
        }
    }

    /// The E8M0 byte for a block whose absolute maximum is `amax` (not NaN; +Inf gives 254).
    #[inline]
    pub fn scale_byte(self, amax: f32) -> u8 {
        if amax == f32::INFINITY {
            return 254;
        }
        match self {
            ScaleRule::Floor => {
                // Round-down to a power of two is the biased exponent of the product; a
                // subnormal or zero product (below 2^-126) saturates to byte 0 (2^-127).
                let e = (amax * (1.0 / 256.0)).to_bits() >> 23;
                e.min(254) as u8
            }
            ScaleRule::FloorF16 => {
                // The product is exact in f32 (amax ≥ 2^-118 or zero in a float16 graph); one
                // rounding to float16 then gives the graph's value. Above float16's range the
                // product becomes +Inf, which saturates like a huge amax (byte 254).
                let p = half::f16::from_f32(amax * (1.0 / 256.0)).to_f32();
                let e = p.to_bits() >> 23;
                e.min(254) as u8
            }
            ScaleRule::Rceil => {
                let bits = (amax * (1.0f32 / 448.0)).to_bits();
                let (e, m) = (bits >> 23, bits & 0x7F_FFFF);
                let byte = if e == 0 {
                    // Subnormal quotient m·2^-149: it is above 2^-127 (byte 0) iff m > 2^22.
                    u32::from(m > 0x40_0000)
                } else {
                    e + u32::from(m != 0)
                };
                byte.min(254) as u8
            }
        }
    }
}

impl NanPolicy {
    /// Parses the `nan_policy` attribute.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "propagate" => Ok(Self::Propagate),
            "ignore" => Ok(Self::Ignore),
            _ => Err(KernelError::Attribute(format!(
                "nan_policy must be \"propagate\" or \"ignore\", got {s:?}"
            ))),
        }
    }
}

/// The quantizer settings shared by every quantizing op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuantConfig {
    pub scale_rule: ScaleRule,
    pub nan_policy: NanPolicy,
}

/// Quantizes one block of 32 f32 values (already rounded to the activation dtype where the op
/// says so) into `q` and returns the E8M0 scale byte.
///
/// Values are `sat_rne_e4m3(x · 2^(127-scale))`; multiplying by the exact power-of-two inverse
/// rounds exactly like ONNX `QuantizeLinear`'s division.
pub fn quantize_block(x: &[f32; BLOCK], q: &mut [u8; BLOCK], cfg: QuantConfig) -> u8 {
    let has_nan = x.iter().any(|v| v.is_nan());
    let has_inf = x.iter().any(|v| v.is_infinite());
    if cfg.nan_policy == NanPolicy::Propagate && (has_nan || has_inf) {
        q.fill(E4M3_NAN);
        return E8M0_NAN;
    }
    // NaN-ignoring max (f32::max returns the non-NaN operand).
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let byte = cfg.scale_rule.scale_byte(amax);
    let inv = pow2_inverse(byte);
    for (dst, &v) in q.iter_mut().zip(x) {
        *dst = if v.is_nan() {
            E4M3_NAN
        } else if v.is_infinite() {
            // vLLM's cast of Inf·2^-127 = Inf is non-saturating: the element becomes NaN.
            f32_to_e4m3(v, false)
        } else {
            f32_to_e4m3(v * inv, true)
        };
    }
    byte
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_and_rceil_bytes() {
        let (f, r) = (ScaleRule::Floor, ScaleRule::Rceil);
        assert_eq!(f.scale_byte(1.0), 119);
        assert_eq!(r.scale_byte(1.0), 119);
        assert_eq!(f.scale_byte(1.75), 119);
        assert_eq!(r.scale_byte(1.75), 119);
        assert_eq!(f.scale_byte(1.7578125), 119);
        assert_eq!(r.scale_byte(1.7578125), 120);
        assert_eq!(f.scale_byte(0.0), 0);
        assert_eq!(r.scale_byte(0.0), 0);
        assert_eq!(f.scale_byte(f32::MAX), 246);
        assert_eq!(r.scale_byte(f32::MAX), 247);
        assert_eq!(r.scale_byte(f32::INFINITY), 254);
    }

    #[test]
    fn floor_f16_bytes() {
        let h = ScaleRule::FloorF16;
        // Every float16 amax ≥ 2^-6 (a normal float16 product): the floor rule.
        for bits in 0x2400u16..0x7C00 {
            let a = half::f16::from_bits(bits).to_f32();
            assert_eq!(h.scale_byte(a), ScaleRule::Floor.scale_byte(a), "{a:e}");
        }
        // 1.99·2^-12 · 2^-8 = 31.84·2^-24 rounds to 32·2^-24 = 2^-19 in float16.
        let a = 1.99 * 2f32.powi(-12);
        assert_eq!(ScaleRule::Floor.scale_byte(a), 127 - 20);
        assert_eq!(h.scale_byte(a), 127 - 19);
        // Exactly on the subnormal grid: no change (2^-24 · 3 = 3·2^-24 → floor 2^-23).
        assert_eq!(h.scale_byte(3.0 * 2f32.powi(-16)), 127 - 23);
        // Half of the smallest subnormal rounds to 0 (even), just above it to 2^-24.
        assert_eq!(h.scale_byte(2f32.powi(-17)), 0);
        assert_eq!(h.scale_byte(2f32.powi(-17) * 1.001), 127 - 24);
        assert_eq!(h.scale_byte(0.0), 0);
        assert_eq!(h.scale_byte(65504.0), ScaleRule::Floor.scale_byte(65504.0));
        assert_eq!(h.scale_byte(f32::MAX), 254);
        assert_eq!(h.scale_byte(f32::INFINITY), 254);
        assert_eq!(ScaleRule::parse("floor_f16").unwrap(), h);
    }

    #[test]
    fn rceil_equals_integer_rule_for_normal_amax() {
        // The spec's integer form: floor_log2(amax) - 8 + (mantissa > 1.75), clamped.
        let mut bits = 0x0500_0000u32; // amax/448 stays normal from here on
        while bits < 0x7F80_0000 {
            let e = (bits >> 23) as i32;
            let m = bits & 0x7F_FFFF;
            let want = (e - 8 + i32::from(m > 0x60_0000)).clamp(0, 254) as u8;
            assert_eq!(ScaleRule::Rceil.scale_byte(f32::from_bits(bits)), want);
            bits += 0x3_1F3;
        }
    }
}
