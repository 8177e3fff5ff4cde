//! AVX2 `MxMatMul` drivers for MXFP8 weights, both layouts (kernels in `avx2_mx`). Work is split
//! over output columns in contiguous chunks, one per thread, and every decoded weight vector is
//! reused for all M rows:
//!
//! * `[N, K]` (trans_b = 1), units of 4 columns: M ≤ 4 decodes in registers next to the FMAs
//!   (one pass over the weights, 8-lane partial sums over all of K); larger M, or a unit with a
//!   block off the fast decode route, decodes 256-k tiles of the 4 columns into L1 and runs
//!   2-row × 4-column register blocks over them.
//!   With AVX-512 BF16 + VBMI (the default where the CPU has it; every value and product a
//!   normal f32): M ≤ 64 decodes the weights straight to bf16 in registers by byte look-ups
//!   (`avx512_regs`), once per group of up to 8 rows of bf16 A (packed step by step), two
//!   columns per pass — `vdpbf16ps` runs 32 multiply-adds per instruction; larger M converts
//!   decoded tiles to bf16 and runs 4-row × 4-column `vdpbf16ps` blocks (`avx512_mx`).
//!   Weights prepacked in 16-column groups (`cols_layout`: the provider's constant weights on
//!   AVX-512 BF16 CPUs without AMX) take the column-lane kernel instead for M ≤ 64
//!   (`matmul_cols`, `avx512_cols`: 1.2-1.4× this path at M = 8, its A stream 8× smaller).
//!   With AMX-BF16 too (`amx`; Linux grants the tile state), 4 ≤ M ≤ 64 runs 32-column units
//!   on tiles instead: weights decoded the same way into a small buffer, one `tdpbf16ps` per 16
//!   columns × 32 k × up to 16 rows (M > 16: groups of 16 rows, each its own pass); a unit off its route (guards as above, NaN weights) runs its 4-column
//!   units as above.
//! * `[K, N]` (trans_b = 0), units of 256 columns (4 cache lines of each weight row): 128-k
//!   tiles of 16-column stripes decoded into L1, then 6-row × 16-column register blocks with A
//!   broadcast (no horizontal sums; for up to 3 rows, even and odd k summed apart per tile).
//!
//! The epilogue (alpha, beta, bias) is applied where each unit's f32 sums are rounded to the
//! output type, once per output.
//!
//! f32 accumulation order (docs/ops.md leaves it open; deterministic): `[N, K]`: per output,
//! 8 lanes (k mod 8) accumulated in k order, summed horizontally at the end (AVX-512 BF16: 16
//! lanes of pairs of k, in the lane order of its decode, summed at the end; AMX: the tile
//! unit's order over each 32-k block, blocks in k order); `[K, N]`: per
//! output, a running sum in k order (M ≤ 3 rows per block: even and odd k apart within a
//! 128-k tile, added at its end).

use std::arch::x86_64::*;

use super::amx;
use super::avx2_mx::{self as kern, KN_COLS, KN_ROWS, MAX_FAST_SCALE, NK_COLS, ZERO};
use super::avx512_mx as wide;
use super::avx512_regs as regs;
use super::shared::SharedMut;
use crate::codec::{e4m3_to_f32, e8m0_to_f32, BLOCK};
use crate::element::Element;
use crate::epilogue::Epilogue;
use crate::parallel::{for_row_chunks, Parallel};

/// Below this many multiply-adds per task a GEMM does not split further. Small: a decode GEMV
/// (M = 1) is bound by its weight reads, which two threads share better than one even at
/// 1.6 MB (6144 × 256: 148 → 77-89 µs with 2^18 instead of 2^21, two threads).
pub(super) const MIN_TASK_MACS: usize = 1 << 18;
/// K per decoded `[N, K]` tile: 4 columns × 256 floats (4 KiB) plus the A slice of ≤ 16 rows
/// (16 KiB) stay in L1.
const NK_KC: usize = 256;
/// K per decoded `[K, N]` tile: 128 × 16 floats (8 KiB).
const KN_KC: usize = 128;
/// Columns per `[K, N]` unit: 256 weight bytes (4 cache lines) per row, all 16 stripes decoded
/// while the lines are in L1. Narrower units walk the K rows (n bytes apart, a new page every
/// few rows) more often per byte: 64 columns measured 1.5× slower at M = 1.
const KN_UNIT: usize = 256;

/// A dequantized to f32, row by row (bit for bit the scalar deq). Written into uninitialised
/// memory: the zero fill of `vec![0f32; m·k]` (196 KB at M = 8, K = 6144, 16 calls per decoder
/// step) showed as `memset` in profiles of the step.
pub(super) fn dequantize_a(a_q: &[u8], a_scales: &[u8], k: usize) -> Vec<f32> {
    let kb = k / BLOCK;
    let rows = a_q.len() / k;
    assert!(a_q.len() == rows * k && a_scales.len() >= rows * kb);
    let mut a = Vec::<f32>::with_capacity(rows * k);
    for (r, (q, s)) in a_q
        .chunks_exact(k)
        .zip(a_scales.chunks_exact(kb))
        .enumerate()
    {
        // SAFETY: callers reach this module only with AVX2 detected; whole rows of k values
        // and k/32 scales, row r written at r·k of the rows·k reserved floats.
        unsafe { kern::decode_mx_row_to(q, s, a.as_mut_ptr().add(r * k)) };
    }
    // SAFETY: every one of the rows·k floats was written above.
    unsafe { a.set_len(rows * k) };
    a
}

/// `y = deq(A) · deq(B)ᵀ` for MXFP8 `B [N, K]` with scales `[N, K/32]`; `a` is deq(A) `[m, k]`.
/// Caller: AVX2 detected, shapes checked, `k % 32 == 0`.
#[allow(clippy::too_many_arguments)]
pub(super) fn nk<O: Element>(
    a: &[f32],
    m: usize,
    k: usize,
    n: usize,
    q: &[u8],
    scales: &[u8],
    y: &mut [O],
    ep: &Epilogue,
    par: &dyn Parallel,
) {
    let kb = k / BLOCK;
    let y = SharedMut::new(y);
    let bf16 = bf16_a(a, m);
    // 4 ≤ M ≤ 64 on AMX tiles where wanted and supported (decided on the calling thread, like
    // bf16_a): A in the tiles' pair layout, once per call; units of 32 columns.
    let amx = bf16
        .as_ref()
        .filter(|_| (amx::MIN_M..=amx::MAX_M).contains(&m) && super::isa::amx_bf16())
        .map(|b| {
            // Groups of 16 rows (one group of m rows up to 16; beyond, the last group padded
            // with zero rows: the tile product costs the same, and one configuration serves).
            let tm = m.min(amx::TILE_M);
            let groups: Vec<Vec<u32>> = (0..m)
                .step_by(tm)
                .map(|r0| amx::pack_pairs(&b.a, m, k, (r0, tm)))
                .collect();
            (b, tm, groups)
        });
    let unit_cols = if amx.is_some() {
        amx::PASS_COLS
    } else {
        NK_COLS
    };
    for_row_chunks(
        par,
        n.div_ceil(unit_cols),
        MIN_TASK_MACS.div_ceil(unit_cols * m * k),
        &|u0, u1| {
            let mut tile = vec![0f32; NK_COLS * NK_KC.min(k)];
            let mut acc = vec![[ZERO; NK_COLS]; m];
            let mut vals = vec![[0f32; NK_COLS]; m];
            let mut scratch = bf16.as_ref().map(|_| Bf16Scratch {
                tile: vec![0u16; tile.len()],
                acc: vec![[wide::ZERO; NK_COLS]; m],
            });
            // One 4-column unit, every path but AMX.
            let mut four = |u: usize| {
                let (n0, cols) = (u * NK_COLS, NK_COLS.min(n - u * NK_COLS));
                // Missing columns of the last unit repeat its last column; their results are
                // dropped.
                let col = |c: usize| n0 + c.min(cols - 1);
                let qs: [*const u8; NK_COLS] = std::array::from_fn(|c| q[col(c) * k..].as_ptr());
                let ss: [*const u8; NK_COLS] =
                    std::array::from_fn(|c| scales[col(c) * kb..].as_ptr());
                // A in bf16 where both bf16 paths may take this unit (every value and product
                // a normal f32), checked once for them from one scan of the unit's scales; the
                // in-register path also needs every scale ≤ MAX_FAST_SCALE.
                let (min_scale, max_scale) = unit_scale_range(ss, kb);
                let bf16_unit = bf16
                    .as_ref()
                    .filter(|b| wide::normal_products(b.min_exp, min_scale as i32 - 127 - 9));
                let in_regs_bf16 = bf16_unit.is_some_and(|b| {
                    max_scale <= MAX_FAST_SCALE && nk_unit_regs_bf16(&b.a, m, k, qs, ss, &mut vals)
                });
                // SAFETY: AVX2 detected by the caller; rows col(c) of q (k bytes) and scales
                // (k/32 bytes) and the m rows of a are in bounds (check_matmul_io).
                let in_regs = if in_regs_bf16 {
                    Some(())
                } else {
                    unsafe {
                        match m {
                            1 => kern::nk_regs::<1, 4>(a.as_ptr(), k, qs, ss, k)
                                .map(|o| vals[..1].copy_from_slice(&o)),
                            2 => kern::nk_regs::<2, 4>(a.as_ptr(), k, qs, ss, k)
                                .map(|o| vals[..2].copy_from_slice(&o)),
                            3 => nk_regs_cols::<3, 2>(a, k, qs, ss, &mut vals),
                            4 => nk_regs_cols::<4, 2>(a, k, qs, ss, &mut vals),
                            5 => nk_regs_cols::<5, 1>(a, k, qs, ss, &mut vals),
                            6 => nk_regs_cols::<6, 1>(a, k, qs, ss, &mut vals),
                            7 => nk_regs_cols::<7, 1>(a, k, qs, ss, &mut vals),
                            _ => None,
                        }
                    }
                };
                if in_regs.is_none() {
                    match (bf16_unit, scratch.as_mut()) {
                        (Some(b), Some(sc)) if m > REGS_BF16_MAX_M => {
                            nk_tiled_bf16(&b.a, k, qs, ss, &mut tile, sc, &mut vals)
                        }
                        _ => nk_tiled(a, m, k, qs, ss, &mut tile, &mut acc, &mut vals),
                    }
                }
                store_block(&y, n, (n0, cols), &mut vals, ep);
            };
            match &amx {
                None => (u0..u1).for_each(&mut four),
                Some((b, tm, groups)) => {
                    let w = MxWeights { q, scales, k, n };
                    nk_amx_units((groups, *tm), b, m, w, (u0, u1), (&y, ep), &mut four)
                }
            }
        },
    );
}

/// Applies the epilogue to `vals` (rows of y, columns n0..n0+cols; W ≥ cols) and writes them,
/// rounded to the output type, into y (`n` columns).
pub(super) fn store_block<O: Element, const W: usize>(
    y: &SharedMut<O>,
    n: usize,
    (n0, cols): (usize, usize),
    vals: &mut [[f32; W]],
    ep: &Epilogue,
) {
    ep.apply_block(n0, cols, vals);
    for (r, v) in vals.iter().enumerate() {
        // SAFETY: each task owns its units' columns in every row: disjoint pieces.
        let out = unsafe { y.piece(r * n + n0, r * n + n0 + cols) };
        for (o, &x) in out.iter_mut().zip(v.iter()) {
            *o = O::from_f32(x);
        }
    }
}

/// MXFP8 `[N, K]` weights: `q` `[n, k]`, `scales` `[n, k/32]`.
#[derive(Clone, Copy)]
struct MxWeights<'a> {
    q: &'a [u8],
    scales: &'a [u8],
    k: usize,
    n: usize,
}

/// Units u0..u1 of 32 columns on AMX-BF16 tiles (`amx`; A in bf16 `b` and, in the tiles' pair
/// layout, `groups` of `tm` rows). A unit off the AMX route — a product that may not be a
/// normal f32, a scale above `MAX_FAST_SCALE`, a NaN weight — runs its 4-column units through
/// `four` (the other paths) instead. The tile configuration lives on this thread for these
/// units only: tasks run on other pools' threads too. Caller: `amx_bf16()` (CPU, OS, AVX-512
/// BF16), m ≤ `amx::MAX_M`.
fn nk_amx_units<O: Element>(
    (groups, tm): (&[Vec<u32>], usize),
    b: &Bf16A,
    m: usize,
    w: MxWeights,
    (u0, u1): (usize, usize),
    (y, ep): (&SharedMut<O>, &Epilogue),
    four: &mut dyn FnMut(usize),
) {
    let (k, n, kb) = (w.k, w.n, w.k / BLOCK);
    assert!(groups.len() == m.div_ceil(tm) && groups.iter().all(|g| g.len() * 2 == tm * k));
    assert!(w.q.len() >= n * k && w.scales.len() >= n * kb);
    let cfg = amx::TileConfig::new(tm);
    let mut buf = amx::DecodeBuf::new();
    let mut c = [[[0f32; amx::TILE_COLS]; amx::TILE_COLS]; 2];
    let mut vals = vec![[0f32; amx::PASS_COLS]; m];
    // SAFETY: amx_bf16() checked the CPU and OS (caller); released when `_tiles` drops.
    let _tiles = unsafe { cfg.load() };
    for u in u0..u1 {
        let (n0, cols) = (
            u * amx::PASS_COLS,
            amx::PASS_COLS.min(n - u * amx::PASS_COLS),
        );
        let (lo, hi) = w.scales[n0 * kb..(n0 + cols) * kb]
            .iter()
            .fold((u8::MAX, 0), |(lo, hi), &s| (lo.min(s), hi.max(s)));
        let mut on_route =
            hi <= MAX_FAST_SCALE && wide::normal_products(b.min_exp, lo as i32 - 127 - 9);
        for (g, pairs) in groups.iter().enumerate() {
            // SAFETY: tiles configured for tm above; rows n0..n0+cols of q / scales and the
            // tm·k/2 pairs are in bounds (asserted); every scale ≤ MAX_FAST_SCALE (checked).
            on_route = on_route
                && unsafe {
                    amx::nk_pass(
                        pairs.as_ptr(),
                        tm,
                        k,
                        (w.q[n0 * k..].as_ptr(), w.scales[n0 * kb..].as_ptr(), cols),
                        &mut buf,
                        &mut c,
                    )
                };
            // C tiles hold column-major sums: c[t][i][j] is row g·tm + j, column n0 + 16t + i.
            for (j, v) in vals.iter_mut().skip(g * tm).take(tm).enumerate() {
                *v = std::array::from_fn(|col| c[col / amx::TILE_COLS][col % amx::TILE_COLS][j]);
            }
        }
        if !on_route {
            (n0 / NK_COLS..(n0 + cols).div_ceil(NK_COLS)).for_each(&mut *four);
            continue;
        }
        store_block(y, n, (n0, cols), &mut vals, ep);
    }
}

/// Largest M of the in-register AVX-512 BF16 path (`avx512_regs::nk_regs_bf16`, rows in groups
/// of 8: 1.1-1.2× faster than the tiled bf16 path at M = 24..32 and even at M = 64, single
/// thread, weights in L2); larger M runs the tiled bf16 path, whose 4 × 4 register blocks reuse
/// each A load for 4 columns.
const REGS_BF16_MAX_M: usize = 64;

/// One `[N, K]` unit on the in-register AVX-512 BF16 path (M ≤ `REGS_BF16_MAX_M`): each pair of
/// columns is decoded once in registers for a group of up to 8 rows of bf16 A; M > 8 runs
/// several row groups (the decode is cheap, the A loads are what each group amortises over its
/// columns); the kernel prefetches the next pass's weight rows.
/// `false` (nothing written) when M is out of range or a block is off the fast route; the
/// caller then runs an exact path. Caller: `normal_products` holds for A and the unit.
fn nk_unit_regs_bf16(
    a: &[u16],
    m: usize,
    k: usize,
    qs: [*const u8; NK_COLS],
    ss: [*const u8; NK_COLS],
    vals: &mut [[f32; NK_COLS]],
) -> bool {
    /// Rows r0..r0+R of the m-row packed A against the unit's 4 columns, C at a time (R·C ≤ 16
    /// accumulators, in registers over all of K); writes vals[r0..r0+R].
    fn run<const R: usize, const C: usize>(
        (a, m, r0): (&[u16], usize, usize),
        k: usize,
        qs: [*const u8; NK_COLS],
        ss: [*const u8; NK_COLS],
        vals: &mut [[f32; NK_COLS]],
    ) -> bool {
        assert!(a.len() >= m * k && r0 + R <= m && vals.len() >= m && NK_COLS.is_multiple_of(C));
        let mut sums = [[[0f32; R]; C]; 4];
        for (g, sg) in sums.iter_mut().take(NK_COLS / C).enumerate() {
            let cols: [usize; C] = std::array::from_fn(|c| g * C + c);
            // SAFETY: the caller (nk, via bf16_a) checked avx512_bf16(); qs[c] / ss[c] are rows
            // of k bytes and k/32 scales; a holds the m·k packed values, r0 + R ≤ m (asserted).
            let ok = unsafe {
                regs::nk_regs_bf16::<R, C>(
                    (a.as_ptr(), m, r0),
                    k,
                    cols.map(|c| qs[c]),
                    cols.map(|c| ss[c]),
                    sg,
                )
            };
            if !ok {
                return false;
            }
        }
        for (r, v) in vals[r0..r0 + R].iter_mut().enumerate() {
            *v = std::array::from_fn(|col| sums[col / C][col % C][r]);
        }
        true
    }
    // Two columns per decode pass (C = 2) measured fastest for every R: 1.2-1.5x over C = 1 at
    // M = 4..8 (single thread, weights in L2), while C = 4 loses at M ≥ 4.
    let group = |r0: usize, rows: usize, vals: &mut [[f32; NK_COLS]]| {
        let g = (a, m, r0);
        match rows {
            1 => run::<1, 2>(g, k, qs, ss, vals),
            2 => run::<2, 2>(g, k, qs, ss, vals),
            3 => run::<3, 2>(g, k, qs, ss, vals),
            4 => run::<4, 2>(g, k, qs, ss, vals),
            5 => run::<5, 2>(g, k, qs, ss, vals),
            6 => run::<6, 2>(g, k, qs, ss, vals),
            7 => run::<7, 2>(g, k, qs, ss, vals),
            _ => run::<8, 2>(g, k, qs, ss, vals),
        }
    };
    m <= REGS_BF16_MAX_M && (0..m).step_by(8).all(|r0| group(r0, (m - r0).min(8), vals))
}

/// R rows in registers against the unit's 4 columns, C at a time (R·C ≤ 8 accumulators), so
/// each weight is still decoded once. `None` as `nk_regs`. Used up to M = 7 (AVX2 only; single
/// thread, weights in L2: M = 5 1.12× the tiled path, M = 7 1.03×, M = 8 0.9×: A's rows, 4·k
/// bytes apart, share L1 sets).
///
/// # Safety
/// AVX2 detected; `qs` / `ss` are rows of k bytes and k/32 scales, `a` holds R rows of k.
unsafe fn nk_regs_cols<const R: usize, const C: usize>(
    a: &[f32],
    k: usize,
    qs: [*const u8; NK_COLS],
    ss: [*const u8; NK_COLS],
    vals: &mut [[f32; NK_COLS]],
) -> Option<()> {
    for h in (0..NK_COLS).step_by(C) {
        let cols: [usize; C] = std::array::from_fn(|c| h + c);
        let o = kern::nk_regs::<R, C>(a.as_ptr(), k, cols.map(|c| qs[c]), cols.map(|c| ss[c]), k)?;
        for (v, or) in vals.iter_mut().zip(&o) {
            v[h..h + C].copy_from_slice(or);
        }
    }
    Some(())
}

/// Decodes rows k0..k0+kt of the unit's 4 columns into `tile` (row stride `ldt`, exact deq),
/// then prefetches the next tile (or the next unit's first tile: its rows follow these four)
/// so its DRAM reads overlap with this tile's multiply.
fn decode_unit_tile(
    qs: [*const u8; NK_COLS],
    ss: [*const u8; NK_COLS],
    k: usize,
    (k0, kt): (usize, usize),
    tile: &mut [f32],
) {
    let ldt = tile.len() / NK_COLS;
    for (c, dst) in tile.chunks_exact_mut(ldt).enumerate() {
        // SAFETY: AVX2 detected by the caller; qs[c] / ss[c] are rows of k bytes and k/32
        // scales (nk), so k0..k0+kt and its blocks are in bounds.
        unsafe {
            let q = std::slice::from_raw_parts(qs[c].add(k0), kt);
            let s = std::slice::from_raw_parts(ss[c].add(k0 / BLOCK), kt / BLOCK);
            kern::decode_mx_row(q, s, dst);
        }
    }
    let (next, step) = if k0 + kt < k {
        (k0 + kt, 0)
    } else {
        (0, NK_COLS * k)
    };
    for &qc in &qs {
        // SAFETY: AVX2 detected by the caller; a prefetch never faults.
        unsafe { kern::prefetch(qc.wrapping_add(step + next), ldt) };
    }
}

/// One `[N, K]` unit through decoded tiles (exact deq, any block): `vals[r][c]` for all m rows.
#[allow(clippy::too_many_arguments)]
fn nk_tiled(
    a: &[f32],
    m: usize,
    k: usize,
    qs: [*const u8; NK_COLS],
    ss: [*const u8; NK_COLS],
    tile: &mut [f32],
    acc: &mut [[__m256; NK_COLS]],
    vals: &mut [[f32; NK_COLS]],
) {
    let ldt = tile.len() / NK_COLS;
    acc.fill([ZERO; NK_COLS]);
    for k0 in (0..k).step_by(ldt) {
        // The last tile may be shorter (still a multiple of 32).
        let kt = ldt.min(k - k0);
        decode_unit_tile(qs, ss, k, (k0, kt), tile);
        let mut r = 0;
        while r < m {
            let ap = a[r * k + k0..].as_ptr();
            // SAFETY: rows r (and r + 1) of a hold k0..k0+kt; the tile holds 4 × ldt floats.
            unsafe {
                if let Some(pair) = acc[r..].first_chunk_mut::<2>() {
                    kern::nk_tile_rows::<2>(ap, k, tile.as_ptr(), ldt, kt, pair);
                    r += 2;
                } else if let Some(one) = acc[r..].first_chunk_mut::<1>() {
                    kern::nk_tile_rows::<1>(ap, k, tile.as_ptr(), ldt, kt, one);
                    r += 1;
                }
            }
        }
    }
    for (v, ar) in vals.iter_mut().zip(acc.iter()) {
        // SAFETY: AVX2 detected by the caller.
        *v = std::array::from_fn(|c| unsafe { kern::hsum(ar[c]) });
    }
}

/// Scratch of the AVX-512 BF16 paths: A as bf16 (once per call; packed in 64-k steps for M ≤
/// `REGS_BF16_MAX_M`, `avx512_regs::pack_steps`) and its smallest exponent
/// (`avx512_mx::min_exponent`).
struct Bf16A {
    a: Vec<u16>,
    min_exp: i32,
}

/// A in bf16 when the AVX-512 BF16 paths may run (CPU support, every nonzero A value a normal
/// f32; also at M = 1, where the cheaper decode measured 1.6× faster single-threaded with the
/// weights in L2 and 1.08× with two threads from DRAM). Called on the calling thread:
/// `with_avx2_only` is thread-local.
///
/// A that is not exactly bf16 (a float activation, `MatA::F32` / `F16`) gets `None`: its bf16
/// rounding would change the products. deq(A) of MXFP8 values is always exact (3 mantissa bits).
fn bf16_a(a: &[f32], m: usize) -> Option<Bf16A> {
    if m == 0 || !super::isa::avx512_bf16() || !bf16_exact(a) {
        return None;
    }
    // SAFETY (all three): avx512_bf16() checked the CPU features; a.len() = m·k, k a multiple
    // of 32.
    let min_exp = unsafe { wide::min_exponent(a) };
    if min_exp < -126 {
        return None;
    }
    let bf = if m <= REGS_BF16_MAX_M {
        unsafe { regs::pack_steps(a, m, a.len() / m) }
    } else {
        let mut bf = vec![0u16; a.len()];
        unsafe { wide::to_bf16(a, &mut bf) };
        bf
    };
    Some(Bf16A { a: bf, min_exp })
}

/// Whether every value of `a` is exactly a bf16 (its low 16 bits zero).
pub(super) fn bf16_exact(a: &[f32]) -> bool {
    a.iter().fold(0u32, |acc, v| acc | v.to_bits()) & 0xFFFF == 0
}

/// The smallest and largest block scale of the unit (the smallest exponent of a nonzero deq(B)
/// value is 2^-9, the least E4M3 subnormal, at the smallest scale).
fn unit_scale_range(ss: [*const u8; NK_COLS], kb: usize) -> (u8, u8) {
    ss.iter().fold((u8::MAX, 0), |(lo, hi), &p| {
        // SAFETY: ss[c] points at a row of kb scales (nk).
        let row = unsafe { std::slice::from_raw_parts(p, kb) };
        row.iter()
            .fold((lo, hi), |(lo, hi), &s| (lo.min(s), hi.max(s)))
    })
}

/// Scratch of one task on the AVX-512 BF16 path.
struct Bf16Scratch {
    tile: Vec<u16>,
    acc: Vec<[__m512; NK_COLS]>,
}

/// `nk_tiled` with bf16 tiles and `vdpbf16ps` (see `avx512_mx` for why it stays exact).
#[allow(clippy::too_many_arguments)]
fn nk_tiled_bf16(
    a: &[u16],
    k: usize,
    qs: [*const u8; NK_COLS],
    ss: [*const u8; NK_COLS],
    tile: &mut [f32],
    scratch: &mut Bf16Scratch,
    vals: &mut [[f32; NK_COLS]],
) {
    let ldt = tile.len() / NK_COLS;
    let (tile16, acc) = (&mut scratch.tile, &mut scratch.acc);
    acc.fill([wide::ZERO; NK_COLS]);
    for k0 in (0..k).step_by(ldt) {
        let kt = ldt.min(k - k0);
        decode_unit_tile(qs, ss, k, (k0, kt), tile);
        for c in 0..NK_COLS {
            // SAFETY: the caller checked avx512_bf16(); kt is a multiple of 32.
            unsafe { wide::to_bf16(&tile[c * ldt..c * ldt + kt], &mut tile16[c * ldt..]) };
        }
        for (g, block) in acc.chunks_mut(wide::ROWS).enumerate() {
            let ap = a[g * wide::ROWS * k + k0..].as_ptr();
            let t = tile16.as_ptr();
            // SAFETY: AVX-512 BF16 checked by the caller; the block's rows of a hold k0..k0+kt,
            // the tile 4 × ldt values.
            unsafe {
                match block.len() {
                    4 => wide::nk_tile_rows::<4>(ap, k, t, ldt, kt, first::<4, _>(block)),
                    3 => wide::nk_tile_rows::<3>(ap, k, t, ldt, kt, first::<3, _>(block)),
                    2 => wide::nk_tile_rows::<2>(ap, k, t, ldt, kt, first::<2, _>(block)),
                    _ => wide::nk_tile_rows::<1>(ap, k, t, ldt, kt, first::<1, _>(block)),
                }
            }
        }
    }
    for (v, ar) in vals.iter_mut().zip(acc.iter()) {
        // SAFETY: AVX-512F checked by the caller.
        *v = std::array::from_fn(|c| unsafe { wide::hsum(ar[c]) });
    }
}

/// `y = deq(A) · deq(B)` for MXFP8 `B [K, N]` with scales `[K/32, N]`; `a` is deq(A) `[m, k]`.
/// Caller: AVX2 detected, shapes checked, `k % 32 == 0`.
#[allow(clippy::too_many_arguments)]
pub(super) fn kn<O: Element>(
    a: &[f32],
    m: usize,
    k: usize,
    n: usize,
    q: &[u8],
    scales: &[u8],
    y: &mut [O],
    ep: &Epilogue,
    par: &dyn Parallel,
) {
    const STRIPES: usize = KN_UNIT / KN_COLS;
    let y = SharedMut::new(y);
    let units = n.div_ceil(KN_UNIT);
    for_row_chunks(
        par,
        units,
        MIN_TASK_MACS.div_ceil(KN_UNIT * m * k),
        &|u0, u1| {
            let kc = KN_KC.min(k);
            let mut tile = vec![0f32; kc * KN_COLS];
            // acc[st * m + r]: row r, stripe st, two 8-column vectors.
            let mut acc = vec![[ZERO; 2]; STRIPES * m];
            for u in u0..u1 {
                let (n0, cols) = (u * KN_UNIT, KN_UNIT.min(n - u * KN_UNIT));
                acc.fill([ZERO; 2]);
                for k0 in (0..k).step_by(kc) {
                    let kt = kc.min(k - k0);
                    // The next tile's weight lines (one per row), so DRAM reads overlap with
                    // this tile's FMAs.
                    let next = q.as_ptr().wrapping_add((k0 + kt) * n + n0);
                    for kk in 0..kt {
                        // SAFETY: AVX2 detected by the caller; a prefetch never faults.
                        unsafe { kern::prefetch(next.wrapping_add(kk * n), cols) };
                    }
                    for st in 0..cols.div_ceil(KN_COLS) {
                        let (c0, w) = (n0 + st * KN_COLS, KN_COLS.min(cols - st * KN_COLS));
                        kn_decode(q, scales, n, (k0, kt), (c0, w), &mut tile);
                        kn_rows(a, m, k, k0, kt, &tile, &mut acc[st * m..(st + 1) * m]);
                    }
                }
                for r in 0..m {
                    // SAFETY: each task owns its units' columns in every row: disjoint pieces.
                    let out = unsafe { y.piece(r * n + n0, r * n + n0 + cols) };
                    for (st, chunk) in out.chunks_mut(KN_COLS).enumerate() {
                        let mut v = [0f32; KN_COLS];
                        let [lo, hi] = acc[st * m + r];
                        // SAFETY: AVX2 detected by the caller; v holds 16 floats.
                        unsafe {
                            _mm256_storeu_ps(v.as_mut_ptr(), lo);
                            _mm256_storeu_ps(v.as_mut_ptr().add(8), hi);
                        }
                        ep.apply_row(r, n0 + st * KN_COLS, &mut v[..chunk.len()]);
                        for (o, &x) in chunk.iter_mut().zip(&v) {
                            *o = O::from_f32(x);
                        }
                    }
                }
            }
        },
    );
}

/// Decodes rows k0..k0+kt of columns c0..c0+w (w ≤ 16) of `[K, N]` MXFP8 weights into the
/// 16-wide `tile`; a partial stripe (the last columns of B) is decoded by the scalar codec and
/// padded with zeros.
fn kn_decode(
    q: &[u8],
    scales: &[u8],
    n: usize,
    (k0, kt): (usize, usize),
    (c0, w): (usize, usize),
    tile: &mut [f32],
) {
    let srow = (k0 / BLOCK) * n + c0;
    if w == KN_COLS {
        assert!((k0 + kt - 1) * n + c0 + KN_COLS <= q.len() && tile.len() >= kt * KN_COLS);
        assert!(srow + (kt / BLOCK - 1) * n + KN_COLS <= scales.len());
        // SAFETY: AVX2 detected by the caller; bounds asserted above.
        unsafe {
            kern::kn_decode_tile(
                q[k0 * n + c0..].as_ptr(),
                scales[srow..].as_ptr(),
                n,
                kt,
                tile.as_mut_ptr(),
            )
        };
        return;
    }
    for (kk, line) in tile.chunks_exact_mut(KN_COLS).take(kt).enumerate() {
        let (row, srow) = ((k0 + kk) * n + c0, ((k0 + kk) / BLOCK) * n + c0);
        for (j, d) in line.iter_mut().enumerate() {
            *d = if j < w {
                e4m3_to_f32(q[row + j]) * e8m0_to_f32(scales[srow + j])
            } else {
                0.0
            };
        }
    }
}

/// `acc[r] += a[r, k0..k0+kt] · tile` for all m rows, in register blocks of up to 6 rows.
fn kn_rows(
    a: &[f32],
    m: usize,
    k: usize,
    k0: usize,
    kt: usize,
    tile: &[f32],
    acc: &mut [[__m256; 2]],
) {
    assert!(tile.len() >= kt * KN_COLS && acc.len() == m && a.len() >= m * k && k0 + kt <= k);
    let t = tile.as_ptr();
    for (g, block) in acc.chunks_mut(KN_ROWS).enumerate() {
        let ap = a[g * KN_ROWS * k + k0..].as_ptr();
        // SAFETY: AVX2 detected by the caller; the block's rows of a hold k0..k0+kt (asserted).
        unsafe {
            match block.len() {
                6 => kern::kn_tile_rows::<6>(ap, k, t, kt, first::<6, _>(block)),
                5 => kern::kn_tile_rows::<5>(ap, k, t, kt, first::<5, _>(block)),
                4 => kern::kn_tile_rows::<4>(ap, k, t, kt, first::<4, _>(block)),
                3 => kern::kn_tile_rows::<3>(ap, k, t, kt, first::<3, _>(block)),
                2 => kern::kn_tile_rows::<2>(ap, k, t, kt, first::<2, _>(block)),
                _ => kern::kn_tile_rows::<1>(ap, k, t, kt, first::<1, _>(block)),
            }
        }
    }
}

/// The block as a fixed-size array (its length was matched by the caller).
fn first<const R: usize, T>(block: &mut [T]) -> &mut [T; R] {
    block
        .first_chunk_mut::<R>()
        .expect("register block length matched by the caller")
}
