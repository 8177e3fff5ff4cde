//! Pass 2 + quantizer of the fused norm for bf16 rows on CPUs with AVX-512 BF16, on packed bf16
//! words: the common case (bf16, `n = s · (1/d)` weighted in f32, no NaN can arise, no `normed`
//! output) of [`super::avx512_norm`], bit-identical to it and to the reference.
//!
//! * s comes as words (pass 1 leaves it in `residual_out`, or a scratch row; half the bytes of
//!   the f32 row buffer, and pass 1 stores nothing else). Pass 2 widens a block by a shift and
//!   a mask (the bf16 layout of the weights), rounds the normed values to bf16 with one
//!   `vcvtne2ps2bf16` per block (it was four integer ops per 16 lanes) into a 1 KiB group
//!   buffer, and takes each block's |max| from the unrounded values (`vrangeps`); RNE is
//!   monotonic, so rounding the 16 block maxima of a group afterwards gives the maxima of the
//!   rounded values. (A row-long word buffer was slower than the f32 pass 2 it replaced: its
//!   lines leave L1 between rows, and every 64-byte store then waits for its line.)
//! * The quantizer encodes 32 words a vector: the scale is a power of two 2^k, so with |w| the
//!   bf16 bits of |y|, `|w| + ((k - 120) << 7)` is the E4M3 exponent and 7 mantissa bits of
//!   y · 2^k (bias 127 → 7) — a saturating `vpminsw` at 448, a mask-register RNE of the low 4
//!   bits, the sign by one `vpternlogd`, and one `vpermb` picks the 32 high bytes in element
//!   order. Blocks with a lane in the E4M3 subnormal range (or a zero) go through the f32
//!   encoder of [`super::avx512_norm`] from the same words.
//!
//! `vcvtne2ps2bf16` flushes subnormal inputs to ±0 where RNE keeps them. A subnormal |y| <
//! 2^-126 times the inverse scale 2^k is below 2^-10 (E4M3 code 0, signed) whenever the block
//! |max| is ≥ 2^-100 (then k ≤ 108), so a flushed lane gives the same code and the same block
//! maximum there; blocks with a smaller |max| (and those with ±Inf) are formed again with the
//! exact rounding. With a `normed` output the flushed values themselves would show, so that
//! case keeps [`super::avx512_norm`]'s pass 2.
//!
//! Measured on Zen 4: BENCHMARKS.md, "2026-12-01 (2): packed-word pass 2 of the fused norm".

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use half::bf16;

use super::avx512_norm::{
    bf16_position, encode_block, inverse16, prefetch_block, scalar_block, scale_bytes16,
    transpose_max, Wide, GROUP, PACK,
};
use crate::attrs::AddRmsNormAttrs;
use crate::codec::BLOCK;

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
/// weights are finite (no lane can be NaN), no `normed` output.
/// rounded values (h words). `next` / `next_out`: as in `avx512_norm::normalize_quantize`.
///
/// # Safety
/// The CPU has AVX512F/BW/DQ/VBMI/BF16 and AVX2/FMA/F16C; `sw`, `gw`, `words` and `q` hold h
/// values, `scales` h / 32.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx512bf16,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn normalize_quantize(
    sw: *const u16,
    gw: *const f32,
    h: usize,
    d: f32,
    attrs: &AddRmsNormAttrs,
    q: *mut u8,
    scales: *mut u8,
    next: &[*const bf16],
    next_out: *const bf16,
) {
    // The group's rounded values: 1 KiB that stays in L1 (a row-long buffer measured slower).
    let mut words = [0u16; GROUP * BLOCK];
    let words = words.as_mut_ptr();
    let inv = _mm512_set1_ps(1.0 / d);
    let nb = h / BLOCK;
    let mut b0 = 0;
    while b0 < nb {
        let n = GROUP.min(nb - b0);
        let mut m = [_mm512_setzero_si512(); GROUP];
        for (b, mb) in m.iter_mut().enumerate().take(n) {
            let i = (b0 + b) * BLOCK;
            prefetch_block(next, next_out, i);
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
