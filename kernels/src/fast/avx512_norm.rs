//! AVX-512 path of the fused `AddRmsNormMxQuant` (driven by `fast::norm` where
//! [`super::isa::avx512_norm`] allows it): bit-identical to the AVX2 path and the reference.
//!
//! * Pass 1 for bf16 rows: 32 elements a step, the even elements widened by a shift and the
//!   odd ones by a mask (no shuffles). Even elements are exactly the pinned lanes {0, 2, .., 14}
//!   of the 16-lane f64 sum of squares and odd ones {1, 3, .., 15}, in index order, so the row
//!   buffer `s` keeps that order within each 32-element block (the *bf16 block layout*, even
//!   elements then odd ones, [`bf16_layout`]); the weights are permuted to match once per call,
//!   and the byte permute that packs the E4M3 codes (`vpermt2b`) puts them back in element
//!   order for free. `residual_out` (and `normed`) go back to element order by a shift and a
//!   `vpternlogd` (even halves low, odd halves high).
//!   f32 / f16 rows keep the AVX2 pass 1 (element order).
//! * Pass 2 + quantizer, groups of 16 blocks: the normed values are formed, rounded to T and
//!   written back to `s` while each block's running |max| is taken (`vrangeps` max-abs, one op
//!   per two vectors); the 16 block maxima are transposed into one vector, which gives the 16
//!   scale bytes and inverses at once. The encoder clamps and takes |v| in one `vrangeps`
//!   (min-abs with 448, sign cleared), rounds with a mask-register RNE and leaves each code in
//!   byte 3 of its lane with the sign (one `vpternlogd`), so one `vpermt2b` packs a block.
//!   Lanes below 2^-6 (E4M3 subnormals, zeros) take a masked fix-up only when present; blocks
//!   with a NaN or ±Inf take the scalar [`quantize_block`].
//! * Where the CPU also has AVX-512 BF16, bf16 rows of the common attributes (s in bf16,
//!   `n = s · (1/d)` weighted in f32, no `normed` output) skip the f32 row buffer: pass 1
//!   leaves s as words (in `residual_out`, or a scratch row) and pass 2 + quantizer run on
//!   packed bf16 words ([`super::avx512_norm_words`]).

#![allow(unsafe_op_in_unsafe_fn)]

use std::any::TypeId;
use std::arch::x86_64::*;

use half::{bf16, f16};

use super::avx2::Lanes;
use super::norm::avx2_norm;
use super::shared::{cast_outputs, cast_slice};
use crate::attrs::{AddRmsNormAttrs, InvForm};
use crate::codec::{quantize_block, QuantConfig, ScaleRule, BLOCK};
use crate::slices::NormOutputs;

/// Blocks per group: one scale lane per block.
pub(super) const GROUP: usize = 16;

/// The element of a 32-element block held at lane position `p` (0..32: the 16 lanes of the
/// first vector, then the second) in the bf16 block layout: even elements, then odd ones.
pub const fn bf16_layout(p: usize) -> usize {
    2 * (p % 16) + p / 16
}

/// The lane position of element `e` of a block (inverse of [`bf16_layout`]).
pub(super) const fn bf16_position(e: usize) -> usize {
    16 * (e % 2) + e / 2
}

/// `vpermt2ps` indices from two vectors of 16 elements in order to the bf16 layout.
const BF16_GATHER: [[i32; 16]; 2] = {
    let mut t = [[0i32; 16]; 2];
    let mut p = 0;
    while p < 32 {
        t[p / 16][p % 16] = bf16_layout(p) as i32;
        p += 1;
    }
    t
};

/// `vpermt2b` indices: byte e = byte 3 of the lane holding element e, for element-order
/// blocks (`[0]`) and the bf16 layout (`[1]`); the upper 32 bytes are not used.
pub(super) const PACK: [[u8; 64]; 2] = {
    let mut t = [[0u8; 64]; 2];
    let mut e = 0;
    while e < 32 {
        t[0][e] = (4 * e + 3) as u8;
        t[1][e] = (4 * bf16_position(e) + 3) as u8;
        e += 1;
    }
    t
};

/// Lane b of the transposed maxima holds block `4 (b % 4) + b / 4`; this puts block b in lane b.
const UNTRANSPOSE: [i32; 16] = {
    let mut t = [0i32; 16];
    let mut b = 0;
    while b < 16 {
        t[b] = (4 * (b % 4) + b / 4) as i32;
        b += 1;
    }
    t
};

/// Per element type: the lane layout of a block in the row buffer, the 16-lane rounding to T,
/// the store of the normed values and pass 1.
pub(super) trait Wide: Lanes + Copy + 'static {
    /// Blocks are held in the bf16 layout rather than in element order.
    const PERMUTED: bool;
    /// round_T of 16 lanes (RNE as `Element::from_f32`, NaN as `half` quiets it).
    unsafe fn round16(v: __m512) -> __m512;
    /// `round16` for lanes that are not NaN.
    unsafe fn round16_no_nan(v: __m512) -> __m512;
    /// Stores one block of values already rounded to T (two vectors in this type's layout) at
    /// `p` in element order.
    unsafe fn store_block(p: *mut Self, lo: __m512, hi: __m512);
    /// Pass 1 of one row (see `avx2_norm::pass1`), writing `s` in this type's layout.
    unsafe fn pass1(
        xp: *const Self,
        rp: *const Self,
        rop: *mut Self,
        sp: *mut f32,
        h: usize,
        round_sum: bool,
    ) -> f64;
}

impl Wide for f32 {
    const PERMUTED: bool = false;
    #[inline(always)]
    unsafe fn round16(v: __m512) -> __m512 {
        v
    }
    #[inline(always)]
    unsafe fn round16_no_nan(v: __m512) -> __m512 {
        v
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
    #[inline]
    unsafe fn store_block(p: *mut f32, lo: __m512, hi: __m512) {
        _mm512_storeu_ps(p, lo);
        _mm512_storeu_ps(p.add(16), hi);
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
    unsafe fn pass1(
        xp: *const f32,
        rp: *const f32,
        rop: *mut f32,
        sp: *mut f32,
        h: usize,
        round_sum: bool,
    ) -> f64 {
        avx2_norm::pass1(xp, rp, rop, sp, h, round_sum)
    }
}

impl Wide for f16 {
    const PERMUTED: bool = false;
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
    #[inline]
    unsafe fn round16(v: __m512) -> __m512 {
        _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
    #[inline]
    unsafe fn round16_no_nan(v: __m512) -> __m512 {
        Self::round16(v)
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
    #[inline]
    unsafe fn store_block(p: *mut f16, lo: __m512, hi: __m512) {
        // The values are f16 already: the conversion is exact.
        let (a, b) = (
            _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(lo),
            _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(hi),
        );
        _mm256_storeu_si256(p as *mut __m256i, a);
        _mm256_storeu_si256(p.add(16) as *mut __m256i, b);
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
    unsafe fn pass1(
        xp: *const f16,
        rp: *const f16,
        rop: *mut f16,
        sp: *mut f32,
        h: usize,
        round_sum: bool,
    ) -> f64 {
        avx2_norm::pass1(xp, rp, rop, sp, h, round_sum)
    }
}

/// RNE of f32 lanes to bf16 in the high halves (low halves are garbage): x + 0x7FFF + lsb,
/// written as x + 0x8000 - (lsb == 0). Exact for lanes that are not NaN, and for NaN lanes
/// with zero low halves (see `Lanes::round8_no_nan`).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
#[inline]
unsafe fn bf16_round_bits(v: __m512) -> __m512i {
    let x = _mm512_castps_si512(v);
    let even = _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x1_0000));
    let t = _mm512_add_epi32(x, _mm512_set1_epi32(0x8000));
    _mm512_mask_sub_epi32(t, even, t, _mm512_set1_epi32(1))
}

impl Wide for bf16 {
    const PERMUTED: bool = true;
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
    #[inline]
    unsafe fn round16(v: __m512) -> __m512 {
        let x = _mm512_castps_si512(v);
        let high = _mm512_set1_epi32(-65536);
        let r = _mm512_and_si512(bf16_round_bits(v), high);
        // NaN: top mantissa bit set, payload truncated (`half::bf16::from_f32`).
        let quiet = _mm512_or_si512(_mm512_and_si512(x, high), _mm512_set1_epi32(0x40_0000));
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
        _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, nan, quiet))
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
    #[inline]
    unsafe fn round16_no_nan(v: __m512) -> __m512 {
        _mm512_castsi512_ps(_mm512_and_si512(
            bf16_round_bits(v),
            _mm512_set1_epi32(-65536),
        ))
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
    #[inline]
    unsafe fn store_block(p: *mut bf16, lo: __m512, hi: __m512) {
        // Rounded values have zero low halves: element 2k low, 2k+1 high in lane k.
        let words = _mm512_or_si512(
            _mm512_srli_epi32::<16>(_mm512_castps_si512(lo)),
            _mm512_castps_si512(hi),
        );
        _mm512_storeu_si512(p as *mut _, words);
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
    unsafe fn pass1(
        xp: *const bf16,
        rp: *const bf16,
        rop: *mut bf16,
        sp: *mut f32,
        h: usize,
        round_sum: bool,
    ) -> f64 {
        let sw = std::ptr::null_mut();
        match (!rp.is_null(), !rop.is_null(), round_sum) {
            (true, true, true) => sum_row_bf16::<true, true, true, true>(xp, rp, rop, sp, sw, h),
            (true, true, false) => sum_row_bf16::<true, true, false, true>(xp, rp, rop, sp, sw, h),
            (true, false, true) => sum_row_bf16::<true, false, true, true>(xp, rp, rop, sp, sw, h),
            (true, false, false) => {
                sum_row_bf16::<true, false, false, true>(xp, rp, rop, sp, sw, h)
            }
            // Without a residual s = x: `round_sum` does not matter.
            (false, true, _) => sum_row_bf16::<false, true, false, true>(xp, rp, rop, sp, sw, h),
            (false, false, _) => sum_row_bf16::<false, false, false, true>(xp, rp, rop, sp, sw, h),
        }
    }
}

/// Pass 1 of a bf16 row whose s is in bf16 (`round_sum`, or no residual) for the packed-word
/// pass 2 (`avx512_norm_words`): s is not written as f32 — it is `residual_out` where that is
/// written (`rop` not null), else its words go to `sw` (h words, element order). Returns the
/// sum of squares in the pinned order.
///
/// # Safety
/// As [`Wide::pass1`]; `sw` holds h words where `rop` is null.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
pub(super) unsafe fn pass1_words(
    xp: *const bf16,
    rp: *const bf16,
    rop: *mut bf16,
    sw: *mut u16,
    h: usize,
) -> f64 {
    let sp = std::ptr::null_mut();
    match (!rp.is_null(), !rop.is_null()) {
        (true, true) => sum_row_bf16::<true, true, true, false>(xp, rp, rop, sp, sw, h),
        (true, false) => sum_row_bf16::<true, false, true, false>(xp, rp, rop, sp, sw, h),
        (false, true) => sum_row_bf16::<false, true, false, false>(xp, rp, rop, sp, sw, h),
        (false, false) => sum_row_bf16::<false, false, false, false>(xp, rp, rop, sp, sw, h),
    }
}

/// Pass 1 of a bf16 row, 32 elements a step: s (rounded per `ROUND`) into `sp` in the bf16
/// block layout (`F32`; else, for s in bf16, its words into `sw` in element order unless `RO`
/// writes them already), `residual_out` (`RO`) in element order, the sum of squares in the
/// pinned order. `RES`: a residual is read (`rp` is not used otherwise).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
unsafe fn sum_row_bf16<const RES: bool, const RO: bool, const ROUND: bool, const F32: bool>(
    xp: *const bf16,
    rp: *const bf16,
    rop: *mut bf16,
    sp: *mut f32,
    sw: *mut u16,
    h: usize,
) -> f64 {
    debug_assert!(F32 || ROUND || !RES, "s is not in bf16");
    let high = _mm512_set1_epi32(-65536);
    let mut acc = [_mm512_setzero_pd(); 2];
    for i in (0..h).step_by(BLOCK) {
        let xv = _mm512_loadu_si512(xp.add(i) as *const _);
        // Even elements (low halves) by a shift, odd ones (high halves) by a mask.
        let x_lo = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(xv));
        let x_hi = _mm512_castsi512_ps(_mm512_and_si512(xv, high));
        let (s_lo, s_hi) = if RES {
            let rv = _mm512_loadu_si512(rp.add(i) as *const _);
            let sum_lo = _mm512_add_ps(x_lo, _mm512_castsi512_ps(_mm512_slli_epi32::<16>(rv)));
            let sum_hi = _mm512_add_ps(x_hi, _mm512_castsi512_ps(_mm512_and_si512(rv, high)));
            // The sum of two values widened from bf16 is a NaN only with zero low bits.
            let (t_lo, t_hi) = (bf16_round_bits(sum_lo), bf16_round_bits(sum_hi));
            if RO || !F32 {
                // Element 2k in the low half of lane k, 2k+1 in the high half.
                let ro =
                    _mm512_ternarylogic_epi32::<0xF8>(_mm512_srli_epi32::<16>(t_lo), t_hi, high);
                let dst = if RO { rop as *mut u16 } else { sw };
                _mm512_storeu_si512(dst.add(i) as *mut _, ro);
            }
            if ROUND {
                (
                    _mm512_castsi512_ps(_mm512_and_si512(t_lo, high)),
                    _mm512_castsi512_ps(_mm512_and_si512(t_hi, high)),
                )
            } else {
                (sum_lo, sum_hi)
            }
        } else {
            if RO || !F32 {
                let dst = if RO { rop as *mut u16 } else { sw };
                _mm512_storeu_si512(dst.add(i) as *mut _, xv);
            }
            (x_lo, x_hi)
        };
        if F32 {
            _mm512_storeu_ps(sp.add(i), s_lo);
            _mm512_storeu_ps(sp.add(i + 16), s_hi);
        }
        let (sq_lo, sq_hi) = (_mm512_mul_ps(s_lo, s_lo), _mm512_mul_ps(s_hi, s_hi));
        // Elements i.. (lower halves) before i+16.. (upper halves), lane by lane.
        let [a, b] = &mut acc;
        *a = _mm512_add_pd(*a, _mm512_cvtps_pd(_mm512_castps512_ps256(sq_lo)));
        *b = _mm512_add_pd(*b, _mm512_cvtps_pd(_mm512_castps512_ps256(sq_hi)));
        *a = _mm512_add_pd(*a, _mm512_cvtps_pd(_mm512_extractf32x8_ps::<1>(sq_lo)));
        *b = _mm512_add_pd(*b, _mm512_cvtps_pd(_mm512_extractf32x8_ps::<1>(sq_hi)));
    }
    pinned_total(&acc)
}

/// The sum of squares from the f64 accumulators of a bf16 pass 1 (`acc[0]`: pinned lanes 0,
/// 2, .., 14; `acc[1]`: 1, 3, .., 15), lanes combined in the pinned order
/// (`reference::math::lane_mean`: lane j += lane j+w, w = 8, 4, 2, 1).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
pub(super) unsafe fn pinned_total(acc: &[__m512d; 2]) -> f64 {
    let (mut a, mut b) = ([0f64; 8], [0f64; 8]);
    _mm512_storeu_pd(a.as_mut_ptr(), acc[0]);
    _mm512_storeu_pd(b.as_mut_ptr(), acc[1]);
    let mut lanes = [0f64; 16];
    for k in 0..8 {
        (lanes[2 * k], lanes[2 * k + 1]) = (a[k], b[k]);
    }
    let mut w = 16;
    while w > 1 {
        w /= 2;
        for j in 0..w {
            lanes[j] += lanes[j + w];
        }
    }
    lanes[0]
}

/// The normed lanes i..i+16 of the row buffer: `n` per `inv_form`, times the weight (`gw + i`,
/// same layout) per `gamma_in_f32`, rounded to T. `NO_NAN`: no lane can be NaN. `PLAIN`: the
/// attributes say `n = s · (1/d)` and `gamma_in_f32` (no branches on them in the row loop).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
#[inline]
unsafe fn normed16<T: Wide, const NO_NAN: bool, const PLAIN: bool>(
    sp: *const f32,
    gw: *const f32,
    i: usize,
    d: __m512,
    inv: __m512,
    attrs: &AddRmsNormAttrs,
) -> __m512 {
    let s = _mm512_loadu_ps(sp.add(i));
    if PLAIN {
        let y = _mm512_mul_ps(_mm512_mul_ps(s, inv), _mm512_loadu_ps(gw.add(i)));
        return if NO_NAN {
            T::round16_no_nan(y)
        } else {
            T::round16(y)
        };
    }
    // Where a lane can be NaN, which operand's NaN a product keeps is part of the result
    // (x86 keeps the first source's); LLVM treats `fmul` as commutative and swaps operands
    // freely (it did once the row loop around this changed), so those products are pinned.
    let mul = |a, b| {
        if NO_NAN {
            _mm512_mul_ps(a, b)
        } else {
            mul_first_nan(a, b)
        }
    };
    let n = match attrs.inv_form {
        InvForm::Div => _mm512_div_ps(s, d),
        InvForm::Rsqrt | InvForm::RecipMul => mul(s, inv),
    };
    let round = |v| {
        if NO_NAN {
            T::round16_no_nan(v)
        } else {
            T::round16(v)
        }
    };
    let g = _mm512_loadu_ps(gw.add(i));
    if attrs.gamma_in_f32 {
        round(mul(n, g))
    } else {
        round(mul(round(n), g))
    }
}

/// a · b by one `vmulps` with `a` as the first source, so a NaN in `a` wins over one in `b`
/// (as in the reference's scalar `a * b`) whatever the compiler would reorder.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
#[inline]
unsafe fn mul_first_nan(a: __m512, b: __m512) -> __m512 {
    let y: __m512;
    std::arch::asm!(
        "vmulps {y}, {a}, {b}",
        y = lateout(zmm_reg) y,
        a = in(zmm_reg) a,
        b = in(zmm_reg) b,
        options(pure, nomem, nostack, preserves_flags),
    );
    y
}

/// Lane b = max of the 16 lanes of `m[b]` (non-negative f32 bit patterns, compared as
/// unsigned integers: the float order, with NaN above Inf).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn transpose_max(m: &[__m512i; GROUP]) -> __m512i {
    // z[i]: lanes 0-7 = block 2i (8 partial maxima), 8-15 = block 2i+1.
    let mut z = [_mm512_setzero_si512(); 8];
    for (i, zi) in z.iter_mut().enumerate() {
        let (a, b) = (m[2 * i], m[2 * i + 1]);
        *zi = _mm512_max_epu32(
            _mm512_shuffle_i32x4::<0b01_00_01_00>(a, b),
            _mm512_shuffle_i32x4::<0b11_10_11_10>(a, b),
        );
    }
    // w[j]: quarter q = block 4j+q (4 partial maxima).
    let mut w = [_mm512_setzero_si512(); 4];
    for (j, wj) in w.iter_mut().enumerate() {
        let (a, b) = (z[2 * j], z[2 * j + 1]);
        *wj = _mm512_max_epu32(
            _mm512_shuffle_i32x4::<0b10_00_10_00>(a, b),
            _mm512_shuffle_i32x4::<0b11_01_11_01>(a, b),
        );
    }
    let pairs = |a: __m512i, b: __m512i| {
        let (a, b) = (_mm512_castsi512_ps(a), _mm512_castsi512_ps(b));
        _mm512_max_epu32(
            _mm512_castps_si512(_mm512_shuffle_ps::<0b10_00_10_00>(a, b)),
            _mm512_castps_si512(_mm512_shuffle_ps::<0b11_01_11_01>(a, b)),
        )
    };
    // v[k]: quarter q lanes 0-1 = block 8k+q, lanes 2-3 = block 8k+4+q.
    let v = [pairs(w[0], w[1]), pairs(w[2], w[3])];
    // u: lane 4q+l = block 4l+q.
    let u = pairs(v[0], v[1]);
    _mm512_permutexvar_epi32(_mm512_loadu_si512(UNTRANSPOSE.as_ptr() as *const _), u)
}

/// 16 lanes of `ScaleRule::scale_byte` for finite amax (the same integer rule).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn scale_bytes16(amax: __m512, rule: ScaleRule) -> __m512i {
    let max_byte = _mm512_set1_epi32(254);
    match rule {
        ScaleRule::Floor => {
            let bits = _mm512_castps_si512(_mm512_mul_ps(amax, _mm512_set1_ps(1.0 / 256.0)));
            _mm512_min_epu32(_mm512_srli_epi32::<23>(bits), max_byte)
        }
        ScaleRule::FloorF16 => {
            // The product rounded to float16 (RNE; F16C, as `half`) and widened back.
            let p = _mm512_mul_ps(amax, _mm512_set1_ps(1.0 / 256.0));
            let p = _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(p));
            _mm512_min_epu32(_mm512_srli_epi32::<23>(_mm512_castps_si512(p)), max_byte)
        }
        ScaleRule::Rceil => {
            let bits = _mm512_castps_si512(_mm512_mul_ps(amax, _mm512_set1_ps(1.0f32 / 448.0)));
            let one = _mm512_set1_epi32(1);
            let mant = _mm512_set1_epi32(0x7F_FFFF);
            let e = _mm512_srli_epi32::<23>(bits);
            let normal = _mm512_mask_add_epi32(e, _mm512_test_epi32_mask(bits, mant), e, one);
            let above_half =
                _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, mant), _mm512_set1_epi32(0x40_0000));
            let sub = _mm512_maskz_mov_epi32(above_half, one);
            let byte = _mm512_mask_mov_epi32(
                normal,
                _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                sub,
            );
            _mm512_min_epu32(byte, max_byte)
        }
    }
}

/// 16 lanes of `pow2_inverse`: 2^(127 - byte), byte 254 → the subnormal 2^-127.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn inverse16(bytes: __m512i) -> __m512 {
    let normal = _mm512_slli_epi32::<23>(_mm512_sub_epi32(_mm512_set1_epi32(254), bytes));
    let is_254 = _mm512_cmpeq_epi32_mask(bytes, _mm512_set1_epi32(254));
    _mm512_castsi512_ps(_mm512_mask_mov_epi32(
        normal,
        is_254,
        _mm512_set1_epi32(0x0040_0000),
    ))
}

/// E4M3FN codes (RNE, saturating) of 16 finite lanes, each in byte 3 of its lane (the other
/// bytes are garbage). Same rule as `codec::f32_to_e4m3(x, true)` for finite inputs.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn encode16(v: __m512) -> __m512i {
    // min(|v|, 448), sign cleared (VRANGEPS min-abs): saturation before rounding, so the
    // rounded code never passes 0x7E.
    let a = _mm512_range_ps::<0b1010>(v, _mm512_set1_ps(448.0));
    let ai = _mm512_castps_si512(a);
    // Normal range: round 23 → 3 mantissa bits (ties to even), rebias 127 → 7: the code lands
    // in bits 20-26.
    let even = _mm512_testn_epi32_mask(ai, _mm512_set1_epi32(1 << 20));
    let t = _mm512_add_epi32(ai, _mm512_set1_epi32(0x8_0000 - (120 << 23)));
    let mut t = _mm512_mask_sub_epi32(t, even, t, _mm512_set1_epi32(1));
    let sub = _mm512_cmplt_epu32_mask(ai, _mm512_set1_epi32(0x3C80_0000));
    if sub != 0 {
        // |v| < 2^-6: m = rne(|v|·512) in 0..=8 — the low bits of |v| + 2^14 (ulp 2^-9).
        let m = _mm512_sub_epi32(
            _mm512_castps_si512(_mm512_add_ps(a, _mm512_set1_ps(16384.0))),
            _mm512_set1_epi32(0x4680_0000),
        );
        t = _mm512_mask_mov_epi32(t, sub, _mm512_slli_epi32::<20>(m));
    }
    // code << 24 | sign of v.
    _mm512_ternarylogic_epi32::<0xF8>(
        _mm512_slli_epi32::<4>(t),
        _mm512_castps_si512(v),
        _mm512_set1_epi32(i32::MIN),
    )
}

/// Quantizes the `n` (≤ 16) blocks of rounded values at `y` (this type's layout) whose |max|
/// bit patterns are `m[..n]`: 32 codes per block at `q` in element order, scale bytes at `s`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
#[inline]
unsafe fn quantize_group<T: Wide>(
    y: *const f32,
    q: *mut u8,
    s: *mut u8,
    n: usize,
    m: &[__m512i; GROUP],
    cfg: QuantConfig,
) {
    let amax = transpose_max(m);
    let live = ((1u32 << n) - 1) as __mmask16;
    let non_finite =
        _mm512_mask_cmpge_epu32_mask(live, amax, _mm512_set1_epi32(0x7F80_0000)) as u32;
    let bytes = scale_bytes16(_mm512_castsi512_ps(amax), cfg.scale_rule);
    let mut b8 = [0u8; GROUP];
    _mm_storeu_si128(b8.as_mut_ptr() as *mut __m128i, _mm512_cvtepi32_epi8(bytes));
    std::ptr::copy_nonoverlapping(b8.as_ptr(), s, n);
    let mut inv = [0f32; GROUP];
    _mm512_storeu_ps(inv.as_mut_ptr(), inverse16(bytes));
    let idx = _mm512_loadu_si512(PACK[T::PERMUTED as usize].as_ptr() as *const _);
    for (b, &inv_b) in inv.iter().enumerate().take(n) {
        let (yb, qb) = (y.add(b * BLOCK), q.add(b * BLOCK));
        if (non_finite >> b) & 1 != 0 {
            // A NaN or ±Inf in the block: the scalar definition, on the block in element order.
            *s.add(b) = scalar_block::<T>(yb, qb, cfg);
            continue;
        }
        let (y0, y1) = (_mm512_loadu_ps(yb), _mm512_loadu_ps(yb.add(16)));
        encode_block(y0, y1, _mm512_set1_ps(inv_b), idx, qb);
    }
}

/// The 32 E4M3 codes of one finite block (rounded values `y0`, `y1`, inverse scale `ib`) at
/// `qb`, packed into element order by the `vpermt2b` indices `idx` (a row of [`PACK`]).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn encode_block(y0: __m512, y1: __m512, ib: __m512, idx: __m512i, qb: *mut u8) {
    let c0 = encode16(_mm512_mul_ps(y0, ib));
    let c1 = encode16(_mm512_mul_ps(y1, ib));
    let packed = _mm512_permutex2var_epi8(c0, idx, c1);
    _mm256_storeu_si256(qb as *mut __m256i, _mm512_castsi512_si256(packed));
}

/// Prefetches block `i` (element offset) of the next row: its inputs `next` into L1 and its
/// `residual_out` (`next_out`, null: none) for writing. See [`normalize_quantize`] for why.
#[inline(always)]
pub(super) unsafe fn prefetch_block<T>(next: &[*const T], next_out: *const T, i: usize) {
    // Cache lines per block of T (1 for bf16 / f16, 2 for f32).
    let block_lines = (BLOCK * std::mem::size_of::<T>()).div_ceil(64);
    for &p in next {
        for l in 0..block_lines {
            _mm_prefetch::<_MM_HINT_T0>((p.add(i) as *const i8).add(64 * l));
        }
    }
    if !next_out.is_null() {
        for l in 0..block_lines {
            // PREFETCHW: the line arrives owned, so the store does not wait for it.
            _mm_prefetch::<_MM_HINT_ET0>((next_out.add(i) as *const i8).add(64 * l));
        }
    }
}

/// The scalar [`quantize_block`] of one block of rounded values at `yb` (this type's layout,
/// a NaN or ±Inf among them): the codes at `qb` in element order, returns the scale byte.
pub(super) unsafe fn scalar_block<T: Wide>(yb: *const f32, qb: *mut u8, cfg: QuantConfig) -> u8 {
    let mut x = [0f32; BLOCK];
    for (p, v) in std::slice::from_raw_parts(yb, BLOCK).iter().enumerate() {
        x[if T::PERMUTED { bf16_layout(p) } else { p }] = *v;
    }
    let mut out = [0u8; BLOCK];
    let byte = quantize_block(&x, &mut out, cfg);
    std::ptr::copy_nonoverlapping(out.as_ptr(), qb, BLOCK);
    byte
}

/// Pass 2 of one row: normalise, weight and round into `sp` in place (and the normed output),
/// then quantize, a group of 16 blocks at a time. `next`: the inputs of the row that comes
/// next (x, and the residual if any) to prefetch, and `next_out` its `residual_out` to
/// prefetch for writing (null: none), one block's lines per block formed here (empty: none).
///
/// Why: pass 2 reads nothing from memory, so DRAM idles while this row is normalised, and
/// the next row's pass 1 then waits on its loads and on the read-for-ownership of every
/// `residual_out` line it stores (the hardware prefetchers follow only demand accesses, which
/// pass 2 does not make to those rows). Both prefetches together measured 4-11 % less CPU
/// time per call at M = 2048 (one thread); either alone did not. Spreading them over the blocks
/// keeps a few lines in flight at a time instead of filling the miss buffers at once.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn normalize_quantize<T: Wide, const NO_NAN: bool, const PLAIN: bool>(
    sp: *mut f32,
    gw: *const f32,
    h: usize,
    d: f32,
    attrs: &AddRmsNormAttrs,
    np: Option<*mut T>,
    q: *mut u8,
    scales: *mut u8,
    next: &[*const T],
    next_out: *const T,
) {
    let (dv, inv) = (_mm512_set1_ps(d), _mm512_set1_ps(1.0 / d));
    let absmask = _mm512_set1_epi32(0x7FFF_FFFF);
    let nb = h / BLOCK;
    let mut b0 = 0;
    while b0 < nb {
        let n = GROUP.min(nb - b0);
        let mut m = [_mm512_setzero_si512(); GROUP];
        for (b, mb) in m.iter_mut().enumerate().take(n) {
            let i = (b0 + b) * BLOCK;
            prefetch_block(next, next_out, i);
            let y0 = normed16::<T, NO_NAN, PLAIN>(sp, gw, i, dv, inv, attrs);
            let y1 = normed16::<T, NO_NAN, PLAIN>(sp, gw, i + 16, dv, inv, attrs);
            _mm512_storeu_ps(sp.add(i), y0);
            _mm512_storeu_ps(sp.add(i + 16), y1);
            if let Some(np) = np {
                T::store_block(np.add(i), y0, y1);
            }
            *mb = if NO_NAN {
                // ±Inf but no NaN: the float max-abs (sign cleared) of the two vectors.
                _mm512_castps_si512(_mm512_range_ps::<0b1011>(y0, y1))
            } else {
                _mm512_max_epu32(
                    _mm512_and_si512(_mm512_castps_si512(y0), absmask),
                    _mm512_and_si512(_mm512_castps_si512(y1), absmask),
                )
            };
        }
        let off = b0 * BLOCK;
        quantize_group::<T>(sp.add(off), q.add(off), scales.add(b0), n, &m, attrs.quant);
        b0 += n;
    }
}

/// Rows of the fused norm for one element type. `words`: the CPU has AVX-512 BF16, so bf16 rows
/// of the common attributes take the packed-word pass 2 (`avx512_norm_words`).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_of<T: Wide, G: Lanes>(
    x: &[T],
    residual: Option<&[T]>,
    gamma: &[G],
    h: usize,
    attrs: &AddRmsNormAttrs,
    mut out: NormOutputs<'_, T>,
    prefetch: bool,
    words: bool,
) {
    let nb = h / BLOCK;
    let rows = x.len() / h;
    let (mut g_buf, gw_finite) = avx2_norm::weights(gamma, h, attrs);
    if T::PERMUTED {
        let (lo, hi) = (
            _mm512_loadu_si512(BF16_GATHER[0].as_ptr() as *const _),
            _mm512_loadu_si512(BF16_GATHER[1].as_ptr() as *const _),
        );
        for blk in g_buf.chunks_exact_mut(BLOCK) {
            let p = blk.as_mut_ptr();
            let (a, b) = (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)));
            _mm512_storeu_ps(p, _mm512_permutex2var_ps(a, lo, b));
            _mm512_storeu_ps(p.add(16), _mm512_permutex2var_ps(a, hi, b));
        }
    }
    let gw = g_buf.as_ptr();
    let plain = attrs.inv_form != InvForm::Div && attrs.gamma_in_f32;
    // bf16 rows of the common attributes, no normed output: pass 2 on packed words.
    let words = words
        && T::PERMUTED
        && plain
        && out.normed.is_none()
        && (attrs.round_sum || residual.is_none());
    let mut s_buf = vec![0f32; h];
    if words {
        // T is bf16 (`T::PERMUTED`): the casts are identities.
        let (x, residual) = (cast_slice(x), residual.map(|r| cast_slice(r)));
        let out = cast_outputs(out);
        let sb = &mut s_buf;
        super::avx512_norm_words::rows(x, residual, gw, gw_finite, h, attrs, out, prefetch, sb);
        return;
    }
    for r in 0..rows {
        let base = r * h;
        let xp = x.as_ptr().add(base);
        let rp = residual.map_or(std::ptr::null(), |res| res.as_ptr().add(base));
        let rop = out
            .residual_out
            .as_deref_mut()
            .map_or(std::ptr::null_mut(), |ro| ro.as_mut_ptr().add(base));
        let sp = s_buf.as_mut_ptr();
        let sum_sq = T::pass1(xp, rp, rop, sp, h, attrs.round_sum);
        // The next row of this chunk (rows past it belong to another chunk).
        let more = prefetch && r + 1 < rows;
        let ahead = [xp.wrapping_add(h), rp.wrapping_add(h)];
        let next: &[*const T] = match (more, rp.is_null()) {
            (false, _) => &[],
            (true, true) => &ahead[..1],
            (true, false) => &ahead,
        };
        let next_out = if more && !rop.is_null() {
            rop.wrapping_add(h) as *const T
        } else {
            std::ptr::null()
        };
        let v = (sum_sq / h as f64) as f32;
        let d = (v + attrs.epsilon).sqrt();
        let np = out.normed.as_deref_mut().map(|n| n.as_mut_ptr().add(base));
        let (q, sc) = (
            out.q.as_mut_ptr().add(base),
            out.scales.as_mut_ptr().add(r * nb),
        );
        // Finite Σs² bounds every |s| and makes d finite; with 1/d and g finite too, n and
        // y = n·g are finite or ±Inf, never NaN.
        let no_nan = gw_finite && sum_sq.is_finite() && (1.0 / d).is_finite();
        match (no_nan, plain) {
            (true, true) => {
                normalize_quantize::<T, true, true>(sp, gw, h, d, attrs, np, q, sc, next, next_out)
            }
            (true, false) => {
                normalize_quantize::<T, true, false>(sp, gw, h, d, attrs, np, q, sc, next, next_out)
            }
            (false, _) => normalize_quantize::<T, false, false>(
                sp, gw, h, d, attrs, np, q, sc, next, next_out,
            ),
        }
    }
}

/// Computes rows of the fused norm (the AVX-512 counterpart of `avx2_norm::rows`).
/// `prefetch`: the inputs come from DRAM (a large call): each row's pass 2 prefetches the next
/// row (see `normalize_quantize`).
///
/// # Safety
/// The CPU has AVX512F/BW/DQ/VBMI and AVX2/FMA/F16C; shapes were checked.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn rows<T: Lanes + 'static, G: Lanes>(
    x: &[T],
    residual: Option<&[T]>,
    gamma: &[G],
    h: usize,
    attrs: &AddRmsNormAttrs,
    out: NormOutputs<'_, T>,
    prefetch: bool,
) {
    let t = TypeId::of::<T>();
    if t == TypeId::of::<bf16>() {
        rows_of::<bf16, G>(
            cast_slice(x),
            residual.map(|r| cast_slice(r)),
            gamma,
            h,
            attrs,
            cast_outputs(out),
            prefetch,
            super::isa::avx512_bf16(),
        );
    } else if t == TypeId::of::<f16>() {
        rows_of::<f16, G>(
            cast_slice(x),
            residual.map(|r| cast_slice(r)),
            gamma,
            h,
            attrs,
            cast_outputs(out),
            prefetch,
            false,
        );
    } else {
        debug_assert!(t == TypeId::of::<f32>());
        rows_of::<f32, G>(
            cast_slice(x),
            residual.map(|r| cast_slice(r)),
            gamma,
            h,
            attrs,
            cast_outputs(out),
            prefetch,
            false,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::norm_edge_rows::{
        pass1_edges, pass2_edges, runs_match_reference, xorshift, Run,
    };
    use super::*;

    /// bf16 pass 1 against the AVX2 pass 1 on rows spanning ±2^40 (so the f64 sums round and
    /// their order shows in the bits): the same Σs² bits, s (in the bf16 layout) and
    /// residual_out, for every residual / residual_out / `round_sum` combination.
    #[test]
    fn bf16_pass1_matches_avx2_bit_for_bit() {
        if !super::super::isa::avx512_norm() {
            return;
        }
        let h = 1024;
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15u64);
        let mut val = || {
            let r = next();
            let mag = 2f32.powi((r % 81) as i32 - 40);
            let sign = if r & (1 << 40) != 0 { -1.0 } else { 1.0 };
            bf16::from_f32(sign * mag * (1.0 + (r >> 44) as f32 / (1u64 << 20) as f32))
        };
        let x: Vec<bf16> = (0..h).map(|_| val()).collect();
        let r: Vec<bf16> = (0..h).map(|_| val()).collect();
        for (res, ro, round) in [
            (true, true, true),
            (true, true, false),
            (true, false, true),
            (true, false, false),
            (false, true, true),
            (false, false, false),
        ] {
            let run = |wide: bool| {
                let (mut s, mut o) = (vec![0f32; h], vec![bf16::ZERO; h]);
                let rp = if res { r.as_ptr() } else { std::ptr::null() };
                let rop = if ro {
                    o.as_mut_ptr()
                } else {
                    std::ptr::null_mut()
                };
                // SAFETY: the features were checked; the buffers hold h elements.
                let sum = unsafe {
                    if wide {
                        <bf16 as Wide>::pass1(x.as_ptr(), rp, rop, s.as_mut_ptr(), h, round)
                    } else {
                        avx2_norm::pass1(x.as_ptr(), rp, rop, s.as_mut_ptr(), h, round)
                    }
                };
                if wide {
                    for blk in s.chunks_exact_mut(BLOCK) {
                        let held = blk.to_vec();
                        for (p, v) in held.iter().enumerate() {
                            blk[bf16_layout(p)] = *v;
                        }
                    }
                }
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                (sum.to_bits(), bits(&s), o)
            };
            assert!(run(true) == run(false), "res {res} ro {ro} round {round}");
        }
        // The sums did round: the f64 total differs from the exact one in some order.
        let exact: f64 = x.iter().map(|v| f64::from(v.to_f32()).powi(2)).sum();
        let rev: f64 = x.iter().rev().map(|v| f64::from(v.to_f32()).powi(2)).sum();
        assert_ne!(
            exact.to_bits(),
            rev.to_bits(),
            "rows too tame to pin the order"
        );
    }

    /// Rows of T through `rows` with and without the next-row prefetch and through the
    /// reference: the same outputs (the prefetch only touches the cache). 5 rows of 33 blocks
    /// (a partial 16-block group) with a NaN row and an Inf + -Inf row, with and without a
    /// residual, every output asked for.
    fn prefetch_case<T: Wide + crate::Element>(attrs: &AddRmsNormAttrs) {
        let (m, h) = (5, 1056);
        let val = |i: usize, k: usize| T::from_f32(((i * k) % 29) as f32 * 0.37 - 5.0);
        let mut x: Vec<T> = (0..m * h).map(|i| val(i, 7)).collect();
        let mut res: Vec<T> = (0..m * h).map(|i| val(i, 11)).collect();
        // A NaN row, an Inf + -Inf row (the NaN-aware pass 2).
        x[h + 7] = T::from_f32(f32::NAN);
        (x[3 * h + 40], res[3 * h + 40]) =
            (T::from_f32(f32::INFINITY), T::from_f32(f32::NEG_INFINITY));
        let gamma: Vec<T> = (0..h)
            .map(|i| T::from_f32((i % 13) as f32 * 0.05))
            .collect();
        for residual in [Some(&res[..]), None] {
            let run = |how: Option<bool>| {
                let (mut q, mut s) = (vec![0u8; m * h], vec![0u8; m * h / BLOCK]);
                let (mut ro, mut nm) = (vec![T::default(); m * h], vec![T::default(); m * h]);
                let out = NormOutputs {
                    q: &mut q,
                    scales: &mut s,
                    residual_out: Some(&mut ro),
                    normed: Some(&mut nm),
                };
                match how {
                    // SAFETY: the features were checked; shapes are valid.
                    Some(prefetch) => unsafe {
                        rows(&x, residual, &gamma, h, attrs, out, prefetch)
                    },
                    None => {
                        crate::reference::add_rms_norm_mx_quant(&x, residual, &gamma, h, attrs, out)
                            .expect("valid shapes")
                    }
                }
                let bits = |v: &[T]| v.iter().map(|e| e.to_f32().to_bits()).collect::<Vec<_>>();
                (q, s, bits(&ro), bits(&nm))
            };
            let want = run(None);
            let name = std::any::type_name::<T>();
            let with = residual.is_some();
            assert!(
                run(Some(true)) == want,
                "{name} {attrs:?} residual {with}, prefetch"
            );
            assert!(run(Some(false)) == want, "{name} {attrs:?} residual {with}");
        }
    }

    #[test]
    fn prefetching_rows_match_reference() {
        if !super::super::isa::avx512_norm() {
            return;
        }
        for (gemma, gamma_in_f32, inv_form) in [
            (true, false, InvForm::Rsqrt),
            (false, true, InvForm::Rsqrt),
            (true, true, InvForm::Div),
        ] {
            let attrs = AddRmsNormAttrs {
                gemma,
                gamma_in_f32,
                inv_form,
                ..Default::default()
            };
            prefetch_case::<bf16>(&attrs);
            prefetch_case::<f16>(&attrs);
            prefetch_case::<f32>(&attrs);
        }
    }

    /// bf16 rows (`normed` not asked for, `residual_out` if `ro`) through `rows_of` with and
    /// without the words path and through the reference: the same q, scales and residual_out.
    fn words_match_reference(
        x: &[bf16],
        residual: Option<&[bf16]>,
        gamma: &[f32],
        h: usize,
        attrs: &AddRmsNormAttrs,
        ro: bool,
    ) {
        // SAFETY: the callers checked the features; shapes are valid.
        let with = |words: bool| {
            move |out: NormOutputs<'_, bf16>| unsafe {
                rows_of::<bf16, f32>(x, residual, gamma, h, attrs, out, true, words)
            }
        };
        let (on, off) = (with(true), with(false));
        let runs: [Run<'_>; 2] = [("words path", &on), ("f32 path", &off)];
        runs_match_reference(x, residual, gamma, h, attrs, ro, &runs);
    }

    /// bf16 rows through the packed-word pass 2 (`avx512_norm_words`), the f32 pass 2 and the
    /// reference: the same q, scales and residual_out, on `norm_edge_rows::pass2_edges`.
    #[test]
    fn word_pass2_matches_reference() {
        if !(super::super::isa::avx512_norm() && super::super::isa::avx512_bf16()) {
            return;
        }
        pass2_edges().each(words_match_reference);
    }

    /// bf16 rows through the words path's pass 1 (`vcvtne2ps2bf16` sums, pipelined into the
    /// previous row's pass 2), the f32 path and the reference: the same q, scales and
    /// residual_out, on `norm_edge_rows::pass1_edges`.
    #[test]
    fn word_pass1_matches_reference() {
        if !(super::super::isa::avx512_norm() && super::super::isa::avx512_bf16()) {
            return;
        }
        pass1_edges().each(words_match_reference);
    }

    #[test]
    fn layout_tables_are_inverse() {
        for p in 0..32 {
            assert_eq!(bf16_position(bf16_layout(p)), p);
        }
        // Even elements of the block, then odd ones.
        let expect: Vec<usize> = (0..32).step_by(2).chain((1..32).step_by(2)).collect();
        assert_eq!((0..32).map(bf16_layout).collect::<Vec<_>>(), expect);
    }
}
