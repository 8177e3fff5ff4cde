//! Fast `AddRmsNormMxQuant`: the weights g_i are formed once per call; one pass per row forms
//! the sum (and `residual_out`) and the pinned 16-lane f64 sum of squares, a second pass
//! normalises, rounds to T and quantizes each group of 8 blocks while it is in L1. When the row's
//! sum of squares, 1/d and every g_i are finite no lane of the second pass can be NaN, so bf16
//! rounds without the NaN quieting there. The first pass is compiled per combination of the
//! optional residual / residual_out / `round_sum` (no branches in the row loop); bf16 with a
//! residual widens by 16-bit unpacks (see `sum_row_bf16`). bf16 rows of the common attributes
//! (s in bf16, `n = s · (1/d)` weighted in f32, no `normed` output) take the packed-word path
//! of [`super::avx2_norm_words`] instead.

use super::shared::SharedMut;
use super::{min_rows_per_task, FastElement, Isa};
use crate::attrs::AddRmsNormAttrs;
use crate::codec::BLOCK;
use crate::error::Result;
use crate::parallel::{for_row_chunks, Parallel};
use crate::slices::{check_norm_io, NormOutputs};

/// `AddRmsNormMxQuant` over rows of `h` (bit-exact with
/// [`crate::reference::add_rms_norm_mx_quant`]).
pub fn add_rms_norm_mx_quant<T: FastElement, G: FastElement>(
    x: &[T],
    residual: Option<&[T]>,
    gamma: &[G],
    h: usize,
    attrs: &AddRmsNormAttrs,
    out: NormOutputs<'_, T>,
    par: &dyn Parallel,
) -> Result<()> {
    let rows = check_norm_io(x, residual, gamma, h, &out)?;
    let isa = Isa::detect();
    // AVX-512 pass 2 + quantizer (and bf16 pass 1) where the CPU has it: the same bits.
    #[cfg(target_arch = "x86_64")]
    let wide = super::isa::avx512_norm();
    let nb = h / BLOCK;
    // Inputs past the caches: prefetch each next row during pass 2 (AVX-512 paths, AVX2 words).
    #[cfg(target_arch = "x86_64")]
    let prefetch =
        std::mem::size_of_val(x) * (1 + residual.is_some() as usize) >= PREFETCH_MIN_BYTES;
    let q = SharedMut::new(out.q);
    let scales = SharedMut::new(out.scales);
    let res_out = out.residual_out.map(SharedMut::new);
    let normed = out.normed.map(SharedMut::new);
    for_row_chunks(par, rows, min_rows_per_task(h), &|r0, r1| {
        let span = (r0 * h, r1 * h);
        // SAFETY: row chunks are disjoint, so these pieces are too.
        let chunk_out = unsafe {
            NormOutputs {
                q: q.piece(span.0, span.1),
                scales: scales.piece(r0 * nb, r1 * nb),
                residual_out: res_out.as_ref().map(|r| r.piece(span.0, span.1)),
                normed: normed.as_ref().map(|n| n.piece(span.0, span.1)),
            }
        };
        let xc = &x[span.0..span.1];
        let rc = residual.map(|r| &r[span.0..span.1]);
        match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `avx512_norm()` checked the AVX-512 features (and implies Avx2).
            Isa::Avx2 if wide => unsafe {
                super::avx512_norm::rows(xc, rc, gamma, h, attrs, chunk_out, prefetch)
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: Avx2 implies the CPU features; shapes were checked above.
            Isa::Avx2 => unsafe {
                avx2_norm::rows(xc, rc, gamma, h, attrs, chunk_out, Some(prefetch))
            },
            _ => {
                // The reference is the portable path; shapes are valid, so it cannot fail.
                let r = crate::reference::add_rms_norm_mx_quant(xc, rc, gamma, h, attrs, chunk_out);
                debug_assert!(r.is_ok());
            }
        }
    });
    Ok(())
}

/// Input bytes (x and residual) of a call from which the AVX-512 paths and the AVX2 words path
/// prefetch each next row: with the outputs the call then moves about as much as the 32 MiB L3
/// of the Zen 4 parts we run on, so the rows come from DRAM. Below it the rows are in cache and the
/// prefetches only cost instructions (M = 192, H = 6144, 4.7 MB of inputs: 4 % slower with
/// them, one thread).
#[cfg(target_arch = "x86_64")]
const PREFETCH_MIN_BYTES: usize = 16 << 20;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_op_in_unsafe_fn)]
pub(super) mod avx2_norm {
    use std::any::TypeId;
    use std::arch::x86_64::*;

    use half::bf16;

    use super::super::avx2::{quantize_block_avx2, quantize_group8, Lanes, GROUP};
    use super::super::avx2_norm_words;
    use super::super::shared::{cast_outputs, cast_slice};
    use crate::attrs::{AddRmsNormAttrs, InvForm};
    use crate::codec::BLOCK;
    use crate::slices::NormOutputs;

    /// Widens 8 f32 squares to two f64 vectors (lanes 0-3, 4-7 of the chunk).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn squares_pd(s: __m256) -> (__m256d, __m256d) {
        let sq = _mm256_mul_ps(s, s);
        (
            _mm256_cvtps_pd(_mm256_castps256_ps128(sq)),
            _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(sq)),
        )
    }

    /// x + residual for the 8 elements at `i`: writes round_T(sum) to `residual_out`, stores
    /// the value to normalise (rounded per `ROUND`) at `sp + i` and returns it. The sum of two
    /// values widened from T is a NaN only with zero low bits, so the `_no_nan` rounding is
    /// exact here (see `Lanes::round8_no_nan`). `RES` / `RO`: a residual is read / a
    /// residual_out written (`rp` / `rop` are not used otherwise) — constants, so the row loop
    /// carries no branches.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn sum8<T: Lanes, const RES: bool, const RO: bool, const ROUND: bool>(
        xp: *const T,
        rp: *const T,
        rop: *mut T,
        sp: *mut f32,
        i: usize,
    ) -> __m256 {
        let xv = T::load8(xp.add(i));
        let s = if RES {
            let sum = _mm256_add_ps(xv, T::load8(rp.add(i)));
            match (RO, ROUND) {
                (true, true) => T::round_store8_no_nan(rop.add(i), sum),
                (true, false) => {
                    T::round_store8_no_nan(rop.add(i), sum);
                    sum
                }
                (false, true) => T::round8_no_nan(sum),
                (false, false) => sum,
            }
        } else {
            if RO {
                T::store8(rop.add(i), xv);
            }
            xv
        };
        _mm256_storeu_ps(sp.add(i), s);
        s
    }

    /// Pass 1 of one row: the sums into `sp` (and `residual_out`) and their sum of squares in
    /// the pinned order. Element i goes to lane i mod 16: the first 8 of every 16 to acc0/acc1,
    /// the next 8 to acc2/acc3 (h is a multiple of 32, so there is no tail).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn sum_row<T: Lanes, const RES: bool, const RO: bool, const ROUND: bool>(
        xp: *const T,
        rp: *const T,
        rop: *mut T,
        sp: *mut f32,
        h: usize,
    ) -> f64 {
        let mut acc = [_mm256_setzero_pd(); 4];
        let mut i = 0;
        while i < h {
            let (a, b) = squares_pd(sum8::<T, RES, RO, ROUND>(xp, rp, rop, sp, i));
            let (c, d) = squares_pd(sum8::<T, RES, RO, ROUND>(xp, rp, rop, sp, i + 8));
            acc[0] = _mm256_add_pd(acc[0], a);
            acc[1] = _mm256_add_pd(acc[1], b);
            acc[2] = _mm256_add_pd(acc[2], c);
            acc[3] = _mm256_add_pd(acc[3], d);
            i += 16;
        }
        reduce_lanes(acc)
    }

    /// [`sum_row`] with a residual for bf16, 16 elements a step. Unpacking 16 bf16 with zero
    /// widens them in one shuffle per 8 (not a zero-extend and a shift) but yields the lanes
    /// as [0-3 | 8-11] and [4-7 | 12-15]: exactly the halves the pinned 16-lane order adds to
    /// acc0/acc2 and acc1/acc3, so the sum of squares needs no reordering; two 128-bit permutes
    /// put the sums back in order for `sp`, and one `packus` of the two halves gives the 16
    /// `residual_out` values in order. Same results as `sum_row::<bf16, true, RO, ROUND>`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn sum_row_bf16<const RO: bool, const ROUND: bool>(
        xp: *const bf16,
        rp: *const bf16,
        rop: *mut bf16,
        sp: *mut f32,
        h: usize,
    ) -> f64 {
        let zero = _mm256_setzero_si256();
        let (lsb_bit, half, high) = (
            _mm256_set1_epi32(0x1_0000),
            _mm256_set1_epi32(0x8000),
            _mm256_set1_epi32(-65536),
        );
        // RNE of a non-NaN f32 to bf16 in the high half: x + 0x7FFF + lsb, written as
        // x + 0x8000 - (lsb == 0) to keep it off the shift ports.
        let round = |v: __m256i| {
            let even = _mm256_cmpeq_epi32(_mm256_and_si256(v, lsb_bit), zero);
            _mm256_add_epi32(_mm256_add_epi32(v, half), even)
        };
        let mut acc = [_mm256_setzero_pd(); 4];
        let mut i = 0;
        while i < h {
            let xv = _mm256_loadu_si256(xp.add(i) as *const __m256i);
            let rv = _mm256_loadu_si256(rp.add(i) as *const __m256i);
            let sum_lo = _mm256_add_ps(
                _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, xv)),
                _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, rv)),
            );
            let sum_hi = _mm256_add_ps(
                _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, xv)),
                _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, rv)),
            );
            let r_lo = round(_mm256_castps_si256(sum_lo));
            let r_hi = round(_mm256_castps_si256(sum_hi));
            if RO {
                let bits = _mm256_packus_epi32(
                    _mm256_srli_epi32::<16>(r_lo),
                    _mm256_srli_epi32::<16>(r_hi),
                );
                _mm256_storeu_si256(rop.add(i) as *mut __m256i, bits);
            }
            let (s_lo, s_hi) = if ROUND {
                (
                    _mm256_castsi256_ps(_mm256_and_si256(r_lo, high)),
                    _mm256_castsi256_ps(_mm256_and_si256(r_hi, high)),
                )
            } else {
                (sum_lo, sum_hi)
            };
            _mm256_storeu_ps(sp.add(i), _mm256_permute2f128_ps::<0x20>(s_lo, s_hi));
            _mm256_storeu_ps(sp.add(i + 8), _mm256_permute2f128_ps::<0x31>(s_lo, s_hi));
            let (a, c) = squares_pd(s_lo); // elements 0-3, 8-11
            let (b, d) = squares_pd(s_hi); // elements 4-7, 12-15
            acc[0] = _mm256_add_pd(acc[0], a);
            acc[1] = _mm256_add_pd(acc[1], b);
            acc[2] = _mm256_add_pd(acc[2], c);
            acc[3] = _mm256_add_pd(acc[3], d);
            i += 16;
        }
        reduce_lanes(acc)
    }

    /// Combines the 16 lanes in the pinned order (see `reference::math::mean_of_squares`).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(in crate::fast) unsafe fn reduce_lanes(acc: [__m256d; 4]) -> f64 {
        let a = _mm256_add_pd(acc[0], acc[2]); // lanes 0-3 (+8-11)
        let b = _mm256_add_pd(acc[1], acc[3]); // lanes 4-7 (+12-15)
        let c = _mm256_add_pd(a, b); // lane j += lane j+4
        let lo = _mm256_castpd256_pd128(c);
        let hi = _mm256_extractf128_pd::<1>(c);
        let d = _mm_add_pd(lo, hi); // lane j += lane j+2
        _mm_cvtsd_f64(_mm_add_sd(d, _mm_unpackhi_pd(d, d))) // lane 0 += lane 1
    }

    /// The weights g_i of lanes i..i+8 as `reference::norm_weight` forms them.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn weight8<G: Lanes>(gp: *const G, i: usize, attrs: &AddRmsNormAttrs) -> __m256 {
        let w = G::load8(gp.add(i));
        match (attrs.gemma, attrs.gamma_in_f32) {
            (false, _) => w,
            (true, true) => _mm256_add_ps(_mm256_set1_ps(1.0), w),
            (true, false) => G::round8(_mm256_add_ps(_mm256_set1_ps(1.0), w)),
        }
    }

    /// a · b by one `vmulps` with `a` as the first source, so a NaN in `a` wins over one in `b`
    /// whatever the compiler would reorder.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn mul_first_nan8(a: __m256, b: __m256) -> __m256 {
        let y: __m256;
        std::arch::asm!(
            "vmulps {y}, {a}, {b}",
            y = lateout(ymm_reg) y,
            a = in(ymm_reg) a,
            b = in(ymm_reg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
        y
    }

    /// The normed lanes i..i+8: `n` per `inv_form`, times the weight g (`gw + i`) per
    /// `gamma_in_f32`, rounded to T (and stored at `np + i` when the normed output is wanted).
    /// `NO_NAN`: the caller proved no lane is NaN (finite s, 1/d and g).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn normed8<T: Lanes, const NO_NAN: bool>(
        sp: *const f32,
        gw: *const f32,
        i: usize,
        d: __m256,
        inv: __m256,
        attrs: &AddRmsNormAttrs,
        np: Option<*mut T>,
    ) -> __m256 {
        let s = _mm256_loadu_ps(sp.add(i));
        // Where a lane can be NaN, which operand's NaN a product keeps is part of the result
        // (x86 keeps the first source's, as the reference's scalar `a * b`); LLVM may commute
        // `fmul`, so those products are pinned (as in avx512_norm.rs).
        let mul = |a, b| {
            if NO_NAN {
                _mm256_mul_ps(a, b)
            } else {
                mul_first_nan8(a, b)
            }
        };
        let n = match attrs.inv_form {
            InvForm::Div => _mm256_div_ps(s, d),
            InvForm::Rsqrt | InvForm::RecipMul => mul(s, inv),
        };
        let round = |v| {
            if NO_NAN {
                T::round8_no_nan(v)
            } else {
                T::round8(v)
            }
        };
        let g = _mm256_loadu_ps(gw.add(i));
        let y = if attrs.gamma_in_f32 {
            mul(n, g)
        } else {
            mul(round(n), g)
        };
        match np {
            Some(np) if NO_NAN => T::round_store8_no_nan(np.add(i), y),
            Some(np) => T::round_store8(np.add(i), y),
            None => round(y),
        }
    }

    /// Pass 2 of one row: normalise, weight and round into `sp` in place, quantizing every
    /// group of 8 blocks right after it is formed (then the leftover single blocks).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(in crate::fast) unsafe fn normalize_quantize<T: Lanes, const NO_NAN: bool>(
        sp: *mut f32,
        gw: *const f32,
        h: usize,
        d: f32,
        attrs: &AddRmsNormAttrs,
        np: Option<*mut T>,
        q: *mut u8,
        scales: *mut u8,
    ) {
        let (dv, inv) = (_mm256_set1_ps(d), _mm256_set1_ps(1.0 / d));
        let nb = h / BLOCK;
        let groups = nb / GROUP;
        for g in 0..groups {
            let off = g * GROUP * BLOCK;
            for i in (off..off + GROUP * BLOCK).step_by(8) {
                let y = normed8::<T, NO_NAN>(sp, gw, i, dv, inv, attrs, np);
                _mm256_storeu_ps(sp.add(i), y);
            }
            quantize_group8(sp.add(off), q.add(off), scales.add(g * GROUP), attrs.quant);
        }
        for b in groups * GROUP..nb {
            let i = b * BLOCK;
            let y = [
                normed8::<T, NO_NAN>(sp, gw, i, dv, inv, attrs, np),
                normed8::<T, NO_NAN>(sp, gw, i + 8, dv, inv, attrs, np),
                normed8::<T, NO_NAN>(sp, gw, i + 16, dv, inv, attrs, np),
                normed8::<T, NO_NAN>(sp, gw, i + 24, dv, inv, attrs, np),
            ];
            *scales.add(b) = quantize_block_avx2(y, q.add(i), attrs.quant);
        }
    }

    /// The weights g_i of every lane (the same for every row: formed once per call) and
    /// whether all of them are finite.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::fast) unsafe fn weights<G: Lanes>(
        gamma: &[G],
        h: usize,
        attrs: &AddRmsNormAttrs,
    ) -> (Vec<f32>, bool) {
        let mut g_buf = vec![0f32; h];
        let mut finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
        let absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
        for i in (0..h).step_by(8) {
            let g = weight8(gamma.as_ptr(), i, attrs);
            let lt_inf = _mm256_cmp_ps::<_CMP_LT_OQ>(
                _mm256_and_ps(g, absmask),
                _mm256_set1_ps(f32::INFINITY),
            );
            finite = _mm256_and_ps(finite, lt_inf);
            _mm256_storeu_ps(g_buf.as_mut_ptr().add(i), g);
        }
        (g_buf, _mm256_movemask_ps(finite) == 0xFF)
    }

    /// Pass 1 of one row (AVX2): the values to normalise into `sp` in element order (and
    /// `residual_out` at `rop` unless null; `rp` null = no residual); returns their sum of
    /// squares in the pinned order.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::fast) unsafe fn pass1<T: Lanes + 'static>(
        xp: *const T,
        rp: *const T,
        rop: *mut T,
        sp: *mut f32,
        h: usize,
        round_sum: bool,
    ) -> f64 {
        // `round_sum` only matters with a residual; without one s = x either way.
        let bf16_rows = TypeId::of::<T>() == TypeId::of::<bf16>();
        let (xb, rb, rob) = (xp as *const bf16, rp as *const bf16, rop as *mut bf16);
        match (!rp.is_null(), !rop.is_null(), round_sum) {
            // bf16 (the types are equal, so the casts are identities) with a residual.
            (true, true, true) if bf16_rows => sum_row_bf16::<true, true>(xb, rb, rob, sp, h),
            (true, true, false) if bf16_rows => sum_row_bf16::<true, false>(xb, rb, rob, sp, h),
            (true, false, true) if bf16_rows => sum_row_bf16::<false, true>(xb, rb, rob, sp, h),
            (true, false, false) if bf16_rows => sum_row_bf16::<false, false>(xb, rb, rob, sp, h),
            (true, true, true) => sum_row::<T, true, true, true>(xp, rp, rop, sp, h),
            (true, true, false) => sum_row::<T, true, true, false>(xp, rp, rop, sp, h),
            (true, false, true) => sum_row::<T, true, false, true>(xp, rp, rop, sp, h),
            (true, false, false) => sum_row::<T, true, false, false>(xp, rp, rop, sp, h),
            (false, true, _) => sum_row::<T, false, true, false>(xp, rp, rop, sp, h),
            (false, false, _) => sum_row::<T, false, false, false>(xp, rp, rop, sp, h),
        }
    }

    /// Computes rows of the fused norm. `words`: bf16 rows of the common attributes take the
    /// packed-word path ([`super::super::avx2_norm_words`]), with the next-row prefetch if
    /// `Some(true)` (`None` only in tests: the f32 path for every row).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn rows<T: Lanes + 'static, G: Lanes>(
        x: &[T],
        residual: Option<&[T]>,
        gamma: &[G],
        h: usize,
        attrs: &AddRmsNormAttrs,
        mut out: NormOutputs<'_, T>,
        words: Option<bool>,
    ) {
        let (g_buf, gw_finite) = weights(gamma, h, attrs);
        if let Some(prefetch) = words.filter(|_| {
            TypeId::of::<T>() == TypeId::of::<bf16>()
                && avx2_norm_words::applies(attrs, residual.is_some(), out.normed.is_some())
        }) {
            // T is bf16: the casts are identities.
            let (x, residual) = (cast_slice(x), residual.map(|r| cast_slice(r)));
            let out = cast_outputs(out);
            avx2_norm_words::rows(x, residual, &g_buf, gw_finite, h, attrs, out, prefetch);
            return;
        }
        let mut s_buf = vec![0f32; h];
        let nb = h / BLOCK;
        let gw = g_buf.as_ptr();
        for r in 0..x.len() / h {
            let base = r * h;
            let xp = x.as_ptr().add(base);
            let rp = residual.map_or(std::ptr::null(), |res| res.as_ptr().add(base));
            let rop = out
                .residual_out
                .as_deref_mut()
                .map_or(std::ptr::null_mut(), |ro| ro.as_mut_ptr().add(base));
            let sp = s_buf.as_mut_ptr();
            let sum_sq = pass1(xp, rp, rop, sp, h, attrs.round_sum);
            let v = (sum_sq / h as f64) as f32;
            let d = (v + attrs.epsilon).sqrt();
            let np = out.normed.as_deref_mut().map(|n| n.as_mut_ptr().add(base));
            let (q, sc) = (
                out.q.as_mut_ptr().add(base),
                out.scales.as_mut_ptr().add(r * nb),
            );
            // Finite Σs² bounds every |s| and makes d finite; with 1/d and g finite too, n and
            // y = n·g are finite or ±Inf, never NaN.
            if gw_finite && sum_sq.is_finite() && (1.0 / d).is_finite() {
                normalize_quantize::<T, true>(sp, gw, h, d, attrs, np, q, sc);
            } else {
                normalize_quantize::<T, false>(sp, gw, h, d, attrs, np, q, sc);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use half::f16;

    use crate::attrs::AddRmsNormAttrs;
    use crate::parallel::Serial;
    use crate::slices::NormOutputs;

    /// f16 rows whose weighted values overflow to ±Inf while Σs², 1/d and every weight are
    /// finite: the NaN-free pass 2 must hand groups holding an Inf to the per-block fallback
    /// (the quantizer sees ±Inf next to finite values, never NaN).
    #[test]
    fn inf_after_weighting_matches_reference() {
        let (rows, h) = (3, 512); // two groups of 8 blocks per row
        let x: Vec<f16> = (0..rows * h)
            .map(|i| f16::from_f32(((i * 7) % 23) as f32 - 11.0))
            .collect();
        let res: Vec<f16> = (0..rows * h)
            .map(|i| f16::from_f32(((i * 5) % 13) as f32 * 0.25))
            .collect();
        let mut gamma = vec![f16::from_f32(0.5); h];
        gamma[300] = f16::from_f32(60000.0); // n·g > 65504 in the second group
        gamma[301] = f16::from_f32(-60000.0);
        let attrs = AddRmsNormAttrs::default();
        let run = |fast: bool| {
            let (mut q, mut s) = (vec![0u8; rows * h], vec![0u8; rows * h / 32]);
            let (mut ro, mut nm) = (vec![f16::ZERO; rows * h], vec![f16::ZERO; rows * h]);
            let out = NormOutputs {
                q: &mut q,
                scales: &mut s,
                residual_out: Some(&mut ro),
                normed: Some(&mut nm),
            };
            let r = if fast {
                super::add_rms_norm_mx_quant(&x, Some(&res), &gamma, h, &attrs, out, &Serial)
            } else {
                crate::reference::add_rms_norm_mx_quant(&x, Some(&res), &gamma, h, &attrs, out)
            };
            r.expect("valid shapes");
            let bits: Vec<u16> = nm.iter().map(|v| v.to_bits()).collect();
            (q, s, bits)
        };
        let want = run(false);
        assert!(
            want.2.iter().any(|&b| b & 0x7FFF == 0x7C00),
            "the case must overflow to Inf"
        );
        assert_eq!(run(true), want);
    }
}
