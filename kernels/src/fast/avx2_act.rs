//! AVX2 lanes of the pinned `exp`/`sigmoid` (`reference::math`) and of the SwiGLU activation
//! (`reference::swiglu_value`): the same f32 operations in the same order, so the same bits.
#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::avx2::Lanes;
use crate::attrs::{Activation, SwiGluAttrs, SwishForm};
use crate::element::Element;
use crate::reference::math::{EXP_HI, EXP_LO, EXP_POLY, EXP_SHIFTER, LN2_HI, LN2_LO, LOG2E};

/// 8 lanes of `reference::math::exp_f32`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn exp8(x: __m256) -> __m256 {
    let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
    let hi = _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(EXP_HI));
    let lo = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_LO));
    // Keep the in-range arithmetic well-defined on the lanes the masks overwrite.
    let xc = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(EXP_LO)),
        _mm256_set1_ps(EXP_HI),
    );
    // The same fma sequence as the scalar reference (vfmadd is correctly rounded like mul_add).
    let shifter = _mm256_set1_ps(EXP_SHIFTER);
    let n = _mm256_sub_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(LOG2E), shifter), shifter);
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), xc);
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY[0]);
    for c in &EXP_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
    }
    let one = _mm256_set1_ps(1.0);
    let y = _mm256_fmadd_ps(_mm256_fmadd_ps(p, r, one), r, one);
    let e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    let res = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e)));
    let res = _mm256_blendv_ps(res, _mm256_set1_ps(f32::INFINITY), hi);
    let res = _mm256_blendv_ps(res, _mm256_setzero_ps(), lo);
    _mm256_blendv_ps(res, x, nan)
}

/// 8 lanes of `reference::math::sigmoid_f32`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn sigmoid8(z: __m256) -> __m256 {
    let neg = _mm256_xor_ps(z, _mm256_set1_ps(-0.0));
    let one = _mm256_set1_ps(1.0);
    _mm256_div_ps(one, _mm256_add_ps(one, exp8(neg)))
}

/// `min(v, lim)` keeping NaN: `_mm256_min_ps(a, b)` returns b when either is NaN.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn min_keep_nan(v: __m256, lim: __m256) -> __m256 {
    _mm256_min_ps(lim, v)
}

/// `clamp(v, -lim, lim)` keeping NaN.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn clamp_keep_nan(v: __m256, lim: __m256) -> __m256 {
    let neg = _mm256_xor_ps(lim, _mm256_set1_ps(-0.0));
    _mm256_max_ps(neg, _mm256_min_ps(lim, v))
}

/// 8 lanes of `reference::swiglu_value::<T>` (gate and up are T values widened to f32).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn swiglu8<T: Lanes + Element>(gate: __m256, up: __m256, a: &SwiGluAttrs) -> __m256 {
    let oai = a.activation == Activation::Oai;
    let alpha = _mm256_set1_ps(a.alpha);
    if a.fp32_activation {
        let (g, u) = if oai {
            let lim = _mm256_set1_ps(a.limit);
            (
                min_keep_nan(gate, lim),
                _mm256_add_ps(clamp_keep_nan(up, lim), _mm256_set1_ps(a.beta)),
            )
        } else {
            (gate, up)
        };
        return _mm256_mul_ps(_mm256_mul_ps(g, sigmoid8(_mm256_mul_ps(alpha, g))), u);
    }
    let (g, u) = if oai {
        let lim = _mm256_set1_ps(T::round_f32(a.limit));
        let beta = _mm256_set1_ps(T::round_f32(a.beta));
        (
            min_keep_nan(gate, lim),
            T::round8(_mm256_add_ps(clamp_keep_nan(up, lim), beta)),
        )
    } else {
        (gate, up)
    };
    let swish = match a.swish_form {
        SwishForm::SingleOp => T::round8(_mm256_mul_ps(g, sigmoid8(_mm256_mul_ps(alpha, g)))),
        SwishForm::Unrolled => {
            let z = if a.alpha == 1.0 {
                g
            } else {
                T::round8(_mm256_mul_ps(g, _mm256_set1_ps(T::round_f32(a.alpha))))
            };
            T::round8(_mm256_mul_ps(g, T::round8(sigmoid8(z))))
        }
    };
    T::round8(_mm256_mul_ps(swish, u))
}

#[cfg(test)]
mod tests {
    //! Lane-level bit-exactness (the quantizer after them would hide 1-ulp differences).
    use super::*;
    use crate::attrs::SwiGluLayout;
    use crate::fast::Isa;
    use crate::reference::math::{exp_f32, sigmoid_f32};
    use crate::reference::swiglu_value;
    use half::{bf16, f16};

    fn lanes(v: __m256) -> [f32; 8] {
        let mut out = [0f32; 8];
        // SAFETY: plain unaligned store of 8 lanes into an 8-element array.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) };
        out
    }

    /// Inputs: a dense sweep plus the special values.
    fn inputs() -> Vec<f32> {
        let mut v: Vec<f32> = (0..40_000)
            .map(|i| (i as f32 - 20_000.0) * 0.0071)
            .collect();
        v.extend([
            0.0,
            -0.0,
            87.0,
            -87.0,
            88.0,
            88.1,
            -87.1,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-40,
        ]);
        while !v.len().is_multiple_of(8) {
            v.push(1.0);
        }
        v
    }

    #[test]
    fn exp_and_sigmoid_lanes_equal_scalar() {
        if Isa::detect() != Isa::Avx2 {
            return;
        }
        for c in inputs().chunks_exact(8) {
            // SAFETY: AVX2 is present (checked above).
            let (e, s) = unsafe {
                let x = _mm256_loadu_ps(c.as_ptr());
                (lanes(exp8(x)), lanes(sigmoid8(x)))
            };
            for j in 0..8 {
                assert_eq!(e[j].to_bits(), exp_f32(c[j]).to_bits(), "exp({})", c[j]);
                assert_eq!(
                    s[j].to_bits(),
                    sigmoid_f32(c[j]).to_bits(),
                    "sigmoid({})",
                    c[j]
                );
            }
        }
    }

    fn swiglu_lanes_equal<T: Lanes + Element>() {
        let xs: Vec<f32> = inputs().iter().map(|&x| T::round_f32(x * 1.3)).collect();
        for activation in [Activation::Silu, Activation::Oai] {
            for (alpha, swish_form) in [
                (1.0, SwishForm::Unrolled),
                (1.702, SwishForm::Unrolled),
                (1.702, SwishForm::SingleOp),
            ] {
                for fp32_activation in [false, true] {
                    let a = SwiGluAttrs {
                        layout: SwiGluLayout::Separate,
                        activation,
                        alpha,
                        limit: 7.0,
                        beta: 1.0,
                        fp32_activation,
                        swish_form,
                        quant: Default::default(),
                    };
                    for (g, u) in xs.chunks_exact(8).zip(xs.chunks_exact(8).rev()) {
                        // SAFETY: AVX2 is present (checked by the caller).
                        let got = unsafe {
                            lanes(swiglu8::<T>(
                                _mm256_loadu_ps(g.as_ptr()),
                                _mm256_loadu_ps(u.as_ptr()),
                                &a,
                            ))
                        };
                        for j in 0..8 {
                            let want = swiglu_value::<T>(g[j], u[j], &a);
                            // A NaN's sign and payload are not part of the contract (quantize
                            // maps every NaN to one byte); the release build's scalar code
                            // and the lanes make NaNs of different signs.
                            if got[j].is_nan() && want.is_nan() {
                                continue;
                            }
                            assert_eq!(
                                got[j].to_bits(),
                                want.to_bits(),
                                "{a:?} g={} u={}",
                                g[j],
                                u[j]
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn swiglu_lanes_equal_scalar() {
        if Isa::detect() != Isa::Avx2 {
            return;
        }
        swiglu_lanes_equal::<f32>();
        swiglu_lanes_equal::<f16>();
        swiglu_lanes_equal::<bf16>();
    }
}
