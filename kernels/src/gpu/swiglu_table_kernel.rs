//! When and how `SwiGluMxQuant` launches the table kernels
//! `mx_swiglu_quant_bf16_e8_a{0,1}_table` (kernels/gpu/swiglu_mxquant.hip
//! `swiglu_mxquant_blocks`): the packed bf16 path alone (8 outputs a lane, rounded activation,
//! unrolled swish), with σ looked up in the bf16 logistic table of [`super::sigma_table`] that
//! each block copies into shared memory once, and a block looping over chunks of 256 lanes with
//! a stride of the grid, so the grid can be capped at what the device holds at once (one table
//! copy per resident block instead of one per chunk).
//!
//! The kernel compiles only the one path and does no dispatch of its own: where its
//! preconditions fail it executes `__trap()`. [`refusal`] is those preconditions (the same test
//! as bench/gpu/mxgpu.py `swiglu_table_ok`); the launcher asks it first and takes the default
//! kernels wherever it refuses, so the trap is unreachable from the runtime. The kernels exist on
//! CUDA sm_80+ only (`MX_SWIGLU_PACKED`, like the packed path of the default kernels); HIP and
//! older devices never take them.
//!
//! Grid ([`grid`]): min(chunks, SMs × resident blocks per SM), the resident blocks from the
//! driver's occupancy query (registers: 35 for OAI, 32 for SiLU, plus 7.8 KB of static shared
//! memory: 6 / 8 blocks of 256 lanes on sm_90), or the full grid where the driver has no query.
//!
//! Measured (NVIDIA H200, 2026-12-01, bench/gpu/ab_sigtab.py, I = 768, split halves, PDL,
//! CUDA-graph replay, µs; BENCHMARKS.md "Issue 6 follow-up 7"): the previous default (2 per lane
//! below 2^18 outputs, 8 per lane in 128-lane blocks above) vs the table kernel with 256-lane
//! blocks (full grid / grid capped at 792 = 132 × 6 blocks): M = 8 OAI 1.25 vs 1.34 / 1.35 (slower:
//! 6144 outputs, one partial wave, the table copy not hidden); M = 192 OAI 1.66 vs 1.47 / 1.47,
//! SiLU 1.58 vs 1.46 / 1.46; M = 2048 OAI 3.65 vs 3.10 / 3.09, SiLU 3.46 vs 3.42 / 3.42; M = 4096
//! OAI 5.84 vs 5.46 / 5.12, SiLU 5.34 vs 4.91 / 5.77; M = 8192 OAI 10.11 vs 10.22 / 9.37, SiLU
//! 9.23 vs 9.10 / 10.56. So the crossover lies between 6144 and 147456 outputs (the launch
//! table's `table_from`); the 792 cap fitted OAI's 6 resident blocks but under-filled SiLU's 8,
//! hence the cap from the occupancy query.

use crate::attrs::{Activation, SwiGluAttrs, SwishForm};
use crate::element::{DType, Element};
use half::bf16;

/// Lanes per block of the table kernels (their `__launch_bounds__(256, 6)` allows no more; 128
/// measured slower at every M).
pub const BLOCK: usize = 256;

/// Why the table kernel must not run these attributes (its `__trap()` would fire, or it does not
/// implement them), or `None` where it may. Mirrors the kernel's entry test: bf16, rounded
/// activation, unrolled swish; OAI needs `limit > 0` and `bf16(limit) > 0` (the min / max clamps
/// of the packed path); the table needs `bf16(alpha)` finite and nonzero (then z = r(g · r(alpha))
/// is NaN only where g is, and the table's NaN entry is never used).
pub fn refusal(dtype: DType, attrs: &SwiGluAttrs) -> Option<&'static str> {
    let r = |v: f32| bf16::round_f32(v);
    if dtype != DType::BF16 {
        Some("not bf16")
    } else if attrs.fp32_activation {
        Some("fp32 activation")
    } else if attrs.swish_form != SwishForm::Unrolled {
        Some("single-op swish")
    } else if attrs.activation == Activation::Oai && !(attrs.limit > 0.0 && r(attrs.limit) > 0.0) {
        Some("OAI limit not > 0 in f32 and bf16")
    } else if !r(attrs.alpha).is_finite() || r(attrs.alpha) == 0.0 {
        Some("bf16(alpha) not finite and nonzero")
    } else {
        None
    }
}

/// Blocks of [`BLOCK`] lanes for `chunks` chunks of [`BLOCK`] lanes on `sms` multiprocessors
/// holding `resident` blocks each (the occupancy query; `None` or 0: unknown, the full grid).
pub fn grid(chunks: usize, sms: usize, resident: Option<usize>) -> usize {
    match resident {
        Some(r) if r > 0 => chunks.min(sms * r),
        _ => chunks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attrs::SwiGluLayout;

    fn oai() -> SwiGluAttrs {
        SwiGluAttrs {
            activation: Activation::Oai,
            alpha: 1.702,
            ..Default::default()
        }
    }

    #[test]
    fn serves_rounded_unrolled_bf16_silu_and_oai_in_every_layout() {
        for layout in [
            SwiGluLayout::Separate,
            SwiGluLayout::SplitHalves,
            SwiGluLayout::Interleaved,
        ] {
            let silu = SwiGluAttrs {
                layout,
                ..Default::default()
            };
            assert_eq!(refusal(DType::BF16, &silu), None);
            assert_eq!(refusal(DType::BF16, &SwiGluAttrs { layout, ..oai() }), None);
        }
        // Huge but finite alpha (r(alpha) = 3e38 rounds to a finite bf16), tiny normal alpha,
        // negative alpha, an infinite limit: all within the kernel's preconditions.
        for alpha in [3.0e38, 1.0e-30, -1.0e-30, -1.702] {
            assert_eq!(refusal(DType::BF16, &SwiGluAttrs { alpha, ..oai() }), None);
        }
        let limit = f32::INFINITY;
        assert_eq!(refusal(DType::BF16, &SwiGluAttrs { limit, ..oai() }), None);
        // SiLU ignores the limit.
        let silu = SwiGluAttrs {
            limit: -1.0,
            ..Default::default()
        };
        assert_eq!(refusal(DType::BF16, &silu), None);
    }

    #[test]
    fn refuses_other_dtypes() {
        assert!(refusal(DType::F16, &oai()).is_some());
        assert!(refusal(DType::F32, &oai()).is_some());
    }

    #[test]
    fn refuses_the_fp32_activation() {
        let a = SwiGluAttrs {
            fp32_activation: true,
            ..oai()
        };
        assert_eq!(refusal(DType::BF16, &a), Some("fp32 activation"));
    }

    #[test]
    fn refuses_the_single_op_swish() {
        let a = SwiGluAttrs {
            swish_form: SwishForm::SingleOp,
            ..Default::default()
        };
        assert_eq!(refusal(DType::BF16, &a), Some("single-op swish"));
    }

    #[test]
    fn refuses_oai_limits_not_positive_in_f32_and_bf16() {
        // 1e-45 > 0 in f32 but rounds to +0 in bf16; the others fail in f32 already.
        for limit in [0.0, -0.0, -7.0, f32::NAN, f32::NEG_INFINITY, 1.0e-45] {
            let a = SwiGluAttrs { limit, ..oai() };
            assert_eq!(
                refusal(DType::BF16, &a),
                Some("OAI limit not > 0 in f32 and bf16"),
                "{limit}"
            );
        }
    }

    #[test]
    fn refuses_alpha_not_finite_and_nonzero_in_bf16() {
        // 3.4e38 rounds up to +Inf in bf16; 1e-45 to +0.
        for alpha in [
            0.0,
            -0.0,
            f32::NAN,
            f32::INFINITY,
            -f32::INFINITY,
            3.4e38,
            1.0e-45,
        ] {
            for base in [oai(), SwiGluAttrs::default()] {
                let a = SwiGluAttrs { alpha, ..base };
                assert_eq!(
                    refusal(DType::BF16, &a),
                    Some("bf16(alpha) not finite and nonzero"),
                    "{alpha}"
                );
            }
        }
    }

    #[test]
    fn grid_is_capped_by_the_resident_blocks() {
        // M = 8192, I = 768: 3072 chunks of 256 lanes; 132 SMs.
        assert_eq!(grid(3072, 132, Some(6)), 792);
        assert_eq!(grid(3072, 132, Some(8)), 1056);
        assert_eq!(grid(72, 132, Some(8)), 72);
        assert_eq!(grid(3072, 132, None), 3072);
        assert_eq!(grid(3072, 132, Some(0)), 3072);
    }
}
