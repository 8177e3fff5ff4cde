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
//! ([`pack_k_tiles`]). A 32-wide tail (K ≡ 32 mod 64) is decoded by the f16 route in k order.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::avx2_mx::{nan_bytes32, MAX_FAST_SCALE};
use crate::codec::BLOCK;

/// K per tile of the packed A: the ≤ 8 rows of a group (8 KiB) stay in L1 while a column pair
/// runs over them.
pub const REGS_KT: usize = 512;

/// Weights per look-up step: two blocks of one row.
const STEP: usize = 2 * BLOCK;

/// bf16 bits of the E4M3 magnitude with bits `idx` (0..128; 127 is NaN, never used: such
/// blocks leave this path).
const fn bf16_of_e4m3_magnitude(idx: u8) -> u16 {
    let (e, m) = ((idx >> 3) as u16, (idx & 7) as u16);
    if idx == 0x7F {
        0x7FC0
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

/// 64 E4M3 bytes at `q` (blocks with scales `s0`, `s1`, both ≤ `MAX_FAST_SCALE`) → the 64 deq
/// values in bf16 as two vectors (lane order: module docs), and the NaN bytes' mask.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16")]
#[inline]
unsafe fn decode64(q: *const u8, s0: u8, s1: u8, t: &[__m512i; 4]) -> (__m512bh, __m512bh, u64) {
    let b = _mm512_loadu_si512(q as *const __m512i);
    let magnitude = _mm512_set1_epi8(0x7F);
    let nan = _mm512_cmpeq_epi8_mask(_mm512_and_si512(b, magnitude), magnitude);
    let hi = _mm512_permutex2var_epi8(t[0], b, t[1]);
    let lo = _mm512_permutex2var_epi8(t[2], b, t[3]);
    // hi | (b & 0x80): the sign.
    let hi = _mm512_ternarylogic_epi32::<0xF8>(hi, b, _mm512_set1_epi8(i8::MIN));
    let exp_add = |s: u8| ((s as i16 - 127) << 7) as u16 as i16;
    let e = _mm512_inserti64x4::<1>(
        _mm512_set1_epi16(exp_add(s0)),
        _mm256_set1_epi16(exp_add(s1)),
    );
    let scale = |w: __m512i| {
        let nonzero = _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x7FFF));
        std::mem::transmute::<__m512i, __m512bh>(_mm512_mask_add_epi16(w, nonzero, w, e))
    };
    (
        scale(_mm512_unpacklo_epi8(lo, hi)),
        scale(_mm512_unpackhi_epi8(lo, hi)),
        nan,
    )
}

/// 32 E4M3 bytes of one block at `q` with scale `s` (≤ `MAX_FAST_SCALE`) → the 32 bf16 deq
/// values in k order, by the f16 route of `avx2_mx` (exact f16 of `value · 2^-8`, widened
/// exactly, times `2^(s - 119)` with the scalar deq's single rounding, then RNE to bf16, exact
/// under the `normal_products` guard). For the 32-wide tail only.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")]
#[inline]
unsafe fn decode32(q: *const u8, s: u8) -> __m512bh {
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

/// Bytes ahead of the decode that [`nk_regs_bf16`] prefetches in each weight row (a hint next to
/// the hardware prefetcher; prefetching across row ends into the next pass's rows measured no
/// different).
const PREFETCH_AHEAD: usize = 1024;

/// `out[c][r] = Σ_k a[r0 + r, k] · deq(B_c)[k]` over all `k` (multiple of 32) weights of `C`
/// MXFP8 weight rows at `q[c]` (their scales at `s[c]`), for rows r0..r0+R of the m-row packed
/// bf16 A at `a` ([`pack_k_tiles`]); R·C ≤ 16 accumulators stay in registers for the whole row,
/// and each A vector loaded serves C dot products. Lane j of an accumulator sums the products
/// of words 2j and 2j+1 of each vector; the 16 lanes are summed at the end (a fixed tree).
/// `false` when a block is off the fast route (a NaN byte or a scale > `MAX_FAST_SCALE`): the
/// caller then recomputes these columns exactly.
///
/// # Safety
/// The CPU has AVX512F/BW/VL/VBMI/BF16 and AVX2/FMA/F16C; `q[c][..k]`, `s[c][..k/32]` and the
/// packed A (`m·k` values, r0 + R ≤ m) are in bounds.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16,avx2,fma,f16c")]
pub unsafe fn nk_regs_bf16<const R: usize, const C: usize>(
    (a, m, r0): (*const u16, usize, usize),
    k: usize,
    q: [*const u8; C],
    s: [*const u8; C],
    out: &mut [[f32; R]; C],
) -> bool {
    let t = TABLES.map(|tb| _mm512_loadu_si512(tb.as_ptr() as *const __m512i));
    let mut v = [[_mm512_setzero_ps(); R]; C];
    let mut nan = 0u64;
    let mut max_scale = 0u8;
    let load = |p: *const u16| -> __m512bh {
        std::mem::transmute(_mm512_loadu_si512(p as *const __m512i))
    };
    let t0: __m512bh = std::mem::transmute(_mm512_setzero_si512());
    for k0 in (0..k).step_by(REGS_KT) {
        let kt = REGS_KT.min(k - k0);
        // Rows r0.. of tile k0 (m rows of kt values).
        let at = a.add(m * k0 + r0 * kt);
        let whole = kt - kt % STEP;
        for kk in (0..whole).step_by(STEP) {
            let mut b = [(t0, t0); C];
            for c in 0..C {
                let (qc, sc) = (q[c].add(k0 + kk), s[c].add((k0 + kk) / BLOCK));
                _mm_prefetch::<_MM_HINT_T0>(qc.wrapping_add(PREFETCH_AHEAD) as *const i8);
                let (s0, s1) = (*sc, *sc.add(1));
                max_scale = max_scale.max(s0).max(s1);
                let (b0, b1, n) = decode64(qc, s0, s1, &t);
                nan |= n;
                b[c] = (b0, b1);
            }
            // r indexes A's rows and every column's accumulators alike.
            #[allow(clippy::needless_range_loop)]
            for r in 0..R {
                let ap = at.add(r * kt + kk);
                let (x0, x1) = (load(ap), load(ap.add(BLOCK)));
                for c in 0..C {
                    v[c][r] = _mm512_dpbf16_ps(v[c][r], x0, b[c].0);
                    v[c][r] = _mm512_dpbf16_ps(v[c][r], x1, b[c].1);
                }
            }
        }
        if whole < kt {
            for c in 0..C {
                let (qc, sc) = (q[c].add(k0 + whole), *s[c].add((k0 + whole) / BLOCK));
                max_scale = max_scale.max(sc);
                nan |= _mm256_movemask_epi8(nan_bytes32(qc)) as u32 as u64;
                let b = decode32(qc, sc);
                for (r, vr) in v[c].iter_mut().enumerate() {
                    *vr = _mm512_dpbf16_ps(*vr, load(at.add(r * kt + whole)), b);
                }
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
    nan == 0 && max_scale <= MAX_FAST_SCALE
}

/// `a` (`m` rows of `k` bf16 values) packed for [`nk_regs_bf16`]: in k-tiles of [`REGS_KT`],
/// tile t holding rows 0..m of its k range contiguously (row stride = the tile's length), each
/// 64-wide chunk of a row in the decode's lane order (module docs), a 32-wide tail in k order.
/// Contiguous tiles matter: row-major A has a stride of 2k bytes — a multiple of 4 KiB at
/// k = 6144 — and its rows would all map to the same L1 sets.
pub fn pack_k_tiles(a: &[u16], m: usize, k: usize) -> Vec<u16> {
    let mut out = Vec::with_capacity(m * k);
    for k0 in (0..k).step_by(REGS_KT) {
        let kt = REGS_KT.min(k - k0);
        for row in a.chunks_exact(k).take(m) {
            let row = &row[k0..k0 + kt];
            let mut chunks = row.chunks_exact(STEP);
            for c in &mut chunks {
                for half in [0, 8] {
                    for lane in 0..4 {
                        out.extend_from_slice(&c[lane * 16 + half..lane * 16 + half + 8]);
                    }
                }
            }
            out.extend_from_slice(chunks.remainder());
        }
    }
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
    fn packing_follows_the_unpack_lane_order() {
        let (m, k) = (2, REGS_KT + 64); // one full tile and a 64-wide one
        let a: Vec<u16> = (0..(m * k) as u16).collect();
        let p = pack_k_tiles(&a, m, k);
        assert_eq!(p.len(), m * k);
        // Tile 0, row 0, first chunk: k 0..8, 16..24, 32..40, 48..56, then 8..16, ...
        let want: Vec<u16> = [0, 16, 32, 48, 8, 24, 40, 56]
            .iter()
            .flat_map(|&s| s..s + 8)
            .collect();
        assert_eq!(&p[..64], &want[..]);
        // Tile 1 starts after both rows of tile 0; row 1 of it after row 0's 64.
        let t1 = REGS_KT as u16;
        assert_eq!(p[2 * REGS_KT], t1);
        assert_eq!(p[2 * REGS_KT + 64], k as u16 + t1);
    }
}
