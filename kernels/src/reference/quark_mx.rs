//! AMD Quark's MX fake quantization, `com.amd.quark::MXQuantizeDequantize`, for every element
//! type Quark exports (fp8_e4m3, fp8_e5m2, fp6_e3m2, fp6_e2m3, fp4_e2m1, int8): the semantics of
//! Quark's CPU kernel (`src/mx/cpu/mx_kernel.cc`, summarized in shared/guides/real-material.md
//! §1.2), one block at a time, in f32 as Quark computes:
//!
//! * `shared_exp` = the largest biased f32 exponent field in the block; NaN and Inf (field 0xFF)
//!   count as 0, so they never set the scale.
//! * `scale = 2^(shared_exp − 127 − emax)`, **not** clamped to E8M0's range: down to 2^-142 for
//!   E5M2, an f32 subnormal, which is still exact (no flush).
//! * each finite `x`: `e = x / scale`; FP elements round `e` to nearest even on the element's grid
//!   (subnormal below its minimum normal exponent) and saturate to ±max_norm; INT8 rounds `64·e`
//!   to an integer by `rounding_mode`, clamps it to [−128, 127] and scales back by 2^-6.
//! * output `scale · element` (an f32 multiply, as in Quark: for E5M2 blocks of f32 subnormals the
//!   product itself may round); NaN and Inf pass unchanged.
//!
//! One deliberate difference: Quark's generic element rounding returns +0 for an element that
//! rounds to zero (and for −0), ours keeps the sign, as Quark's ORT-Float8 build does for E4M3 and
//! E5M2 and as our E4M3 path does. The values compare equal.

use crate::error::{KernelError, Result};

/// The element type of a Quark MX fake quantization (its `element_dtype` attribute).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuarkElement {
    Fp8E4M3,
    Fp8E5M2,
    Fp6E3M2,
    Fp6E2M3,
    Fp4E2M1,
    Int8,
}

/// A floating-point element format: exponent and mantissa widths and its largest finite value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FpFormat {
    pub ebits: u32,
    pub mbits: u32,
    pub max_norm: f32,
}

impl FpFormat {
    /// The smallest normal exponent, `1 − bias`; below it the element is subnormal.
    pub fn min_normal_exp(self) -> i32 {
        2 - (1 << (self.ebits - 1))
    }
}

impl QuarkElement {
    /// Every element type, in Quark's order.
    pub const ALL: [QuarkElement; 6] = [
        QuarkElement::Fp8E5M2,
        QuarkElement::Fp8E4M3,
        QuarkElement::Fp6E3M2,
        QuarkElement::Fp6E2M3,
        QuarkElement::Fp4E2M1,
        QuarkElement::Int8,
    ];

    /// Parses Quark's `element_dtype` string.
    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|e| e.name()).collect();
                KernelError::Unsupported(format!("element_dtype {s:?} is not one of {names:?}"))
            })
    }

    /// Quark's spelling.
    pub fn name(self) -> &'static str {
        match self {
            QuarkElement::Fp8E4M3 => "fp8_e4m3",
            QuarkElement::Fp8E5M2 => "fp8_e5m2",
            QuarkElement::Fp6E3M2 => "fp6_e3m2",
            QuarkElement::Fp6E2M3 => "fp6_e2m3",
            QuarkElement::Fp4E2M1 => "fp4_e2m1",
            QuarkElement::Int8 => "int8",
        }
    }

    /// The exponent of the element's largest power of two (`emax_elem` of OCP MX); INT8's 0 is
    /// with its implicit 2^-6, i.e. elements in [−2, 2).
    pub fn emax(self) -> i32 {
        match self {
            QuarkElement::Fp8E4M3 => 8,
            QuarkElement::Fp8E5M2 => 15,
            QuarkElement::Fp6E3M2 => 4,
            QuarkElement::Fp6E2M3 | QuarkElement::Fp4E2M1 => 2,
            QuarkElement::Int8 => 0,
        }
    }

    /// The floating-point format, `None` for INT8.
    pub fn fp_format(self) -> Option<FpFormat> {
        let (ebits, mbits, max_norm) = match self {
            QuarkElement::Fp8E4M3 => (4, 3, 448.0),
            QuarkElement::Fp8E5M2 => (5, 2, 57344.0),
            QuarkElement::Fp6E3M2 => (3, 2, 28.0),
            QuarkElement::Fp6E2M3 => (2, 3, 7.5),
            QuarkElement::Fp4E2M1 => (2, 1, 6.0),
            QuarkElement::Int8 => return None,
        };
        Some(FpFormat {
            ebits,
            mbits,
            max_norm,
        })
    }
}

/// How INT8 elements round (Quark's `rounding_mode`; FP elements always round half to even).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntRounding {
    /// 0: half away from zero (`std::round`).
    HalfAwayFromZero,
    /// 1: half toward +∞ (Quark's "DPU" rounding).
    HalfUp,
    /// 2: half to even (Python 3's `round`).
    HalfEven,
}

impl IntRounding {
    pub fn from_mode(mode: i64) -> Result<Self> {
        match mode {
            0 => Ok(IntRounding::HalfAwayFromZero),
            1 => Ok(IntRounding::HalfUp),
            2 => Ok(IntRounding::HalfEven),
            // Quark's kernel falls back to half away from zero; an unknown mode is more likely a
            // mistake than a request for that, so it is refused.
            other => Err(KernelError::Attribute(format!(
                "rounding_mode {other} is not 0 (half away from zero), \
                 1 (half up) or 2 (half to even)"
            ))),
        }
    }

    /// `v` rounded to an integer (exact: `v` is an f32 of magnitude below 2^8 here).
    fn round(self, v: f32) -> f32 {
        match self {
            IntRounding::HalfAwayFromZero => v.round(),
            // Not `(v + 0.5).floor()`: that sum can round up (0.49999997 + 0.5 == 1.0 in f32).
            IntRounding::HalfUp => {
                let f = v.floor();
                let r = if v - f >= 0.5 { f + 1.0 } else { f };
                r.copysign(v)
            }
            IntRounding::HalfEven => v.round_ties_even(),
        }
    }
}

/// The biased f32 exponent field, with NaN and Inf (0xFF) read as 0 as Quark does.
fn exponent_field(x: f32) -> u32 {
    match (x.to_bits() >> 23) & 0xFF {
        0xFF => 0,
        e => e,
    }
}

/// `2^k` as an f32 for `k` in [−149, 127], subnormals included (exact).
pub fn pow2_f32(k: i32) -> f32 {
    debug_assert!((-149..=127).contains(&k));
    if k >= -126 {
        f32::from_bits(((k + 127) as u32) << 23)
    } else {
        f32::from_bits(1 << (k + 149))
    }
}

/// The block scale `2^(shared_exp − 127 − emax)` (between 2^-142 and 2^127, exact in f32).
pub fn block_scale(block: &[f32], element: QuarkElement) -> f32 {
    let shared = block.iter().map(|&x| exponent_field(x)).max().unwrap_or(0);
    pow2_f32(shared as i32 - 127 - element.emax())
}

/// `e` rounded to nearest even on the grid of `f` and saturated to ±max_norm; the sign is kept.
/// `e` is finite. Computed in f64, where every step is exact.
pub fn round_to_fp(e: f32, f: FpFormat) -> f32 {
    let a = f64::from(e.abs());
    if a == 0.0 {
        return e;
    }
    // floor(log2 a) from the f64 exponent field (a widened f32 is always an f64 normal); below
    // the element's smallest normal exponent the step stays that of its subnormals.
    let exp = ((a.to_bits() >> 52) as i32 - 1023).max(f.min_normal_exp());
    // 2^(exp − mbits) and its inverse from their bits: exact, and cheaper than powi per element.
    let pow2 = |k: i32| f64::from_bits(((k + 1023) as u64) << 52);
    let step = exp - f.mbits as i32;
    let r = ((a * pow2(-step)).round_ties_even() * pow2(step)).min(f64::from(f.max_norm));
    (r as f32).copysign(e)
}

/// `e` as an INT8 element with the implicit 2^-6: `round(64·e)` clamped to [−128, 127], times 2^-6.
pub fn round_to_int8(e: f32, rounding: IntRounding) -> f32 {
    let k = rounding.round(e * 64.0).clamp(-128.0, 127.0);
    (k / 64.0).copysign(e)
}

/// Fake-quantizes one block (any length; a block padded with zeros gives the same values, since a
/// zero never raises the shared exponent).
pub fn quark_mx_block(x: &[f32], y: &mut [f32], element: QuarkElement, rounding: IntRounding) {
    debug_assert_eq!(x.len(), y.len());
    let scale = block_scale(x, element);
    let fp = element.fp_format();
    for (&v, out) in x.iter().zip(y.iter_mut()) {
        *out = if !v.is_finite() {
            v
        } else {
            let e = v / scale;
            let q = match fp {
                Some(f) => round_to_fp(e, f),
                None => round_to_int8(e, rounding),
            };
            scale * q
        };
    }
}

/// Fake-quantizes `x` (rows of `len` values, blocks of `block` along each row, the last one
/// partial when `block` does not divide `len`) into `y`.
pub fn quark_mx_fake_quant(
    x: &[f32],
    y: &mut [f32],
    len: usize,
    block: usize,
    element: QuarkElement,
    rounding: IntRounding,
) -> Result<()> {
    if block == 0 || len == 0 || x.len() != y.len() || !x.len().is_multiple_of(len) {
        return Err(KernelError::Shape(format!(
            "Quark MX fake quant: {} values in rows of {len}, blocks of {block}, {} outputs",
            x.len(),
            y.len()
        )));
    }
    for (xr, yr) in x.chunks_exact(len).zip(y.chunks_exact_mut(len)) {
        for (xb, yb) in xr.chunks(block).zip(yr.chunks_mut(block)) {
            quark_mx_block(xb, yb, element, rounding);
        }
    }
    Ok(())
}
