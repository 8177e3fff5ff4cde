//! The fused norm for bf16 rows on AVX2 (+FMA/F16C) CPUs, on packed bf16 words: the common
//! case (bf16, s in bf16 — `round_sum` or no residual —, `n = s · (1/d)` weighted in f32, no
//! `normed` output) of [`super::norm::avx2_norm`], bit-identical to it, to the AVX-512 paths and
//! to the reference. The AVX2 counterpart of [`mod@super::avx512_norm_words`], with AVX2's
//! instructions (no `vcvtne2ps2bf16`, no mask registers, no byte permutes):
//!
//! * Pass 1 ([`pass1_half`]) widens 16 words by a shift (even elements) and a mask (odd ones),
//!   rounds x + residual to bf16 by the integer RNE of `avx2_norm::sum_row_bf16` (exact for
//!   subnormal sums, so no guard is needed) and writes s only as words in element order (one
//!   `vpblendw` of the two halves): in `residual_out`, a scratch row, or — without a residual
//!   and `residual_out` — x itself. The squares go to the pinned f64 lanes by f64 FMAs of s
//!   (no f32 square: two ops fewer per 16), which equals the reference's f32 squares added in
//!   f64 unless a square overflows or a lane starts with a tiny value ([`checked_total`]: one
//!   test of the row's first 16 words, else the exact pass again).
//! * Pass 2 ([`products`]) widens a block of words the same way (the weights are permuted to
//!   that layout once per call), rounds the products to bf16 by the integer RNE and packs them
//!   back to element-order words (one shift and one `vpblendw` per 16) in a 512-byte group
//!   buffer that stays in L1; each block's |max| comes from the unrounded products (RNE is
//!   monotonic, so rounding the 8 maxima of a group gives the maxima of the rounded values).
//! * The quantizer ([`quantize_words`]) encodes 16 words a vector: the scale is 2^k, so with
//!   |w| the bf16 bits of |y|, `|w| + ((k - 120) << 7)` is the E4M3 exponent and 7 mantissa bits
//!   of y · 2^k — a saturating `vpminsw` at 448, RNE of the low 4 bits (the + 8 folded into the
//!   offset, - 1 on a tie to an even code), the sign by a shift, a mask and an or, and one
//!   `vpackuswb` + `vpermq` per block. Blocks with a lane in the E4M3 subnormal range (or a
//!   zero) take the f32 encoder from the same words, as do blocks whose scale is below 2^-120
//!   (there a zero or bf16-subnormal word, which has no implicit bit, could pass for a normal
//!   code); blocks with ±Inf take the scalar per-block quantizer.
//! * Row r's pass 2 runs with row r + 1's pass 1 interleaved block by block ([`rows`]), so
//!   the loads of x and the residual overlap the arithmetic of pass 2 and the quantizer; calls
//!   past the caches also prefetch row r + 2 (as the AVX-512 paths).
//!
//! Rows where a NaN can arise (Σs², 1/d or a weight not finite) take `avx2_norm`'s NaN-aware
//! pass 2 from s widened back to f32.
//!
//! Why (Zen 4, `MXFUSE_CPU_ISA=avx2`, one thread, bench rows of H = 6144): 0.18-0.19 ms per 64
//! rows against 0.23-0.24 ms for the f32 path (about 135 vector ops per 32 elements instead of
//! about 180); at M = 2048 about 7 ms against 9.2-9.6 ms, of which ~1 ms is memory time not
//! hidden. perf: pass 1 + pass 2 two thirds of the samples (the pinned f64 sum of squares
//! alone a quarter to a third), the quantizer the rest. The FMA sum of squares measured 1-5 %
//! (M = 8, 64) over f32 squares added in f64. Tried and dropped: rounding on 16-bit lanes after
//! packing (one op fewer per 16, but the `vpblendw`s cost more: 2 % slower; with `vpavgw` LLVM
//! widened the lanes back to 32 bits: 35 % slower). Figures: BENCHMARKS.md, "2026-12-01 (6):
//! AVX2 packed-word norm".

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use half::bf16;

use super::avx2::{
    encode_scaled, inverse8, quantize_block_avx2, scale_bytes8, transpose_max, Lanes, GROUP,
};
use super::avx512_norm::prefetch_block;
use super::norm::avx2_norm;
use super::word_rows::{Ahead, RowPrefetch};
use crate::attrs::AddRmsNormAttrs;
use crate::codec::BLOCK;
use crate::slices::NormOutputs;

/// `vpblendw` mask: odd words (the high halves of the 32-bit lanes) from the second source.
const ODD_WORDS: i32 = 0b1010_1010;

/// RNE of 8 non-NaN f32 to bf16, left in the high halves (the low halves are garbage):
/// v + 0x7FFF + lsb, written as v + 0x8000 - (lsb == 0) (as `avx2_norm::sum_row_bf16`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn round_high(v: __m256) -> __m256i {
    let v = _mm256_castps_si256(v);
    let even = _mm256_cmpeq_epi32(
        _mm256_and_si256(v, _mm256_set1_epi32(0x1_0000)),
        _mm256_setzero_si256(),
    );
    _mm256_add_epi32(_mm256_add_epi32(v, _mm256_set1_epi32(0x8000)), even)
}

/// The words (element order) of two vectors holding the bf16 bits of the even and the odd
/// elements of 16 in their high halves.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn pack_words(even: __m256i, odd: __m256i) -> __m256i {
    _mm256_blend_epi16::<ODD_WORDS>(_mm256_srli_epi32::<16>(even), odd)
}

/// 16 words (element order) widened to f32: the even elements (by a shift) and the odd ones
/// (by a mask).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn widen(v: __m256i) -> (__m256, __m256) {
    (
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v)),
        _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(-65536))),
    )
}

/// Pass 1 of elements i..i+16 of row `a`: s as words at `a.sw` (or `residual_out`), s² added
/// to `acc` by f64 FMAs (exact where [`checked_total`] says so) — pinned lanes (0, 2, 4, 6),
/// (8, .., 14), (1, .., 7), (9, .., 15).
/// `RES`: a residual is read; `COPY`: no residual, x is copied to `residual_out`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn pass1_half<const RES: bool, const COPY: bool>(
    a: Ahead,
    i: usize,
    acc: &mut [__m256d; 4],
) {
    let xv = _mm256_loadu_si256(a.xp.add(i) as *const __m256i);
    let (s_even, s_odd) = if RES {
        let rv = _mm256_loadu_si256(a.rp.add(i) as *const __m256i);
        let ((x0, x1), (r0, r1)) = (widen(xv), widen(rv));
        // The sum of two values widened from bf16 is a NaN only with zero low bits, so the
        // non-NaN rounding is exact here too.
        let (t0, t1) = (
            round_high(_mm256_add_ps(x0, r0)),
            round_high(_mm256_add_ps(x1, r1)),
        );
        _mm256_storeu_si256(a.sw.add(i) as *mut __m256i, pack_words(t0, t1));
        let high = _mm256_set1_epi32(-65536);
        (
            _mm256_castsi256_ps(_mm256_and_si256(t0, high)),
            _mm256_castsi256_ps(_mm256_and_si256(t1, high)),
        )
    } else {
        if COPY {
            _mm256_storeu_si256(a.rop.add(i) as *mut __m256i, xv);
        }
        widen(xv)
    };
    let sq = |v: __m128, acc: __m256d| {
        let d = _mm256_cvtps_pd(v);
        _mm256_fmadd_pd(d, d, acc)
    };
    acc[0] = sq(_mm256_castps256_ps128(s_even), acc[0]);
    acc[1] = sq(_mm256_extractf128_ps::<1>(s_even), acc[1]);
    acc[2] = sq(_mm256_castps256_ps128(s_odd), acc[2]);
    acc[3] = sq(_mm256_extractf128_ps::<1>(s_odd), acc[3]);
}

/// Pass 1 of block `i` (32 elements) of row `a`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn pass1_block(a: Ahead, i: usize, acc: &mut [__m256d; 4]) {
    match (!a.rp.is_null(), !a.rop.is_null()) {
        (true, _) => {
            pass1_half::<true, false>(a, i, acc);
            pass1_half::<true, false>(a, i + 16, acc);
        }
        (false, true) => {
            pass1_half::<false, true>(a, i, acc);
            pass1_half::<false, true>(a, i + 16, acc);
        }
        (false, false) => {
            pass1_half::<false, false>(a, i, acc);
            pass1_half::<false, false>(a, i + 16, acc);
        }
    }
}

/// The sum of squares from [`pass1_half`]'s accumulators, lanes combined in the pinned order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn pass1_total(acc: &[__m256d; 4]) -> f64 {
    // (0, 2, 4, 6) with (1, 3, 5, 7) → lanes 0-3 and 4-7; likewise 8-15.
    let order = |even: __m256d, odd: __m256d| {
        let (lo, hi) = (_mm256_unpacklo_pd(even, odd), _mm256_unpackhi_pd(even, odd));
        (
            _mm256_permute2f128_pd::<0x20>(lo, hi),
            _mm256_permute2f128_pd::<0x31>(lo, hi),
        )
    };
    let (l0, l4) = order(acc[0], acc[2]);
    let (l8, l12) = order(acc[1], acc[3]);
    avx2_norm::reduce_lanes([l0, l4, l8, l12])
}

/// |s| = 2^-40 as bf16 bits: see [`checked_total`].
const FIRST_MIN_BITS: i16 = (127 - 40) << 7;

/// The pinned sum of squares of row `a` (pass 1 done: s as words at `a.sw`) from the FMA total
/// `fast` of its [`pass1_half`]s: `fast` where it provably equals the reference's, else the
/// exact pass 1 of `avx2_norm` on the words again (`s_buf`: its f32 scratch).
///
/// The reference adds each f32 square fl32(s²) to its lane in f64; [`pass1_half`] adds s² by an
/// f64 FMA. For bf16 s (8 significant bits) with 2^-67 ≤ |s| < 2^64 the f32 square is exact, so
/// both add the same value. A tiny s (|s| < 2^-67) has fl32(s²) and s² both ≤ 2^-134; once its
/// lane holds at least 2^-80 (half an ulp ≥ 2^-133) both adds leave the lane unchanged. Lane l
/// starts with element l, so when the first 16 |s| are ≥ 2^-40 every lane is ≥ 2^-80 from its
/// first add on and the two sums agree bit for bit. Otherwise (a zero or tiny value among the
/// first 16: rare), or when the total is not below 2^128 (an f32 square overflowed, or NaN),
/// the exact pass.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn checked_total(a: Ahead, h: usize, fast: f64, s_buf: &mut Vec<f32>) -> f64 {
    let first = _mm256_and_si256(
        _mm256_loadu_si256(a.sw as *const __m256i),
        _mm256_set1_epi16(0x7FFF),
    );
    let tiny = _mm256_cmpgt_epi16(_mm256_set1_epi16(FIRST_MIN_BITS), first);
    if fast < 2f64.powi(128) && _mm256_testz_si256(tiny, tiny) != 0 {
        return fast;
    }
    s_buf.resize(h, 0f32);
    let (none, sp) = (std::ptr::null_mut(), s_buf.as_mut_ptr());
    avx2_norm::pass1(a.sw as *const bf16, none, none, sp, h, false)
}

/// Pass 1 of row `a` alone (the first row of a chunk, the row after a NaN-aware one): the FMA
/// total (see [`checked_total`]).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pass1_row(a: Ahead, h: usize) -> f64 {
    let mut acc = [_mm256_setzero_pd(); 4];
    for i in (0..h).step_by(BLOCK) {
        pass1_block(a, i, &mut acc);
    }
    pass1_total(&acc)
}

/// The unrounded normed values (s · (1/d)) · g of elements i..i+16 from their words at `sw`
/// (`gw`: the weights in the chunk layout): even elements, odd ones.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn products(sw: *const u16, gw: *const f32, i: usize, inv: __m256) -> (__m256, __m256) {
    let (s0, s1) = widen(_mm256_loadu_si256(sw.add(i) as *const __m256i));
    (
        _mm256_mul_ps(_mm256_mul_ps(s0, inv), _mm256_loadu_ps(gw.add(i))),
        _mm256_mul_ps(_mm256_mul_ps(s1, inv), _mm256_loadu_ps(gw.add(i + 8))),
    )
}

/// Pass 2 + quantizer of one bf16 row (`sw`: s as words in element order, `gw`: the weights in
/// the chunk layout) for rows where no lane can be NaN. With `PIPE`, pass 1 of the row `ahead`
/// runs a block per block of this one and its FMA total is returned (see [`checked_total`];
/// else 0). `next` / `next_out`: the inputs / residual_out of the row after `ahead` to
/// prefetch, a block's lines per block (as `avx512_norm::normalize_quantize`).
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn normalize_quantize<const PIPE: bool>(
    sw: *const u16,
    gw: *const f32,
    h: usize,
    d: f32,
    attrs: &AddRmsNormAttrs,
    q: *mut u8,
    scales: *mut u8,
    ahead: Ahead,
    next: &[*const bf16],
    next_out: *const bf16,
) -> f64 {
    // The group's rounded values: 512 bytes that stay in L1.
    let mut words = [0u16; GROUP * BLOCK];
    let words = words.as_mut_ptr();
    let mut acc = [_mm256_setzero_pd(); 4];
    let inv = _mm256_set1_ps(1.0 / d);
    let absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
    let nb = h / BLOCK;
    let mut b0 = 0;
    while b0 < nb {
        let n = GROUP.min(nb - b0);
        let mut m = [_mm256_setzero_ps(); GROUP];
        for (b, mb) in m.iter_mut().enumerate().take(n) {
            let i = (b0 + b) * BLOCK;
            prefetch_block(next, next_out, i);
            if PIPE {
                pass1_block(ahead, i, &mut acc);
            }
            let (y0, y1) = products(sw, gw, i, inv);
            let (y2, y3) = products(sw, gw, i + 16, inv);
            // ±Inf but no NaN: the float max of |y|.
            let abs = |v| _mm256_and_ps(v, absmask);
            *mb = _mm256_max_ps(
                _mm256_max_ps(abs(y0), abs(y1)),
                _mm256_max_ps(abs(y2), abs(y3)),
            );
            let wb = words.add(b * BLOCK);
            let w0 = pack_words(round_high(y0), round_high(y1));
            let w1 = pack_words(round_high(y2), round_high(y3));
            _mm256_storeu_si256(wb as *mut __m256i, w0);
            _mm256_storeu_si256(wb.add(16) as *mut __m256i, w1);
        }
        let off = b0 * BLOCK;
        quantize_words(words, q.add(off), scales.add(b0), n, &m, attrs);
        b0 += n;
    }
    if PIPE {
        pass1_total(&acc)
    } else {
        0.0
    }
}

/// Quantizes the `n` (≤ 8) blocks of rounded words at `w` whose unrounded |max| are `m[..n]`
/// (no NaN): 32 codes per block at `q` in element order, scale bytes at `s`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn quantize_words(
    w: *const u16,
    q: *mut u8,
    s: *mut u8,
    n: usize,
    m: &[__m256; GROUP],
    attrs: &AddRmsNormAttrs,
) {
    let cfg = attrs.quant;
    // The maxima of the rounded values (RNE is monotonic; no lane is NaN).
    let amax = <bf16 as Lanes>::round8_no_nan(transpose_max(m));
    let non_finite = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(
        _mm256_castps_si256(amax),
        _mm256_set1_epi32(0x7F7F_FFFF),
    )));
    let bytes = scale_bytes8(amax, cfg.scale_rule);
    let mut b8 = [0i32; GROUP];
    _mm256_storeu_si256(b8.as_mut_ptr() as *mut __m256i, bytes);
    let mut inv = [0f32; GROUP];
    _mm256_storeu_ps(inv.as_mut_ptr(), inverse8(bytes));
    // Scale 2^k, k = 127 - byte: the word offset (k - 120) << 7 = (7 - byte) << 7, plus the 8
    // of the rounding below.
    let offs_v = _mm256_slli_epi32::<7>(_mm256_sub_epi32(_mm256_set1_epi32(7), bytes));
    let mut offs = [0i32; GROUP];
    _mm256_storeu_si256(
        offs.as_mut_ptr() as *mut __m256i,
        _mm256_add_epi32(offs_v, _mm256_set1_epi32(8)),
    );
    // A zero or bf16-subnormal word (exponent field 0) is not E4M3 exponent + mantissa after
    // the offset; with offset ≤ 0 it stays below 0x80 and takes the f32 encoder below, so only
    // blocks with a positive offset (scale below 2^-120: |max| below about 2^-111) need it
    // whole, as do blocks with ±Inf.
    let tiny_scale = _mm256_cmpgt_epi32(offs_v, _mm256_setzero_si256());
    let exact = non_finite | _mm256_movemask_ps(_mm256_castsi256_ps(tiny_scale));
    let (magnitude, sat, low) = (
        _mm256_set1_epi16(0x7FFF),
        _mm256_set1_epi16(0x7E0 + 8),
        _mm256_set1_epi16(0x80 + 8),
    );
    let (low5, tie) = (_mm256_set1_epi16(0x1F), _mm256_set1_epi16(0x10));
    for b in 0..n {
        let (wb, qb) = (w.add(b * BLOCK), q.add(b * BLOCK));
        *s.add(b) = b8[b] as u8;
        if (exact >> b) & 1 != 0 {
            if (non_finite >> b) & 1 != 0 {
                // ±Inf in the block: the per-block quantizer (scalar for non-finite blocks).
                let p = wb as *const bf16;
                let v = [
                    bf16::load8(p),
                    bf16::load8(p.add(8)),
                    bf16::load8(p.add(16)),
                    bf16::load8(p.add(24)),
                ];
                *s.add(b) = quantize_block_avx2(v, qb, cfg);
            } else {
                encode_scaled(wb as *const bf16, _mm256_set1_ps(inv[b]), qb);
            }
            continue;
        }
        let off = _mm256_set1_epi16(offs[b] as i16);
        let (v0, v1) = (
            _mm256_loadu_si256(wb as *const __m256i),
            _mm256_loadu_si256(wb.add(16) as *const __m256i),
        );
        // 8 + the E4M3 exponent and 7 mantissa bits of |y| · 2^k, saturated at 448 (0x7E << 4).
        let t = |v| _mm256_min_epi16(_mm256_add_epi16(_mm256_and_si256(v, magnitude), off), sat);
        let (t0, t1) = (t(v0), t(v1));
        // Below 2^-6 (E4M3 subnormals, zeros; negative words): the f32 encoder.
        let small = _mm256_cmpgt_epi16(low, _mm256_min_epi16(t0, t1));
        if _mm256_testz_si256(small, small) == 0 {
            encode_scaled(wb as *const bf16, _mm256_set1_ps(inv[b]), qb);
            continue;
        }
        // RNE of the low 4 bits: + 8 (in the offset), - 1 on a tie to an even code (low 5 bits
        // 0b01000 before the + 8); then the code and the sign (bit 15 of the word to bit 7).
        let code = |t, v| {
            let even_tie = _mm256_cmpeq_epi16(_mm256_and_si256(t, low5), tie);
            let r = _mm256_srli_epi16::<4>(_mm256_add_epi16(t, even_tie));
            _mm256_or_si256(
                r,
                _mm256_and_si256(_mm256_srli_epi16::<8>(v), _mm256_set1_epi16(0x80)),
            )
        };
        // Bytes 0-7, 16-23 | 8-15, 24-31 → element order.
        let packed = _mm256_packus_epi16(code(t0, v0), code(t1, v1));
        _mm256_storeu_si256(
            qb as *mut __m256i,
            _mm256_permute4x64_epi64::<0b11_01_10_00>(packed),
        );
    }
}

/// The weights `g` (element order, a multiple of 16) in the chunk layout of the widened words
/// (the shift / mask widening's order): per 16, the even elements, then the odd ones.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn chunk_weights(g: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; g.len()];
    for (src, dst) in g.chunks_exact(16).zip(out.chunks_exact_mut(16)) {
        let (a, b) = (
            _mm256_loadu_ps(src.as_ptr()),
            _mm256_loadu_ps(src.as_ptr().add(8)),
        );
        // Per 128-bit half: a0 a2 b0 b2 | a4 a6 b4 b6 (even), then the 64-bit pairs in order.
        let order = |v: __m256| {
            _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)))
        };
        let even = order(_mm256_shuffle_ps::<0b10_00_10_00>(a, b));
        let odd = order(_mm256_shuffle_ps::<0b11_01_11_01>(a, b));
        _mm256_storeu_ps(dst.as_mut_ptr(), even);
        _mm256_storeu_ps(dst.as_mut_ptr().add(8), odd);
    }
    out
}

/// Whether `rows` takes this path: bf16 rows (the caller checks the type) whose s is in bf16,
/// `n = s · (1/d)` weighted in f32, no `normed` output.
pub(super) fn applies(attrs: &AddRmsNormAttrs, residual: bool, normed: bool) -> bool {
    attrs.inv_form != crate::attrs::InvForm::Div
        && attrs.gamma_in_f32
        && !normed
        && (attrs.round_sum || !residual)
}

/// Rows of the fused norm on the packed-word path (see the module docs; the caller checked
/// [`applies`]). `g_buf`: the weights in element order, `gw_finite`: all finite. With
/// `prefetch` (inputs past the caches) row r's pass 2 prefetches row r + 2, one row ahead of
/// the pass 1 that runs inside it.
///
/// # Safety
/// The CPU has AVX2/FMA/F16C; shapes were checked.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn rows(
    x: &[bf16],
    residual: Option<&[bf16]>,
    g_buf: &[f32],
    gw_finite: bool,
    h: usize,
    attrs: &AddRmsNormAttrs,
    mut out: NormOutputs<'_, bf16>,
    prefetch: bool,
) {
    let (nb, rows) = (h / BLOCK, x.len() / h);
    if rows == 0 {
        return;
    }
    let g_perm = chunk_weights(g_buf);
    let gw = g_perm.as_ptr();
    // s words where neither residual_out nor x holds them: two rows (this one, the next one's).
    let scratch = residual.is_some() && out.residual_out.is_none();
    let mut w_buf = vec![0u16; if scratch { 2 * h } else { 0 }];
    let wb = w_buf.as_mut_ptr();
    let ro = out
        .residual_out
        .as_deref_mut()
        .map_or(std::ptr::null_mut(), |ro| ro.as_mut_ptr());
    let row = |r: usize| {
        let base = r * h;
        let xp = x.as_ptr().add(base);
        let rop = if ro.is_null() { ro } else { ro.add(base) };
        let sw = match (residual.is_some(), rop.is_null()) {
            // No residual: s is x.
            (false, _) => xp as *mut u16,
            (true, false) => rop as *mut u16,
            (true, true) => wb.add(h * (r % 2)),
        };
        Ahead {
            xp,
            rp: residual.map_or(std::ptr::null(), |res| res.as_ptr().add(base)),
            rop,
            sw,
        }
    };
    let mut s_buf = Vec::new();
    let mut sum_sq = checked_total(row(0), h, pass1_row(row(0), h), &mut s_buf);
    for r in 0..rows {
        let this = row(r);
        let pipe = r + 1 < rows;
        let ahead = if pipe { row(r + 1) } else { this };
        // Prefetch the row after the one whose pass 1 runs now.
        let pf = RowPrefetch::new(this, r, rows, h, prefetch);
        let (next, next_out) = (pf.inputs(), pf.out);
        let v = (sum_sq / h as f64) as f32;
        let d = (v + attrs.epsilon).sqrt();
        let (q, sc) = (
            out.q.as_mut_ptr().add(r * h),
            out.scales.as_mut_ptr().add(r * nb),
        );
        // As `avx2_norm::rows`: then no lane of pass 2 can be NaN.
        if !(gw_finite && sum_sq.is_finite() && (1.0 / d).is_finite()) {
            // The NaN-aware pass 2 from s widened to f32; the next row's pass 1 alone.
            s_buf.resize(h, 0f32);
            let (sp, sw) = (s_buf.as_mut_ptr(), this.sw as *const bf16);
            for i in (0..h).step_by(8) {
                _mm256_storeu_ps(sp.add(i), bf16::load8(sw.add(i)));
            }
            let g = g_buf.as_ptr();
            avx2_norm::normalize_quantize::<bf16, false>(sp, g, h, d, attrs, None, q, sc);
            if pipe {
                sum_sq = checked_total(ahead, h, pass1_row(ahead, h), &mut s_buf);
            }
            continue;
        }
        let sw = this.sw as *const u16;
        if pipe {
            let fast =
                normalize_quantize::<true>(sw, gw, h, d, attrs, q, sc, ahead, next, next_out);
            sum_sq = checked_total(ahead, h, fast, &mut s_buf);
        } else {
            normalize_quantize::<false>(sw, gw, h, d, attrs, q, sc, ahead, next, next_out);
        }
    }
}

#[cfg(test)]
mod tests {
    use half::bf16;

    use super::super::norm::avx2_norm;
    use super::super::norm_edge_rows::{
        pass1_edges, pass2_edges, runs_match_reference, xorshift, Run,
    };
    use super::super::FastElement;
    use crate::attrs::AddRmsNormAttrs;
    use crate::slices::NormOutputs;

    #[test]
    fn chunk_weights_follow_the_widening_order() {
        if !avx2() {
            return;
        }
        let g: Vec<f32> = (0..64).map(|i| i as f32).collect();
        // SAFETY: AVX2 was checked.
        let perm = unsafe { super::chunk_weights(&g) };
        // Per 16: even elements, then odd ones.
        let chunk: Vec<usize> = (0..16).step_by(2).chain((1..16).step_by(2)).collect();
        let expect: Vec<f32> = (0..64)
            .map(|p| (p - p % 16 + chunk[p % 16]) as f32)
            .collect();
        assert_eq!(perm, expect);
    }

    /// bf16 rows (`normed` not asked for, `residual_out` if `ro`) through `avx2_norm::rows` with
    /// the words path (with and without the prefetch), without it and through the reference:
    /// the same q, scales and residual_out.
    fn avx2_words_match_reference<G: FastElement>(
        x: &[bf16],
        residual: Option<&[bf16]>,
        gamma: &[G],
        h: usize,
        attrs: &AddRmsNormAttrs,
        ro: bool,
    ) {
        // SAFETY: AVX2 was checked by the callers; shapes are valid.
        let with = |words: Option<bool>| {
            move |out: NormOutputs<'_, bf16>| unsafe {
                avx2_norm::rows(x, residual, gamma, h, attrs, out, words)
            }
        };
        let (pf, plain, f32_path) = (with(Some(true)), with(Some(false)), with(None));
        let runs: [Run<'_>; 3] = [
            ("words path, prefetch", &pf),
            ("words path", &plain),
            ("f32 path", &f32_path),
        ];
        runs_match_reference(x, residual, gamma, h, attrs, ro, &runs);
    }

    fn avx2() -> bool {
        super::super::Isa::detect() == super::super::Isa::Avx2
    }

    /// The pass-2 edges (subnormal products, tiny block maxima, zeros, E4M3 subnormal lanes,
    /// 440-471 · 2^k, overflow to ±Inf, NaN and Inf + -Inf rows, a partial group).
    #[test]
    fn word_pass2_edges_match_reference() {
        if avx2() {
            pass2_edges().each(avx2_words_match_reference);
        }
    }

    /// The FMA sum of squares behind its guard ([`super::checked_total`]) against the pinned
    /// f32-square sum of `avx2_norm::pass1`, bit for bit, on the pass-1 edge rows (with and
    /// without a residual): Σs² is below the outputs' resolution for most of these rows, so
    /// this is where a wrong guard shows.
    #[test]
    fn fma_sum_of_squares_matches_pinned_sum() {
        if !avx2() {
            return;
        }
        let rows = pass1_edges();
        let h = rows.h;
        let mut s_buf = Vec::new();
        let (mut words, mut sp) = (vec![0u16; h], vec![0f32; h]);
        for with_res in [true, false] {
            for (r, x) in rows.x.chunks_exact(h).enumerate() {
                let rp = if with_res {
                    rows.res[r * h..].as_ptr()
                } else {
                    std::ptr::null()
                };
                let a = super::Ahead {
                    xp: x.as_ptr(),
                    rp,
                    rop: std::ptr::null_mut(),
                    sw: if with_res {
                        words.as_mut_ptr()
                    } else {
                        x.as_ptr() as *mut u16
                    },
                };
                // SAFETY: AVX2 was checked; the rows and buffers hold h elements.
                let (got, want) = unsafe {
                    let fast = super::pass1_row(a, h);
                    let null = std::ptr::null_mut();
                    (
                        super::checked_total(a, h, fast, &mut s_buf),
                        avx2_norm::pass1(x.as_ptr(), rp, null, sp.as_mut_ptr(), h, true),
                    )
                };
                let what = format!("row {r}, residual {with_res}: {got:e} vs {want:e}");
                assert!(got.to_bits() == want.to_bits(), "{what}");
            }
        }
    }

    /// The pass-1 edges (subnormal sums and zeros, |s| near 2^-70 and 2^64, sums halfway
    /// between bf16 values, values spanning ±2^40).
    #[test]
    fn word_pass1_edges_match_reference() {
        if avx2() {
            pass1_edges().each(avx2_words_match_reference);
        }
    }

    /// Random Gemma rows with bf16 weights (the bench's case) and f32 weights, 7 rows of 45
    /// blocks (a partial group), two weights that overflow the products to ±Inf: a zero row, a
    /// NaN row and an Inf row between plain ones (the pipeline restarts after them), a row
    /// scaled to 2^-120 (E4M3 subnormal lanes, subnormal sums) and one to 2^100; every
    /// residual / residual_out / `round_sum` case.
    #[test]
    fn random_rows_match_reference() {
        if !avx2() {
            return;
        }
        let (m, h) = (7, 1440);
        let mut next = xorshift(0x1234_5678_9ABC_DEF1);
        let mut val = || {
            let r = next();
            let mag = 2f32.powi((r % 17) as i32 - 8);
            let sign = if r & (1 << 40) != 0 { -1.0 } else { 1.0 };
            sign * mag * (1.0 + (r >> 44) as f32 / (1u64 << 20) as f32)
        };
        let mut xf: Vec<f32> = (0..m * h).map(|_| val()).collect();
        let mut rf: Vec<f32> = (0..m * h).map(|_| val()).collect();
        let mut gf: Vec<f32> = (0..h).map(|_| val() * 0.1).collect();
        // Finite weights whose products overflow to ±Inf in some rows (blocks with ±Inf in the
        // NaN-free pass 2).
        (gf[700], gf[701]) = (3e38, -3e38);
        for i in 0..h {
            (xf[h + i], rf[h + i]) = (0.0, 0.0);
            (xf[4 * h + i], rf[4 * h + i]) = (xf[4 * h + i] * 2f32.powi(-120), 0.0);
            (xf[5 * h + i], rf[5 * h + i]) = (xf[5 * h + i] * 2f32.powi(100), 0.0);
        }
        for r in [0, 6] {
            (xf[r * h + 700], xf[r * h + 701]) = (1000.0, -900.0);
        }
        xf[2 * h + 17] = f32::NAN;
        xf[3 * h + 600] = f32::INFINITY;
        let to = |v: &[f32]| v.iter().map(|f| bf16::from_f32(*f)).collect::<Vec<_>>();
        let (x, res, gb) = (to(&xf), to(&rf), to(&gf));
        for (gemma, round_sum) in [(true, true), (false, true), (true, false)] {
            let attrs = AddRmsNormAttrs {
                gemma,
                round_sum,
                ..Default::default()
            };
            for residual in [Some(&res[..]), None] {
                for ro in [true, false] {
                    avx2_words_match_reference(&x, residual, &gb, h, &attrs, ro);
                    avx2_words_match_reference(&x, residual, &gf, h, &attrs, ro);
                }
            }
        }
    }
}
