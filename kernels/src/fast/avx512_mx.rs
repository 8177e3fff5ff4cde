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

use super::avx2_mx::{nan_bytes32, MAX_FAST_SCALE, NK_COLS};
use crate::codec::BLOCK;

/// All-zero accumulators, usable outside `target_feature` code.
// SAFETY: __m512 is 16 f32 lanes; all-zero bits are 0.0 in every lane.
pub const ZERO: __m512 = unsafe { std::mem::transmute::<[f32; 16], __m512>([0.0; 16]) };

/// Rows of A per register block (4 × 4 accumulators of the 32 registers).
pub const ROWS: usize = 4;

/// The smallest binary exponent of a nonzero value in `v` (`i32::MAX` when all are zero;
/// NaN and ±Inf count as exponent 128, denormals as -127 so they fail the normal check).
pub fn min_exponent(v: &[f32]) -> i32 {
    v.iter()
        .filter(|x| **x != 0.0)
        .map(|x| ((x.to_bits() >> 23) & 0xFF) as i32 - 127)
        .min()
        .unwrap_or(i32::MAX)
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
    assert!(src.len().is_multiple_of(32) && dst.len() >= src.len());
    for i in (0..src.len()).step_by(32) {
        let (lo, hi) = (
            _mm512_loadu_ps(src.as_ptr().add(i)),
            _mm512_loadu_ps(src.as_ptr().add(i + 16)),
        );
        // The first operand fills the upper 16 elements.
        let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        _mm512_storeu_si512(dst.as_mut_ptr().add(i) as *mut __m512i, v);
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

/// Bytes of one weight row decoded per [`nk_regs_bf16`] call (the driver's k-tile): the R rows of
/// bf16 A for it (≤ 16 × 512 B) stay in L1 while the unit's columns run over them.
pub const REGS_KT: usize = 256;

/// 32 E4M3 bytes of one block at `q` with E8M0 scale `s` (≤ `MAX_FAST_SCALE`, no NaN byte) →
/// the 32 bf16 deq values, in k order: the f16 route of `avx2_mx` (exact f16 of `value · 2^-8`,
/// widened exactly, times `2^(s - 119)` with the scalar deq's single rounding), then RNE to bf16,
/// exact for a normal f32 of ≤ 4 significant bits (the caller's `normal_products` guard).
/// (An integer add of the scale to the bf16 exponents, off the multiply pipes, measured 20 %
/// slower on Zen 4.)
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")]
#[inline]
unsafe fn block_bf16(q: *const u8, s: u8) -> __m512bh {
    let w = _mm512_cvtepi8_epi16(_mm256_loadu_si256(q as *const __m256i));
    let h = _mm512_and_si512(
        _mm512_slli_epi16::<7>(w),
        _mm512_set1_epi16(0xBF80u16 as i16),
    );
    let f = _mm512_set1_ps(f32::from_bits((s as u32 + 8) << 23));
    let lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), f);
    let hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64::<1>(h)), f);
    // The first operand fills the upper 16 elements.
    _mm512_cvtne2ps_pbh(hi, lo)
}

/// The in-register `[N, K]` kernel for small M: `acc[r] += Σ_k a[r, k] · deq(B)[k]` over `kt`
/// (multiple of 32) weights of one MXFP8 weight row at `q` (its scales at `s`), for `R` ≤ 16
/// rows of bf16 A at `a` (stride `lda`). Each 32-weight block is decoded once, in registers, for
/// all R rows — no decoded tile goes through memory. Lanes as [`nk_tile_rows`] (lane j: the pairs
/// k ≡ 2j, 2j+1 mod 32, in k order), so the sums equal the tiled path's bit for bit.
/// `false` when a block is off the fast route (a NaN byte or a scale > `MAX_FAST_SCALE`): `acc`
/// is then partial and the caller recomputes the unit exactly.
///
/// # Safety
/// The CPU has AVX512F/BW/VL/BF16 and AVX2/FMA/F16C; `q[..kt]`, `s[..kt/32]` and the R rows of
/// A (`kt` values each) are in bounds.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")]
pub unsafe fn nk_regs_bf16<const R: usize>(
    a: *const u16,
    lda: usize,
    q: *const u8,
    s: *const u8,
    kt: usize,
    acc: &mut [__m512; R],
) -> bool {
    let mut v = *acc;
    let mut off_route = _mm256_setzero_si256();
    let mut big = false;
    for kk in (0..kt).step_by(BLOCK) {
        let qp = q.add(kk);
        let sc = *s.add(kk / BLOCK);
        big |= sc > MAX_FAST_SCALE;
        off_route = _mm256_or_si256(off_route, nan_bytes32(qp));
        let b = block_bf16(qp, sc);
        for (r, vr) in v.iter_mut().enumerate() {
            let x: __m512bh =
                std::mem::transmute(_mm512_loadu_si512(a.add(r * lda + kk) as *const __m512i));
            *vr = _mm512_dpbf16_ps(*vr, x, b);
        }
    }
    *acc = v;
    !big && _mm256_movemask_epi8(off_route) == 0
}

/// `a` (`m` rows of `k` bf16 values) in k-tiles of [`REGS_KT`]: tile t holds rows 0..m of
/// k = t·REGS_KT.. contiguously (row stride = the tile's length), so the rows an
/// [`nk_regs_bf16`] call reads are one contiguous run in L1. Row-major A has a stride of 2k
/// bytes — a multiple of 4 KiB at k = 6144 — and its rows would all map to the same L1 sets.
pub fn pack_k_tiles(a: &[u16], m: usize, k: usize) -> Vec<u16> {
    let mut out = Vec::with_capacity(m * k);
    for k0 in (0..k).step_by(REGS_KT) {
        let kt = REGS_KT.min(k - k0);
        for row in a.chunks_exact(k).take(m) {
            out.extend_from_slice(&row[k0..k0 + kt]);
        }
    }
    out
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
        assert_eq!(min_exponent(&[0.0, 1.0, 0.25, -8.0]), -2);
        assert_eq!(min_exponent(&[0.0, -0.0]), i32::MAX);
        assert_eq!(min_exponent(&[f32::from_bits(1), 1.0]), -127); // a denormal
        assert!(normal_products(-126, 0) && normal_products(-60, -66));
        assert!(normal_products(i32::MAX, i32::MAX)); // all zeros
        assert!(!normal_products(-127, 5) && !normal_products(3, -127));
        assert!(!normal_products(-70, -60)); // values normal, products not
    }
}
