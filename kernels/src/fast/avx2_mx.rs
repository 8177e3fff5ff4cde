//! AVX2 building blocks of the MXFP8 GEMM: E4M3 decode in registers and the register-blocked
//! multiply kernels for both weight layouts (driven by `matmul_mx`).
//!
//! Decode: an E4M3FN byte sign-extended to 16 bits and shifted left by 7 holds the sign in bit
//! 15 and the exponent and mantissa in bits 13..7 — exactly the f16 fields, so after masking
//! bit 14 the lane is the f16 of `value · 2^-8`, subnormals included (the f16 bias is 15, E4M3's
//! 7). `vcvtph2ps` widens exactly, and one multiply by `2^(s - 119)` applies the block's E8M0
//! scale and the 2^8 with the single rounding of the scalar `e4m3_to_f32(q) * e8m0_to_f32(s)`.
//! Two inputs leave this route: NaN bytes (0x7F / 0xFF decode to finite f16 values) and scales
//! above 246 (2^(s - 119) is not a finite f32); callers detect them and decode exactly instead.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use crate::codec::{e4m3_to_f32, e8m0_to_f32, BLOCK};

/// An all-zero vector, usable outside `target_feature` code (accumulator initialisation).
// SAFETY: __m256 is 8 f32 lanes; all-zero bits are 0.0 in every lane.
pub const ZERO: __m256 = unsafe { std::mem::transmute::<[f32; 8], __m256>([0.0; 8]) };

/// Largest E8M0 scale whose factor `2^(s - 119)` is a finite f32.
pub const MAX_FAST_SCALE: u8 = 246;

/// `2^(s - 119)` splatted: the block scale times the 2^8 the f16 route leaves out (s ≤ 246).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn block_factor(s: u8) -> __m256 {
    _mm256_set1_ps(f32::from_bits((s as u32 + 8) << 23))
}

/// 16 E4M3 bytes at `q` → f16 bit patterns of `value · 2^-8`, one per 16-bit lane.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn f16_lanes(q: *const u8) -> __m256i {
    let s = _mm256_cvtepi8_epi16(_mm_loadu_si128(q as *const __m128i));
    _mm256_and_si256(
        _mm256_slli_epi16::<7>(s),
        _mm256_set1_epi16(0xBF80u16 as i16),
    )
}

/// 16 weights at `q` decoded and multiplied by `factor` (per lane), as two vectors of 8.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn weights16(q: *const u8, f_lo: __m256, f_hi: __m256) -> (__m256, __m256) {
    let h = f16_lanes(q);
    (
        _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), f_lo),
        _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256::<1>(h)), f_hi),
    )
}

/// Byte lanes of the 32 bytes at `q` that are E4M3 NaN (all ones where `b & 0x7F == 0x7F`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn nan_bytes32(q: *const u8) -> __m256i {
    let bytes = _mm256_loadu_si256(q as *const __m256i);
    let m = _mm256_set1_epi8(0x7F);
    _mm256_cmpeq_epi8(_mm256_and_si256(bytes, m), m)
}

/// Byte lanes of the 16 bytes at `q` that are E4M3 NaN.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn nan_bytes16(q: *const u8) -> __m128i {
    let bytes = _mm_loadu_si128(q as *const __m128i);
    let m = _mm_set1_epi8(0x7F);
    _mm_cmpeq_epi8(_mm_and_si128(bytes, m), m)
}

/// deq of `BLOCK`-aligned MXFP8 values: `dst[i] = e4m3(q[i]) · 2^(scales[i/32] - 127)`, bit for
/// bit the scalar deq (blocks off the f16 route are decoded by the scalar codec).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_mx_row(q: &[u8], scales: &[u8], dst: &mut [f32]) {
    assert!(dst.len() >= scales.len() * BLOCK);
    decode_mx_row_to(q, scales, dst.as_mut_ptr());
}

/// [`decode_mx_row`] into `scales.len() · 32` floats at `dst`, which are only written: callers
/// may pass memory not yet initialised (A's f32 copy, so it needs no zero fill).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_mx_row_to(q: &[u8], scales: &[u8], dst: *mut f32) {
    assert!(q.len() >= scales.len() * BLOCK);
    for (blk, &s) in scales.iter().enumerate() {
        let (qp, dp) = (q.as_ptr().add(blk * BLOCK), dst.add(blk * BLOCK));
        if s > MAX_FAST_SCALE || _mm256_movemask_epi8(nan_bytes32(qp)) != 0 {
            for j in 0..BLOCK {
                *dp.add(j) = e4m3_to_f32(*qp.add(j)) * e8m0_to_f32(s);
            }
            continue;
        }
        let f = block_factor(s);
        for h in [0, 16] {
            let (w0, w1) = weights16(qp.add(h), f, f);
            _mm256_storeu_ps(dp.add(h), w0);
            _mm256_storeu_ps(dp.add(h + 8), w1);
        }
    }
}

/// Prefetches the cache lines of `bytes` bytes from `p` into L1 (a hint: addresses past the
/// buffer are harmless, hence the wrapping arithmetic).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn prefetch(p: *const u8, bytes: usize) {
    for off in (0..bytes).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off) as *const i8);
    }
}

/// Horizontal sum of 8 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
}

/// Output columns of one `[N, K]` unit.
pub const NK_COLS: usize = 4;

/// The `[N, K]` GEMV in registers: `R` rows of A (stride `lda`) against `C` MXFP8 weight rows
/// `q[c]` (scales `s[c]`) of one 4-row unit, each 16-weight vector decoded once for all R rows
/// (R·C ≤ 8 accumulators); 8-lane partial sums per (row, column) over all of K, summed
/// horizontally at the end. `None` when a block left the
/// fast route (NaN byte or scale > 246): the caller recomputes the unit exactly. Weights are
/// prefetched `PF` bytes ahead of the decode.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn nk_regs<const R: usize, const C: usize>(
    a: *const f32,
    lda: usize,
    q: [*const u8; C],
    s: [*const u8; C],
    k: usize,
) -> Option<[[f32; C]; R]> {
    const PF: usize = 1024;
    let z = _mm256_setzero_ps();
    let mut acc = [[z; C]; R];
    let mut nan = _mm256_setzero_si256();
    let mut big = false;
    for blk in 0..k / BLOCK {
        let off = blk * BLOCK;
        for c in 0..C {
            let qc = q[c].add(off);
            // One line of 64 bytes per two blocks, PF bytes ahead in this row or, near its
            // end, in the same row of the next unit (4 rows on: rows n0..n0+4 are contiguous).
            // A prefetch past the buffer is harmless.
            if blk % 2 == 0 {
                let ahead = if off + PF < k {
                    PF
                } else {
                    PF + (NK_COLS - 1) * k
                };
                _mm_prefetch::<_MM_HINT_T0>(qc.wrapping_add(ahead) as *const i8);
            }
            let sc = *s[c].add(blk);
            big |= sc > MAX_FAST_SCALE;
            nan = _mm256_or_si256(nan, nan_bytes32(qc));
            let f = block_factor(sc);
            for h in [0, 16] {
                let (w0, w1) = weights16(qc.add(h), f, f);
                for (r, ar) in acc.iter_mut().enumerate() {
                    let ap = a.add(r * lda + off + h);
                    ar[c] = _mm256_fmadd_ps(_mm256_loadu_ps(ap), w0, ar[c]);
                    ar[c] = _mm256_fmadd_ps(_mm256_loadu_ps(ap.add(8)), w1, ar[c]);
                }
            }
        }
    }
    if big || _mm256_movemask_epi8(nan) != 0 {
        return None;
    }
    let mut out = [[0f32; C]; R];
    for (o, ar) in out.iter_mut().zip(&acc) {
        for c in 0..C {
            o[c] = hsum(ar[c]);
        }
    }
    Some(out)
}

/// `acc[r][c] += Σ_kk a[r, kk] · tile[c][kk]` over `kt` (multiple of 8) for `R` (1 or 2) rows of
/// A at `a` (stride `lda`) and a decoded tile of 4 columns with row stride `ldt`; `acc` holds
/// 8-lane partial sums.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn nk_tile_rows<const R: usize>(
    a: *const f32,
    lda: usize,
    tile: *const f32,
    ldt: usize,
    kt: usize,
    acc: &mut [[__m256; NK_COLS]; R],
) {
    let mut s = *acc;
    for kk in (0..kt).step_by(8) {
        let b = [
            _mm256_loadu_ps(tile.add(kk)),
            _mm256_loadu_ps(tile.add(ldt + kk)),
            _mm256_loadu_ps(tile.add(2 * ldt + kk)),
            _mm256_loadu_ps(tile.add(3 * ldt + kk)),
        ];
        for (r, sr) in s.iter_mut().enumerate() {
            let x = _mm256_loadu_ps(a.add(r * lda + kk));
            for c in 0..NK_COLS {
                sr[c] = _mm256_fmadd_ps(x, b[c], sr[c]);
            }
        }
    }
    *acc = s;
}

/// Output columns of one `[K, N]` unit (two vectors).
pub const KN_COLS: usize = 16;
/// Rows of A per `[K, N]` register block (12 accumulators).
pub const KN_ROWS: usize = 6;

/// Decodes `kt` rows (multiple of 32, starting at a block boundary) of a 16-column `[K, N]`
/// stripe: `q` points at `b[k0, n0]` (row stride `ldq`), `s` at `b_scale[k0 / 32, n0]` (row
/// stride `ldq` too). Writes `tile[kk * 16 + j]` = deq exactly (lines with a NaN byte or a
/// scale > 246 go through the scalar codec).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn kn_decode_tile(q: *const u8, s: *const u8, ldq: usize, kt: usize, tile: *mut f32) {
    for blk in 0..kt / BLOCK {
        let sp = s.add(blk * ldq);
        let sb = _mm_loadu_si128(sp as *const __m128i);
        // Unsigned s > 246 ⇔ max(s, 246) != 246.
        let lim = _mm_set1_epi8(MAX_FAST_SCALE as i8);
        let big = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(sb, lim), lim)) != 0xFFFF;
        let exps = |v: __m128i| {
            let e = _mm256_add_epi32(_mm256_cvtepu8_epi32(v), _mm256_set1_epi32(8));
            _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e))
        };
        let (f_lo, f_hi) = (exps(sb), exps(_mm_srli_si128::<8>(sb)));
        for kk in blk * BLOCK..(blk + 1) * BLOCK {
            let (qp, tp) = (q.add(kk * ldq), tile.add(kk * KN_COLS));
            if big || _mm_movemask_epi8(nan_bytes16(qp)) != 0 {
                for j in 0..KN_COLS {
                    *tp.add(j) = e4m3_to_f32(*qp.add(j)) * e8m0_to_f32(*sp.add(j));
                }
                continue;
            }
            let (w0, w1) = weights16(qp, f_lo, f_hi);
            _mm256_storeu_ps(tp, w0);
            _mm256_storeu_ps(tp.add(8), w1);
        }
    }
}

/// `acc[r] += Σ_kk a[r, kk] · tile[kk]` (two 8-column vectors per row) for `R` ≤ 6 rows of A at
/// `a` (stride `lda`) over `kt` (even) decoded rows of a 16-column tile: A broadcast, no
/// horizontal sums. Up to 3 rows keep separate sums of even and odd k (added at the end), so
/// enough independent FMA chains are in flight.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn kn_tile_rows<const R: usize>(
    a: *const f32,
    lda: usize,
    tile: *const f32,
    kt: usize,
    acc: &mut [[__m256; 2]; R],
) {
    #[inline(always)]
    unsafe fn step<const R: usize>(
        a: *const f32,
        lda: usize,
        tp: *const f32,
        s: &mut [[__m256; 2]; R],
    ) {
        let (b0, b1) = (_mm256_loadu_ps(tp), _mm256_loadu_ps(tp.add(8)));
        for (r, sr) in s.iter_mut().enumerate() {
            let x = _mm256_broadcast_ss(&*a.add(r * lda));
            sr[0] = _mm256_fmadd_ps(x, b0, sr[0]);
            sr[1] = _mm256_fmadd_ps(x, b1, sr[1]);
        }
    }
    let split = R <= 3;
    let mut even = *acc;
    let mut odd = [[ZERO; 2]; R];
    for kk in (0..kt).step_by(2) {
        step(a.add(kk), lda, tile.add(kk * KN_COLS), &mut even);
        let second = if split { &mut odd } else { &mut even };
        step(a.add(kk + 1), lda, tile.add((kk + 1) * KN_COLS), second);
    }
    if split {
        for (e, o) in even.iter_mut().zip(&odd) {
            e[0] = _mm256_add_ps(e[0], o[0]);
            e[1] = _mm256_add_ps(e[1], o[1]);
        }
    }
    *acc = even;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast::Isa;

    /// The AVX2 MXFP8 row decode equals the scalar deq for every byte and edge scales.
    #[test]
    fn avx2_decode_equals_scalar_deq() {
        if Isa::detect() != Isa::Avx2 {
            return;
        }
        let q: Vec<u8> = (0..=255u8).collect(); // 8 blocks covering every byte (incl. NaN)
        for s in [0u8, 1, 20, 100, 127, 200, 246, 247, 254, 255] {
            let mut scales = vec![s; 8];
            scales[1] = 127; // a NaN-free block next to the edge scale
            let mut got = vec![0f32; 256];
            // SAFETY: AVX2 checked above; 256 bytes, 8 scales, 256 outputs.
            unsafe { decode_mx_row(&q, &scales, &mut got) };
            for (i, g) in got.iter().enumerate() {
                let want = e4m3_to_f32(q[i]) * e8m0_to_f32(scales[i / 32]);
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "byte {i:#x} scale {s}: {g} vs {want}"
                );
            }
        }
    }
}
