//! Column-lane AVX-512 BF16 kernel of the MXFP8 `[N, K]` GEMM for small M: lanes over output
//! columns instead of over k (`avx512_regs`), so each lane of an accumulator is one output, A is
//! a broadcast pair of bf16 per `vdpbf16ps`, and no horizontal sums are needed.
//!
//! Weight layout (built once, [`pack`]): groups of [`GROUP`] = 16 columns (the last padded with
//! zero weights), each group K/4 chunks of 64 bytes (4 k × 16 columns), the group's chunks in k
//! order. In a chunk of k = 4t..4t+4, byte `16·L + 8·p + 2·i + e` holds column `4·L + i`,
//! k = `4t + 2p + e` (L the 128-bit lane). The decode's `vpunpck{l,h}bw` work within 128-bit
//! lanes, so the word vector of bytes 0..8 of each lane holds, in dword lane j, column j's
//! k = 4t, 4t+1 and the one of bytes 8..16 column j's k = 4t+2, 4t+3: each is one operand of
//! `vdpbf16ps` against the broadcast A pair of those k. Scales: per group, per 32-k block, the
//! 16 columns' bytes.
//!
//! Scale: the bf16 words are the unscaled E4M3 values (two `vpermi2b` look-ups, as in
//! `avx512_regs`); each 32-k block is summed into its own accumulators and added to the total by
//! one FMA with the block's 16 per-column factors 2^(s-127) (exact: a power of two, every
//! product normal under the guards). That replaces the per-word masked exponent add, whose mask
//! compare takes a `vdpbf16ps` slot on Zen 4 (2 per 16 dot products), by one FMA per 16 dot
//! products per row.
//!
//! A is the pair layout of `amx::pack_pairs` (`pa[pair · tm + r]`, a u32 of two bf16): per
//! column group all of A is read once (m·2 bytes per weight k-pair... 1 byte of A per weight at
//! m = 8), against 8 bytes per weight for `avx512_regs`, whose every 2-column pass re-reads A.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::avx512_mx::to_bf16;
use super::avx512_regs::{lookup_tables, unscaled_words};
use super::cols_layout::{CHUNK, CHUNKS, GROUP};
use crate::codec::BLOCK;

/// Prefetch distance (bytes) in a group's weight stream, into L2: without it the stream ran at
/// 5-7 GB/s from DRAM (M = 8, one pinned thread, 1536 × 6144: 1366 µs against 791 µs with 4 KiB;
/// 1 KiB: 1412 µs; 16 KiB: 800 µs) — the kernel reads one stream slowly enough that the hardware
/// prefetcher does not run ahead of it.
const PREFETCH_AHEAD: usize = 4096;

/// Row stride of [`pack_a`]'s output in pairs: k/2 plus one cache line, so that the rows (2k
/// bytes apart, a multiple of 4 KiB at k = 6144) do not all map to the same L1 sets.
pub fn a_stride(k: usize) -> usize {
    k / 2 + 16
}

/// `a` (`m` rows of `k` f32 values) in bf16 (RNE, `avx512_mx::to_bf16`), row r at
/// `r · a_stride(k)` pairs (u32: the even k in the low half).
///
/// # Safety
/// The CPU has AVX512F/BW/VL/BF16; `a.len() = m·k`, `k % 32 == 0`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
pub unsafe fn pack_a(a: &[f32], m: usize, k: usize) -> Vec<u32> {
    assert!(a.len() == m * k && k.is_multiple_of(BLOCK));
    let lda = a_stride(k);
    let mut out = vec![0u32; m * lda];
    for (row, dst) in a.chunks_exact(k).zip(out.chunks_exact_mut(lda)) {
        let words = std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut u16, k);
        to_bf16(row, words);
    }
    out
}

/// `out[c][r][j] = Σ_k a[r0 + r, k] · deq(W)[16c + j, k]` for C consecutive column groups of the
/// packed weights at `q` / `s` ([`pack`]; group c at `q + 16·k·c`, `s + 16·(k/32)·c`), R rows
/// of bf16 A at `a`, `lda` pairs apart ([`pack_a`]). Per output: per 32-k
/// block 16 `vdpbf16ps` pair products in k order from zero, then `total = fma(block, 2^(s-127),
/// total)`, blocks in k order. `false` when a weight is NaN: the caller recomputes exactly.
///
/// # Safety
/// The CPU has AVX512F/BW/VL/VBMI/BF16 and FMA; the C groups (16·k bytes, 16·k/32 scales each)
/// and R rows of k/2 pairs at `a` are in bounds; every scale is ≥ 1 and ≤ 254 and
/// every product a normal f32 (the caller's guards).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16,fma")]
pub unsafe fn nk_cols<const R: usize, const C: usize>(
    (a, lda): (*const u32, usize),
    k: usize,
    (q, s): (*const u8, *const u8),
    out: &mut [[[f32; GROUP]; R]; C],
) -> bool {
    let t = lookup_tables();
    let kb = k / BLOCK;
    let mut total = [[_mm512_setzero_ps(); R]; C];
    let mut nan = _mm512_setzero_si512();
    let zero: __m512 = _mm512_setzero_ps();
    let bh = |w: __m512i| std::mem::transmute::<__m512i, __m512bh>(w);
    for b in 0..kb {
        let mut blk = [[zero; R]; C];
        for ch in 0..CHUNKS {
            let off = (b * CHUNKS + ch) * CHUNK;
            let mut w = [(_mm512_setzero_si512(), _mm512_setzero_si512()); C];
            for (c, wc) in w.iter_mut().enumerate() {
                let at = q.add(c * GROUP * k + off);
                _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(PREFETCH_AHEAD) as *const i8);
                let bytes = _mm512_loadu_si512(at as *const __m512i);
                *wc = unscaled_words(bytes, &t, &mut nan);
            }
            let pair = b * (BLOCK / 2) + ch * 2;
            for r in 0..R {
                let a0 = broadcast(a.add(r * lda + pair));
                let a1 = broadcast(a.add(r * lda + pair + 1));
                for c in 0..C {
                    blk[c][r] = _mm512_dpbf16_ps(blk[c][r], bh(w[c].0), bh(a0));
                    blk[c][r] = _mm512_dpbf16_ps(blk[c][r], bh(w[c].1), bh(a1));
                }
            }
        }
        for c in 0..C {
            let sb = _mm_loadu_si128(s.add((c * kb + b) * GROUP) as *const __m128i);
            // 2^(s - 127): the scale byte as an f32 exponent field.
            let f = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_cvtepu8_epi32(sb)));
            for r in 0..R {
                total[c][r] = _mm512_fmadd_ps(blk[c][r], f, total[c][r]);
            }
        }
    }
    for (oc, tc) in out.iter_mut().zip(&total) {
        for (o, v) in oc.iter_mut().zip(tc) {
            _mm512_storeu_ps(o.as_mut_ptr(), *v);
        }
    }
    _mm512_cmpeq_epi8_mask(nan, _mm512_set1_epi8(-1)) == 0
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{e4m3_to_f32, e8m0_to_f32};
    use crate::fast::cols_layout::pack;

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
    }

    /// Random finite E4M3 weights (no NaN) and scales near 127, A values exact in bf16.
    fn operands(seed: u64, m: usize, k: usize, n: usize) -> (Vec<f32>, Vec<u8>, Vec<u8>) {
        let mut g = Lcg(seed);
        let a = (0..m * k)
            .map(|_| {
                f32::from_bits(
                    ((g.next() % 0x80 + 0x3F00) as u32 | (g.next() as u32 & 1) << 15) << 16,
                )
            })
            .collect();
        let q = (0..n * k)
            .map(|_| {
                let b = (g.next() % 0x100) as u8;
                if b & 0x7F == 0x7F {
                    0
                } else {
                    b
                }
            })
            .collect();
        let s = (0..n * k / BLOCK)
            .map(|_| (120 + g.next() % 14) as u8)
            .collect();
        (a, q, s)
    }

    /// y[r][col] by the kernel, m ≤ 16, every group; None on NaN.
    fn run(a: &[f32], m: usize, k: usize, n: usize, pq: &[u8], ps: &[u8]) -> Option<Vec<f32>> {
        let pa = unsafe { pack_a(a, m, k) };
        let lda = a_stride(k);
        let mut y = vec![0f32; m * n];
        for g in 0..n.div_ceil(GROUP) {
            for r0 in 0..m {
                let mut o = [[[0f32; GROUP]; 1]; 1];
                let ok = unsafe {
                    nk_cols::<1, 1>(
                        (pa[r0 * lda..].as_ptr(), lda),
                        k,
                        (
                            pq[g * GROUP * k..].as_ptr(),
                            ps[g * GROUP * k / BLOCK..].as_ptr(),
                        ),
                        &mut o,
                    )
                };
                if !ok {
                    return None;
                }
                for j in 0..GROUP.min(n - g * GROUP) {
                    y[r0 * n + g * GROUP + j] = o[0][0][j];
                }
            }
        }
        Some(y)
    }

    #[test]
    fn matches_f64_sums_with_tails() {
        if !crate::fast::isa::avx512_bf16() {
            return;
        }
        for (m, k, n) in [(3, 96, 21), (1, 32, 16), (5, 256, 40)] {
            let (a, q, s) = operands(m as u64 * 7 + k as u64, m, k, n);
            let (pq, ps) = pack(&q, &s, n, k);
            let y = run(&a, m, k, n, &pq, &ps).unwrap();
            for r in 0..m {
                for col in 0..n {
                    let (mut want, mut mag) = (0f64, 0f64);
                    for kk in 0..k {
                        let w = e4m3_to_f32(q[col * k + kk]) as f64
                            * e8m0_to_f32(s[col * k / BLOCK + kk / BLOCK]) as f64;
                        want += a[r * k + kk] as f64 * w;
                        mag += (a[r * k + kk] as f64 * w).abs();
                    }
                    let got = y[r * n + col] as f64;
                    assert!(
                        (got - want).abs() <= mag * k as f64 * 2f64.powi(-22) + 1e-6,
                        "m {m} k {k} n {n} r {r} col {col}: {got} vs {want}"
                    );
                }
            }
            // A NaN weight anywhere leaves the path.
            let mut qn = q.clone();
            qn[(n - 1) * k + k - 1] = 0xFF;
            let (pq, ps) = pack(&qn, &s, n, k);
            assert!(run(&a, m, k, n, &pq, &ps).is_none());
        }
    }

    /// Timing experiment (ignored): `cargo test -p kernels --release cols_timing -- --ignored
    /// --nocapture`; env COLS_SHAPES="n,k,m;...", COLS_CACHED=1 for one weight copy.
    #[test]
    #[ignore]
    fn cols_timing() {
        use crate::epilogue::Epilogue;
        use crate::parallel::Serial;
        use std::time::Instant;
        let shapes =
            std::env::var("COLS_SHAPES").unwrap_or("1536,6144,8;6144,768,8;6144,6144,8".into());
        let cached = std::env::var_os("COLS_CACHED").is_some();
        let rc: Vec<usize> = std::env::var("COLS_RC")
            .unwrap_or("8,1".into())
            .split(',')
            .map(|x| x.parse().unwrap())
            .collect();
        let rc = (rc[0], rc[1]);
        for spec in shapes.split(';') {
            let v: Vec<usize> = spec.split(',').map(|x| x.parse().unwrap()).collect();
            let (n, k, m) = (v[0], v[1], v[2]);
            let (a, q, s) = operands(1, m, k, n);
            let copies = if cached { 1 } else { (256 << 20) / (n * k) + 2 };
            let old: Vec<(Vec<u8>, Vec<u8>)> =
                (0..copies).map(|_| (q.clone(), s.clone())).collect();
            let new: Vec<(Vec<u8>, Vec<u8>)> = (0..copies).map(|_| pack(&q, &s, n, k)).collect();
            let ep = Epilogue::default();
            let mut y = vec![0f32; m * n];
            let iters = 3 * copies.max(5);
            let time_old = |y: &mut [f32]| {
                let t0 = Instant::now();
                for i in 0..iters {
                    let (q, s) = &old[i % copies];
                    super::super::matmul_mx::nk::<f32>(&a, m, k, n, q, s, y, &ep, &Serial);
                }
                t0.elapsed().as_secs_f64() / iters as f64 * 1e6
            };
            let time_new = |y: &mut [f32]| {
                let t0 = Instant::now();
                for i in 0..iters {
                    let (pq, ps) = &new[i % copies];
                    let pa = unsafe { pack_a(&a, m, k) };
                    let lda = a_stride(k);
                    let groups = n.div_ceil(GROUP);
                    for g in 0..groups {
                        let (gq, gs) = (
                            pq[g * GROUP * k..].as_ptr(),
                            ps[g * GROUP * k / BLOCK..].as_ptr(),
                        );
                        let (rr, cc) = rc;
                        for r0 in (0..m).step_by(rr) {
                            if g % cc != 0 {
                                continue;
                            }
                            let mut o = [[[0f32; GROUP]; 8]; 4];
                            macro_rules! go {
                                ($r:literal, $c:literal) => {{
                                    let mut o2 = [[[0f32; GROUP]; $r]; $c];
                                    unsafe {
                                        nk_cols::<$r, $c>(
                                            (pa[r0 * lda..].as_ptr(), lda),
                                            k,
                                            (gq, gs),
                                            &mut o2,
                                        )
                                    };
                                    for c in 0..$c {
                                        for r in 0..$r {
                                            o[c][r] = o2[c][r];
                                        }
                                    }
                                }};
                            }
                            match ((m - r0).min(rr), cc) {
                                (1, 1) => go!(1, 1),
                                (1, 4) => go!(1, 4),
                                (4, 1) => go!(4, 1),
                                (4, 2) => go!(4, 2),
                                (4, 4) => go!(4, 4),
                                (8, 2) => go!(8, 2),
                                (2, 4) => go!(2, 4),
                                _ => go!(8, 1),
                            }
                            for c in 0..cc {
                                for r in 0..(m - r0).min(rr) {
                                    let g = g + c;
                                    y[(r0 + r) * n + g * GROUP..][..GROUP.min(n - g * GROUP)]
                                        .copy_from_slice(&o[c][r][..GROUP.min(n - g * GROUP)]);
                                }
                            }
                        }
                    }
                }
                t0.elapsed().as_secs_f64() / iters as f64 * 1e6
            };
            let t0 = Instant::now();
            for _ in 0..100 {
                std::hint::black_box(unsafe { pack_a(&a, m, k) });
            }
            println!("A pack {:.1} us", t0.elapsed().as_secs_f64() / 100.0 * 1e6);
            let (mut to, mut tn) = (vec![], vec![]);
            for _ in 0..7 {
                to.push(time_old(&mut y));
                tn.push(time_new(&mut y));
            }
            to.sort_by(f64::total_cmp);
            tn.sort_by(f64::total_cmp);
            let bytes = (n * k) as f64;
            println!(
                "N {n} K {k} M {m}{}: old min/med {:.0}/{:.0} us ({:.1} GB/s), new {:.0}/{:.0} us ({:.1} GB/s), x{:.2} (min) x{:.2} (med)",
                if cached { " cached" } else { "" },
                to[0],
                to[3],
                bytes / to[0] / 1e3,
                tn[0],
                tn[3],
                bytes / tn[0] / 1e3,
                to[0] / tn[0],
                to[3] / tn[3]
            );
        }
    }
}
