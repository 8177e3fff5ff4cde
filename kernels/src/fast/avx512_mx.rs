//! AVX-512 BF16 multiply kernel of the MXFP8 `[N, K]` GEMM for M > 4 (driven by `matmul_mx`):
//! `vdpbf16ps` does 32 multiply-adds per instruction, twice the f32 FMA rate per cycle.
//!
//! Exactness: every deq(A) and deq(B) value has at most 4 significant bits, so it converts to
//! bf16 exactly when it is a normal f32; each bf16 × bf16 product is exact in f32 and
//! `vdpbf16ps` adds the two products of a pair to the f32 accumulator with RNE — f32
//! accumulation as the op defines it. The instruction treats denormal inputs as zero and flushes
//! denormal results, so the driver takes this path only when every nonzero A and B value and
//! every nonzero product is a normal f32 (`normal_products`); an accumulator that cancels below
//! 2^-126 may still flush (an absolute error below 2^-126).

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::avx2_mx::NK_COLS;

/// All-zero accumulators, usable outside `target_feature` code.
// SAFETY: __m512 is 16 f32 lanes; all-zero bits are 0.0 in every lane.
pub const ZERO: __m512 = unsafe { std::mem::transmute::<[f32; 16], __m512>([0.0; 16]) };

/// Rows of A per register block (4 × 4 accumulators of the 32 registers).
pub const ROWS: usize = 4;

/// The smallest binary exponent of a nonzero value in `v` (`i32::MAX` when all are zero;
/// NaN and ±Inf count as exponent 128, denormals as -127 so they fail the normal check).
/// Vectorized: the scalar scan was ~10 µs of a 6144 × 8 A per GEMM call.
///
/// # Safety
/// The CPU has AVX512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn min_exponent(v: &[f32]) -> i32 {
    // Biased exponent fields, 256 for ±0 (above every field, so zeros never count).
    let field = |bits: __m512i| {
        let magnitude = _mm512_slli_epi32::<1>(bits);
        let e = _mm512_srli_epi32::<24>(magnitude);
        _mm512_mask_mov_epi32(
            _mm512_set1_epi32(256),
            _mm512_test_epi32_mask(magnitude, magnitude),
            e,
        )
    };
    let mut lo = _mm512_set1_epi32(256);
    let mut chunks = v.chunks_exact(16);
    for c in &mut chunks {
        lo = _mm512_min_epu32(lo, field(_mm512_loadu_si512(c.as_ptr() as *const __m512i)));
    }
    let mut tail = [0f32; 16];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    lo = _mm512_min_epu32(
        lo,
        field(_mm512_loadu_si512(tail.as_ptr() as *const __m512i)),
    );
    match _mm512_reduce_min_epu32(lo) {
        256 => i32::MAX,
        e => e as i32 - 127,
    }
}

/// The largest binary exponent of a value in `v` (-127 when all are zero or subnormal; NaN and
/// ±Inf count as 128).
///
/// # Safety
/// The CPU has AVX512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn max_exponent(v: &[f32]) -> i32 {
    let field = |bits: __m512i| _mm512_srli_epi32::<24>(_mm512_slli_epi32::<1>(bits));
    let mut hi = _mm512_setzero_si512();
    let mut chunks = v.chunks_exact(16);
    for c in &mut chunks {
        hi = _mm512_max_epu32(hi, field(_mm512_loadu_si512(c.as_ptr() as *const __m512i)));
    }
    let mut tail = [0f32; 16];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    hi = _mm512_max_epu32(
        hi,
        field(_mm512_loadu_si512(tail.as_ptr() as *const __m512i)),
    );
    _mm512_reduce_max_epu32(hi) as i32 - 127
}

/// Whether products of values with smallest exponents `ea` and `eb` (see [`min_exponent`])
/// and the values themselves are all normal f32 — the precondition of this path.
pub fn normal_products(ea: i32, eb: i32) -> bool {
    // i64: the all-zero sentinel i32::MAX must not overflow.
    ea >= -126 && eb >= -126 && ea as i64 + eb as i64 >= -126
}

/// `dst[i] = bf16(src[i])` (RNE) for whole chunks of 32; `src.len() % 32 == 0`.
///
/// # Safety
/// The CPU has AVX512F/BW/VL/BF16; `dst.len() >= src.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
pub unsafe fn to_bf16(src: &[f32], dst: &mut [u16]) {
    assert!(dst.len() >= src.len());
    to_bf16_at(src, dst.as_mut_ptr());
}

/// [`to_bf16`] into the `src.len()` u16 at `dst`, which may be uninitialised memory.
///
/// # Safety
/// The CPU has AVX512F/BW/VL/BF16; `dst` is valid for `src.len()` u16 writes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
pub unsafe fn to_bf16_at(src: &[f32], dst: *mut u16) {
    assert!(src.len().is_multiple_of(32));
    for i in (0..src.len()).step_by(32) {
        let (lo, hi) = (
            _mm512_loadu_ps(src.as_ptr().add(i)),
            _mm512_loadu_ps(src.as_ptr().add(i + 16)),
        );
        // The first operand fills the upper 16 elements.
        let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        _mm512_storeu_si512(dst.add(i) as *mut __m512i, v);
    }
}

/// `acc[r][c] += Σ_kk a[r, kk] · tile[c][kk]` over `kt` (multiple of 32) for `R` ≤ 4 rows of
/// bf16 A at `a` (stride `lda` elements) and a bf16 tile of 4 columns (row stride `ldt`);
/// `acc` holds 16-lane partial sums (lane j: the pairs k ≡ 2j, 2j+1 mod 32).
///
/// # Safety
/// The CPU has AVX512F/BW/VL/BF16; the R rows of A and the 4 tile rows hold `kt` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
pub unsafe fn nk_tile_rows<const R: usize>(
    a: *const u16,
    lda: usize,
    tile: *const u16,
    ldt: usize,
    kt: usize,
    acc: &mut [[__m512; NK_COLS]; R],
) {
    let load = |p: *const u16| -> __m512bh {
        std::mem::transmute(_mm512_loadu_si512(p as *const __m512i))
    };
    let mut s = *acc;
    for kk in (0..kt).step_by(32) {
        let b = [
            load(tile.add(kk)),
            load(tile.add(ldt + kk)),
            load(tile.add(2 * ldt + kk)),
            load(tile.add(3 * ldt + kk)),
        ];
        for (r, sr) in s.iter_mut().enumerate() {
            let x = load(a.add(r * lda + kk));
            for c in 0..NK_COLS {
                sr[c] = _mm512_dpbf16_ps(sr[c], x, b[c]);
            }
        }
    }
    *acc = s;
}

/// Sum of the 16 lanes (a fixed tree, so results are deterministic).
///
/// # Safety
/// The CPU has AVX512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn hsum(v: __m512) -> f32 {
    _mm512_reduce_add_ps(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponent_guard() {
        if crate::fast::isa::avx512_bf16() {
            let min = |v: &[f32]| unsafe { min_exponent(v) };
            assert_eq!(min(&[0.0, 1.0, 0.25, -8.0]), -2);
            assert_eq!(min(&[0.0, -0.0]), i32::MAX);
            assert_eq!(min(&[f32::from_bits(1), 1.0]), -127); // a denormal
            assert_eq!(min(&[f32::NAN, f32::NEG_INFINITY]), 128);
            // Past whole 16-lane chunks, and the smallest value in the remainder.
            let mut v = vec![-3.0f32; 37];
            v[36] = 2f32.powi(-100);
            assert_eq!(min(&v), -100);
            assert_eq!(min(&v[..36]), 1);
            let max = |v: &[f32]| unsafe { max_exponent(v) };
            assert_eq!(max(&[0.0, 1.0, 0.25, -8.0]), 3);
            assert_eq!(max(&[0.0, -0.0, f32::from_bits(1)]), -127); // zeros and a denormal
            assert_eq!(max(&[1.0, f32::NAN]), 128);
            assert_eq!(max(&[-f32::MAX, 1.0]), 127);
            v[36] = -2f32.powi(100);
            assert_eq!(max(&v), 100);
            assert_eq!(max(&v[..36]), 1);
        }
        assert!(normal_products(-126, 0) && normal_products(-60, -66));
        assert!(normal_products(i32::MAX, i32::MAX)); // all zeros
        assert!(!normal_products(-127, 5) && !normal_products(3, -127));
        assert!(!normal_products(-70, -60)); // values normal, products not
    }
}
