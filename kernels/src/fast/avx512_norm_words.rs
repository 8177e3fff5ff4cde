//! The fused norm for bf16 rows on CPUs with AVX-512 BF16, on packed bf16 words: the common
//! case (bf16, s in bf16 — `round_sum` or no residual —, `n = s · (1/d)` weighted in f32, no
//! `normed` output) of [`mod@super::avx512_norm`], bit-identical to it and to the reference.
//!
//! * Pass 1 ([`pass1_step`]) rounds x + residual by `vcvtne2ps2bf16` and sums the squares by
//!   f64 FMAs (22 ops per 32 elements instead of 28), guarded for the two cases where that could
//!   differ from the pinned reference (flushed subnormal sums, inexact f32 squares). It writes
//!   s only as words (in `residual_out`, or a scratch row): half the bytes of the f32 row
//!   buffer of [`mod@super::avx512_norm`], and nothing else to store.
//! * Pass 2 widens a block of words by a shift and a mask (the bf16 layout of the weights),
//!   rounds the normed values to bf16 with one `vcvtne2ps2bf16` per block (four integer ops per
//!   16 lanes before) into a 1 KiB group buffer, and takes each block's |max| from the
//!   unrounded values (`vrangeps`); RNE is monotonic, so rounding the 16 block maxima of a
//!   group afterwards gives the maxima of the rounded values. (A row-long word buffer was
//!   slower than the f32 pass 2 it replaced: its lines leave L1 between rows, and every 64-byte
//!   store then waits for its line.)
//! * The quantizer encodes 32 words a vector: the scale is a power of two 2^k, so with |w| the
//!   bf16 bits of |y|, `|w| + ((k - 120) << 7)` is the E4M3 exponent and 7 mantissa bits of
//!   y · 2^k (bias 127 → 7) — a saturating `vpminsw` at 448, a mask-register RNE of the low 4
//!   bits, the sign by one `vpternlogd`, and one `vpermb` picks the 32 high bytes in element
//!   order. Blocks with a lane in the E4M3 subnormal range (or a zero) go through the f32
//!   encoder of [`mod@super::avx512_norm`] from the same words.
//! * Row r's pass 2 runs with row r + 1's pass 1 interleaved block by block ([`rows`]): the
//!   loads of x and the residual (from DRAM at large M) overlap the arithmetic of pass 2 and
//!   the quantizer instead of stalling a pass of their own.
//!
//! In pass 2, `vcvtne2ps2bf16` flushes subnormal inputs to ±0 where RNE keeps them. A subnormal
//! |y| < 2^-126 times the inverse scale 2^k is below 2^-10 (E4M3 code 0, signed) whenever the
//! block |max| is ≥ 2^-100 (then k ≤ 108), so a flushed lane gives the same code and the same
//! block maximum there; blocks with a smaller |max| (and those with ±Inf) are formed again
//! with the exact rounding. With a `normed` output the flushed values themselves would show, so
//! that case keeps [`mod@super::avx512_norm`]'s pass 2.
//!
//! Measured on Zen 4: BENCHMARKS.md, "2026-12-01 (2): packed-word bf16 path of the fused norm".

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use half::bf16;

use super::avx512_norm::{
    bf16_position, encode_block, inverse16, normalize_quantize as nan_aware_pass2, pass1_words,
    pinned_total, prefetch_block, scalar_block, scale_bytes16, transpose_max, Wide, GROUP, PACK,
};
use super::word_rows::{Ahead, RowPrefetch};
use crate::attrs::AddRmsNormAttrs;
use crate::codec::BLOCK;
use crate::slices::NormOutputs;

/// `vpermb` indices: byte e = the high byte of the word holding element e of a block in the
/// bf16 layout (word `bf16_position(e)`); the upper 32 bytes are not used.
const HIGH_BYTES: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut e = 0;
    while e < 32 {
        t[e] = (2 * bf16_position(e) + 1) as u8;
        e += 1;
    }
    t
};

/// f32 bits of 2^-100: blocks whose rounded |max| is below it are formed again with the exact
/// rounding (see the module docs).
const MIN_WORD_AMAX: i32 = (127 - 100) << 23;

/// `vpermw` indices: the words of `vcvtne2ps2bf16(odd, even)` (even elements, then odd ones:
/// the bf16 layout) back in element order.
const INTERLEAVE: [u16; 32] = {
    let mut t = [0u16; 32];
    let mut e = 0;
    while e < 32 {
        t[e] = bf16_position(e) as u16;
        e += 1;
    }
    t
};

/// Input words with bits 14 and 13 clear: |v| < 2^-63 (or zero). See [`pass1_step`].
const TINY_BITS: i16 = 0x6000;

/// One 32-element step of pass 1 on the words path for the row `a` (elements i..i+32): s =
/// round_bf16(x + residual) (or x) as words in element order at `a.sw` (its residual_out or the
/// scratch), the squares into `acc` in the pinned lanes and order (as `avx512_norm::sum_row_bf16`).
/// Returns the lanes where x and the residual are both below 2^-63 (or zero).
///
/// Cheaper than `sum_row_bf16` (22 ops per 32 elements instead of 28) by two exactness arguments:
/// * `vcvtne2ps2bf16` rounds the sums (one op, and a `vpermw` back to element order, instead
///   of six integer ops and two to pack), but flushes subnormal sums to ±0 where RNE keeps
///   them;
/// * the f64 sum takes `fma(s, s, acc)` of s widened to f64 instead of adding the f32 square
///   s · s: the same value whenever that square is exact — a bf16 s has 8 significant bits, so
///   its square has at most 16 and is exact unless it overflows or underflows.
///
/// Where x or the residual is at least 2^-63 (bf16, so a multiple of 2^-70), the sum is a
/// multiple of 2^-71 or above 2^-64: never subnormal, and a square below 2^-126 is a multiple
/// of 2^-142, exact. So a row is exact unless a lane is flagged (both inputs tiny or zero:
/// rare) or the total is not below 2^128 (an overflowed square, or NaN); those rows take the
/// exact pass 1 again ([`pass1_total`]).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx512bf16,avx2,fma,f16c")]
#[inline]
unsafe fn pass1_step<const RES: bool>(
    a: Ahead,
    i: usize,
    acc: &mut [__m512d; 2],
    interleave: __m512i,
) -> __mmask32 {
    let high = _mm512_set1_epi32(-65536);
    let tiny_bits = _mm512_set1_epi16(TINY_BITS);
    let xv = _mm512_loadu_si512(a.xp.add(i) as *const _);
    let (s, tiny) = if RES {
        let rv = _mm512_loadu_si512(a.rp.add(i) as *const _);
        // Even elements (low halves) by a shift, odd ones (high halves) by a mask.
        let lo = _mm512_add_ps(
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(xv)),
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(rv)),
        );
        let hi = _mm512_add_ps(
            _mm512_castsi512_ps(_mm512_and_si512(xv, high)),
            _mm512_castsi512_ps(_mm512_and_si512(rv, high)),
        );
        let tiny = _mm512_testn_epi16_mask(_mm512_or_si512(xv, rv), tiny_bits);
        // The first operand fills the upper 16 words.
        let c: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        (_mm512_permutexvar_epi16(interleave, c), tiny)
    } else {
        (xv, _mm512_testn_epi16_mask(xv, tiny_bits))
    };
    _mm512_storeu_si512(a.sw.add(i) as *mut _, s);
    let s_lo = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(s));
    let s_hi = _mm512_castsi512_ps(_mm512_and_si512(s, high));
    // Elements i.. (lower halves) before i+16.. (upper halves), lane by lane.
    let [acc_a, acc_b] = acc;
    let sq = |v: __m256, acc: __m512d| {
        let d = _mm512_cvtps_pd(v);
        _mm512_fmadd_pd(d, d, acc)
    };
    *acc_a = sq(_mm512_castps512_ps256(s_lo), *acc_a);
    *acc_b = sq(_mm512_castps512_ps256(s_hi), *acc_b);
    *acc_a = sq(_mm512_extractf32x8_ps::<1>(s_lo), *acc_a);
    *acc_b = sq(_mm512_extractf32x8_ps::<1>(s_hi), *acc_b);
    tiny
}

/// The sum of squares of a row whose [`pass1_step`]s gave `acc` and `tiny`: their pinned
/// total, or the exact pass 1 of the row again where the cheap one may differ from it.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx512bf16,avx2,fma,f16c")]
unsafe fn pass1_total(a: Ahead, h: usize, acc: &[__m512d; 2], tiny: __mmask32) -> f64 {
    let total = pinned_total(acc);
    if tiny == 0 && total < 2f64.powi(128) {
        total
    } else {
        pass1_words(a.xp, a.rp, a.rop, a.sw, h)
    }
}

/// Pass 1 of row `a` alone (the first row of a chunk, the row after a NaN-aware one).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx512bf16,avx2,fma,f16c")]
unsafe fn pass1_row(a: Ahead, h: usize) -> f64 {
    let interleave = _mm512_loadu_si512(INTERLEAVE.as_ptr() as *const _);
    let (mut acc, mut tiny) = ([_mm512_setzero_pd(); 2], 0);
    for i in (0..h).step_by(BLOCK) {
        tiny |= if a.rp.is_null() {
            pass1_step::<false>(a, i, &mut acc, interleave)
        } else {
            pass1_step::<true>(a, i, &mut acc, interleave)
        };
    }
    pass1_total(a, h, &acc, tiny)
}

/// s of block `i` from its words at `sw` (element order) in the bf16 block layout: even
/// elements (low halves, by a shift), then odd ones (high halves, by a mask).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
#[inline]
unsafe fn widen_block(sw: *const u16, i: usize) -> (__m512, __m512) {
    let v = _mm512_loadu_si512(sw.add(i) as *const _);
    (
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v)),
        _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(-65536))),
    )
}

/// s from its words at `sw` into `sp` in the bf16 block layout (for the NaN-aware pass 2 of
/// `avx512_norm`, rows where a NaN can arise).
///
/// # Safety
/// The CPU has AVX512F/BW/DQ/VBMI; `sw` and `sp` hold h values.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
pub(super) unsafe fn unpack(sw: *const u16, sp: *mut f32, h: usize) {
    for i in (0..h).step_by(BLOCK) {
        let (lo, hi) = widen_block(sw, i);
        _mm512_storeu_ps(sp.add(i), lo);
        _mm512_storeu_ps(sp.add(i + 16), hi);
    }
}

/// The unrounded normed values of block `i`: (s · (1/d)) · g, as `normed16` forms them.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx2,fma,f16c")]
#[inline]
unsafe fn products(sw: *const u16, gw: *const f32, i: usize, inv: __m512) -> (__m512, __m512) {
    let (s0, s1) = widen_block(sw, i);
    (
        _mm512_mul_ps(_mm512_mul_ps(s0, inv), _mm512_loadu_ps(gw.add(i))),
        _mm512_mul_ps(_mm512_mul_ps(s1, inv), _mm512_loadu_ps(gw.add(i + 16))),
    )
}

/// Pass 2 + quantizer of one bf16 row (`sw`: s as words in element order, `gw`: the weights
/// in the bf16 block layout) for `n = s · (1/d)`, `gamma_in_f32`, rows whose Σs², 1/d and
/// weights are finite (no lane can be NaN), no `normed` output. `next` / `next_out`: as in
/// `avx512_norm::normalize_quantize`. With `PIPE`, pass 1 of the row `ahead` runs a block per
/// block of this one (`RES`: it has a residual) and its sum of squares is returned (else 0).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx512bf16,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn normalize_quantize<const PIPE: bool, const RES: bool>(
    sw: *const u16,
    gw: *const f32,
    h: usize,
    d: f32,
    attrs: &AddRmsNormAttrs,
    q: *mut u8,
    scales: *mut u8,
    next: &[*const bf16],
    next_out: *const bf16,
    ahead: Ahead,
) -> f64 {
    // The group's rounded values: 1 KiB that stays in L1 (a row-long buffer measured slower).
    let mut words = [0u16; GROUP * BLOCK];
    let words = words.as_mut_ptr();
    let (mut acc, mut tiny) = ([_mm512_setzero_pd(); 2], 0);
    let interleave = _mm512_loadu_si512(INTERLEAVE.as_ptr() as *const _);
    let inv = _mm512_set1_ps(1.0 / d);
    let nb = h / BLOCK;
    let mut b0 = 0;
    while b0 < nb {
        let n = GROUP.min(nb - b0);
        let mut m = [_mm512_setzero_si512(); GROUP];
        for (b, mb) in m.iter_mut().enumerate().take(n) {
            let i = (b0 + b) * BLOCK;
            prefetch_block(next, next_out, i);
            if PIPE {
                tiny |= pass1_step::<RES>(ahead, i, &mut acc, interleave);
            }
            let (y0, y1) = products(sw, gw, i, inv);
            // ±Inf but no NaN: the float max-abs (sign cleared) of the unrounded values.
            *mb = _mm512_castps_si512(_mm512_range_ps::<0b1011>(y0, y1));
            // The first operand fills the upper 16 words.
            let w: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(y1, y0));
            _mm512_storeu_si512(words.add(b * BLOCK) as *mut _, w);
        }
        let off = b0 * BLOCK;
        let group = Group {
            sw: sw.add(off),
            gw: gw.add(off),
            inv,
            attrs,
        };
        quantize_words(&group, words, q.add(off), scales.add(b0), n, &m);
        b0 += n;
    }
    if PIPE {
        pass1_total(ahead, h, &acc, tiny)
    } else {
        0.0
    }
}

/// Rows of the fused norm on the packed-word path (see the module docs; the caller checked the
/// attributes: bf16, s in bf16, `n = s · (1/d)`, `gamma_in_f32`, no `normed` output). `gw`:
/// the weights in the bf16 block layout, `gw_finite`: all finite. `prefetch`: as in
/// `avx512_norm::rows`. `s_buf`: h floats for rows where a NaN can arise (the NaN-aware
/// pass 2 of `avx512_norm`).
///
/// Row r's pass 2 runs with row r + 1's pass 1 interleaved block by block (`PIPE`); with
/// `prefetch` it prefetches row r + 2, one row ahead of those loads.
///
/// # Safety
/// The CPU has AVX512F/BW/DQ/VBMI/BF16 and AVX2/FMA/F16C; shapes were checked.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx512bf16,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn rows(
    x: &[bf16],
    residual: Option<&[bf16]>,
    gw: *const f32,
    gw_finite: bool,
    h: usize,
    attrs: &AddRmsNormAttrs,
    mut out: NormOutputs<'_, bf16>,
    prefetch: bool,
    s_buf: &mut [f32],
) {
    let (nb, rows) = (h / BLOCK, x.len() / h);
    if rows == 0 {
        return;
    }
    // s words where no residual_out holds them: two rows (this one, the next one's pass 1).
    let mut w_buf = vec![0u16; if out.residual_out.is_none() { 2 * h } else { 0 }];
    let wb = w_buf.as_mut_ptr();
    let ro = out
        .residual_out
        .as_deref_mut()
        .map_or(std::ptr::null_mut(), |ro| ro.as_mut_ptr());
    let row = |r: usize| {
        let base = r * h;
        let rop = if ro.is_null() { ro } else { ro.add(base) };
        Ahead {
            xp: x.as_ptr().add(base),
            rp: residual.map_or(std::ptr::null(), |res| res.as_ptr().add(base)),
            rop,
            sw: if rop.is_null() {
                wb.add(h * (r % 2))
            } else {
                rop as *mut u16
            },
        }
    };
    let mut sum_sq = pass1_row(row(0), h);
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
        // As `avx512_norm::rows_of`: then no lane of pass 2 can be NaN.
        let no_nan = gw_finite && sum_sq.is_finite() && (1.0 / d).is_finite();
        if !no_nan {
            // The NaN-aware pass 2 from s in the bf16 layout; the next row's pass 1 alone.
            unpack(this.sw, s_buf.as_mut_ptr(), h);
            let sp = s_buf.as_mut_ptr();
            nan_aware_pass2::<bf16, false, false>(sp, gw, h, d, attrs, None, q, sc, next, next_out);
            if pipe {
                sum_sq = pass1_row(ahead, h);
            }
            continue;
        }
        let sw = this.sw as *const u16;
        sum_sq = match (pipe, !ahead.rp.is_null()) {
            (false, _) => normalize_quantize::<false, false>(
                sw, gw, h, d, attrs, q, sc, next, next_out, ahead,
            ),
            (true, true) => {
                normalize_quantize::<true, true>(sw, gw, h, d, attrs, q, sc, next, next_out, ahead)
            }
            (true, false) => {
                normalize_quantize::<true, false>(sw, gw, h, d, attrs, q, sc, next, next_out, ahead)
            }
        };
    }
}

/// What the exact fallback of a group needs to form its normed values again.
struct Group<'a> {
    sw: *const u16,
    gw: *const f32,
    inv: __m512,
    attrs: &'a AddRmsNormAttrs,
}

/// Quantizes the `n` (≤ 16) blocks of rounded words at `w` whose unrounded |max| bit patterns
/// are `m[..n]`: 32 codes per block at `q` in element order, scale bytes at `s`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx512bf16,avx2,fma,f16c")]
#[inline]
unsafe fn quantize_words(
    group: &Group<'_>,
    w: *const u16,
    q: *mut u8,
    s: *mut u8,
    n: usize,
    m: &[__m512i; GROUP],
) {
    let cfg = group.attrs.quant;
    // The maxima of the rounded values (RNE is monotonic; no lane is NaN).
    let amax = <bf16 as Wide>::round16_no_nan(_mm512_castsi512_ps(transpose_max(m)));
    let amax_bits = _mm512_castps_si512(amax);
    let live = ((1u32 << n) - 1) as __mmask16;
    let non_finite = _mm512_mask_cmpge_epu32_mask(live, amax_bits, _mm512_set1_epi32(0x7F80_0000));
    let tiny = _mm512_mask_cmplt_epu32_mask(live, amax_bits, _mm512_set1_epi32(MIN_WORD_AMAX));
    let exact = u32::from(non_finite | tiny);
    let bytes = scale_bytes16(amax, cfg.scale_rule);
    let mut b8 = [0u8; GROUP];
    _mm_storeu_si128(b8.as_mut_ptr() as *mut __m128i, _mm512_cvtepi32_epi8(bytes));
    std::ptr::copy_nonoverlapping(b8.as_ptr(), s, n);
    let mut inv = [0f32; GROUP];
    _mm512_storeu_ps(inv.as_mut_ptr(), inverse16(bytes));
    // Scale 2^k, k = 127 - byte: the word offset (k - 120) << 7 = (7 - byte) << 7.
    let mut offs = [0i32; GROUP];
    _mm512_storeu_si512(
        offs.as_mut_ptr() as *mut _,
        _mm512_slli_epi32::<7>(_mm512_sub_epi32(_mm512_set1_epi32(7), bytes)),
    );
    let pack = _mm512_loadu_si512(PACK[1].as_ptr() as *const _);
    let high = _mm512_loadu_si512(HIGH_BYTES.as_ptr() as *const _);
    for b in 0..n {
        let (wb, qb) = (w.add(b * BLOCK), q.add(b * BLOCK));
        let ib = _mm512_set1_ps(inv[b]);
        if (exact >> b) & 1 != 0 {
            // Round the block again exactly (as `avx512_norm`'s pass 2).
            let (y0, y1) = products(group.sw, group.gw, b * BLOCK, group.inv);
            let round = |v| <bf16 as Wide>::round16_no_nan(v);
            let (y0, y1) = (round(y0), round(y1));
            if (non_finite >> b) & 1 != 0 {
                let mut y = [0f32; BLOCK];
                _mm512_storeu_ps(y.as_mut_ptr(), y0);
                _mm512_storeu_ps(y.as_mut_ptr().add(16), y1);
                *s.add(b) = scalar_block::<bf16>(y.as_ptr(), qb, cfg);
            } else {
                encode_block(y0, y1, ib, pack, qb);
            }
            continue;
        }
        let wv = _mm512_loadu_si512(wb as *const _);
        // E4M3 exponent and 7 mantissa bits of |y| · 2^k, saturated at 448 (0x7E << 4).
        let a = _mm512_and_si512(wv, _mm512_set1_epi16(0x7FFF));
        let t0 = _mm512_min_epi16(
            _mm512_add_epi16(a, _mm512_set1_epi16(offs[b] as i16)),
            _mm512_set1_epi16(0x7E0),
        );
        // Below 2^-6 (E4M3 subnormals, zeros; negative words): the f32 encoder.
        if _mm512_cmplt_epi16_mask(t0, _mm512_set1_epi16(0x80)) != 0 {
            let y0 = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(wv)));
            let y1 =
                _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64::<1>(wv)));
            let (y0, y1) = (_mm512_castsi512_ps(y0), _mm512_castsi512_ps(y1));
            encode_block(y0, y1, ib, pack, qb);
            continue;
        }
        // RNE of the low 4 bits: + 8, - 1 where bit 4 is clear.
        let even = _mm512_testn_epi16_mask(t0, _mm512_set1_epi16(0x10));
        let t = _mm512_add_epi16(t0, _mm512_set1_epi16(8));
        let t = _mm512_mask_sub_epi16(t, even, t, _mm512_set1_epi16(1));
        // code << 8 | sign of y; the low bytes are garbage.
        let c = _mm512_ternarylogic_epi32::<0xF8>(
            _mm512_slli_epi16::<4>(t),
            wv,
            _mm512_set1_epi16(i16::MIN),
        );
        let packed = _mm512_permutexvar_epi8(high, c);
        _mm256_storeu_si256(qb as *mut __m256i, _mm512_castsi512_si256(packed));
    }
}
