//! The in-register AVX-512 BF16 kernel of the MXFP8 `[N, K]` GEMM for M ≤ 64 (driven by
//! `matmul_mx`): each weight row is decoded straight to bf16 in registers, once per group of up
//! to 8 rows of A, and `vdpbf16ps` (32 multiply-adds per instruction) does the rest — no decoded
//! tile goes through memory.
//!
//! Decode (per 64 weights = two 32-blocks of one row): two `vpermi2b` look-ups of the E4M3
//! byte's low 7 bits give the high and low bytes of the bf16 of its magnitude, exact (≤ 4
//! significant bits, 2^-9 ≤ |v| ≤ 448); the sign is OR-ed in and byte unpacks form the words.
//! The block scale 2^(s-127) is then an integer add of `(s - 127) << 7` to every nonzero word:
//! exact while the result stays a normal bf16, i.e. 10 ≤ s ≤ 246 — what the driver's
//! `normal_products` guard and `MAX_FAST_SCALE` ensure. This is ~2.5× cheaper than the f16
//! route (`vcvtph2ps` + multiply + `vcvtne2ps2bf16`: 9.4 vs 3.8 cycles per 32 weights on Zen 4),
//! which is what bounded M = 8..16. NaN bytes (0x7F / 0xFF) are detected and the unit is
//! recomputed exactly by the caller.
//!
//! Order: `vpunpck{l,h}bw` work within 128-bit lanes, so the first vector holds k ≡ 0..7
//! (mod 16) of the 64 and the second k ≡ 8..15; A is packed in the same order once per call
//! ([`pack_steps`]). A 32-wide tail (K ≡ 32 mod 64) is decoded by the f16 route in k order.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::avx2_mx::nan_bytes32;
use crate::codec::BLOCK;

/// At least this many weight bytes of whole passes (C rows each) between a step and its
/// prefetch (see `nk_regs_bf16`): one pass at K ≥ 2048, three of 1.5 KiB at K = 768, where one
/// pass ahead is about a DRAM latency (M = 1 6144 × 768: 580 → 388 µs, one pinned thread).
const PREFETCH_AHEAD: usize = 4096;

/// Weights per look-up step: two blocks of one row.
const STEP: usize = 2 * BLOCK;

/// bf16 bits of the E4M3 magnitude with bits `idx` (0..128). 127 is NaN: its entry 0xFFC0 has
/// the only high byte 0xFF (finite ones are ≤ 0x43 | sign), which the kernel's running byte max
/// detects (such units leave this path).
const fn bf16_of_e4m3_magnitude(idx: u8) -> u16 {
    let (e, m) = ((idx >> 3) as u16, (idx & 7) as u16);
    if idx == 0x7F {
        0xFFC0
    } else if e > 0 {
        // (1 + m/8) · 2^(e-7): bf16 exponent e - 7 + 127, mantissa m in its top 3 bits.
        ((e + 120) << 7) | (m << 4)
    } else if m == 0 {
        0
    } else {
        // m · 2^-9 with m = 2^p + rest: exponent p - 9 + 127, mantissa rest below the point.
        let p = 15 - m.leading_zeros() as u16;
        ((118 + p) << 7) | ((m - (1 << p)) << (7 - p))
    }
}

/// The four 64-byte look-up tables: (high bytes, low bytes) × (idx 0..64, idx 64..128).
const fn tables() -> [[u8; 64]; 4] {
    let mut t = [[0u8; 64]; 4];
    let mut i = 0;
    while i < 128 {
        let b = bf16_of_e4m3_magnitude(i as u8);
        t[i / 64][i % 64] = (b >> 8) as u8;
        t[2 + i / 64][i % 64] = b as u8;
        i += 1;
    }
    t
}
static TABLES: [[u8; 64]; 4] = tables();

/// [`TABLES`] in registers, for [`decode64`].
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn lookup_tables() -> [__m512i; 4] {
    TABLES.map(|tb| _mm512_loadu_si512(tb.as_ptr() as *const __m512i))
}

/// 64 E4M3 bytes at `q` (blocks with scales `s0`, `s1`, both ≤ `MAX_FAST_SCALE`) → the 64 deq
/// values in bf16 as two vectors (lane order: module docs); `nan` takes the byte max of their
/// high bytes (0xFF where a byte is NaN). No mask compare: those share the ports of
/// `vdpbf16ps` on Zen 4 (each costs a dot product's cycle), a byte max does not.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16")]
#[inline]
unsafe fn decode64(
    q: *const u8,
    s0: u8,
    s1: u8,
    t: &[__m512i; 4],
    nan: &mut __m512i,
) -> (__m512bh, __m512bh) {
    let b = _mm512_loadu_si512(q as *const __m512i);
    let e = _mm512_inserti64x4::<1>(
        _mm512_set1_epi16(exp_add(s0) as i16),
        _mm256_set1_epi16(exp_add(s1) as i16),
    );
    decode_bytes(b, (e, e), t, nan)
}

/// The bf16 exponent add of block scale `s`: `(s - 127) << 7`, as a 16-bit word.
pub(super) const fn exp_add(s: u8) -> u16 {
    ((s as i16 - 127) << 7) as u16
}

/// The core of [`decode64`] for 64 E4M3 bytes `b` in any byte order: the words of
/// `unpacklo_epi8` (bytes 0..8 of each 128-bit lane) get the exponent adds of `e.0`, those of
/// `unpackhi_epi8` (bytes 8..16) `e.1`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16")]
#[inline]
pub(super) unsafe fn decode_bytes(
    b: __m512i,
    e: (__m512i, __m512i),
    t: &[__m512i; 4],
    nan: &mut __m512i,
) -> (__m512bh, __m512bh) {
    let (w0, w1) = unscaled_words(b, t, nan);
    let scale = |w: __m512i, e: __m512i| {
        let nonzero = _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x7FFF));
        std::mem::transmute::<__m512i, __m512bh>(_mm512_mask_add_epi16(w, nonzero, w, e))
    };
    (scale(w0, e.0), scale(w1, e.1))
}

/// The bf16 words of the E4M3 values of bytes `b` (unscaled: exact, 2^-9 ≤ |v| ≤ 448 or 0):
/// those of bytes 0..8 of each 128-bit lane (`unpacklo_epi8`), then of bytes 8..16; `nan`
/// takes the byte max of their high bytes (0xFF where a byte is NaN).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16")]
#[inline]
pub(super) unsafe fn unscaled_words(
    b: __m512i,
    t: &[__m512i; 4],
    nan: &mut __m512i,
) -> (__m512i, __m512i) {
    let hi = _mm512_permutex2var_epi8(t[0], b, t[1]);
    let lo = _mm512_permutex2var_epi8(t[2], b, t[3]);
    // hi | (b & 0x80): the sign.
    let hi = _mm512_ternarylogic_epi32::<0xF8>(hi, b, _mm512_set1_epi8(i8::MIN));
    *nan = _mm512_max_epu8(*nan, hi);
    (_mm512_unpacklo_epi8(lo, hi), _mm512_unpackhi_epi8(lo, hi))
}

/// 32 E4M3 bytes of one block at `q` with scale `s` (≤ `MAX_FAST_SCALE`) → the 32 bf16 deq
/// values in k order, by the f16 route of `avx2_mx` (exact f16 of `value · 2^-8`, widened
/// exactly, times `2^(s - 119)` with the scalar deq's single rounding, then RNE to bf16, exact
/// under the `normal_products` guard). For the 32-wide tail only.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn decode32(q: *const u8, s: u8) -> __m512bh {
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

/// `out[c][r] = Σ_k a[r0 + r, k] · deq(B_c)[k]` over all `k` (multiple of 32) weights of `C`
/// MXFP8 weight rows at `q[c]` (their scales at `s[c]`), for rows r0..r0+R of the m-row packed
/// bf16 A at `a` ([`pack_steps`]); R·C ≤ 16 accumulators stay in registers for the whole row,
/// and each A vector loaded serves C dot products. A (96 KiB at m = 8, k = 6144) does not fit
/// L1 and is read again by every pass; packed step by step it is one sequential stream that
/// the hardware prefetcher keeps ahead of (8 rows 1 KiB apart per step, from 512-k tiles, left
/// ~6 of ~52 cycles per step waiting on L2). Lane j of an accumulator sums the products
/// of words 2j and 2j+1 of each vector; the 16 lanes are summed at the end (a fixed tree).
/// `false` when a weight is NaN (off the fast route): the caller then recomputes these columns
/// exactly. Scales above `MAX_FAST_SCALE` are the caller's to rule out (it scans them anyway).
///
/// # Safety
/// The CPU has AVX512F/BW/VL/VBMI/BF16 and AVX2/FMA/F16C; `q[c][..k]`, `s[c][..k/32]` and the
/// packed A (`m·k` values, r0 + R ≤ m) are in bounds; every scale is ≤ `MAX_FAST_SCALE`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16,avx2,fma,f16c")]
pub unsafe fn nk_regs_bf16<const R: usize, const C: usize>(
    (a, m, r0): (*const u16, usize, usize),
    k: usize,
    q: [*const u8; C],
    s: [*const u8; C],
    out: &mut [[f32; R]; C],
) -> bool {
    let t = lookup_tables();
    let mut v = [[_mm512_setzero_ps(); R]; C];
    let mut nan = _mm512_setzero_si512();
    let mut nan_tail = 0u64;
    let load = |p: *const u16| -> __m512bh {
        std::mem::transmute(_mm512_loadu_si512(p as *const __m512i))
    };
    let t0: __m512bh = std::mem::transmute(_mm512_setzero_si512());
    let ahead = C * k * PREFETCH_AHEAD.div_ceil(C * k);
    let whole = k - k % STEP;
    for k0 in (0..whole).step_by(STEP) {
        // Rows r0.. of step k0 (m rows of 64 values, contiguous).
        let at = a.add(m * k0 + r0 * STEP);
        let mut b = [(t0, t0); C];
        for c in 0..C {
            let (qc, sc) = (q[c].add(k0), s[c].add(k0 / BLOCK));
            // The same k of a row whole passes (C·k bytes each) on: in the `[N, K]` layout the
            // driver walks, a row a later pass (next C columns) reads, so that pass finds its
            // weights in cache (passes ahead hide DRAM latency and the 4 KiB page crossings,
            // where the hardware prefetcher restarts; the next 1 KiB of this row, as before,
            // measured 2-17 % slower single-threaded streaming from DRAM). Into L2: in L1 the
            // lines would wait a pass or more, pushing out A (T0 measured 8-15 % slower at
            // K ≥ 2048, M = 8).
            _mm_prefetch::<_MM_HINT_T1>(qc.wrapping_add(ahead) as *const i8);
            b[c] = decode64(qc, *sc, *sc.add(1), &t, &mut nan);
        }
        // r indexes A's rows and every column's accumulators alike.
        #[allow(clippy::needless_range_loop)]
        for r in 0..R {
            let ap = at.add(r * STEP);
            let (x0, x1) = (load(ap), load(ap.add(BLOCK)));
            for c in 0..C {
                v[c][r] = _mm512_dpbf16_ps(v[c][r], x0, b[c].0);
                v[c][r] = _mm512_dpbf16_ps(v[c][r], x1, b[c].1);
            }
        }
    }
    if whole < k {
        let at = a.add(m * whole + r0 * BLOCK);
        for c in 0..C {
            let (qc, sc) = (q[c].add(whole), *s[c].add(whole / BLOCK));
            nan_tail |= _mm256_movemask_epi8(nan_bytes32(qc)) as u32 as u64;
            let b = decode32(qc, sc);
            for (r, vr) in v[c].iter_mut().enumerate() {
                *vr = _mm512_dpbf16_ps(*vr, load(at.add(r * BLOCK)), b);
            }
        }
    }
    // The 16 lanes summed here, in AVX-512 code: a call per output from the driver cost 8 % of
    // a decoder step (perf).
    for (o, vc) in out.iter_mut().zip(&v) {
        for (x, lanes) in o.iter_mut().zip(vc) {
            *x = _mm512_reduce_add_ps(*lanes);
        }
    }
    nan_tail == 0 && _mm512_cmpeq_epi8_mask(nan, _mm512_set1_epi8(-1)) == 0
}

/// `a` (`m` rows of `k` f32 values) in bf16 (RNE, `vcvtne2ps2bf16` like `avx512_mx::to_bf16`)
/// packed for [`nk_regs_bf16`] in the order it reads: step by step (64 k), each step holding
/// rows 0..m of its 64 values in the decode's lane order (module docs), then a 32-wide tail
/// (K ≡ 32 mod 64) as m rows of 32 in k order. (Row-major A has a stride of 2k bytes — a
/// multiple of 4 KiB at k = 6144 — and its rows would all map to the same L1 sets.) One pass,
/// straight from f32 (a conversion pass, a packing pass and two zero-filled buffers were
/// ~10 µs of a 6144 × 8 A per GEMM call).
///
/// # Safety
/// The CPU has AVX512F/BW/BF16; `a.len() = m·k`, `k % 32 == 0`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub unsafe fn pack_steps(a: &[f32], m: usize, k: usize) -> Vec<u16> {
    assert!(a.len() == m * k && k.is_multiple_of(BLOCK));
    // Word indices into (k 0..32 | k 32..64) of a 64-wide chunk: k ≡ 0..7 (mod 16), then 8..15.
    let idx = |half: i16| {
        let w: [i16; 32] = std::array::from_fn(|j| (j / 8 * 16 + j % 8) as i16 + half);
        _mm512_loadu_si512(w.as_ptr() as *const __m512i)
    };
    let (first, second) = (idx(0), idx(8));
    let mut out = Vec::<u16>::with_capacity(m * k);
    let dst = out.as_mut_ptr();
    let mut o = 0;
    // 32 values → 32 bf16 words in k order (the first operand fills the upper 16).
    let cvt = |p: *const f32| -> __m512i {
        std::mem::transmute(_mm512_cvtne2ps_pbh(
            _mm512_loadu_ps(p.add(16)),
            _mm512_loadu_ps(p),
        ))
    };
    for k0 in (0..k).step_by(STEP) {
        for r in 0..m {
            let src = a.as_ptr().add(r * k + k0);
            if k0 + STEP <= k {
                let (lo, hi) = (cvt(src), cvt(src.add(BLOCK)));
                let v0 = _mm512_permutex2var_epi16(lo, first, hi);
                let v1 = _mm512_permutex2var_epi16(lo, second, hi);
                _mm512_storeu_si512(dst.add(o) as *mut __m512i, v0);
                _mm512_storeu_si512(dst.add(o + BLOCK) as *mut __m512i, v1);
                o += STEP;
            } else {
                _mm512_storeu_si512(dst.add(o) as *mut __m512i, cvt(src));
                o += BLOCK;
            }
        }
    }
    // SAFETY (of set_len): the loops wrote every one of the m·k values.
    debug_assert_eq!(o, m * k);
    out.set_len(m * k);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::e4m3_to_f32;

    #[test]
    fn lookup_tables_hold_the_exact_bf16_of_every_magnitude() {
        for idx in 0..127u8 {
            let want = (e4m3_to_f32(idx).to_bits() >> 16) as u16;
            assert_eq!(
                e4m3_to_f32(idx).to_bits() & 0xFFFF,
                0,
                "idx {idx:#x} not exact in bf16"
            );
            assert_eq!(bf16_of_e4m3_magnitude(idx), want, "idx {idx:#x}");
        }
    }

    #[test]
    fn nan_weights_leave_the_path() {
        if !crate::fast::isa::avx512_bf16() {
            return;
        }
        // k = 288: four full steps and a 32-wide tail; one row of A, one column of 1.0 (0x38).
        let k = 288;
        let a: Vec<f32> = (0..k).map(|i| 1.0 + (i % 7) as f32 / 8.0).collect();
        // SAFETY (all): avx512_bf16() checked the CPU features; q and s hold k and k/32 bytes.
        let packed = unsafe { pack_steps(&a, 1, k) };
        let s = vec![127u8; k / BLOCK];
        let run = |q: &[u8]| {
            let mut out = [[0f32; 1]; 1];
            let ok = unsafe {
                nk_regs_bf16::<1, 1>(
                    (packed.as_ptr(), 1, 0),
                    k,
                    [q.as_ptr()],
                    [s.as_ptr()],
                    &mut out,
                )
            };
            (ok, out[0][0])
        };
        assert_eq!(run(&[0x38; 288]), (true, a.iter().sum()));
        for nan in [0x7F, 0xFF] {
            for pos in [0, 63, 200, 270] {
                let mut q = vec![0x38u8; k];
                q[pos] = nan;
                assert!(!run(&q).0, "NaN {nan:#x} at {pos} not detected");
            }
        }
    }

    #[test]
    fn packing_follows_the_unpack_lane_order() {
        if !crate::fast::isa::avx512_bf16() {
            return;
        }
        let (m, k) = (3, 160); // two steps and a 32-wide tail
                               // Distinct values exact in bf16: bf16 bits 0x3F80 + i.
        let bits = |i: usize| 0x3F80 + i as u16;
        let a: Vec<f32> = (0..m * k)
            .map(|i| f32::from_bits((bits(i) as u32) << 16))
            .collect();
        // SAFETY: avx512_bf16() checked the CPU features; k is a multiple of 32.
        let p = unsafe { pack_steps(&a, m, k) };
        assert_eq!(p.len(), m * k);
        // Row r of step t at (t·m + r)·64: k 0..8, 16..24, 32..40, 48..56, then 8..16, ... of
        // the step.
        let order = [0, 16, 32, 48, 8, 24, 40, 56];
        for (t, r) in [(0, 0), (0, 2), (1, 1)] {
            let want: Vec<u16> = order
                .iter()
                .flat_map(|&s| (s..s + 8).map(|kk| bits(r * k + t * 64 + kk)))
                .collect();
            let at = (t * m + r) * 64;
            assert_eq!(&p[at..at + 64], &want[..], "step {t} row {r}");
        }
        // The tail: m rows of 32 in k order after the steps.
        for r in 0..m {
            let tail: Vec<u16> = (128..160).map(|kk| bits(r * k + kk)).collect();
            let at = 2 * m * 64 + r * 32;
            assert_eq!(&p[at..at + 32], &tail[..], "tail row {r}");
        }
    }
}
