//! Column-lane AVX-512 BF16 kernel of the MXFP8 `[N, K]` GEMM for M ≤ 64 (driven by
//! `matmul_cols`): lanes over output columns instead of over k (`avx512_regs`), so each lane of
//! an accumulator is one output, A comes as a broadcast pair of bf16 per `vdpbf16ps`, and no
//! horizontal sums are left.
//!
//! Weights: the column-group layout of `cols_layout` (prepacked once). The decode's
//! `vpunpck{l,h}bw` work within 128-bit lanes, so of a 64-byte chunk (4 k × 16 columns) the
//! words of bytes 0..8 of each lane hold, in dword lane j, column j's k = 4t, 4t+1, and those of
//! bytes 8..16 column j's k = 4t+2, 4t+3: each is one `vdpbf16ps` operand against the broadcast
//! A pair of those k.
//!
//! Scale: the bf16 words are the unscaled E4M3 values (two `vpermi2b` look-ups, shared with
//! `avx512_regs`); each 32-k block is summed into its own accumulators (8 rows × 16 columns) and
//! added to the row's total by one FMA with the block's 16 per-column factors 2^(s-127) (exact: a
//! power of two, every product normal under the driver's guards). A per-lane exponent add would
//! need a mask compare per 32 words, and those take a `vdpbf16ps` slot on Zen 4 (2 per 16 dot
//! products here); the FMA costs 1 per 16.
//!
//! A: bf16 rows (`pack_a_row`), each read as 4-byte broadcasts; per 16-column group all of A is
//! read once (2 bytes of A per weight byte at M = 8, from L1) against 8 for `avx512_regs`, whose
//! every 2-column pass re-reads A from L2 — that stream was its limit (BENCHMARKS.md
//! 2026-11-30 (5)). Measured on Zen 4 (one pinned thread, M = 8, 128 × 6144 weights in L2,
//! per call with A's packing): 65 µs against 84 µs for `avx512_regs`, i.e. ~39 vs ~50 cycles
//! per 128 weights × 8 rows (ideal 32).

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use super::avx512_mx::to_bf16_at;
use super::avx512_regs::{lookup_tables, unscaled_words};
use super::cols_layout::{CHUNK, CHUNKS, GROUP};
use crate::codec::BLOCK;

/// Prefetch distance (bytes) in a group's weight stream, into L2: without it the stream ran at
/// 5-7 GB/s from DRAM (M = 8, one pinned thread, 1536 × 6144: 1366 µs against 791 µs with 4 KiB;
/// 1 KiB: 1412 µs; 16 KiB: 800 µs) — the kernel reads one stream slowly enough that the hardware
/// prefetcher does not run ahead of it.
const PREFETCH_AHEAD: usize = 4096;

/// Prefetch distance (bytes) in a group's weight stream into L1, on top of [`PREFETCH_AHEAD`]
/// into L2: one 32-k block (8 chunks) ahead, so the chunk's load does not wait for L2. Measured
/// on Zen 4 (one pinned thread, M = 8, 6144 × 768, loop mode, min of 800 calls, three
/// alternations): in cache 385-387 µs against 399-402 µs without it; from DRAM 388-399 against
/// 406-419 µs (256 and 1024 bytes ahead: the same as 512; BENCHMARKS.md 2026-12-01 (7)).
const L1_AHEAD: usize = 512;

/// Fewest rows per call that take the [`L1_AHEAD`] prefetch: with fewer, a chunk's few dot
/// products leave the loads little to wait behind, and the extra instruction costs more than it
/// saves (one pinned thread, 1536 × 6144 from DRAM, min of 300 calls, four alternations: M = 1
/// 434-457 µs with it against 407-424 without; M = 4 the same either way).
const L1_AHEAD_ROWS: usize = 4;

/// Prefetch distance (bytes) in a group's scales, 16 bytes per 32-k block: 16 blocks ahead. The
/// kernel's loads of the scales are their first reads (the driver checks their range from the
/// kernel's result, not by a scan before it).
const SCALES_AHEAD: usize = 256;

/// Row stride of packed A ([`pack_a_row`]) in pairs: k/2 plus one cache line, so that the rows
/// (2k bytes apart, a multiple of 4 KiB at k = 6144) do not all map to the same L1 sets.
pub fn a_stride(k: usize) -> usize {
    k / 2 + 16
}

/// One row of A (`k` f32 values) in bf16 (RNE, `avx512_mx::to_bf16`) into `dst`, one row of
/// packed A (`a_stride(k)` pairs, possibly uninitialised, every one written): k/2 pairs (u32,
/// the even k in the low half), then zero padding. Row r of packed A starts at `r · a_stride(k)`
/// pairs (the driver, `matmul_cols`, packs the rows in parallel).
///
/// # Safety
/// The CPU has AVX512F/BW/VL/BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
pub unsafe fn pack_a_row(row: &[f32], dst: &mut [MaybeUninit<u32>]) {
    let k = row.len();
    assert!(k.is_multiple_of(BLOCK) && dst.len() == a_stride(k));
    to_bf16_at(row, dst.as_mut_ptr() as *mut u16);
    dst[k / 2..].fill(MaybeUninit::new(0));
}

/// `out[r][j] = Σ_k a[r, k] · deq(W)[j, k]` for the 16 columns of one column group of packed
/// weights at `q` / `s` (`cols_layout`: 16·k bytes, 16·k/32 scales) and R ≤ 8 rows of bf16 A
/// at `a`, `lda` pairs apart ([`pack_a_row`]); the 2·R accumulators stay in registers over all of
/// K. Per output: per 32-k block 16 `vdpbf16ps` pair products in k order from zero, then
/// `total = fma(block, 2^(s-127), total)`, blocks in k order. Returns the smallest and largest
/// scale byte of the group, or `None` when a weight is NaN (off the fast route). The sums are
/// the exact ones only where every scale is in 1..=254 and every product (unscaled and scaled)
/// is a normal f32: the caller checks that (the returned range) and recomputes the group
/// otherwise.
///
/// # Safety
/// The CPU has AVX512F/BW/VL/VBMI/BF16 and FMA; the group and R rows of k/2 pairs at `a` are in
/// bounds.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16,fma")]
pub unsafe fn nk_cols<const R: usize>(
    (a, lda): (*const u32, usize),
    k: usize,
    (q, s): (*const u8, *const u8),
    out: &mut [[f32; GROUP]; R],
) -> Option<[u8; 2]> {
    let t = lookup_tables();
    let mut total = [_mm512_setzero_ps(); R];
    let mut nan = _mm512_setzero_si512();
    let (mut lo, mut hi) = (_mm_set1_epi8(-1), _mm_setzero_si128());
    let bh = |w: __m512i| std::mem::transmute::<__m512i, __m512bh>(w);
    for b in 0..k / BLOCK {
        let mut blk = [_mm512_setzero_ps(); R];
        for ch in 0..CHUNKS {
            let at = q.add((b * CHUNKS + ch) * CHUNK);
            _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(PREFETCH_AHEAD) as *const i8);
            if R >= L1_AHEAD_ROWS {
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(L1_AHEAD) as *const i8);
            }
            let (w0, w1) = unscaled_words(_mm512_loadu_si512(at as *const __m512i), &t, &mut nan);
            let pair = b * (BLOCK / 2) + ch * 2;
            for (r, acc) in blk.iter_mut().enumerate() {
                let row = a.add(r * lda + pair);
                *acc = _mm512_dpbf16_ps(*acc, bh(w0), bh(broadcast(row)));
                *acc = _mm512_dpbf16_ps(*acc, bh(w1), bh(broadcast(row.add(1))));
            }
        }
        _mm_prefetch::<_MM_HINT_T0>(s.wrapping_add(b * GROUP + SCALES_AHEAD) as *const i8);
        let sb = _mm_loadu_si128(s.add(b * GROUP) as *const __m128i);
        (lo, hi) = (_mm_min_epu8(lo, sb), _mm_max_epu8(hi, sb));
        // 2^(s - 127): the scale byte as an f32 exponent field.
        let f = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_cvtepu8_epi32(sb)));
        for (tot, acc) in total.iter_mut().zip(&blk) {
            *tot = _mm512_fmadd_ps(*acc, f, *tot);
        }
    }
    for (o, v) in out.iter_mut().zip(&total) {
        _mm512_storeu_ps(o.as_mut_ptr(), *v);
    }
    let bytes = |v: __m128i| std::mem::transmute::<__m128i, [u8; 16]>(v);
    let (lo, hi) = (bytes(lo), bytes(hi));
    let range = [lo.into_iter().min(), hi.into_iter().max()].map(|v| v.unwrap_or_default());
    (_mm512_cmpeq_epi8_mask(nan, _mm512_set1_epi8(-1)) == 0).then_some(range)
}

/// The pair at `p` in all 16 lanes, by a `vpbroadcastd` load of its own: folded into
/// `vdpbf16ps` as a `{1to16}` operand (what the compiler does with `_mm512_set1_epi32`) the dot
/// product measured ~1.3 cycles instead of 1 on Zen 4.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn broadcast(p: *const u32) -> __m512i {
    let v: __m512i;
    std::arch::asm!(
        "vpbroadcastd {v}, dword ptr [{p}]",
        v = out(zmm_reg) v,
        p = in(reg) p,
        options(pure, readonly, nostack, preserves_flags),
    );
    v
}
