//! Driver of the column-lane MXFP8 GEMM (`avx512_cols`) over weights in the column-group layout
//! (`cols_layout`), M ≤ [`MAX_M`]: parallel over groups of 16 columns, each group one pass over
//! its weights per 8 rows of A (accumulators in registers over all of K). A group off the
//! kernel's route — a scale out of its range, a product that may not be a normal f32, a NaN
//! weight — is unpacked to `[N, K]` and computed by the row path (`matmul_mx::nk`) instead.
//!
//! Per call, before the groups: A is decoded, checked and packed to bf16 row by row on all
//! threads ([`prepare_a`]); the kernel itself reports each group's scale range and NaN weights,
//! which are checked after it ran (a group that fails is recomputed), so the scales are read
//! once, in the kernel's stream. Both replaced serial or extra passes that a profile of the
//! decoder step at M = 8 showed (BENCHMARKS.md, ONNX Runtime, "2026-12-01, session 14 (later)").
//!
//! f32 accumulation order (deterministic, the same for any thread count): per output, per 32-k
//! block the 16 `vdpbf16ps` pair products in k order from zero, then `total = fma(block,
//! 2^(s-127), total)`, blocks in k order.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use super::avx2::Lanes;
use super::avx2_mx::{decode_mx_row_to, MAX_FAST_SCALE};
use super::avx512_cols::{a_stride, nk_cols, pack_a_row};
use super::avx512_mx::{max_exponent, min_exponent, normal_products};
use super::cols_layout::{unpack, MxColWeights, GROUP};
use super::matmul_mx::{bf16_exact, store_block, MIN_TASK_MACS};
use super::shared::SharedMut;
use crate::codec::BLOCK;
use crate::element::Element;
use crate::epilogue::Epilogue;
use crate::parallel::{for_row_chunks, Parallel, Serial};
use crate::slices::MatA;
use half::{bf16, f16};

/// Largest M of this path (as `avx512_regs`: rows in groups of 8, each group a pass over the
/// column group's weights, which stay in L2 from the first pass: 16·K bytes).
pub const MAX_M: usize = 64;

/// Rows per kernel call: 8 accumulators per block and 8 totals in registers.
const ROWS: usize = 8;

/// Largest binary exponent of A on the kernel's route. The kernel sums each 32-k block of
/// *unscaled* products `a · e4m3(w)` (|e4m3| ≤ 448 < 2^9) before the block's factor 2^(s-127):
/// with |a| < 2^113 every partial block sum is below 32 · 2^122 = 2^127, so it cannot overflow
/// where `Σ a · deq(w)` does not (an A of ~2^127 against scales far below 127 gave ±Inf / NaN
/// for a finite product). Larger A (a float A, or deq(MXFP8 A) at scales ≥ 232) runs the row
/// path, whose weights are scaled before the products.
const MAX_A_EXP: i32 = 112;

/// `y = deq(A) · deq(W)ᵀ` (+ epilogue) for A (`m × w.k`: MX E4M3 values with `m × w.k/32`
/// scales, or float rows), m ≤ [`MAX_M`]. Float A that is not exactly bf16 runs every group on
/// the row path (exact f32 products). Caller: `avx512_bf16()` checked, A's length checked.
pub(super) fn nk<O: Element>(
    a_in: MatA<'_>,
    m: usize,
    w: MxColWeights<'_>,
    y: &mut [O],
    ep: &Epilogue,
    par: &dyn Parallel,
) {
    let (n, k) = (w.n, w.k);
    let kb = k / BLOCK;
    assert!(m <= MAX_M && y.len() == m * n);
    assert!(
        w.q.len() >= n.div_ceil(GROUP) * GROUP * k
            && w.scales.len() >= n.div_ceil(GROUP) * GROUP * kb
    );
    let (a, bf16_a, (min_exp, max_exp), exact) = prepare_a(a_in, m, k, par);
    let a = a.as_slice();
    let pa = (min_exp >= -126 && max_exp <= MAX_A_EXP && exact).then_some(bf16_a);
    let lda = a_stride(k);
    let y = SharedMut::new(y);
    for_row_chunks(
        par,
        n.div_ceil(GROUP),
        MIN_TASK_MACS.div_ceil(GROUP * m * k),
        &|g0, g1| {
            let mut vals = vec![[0f32; GROUP]; m];
            for g in g0..g1 {
                let (n0, cols) = (g * GROUP, GROUP.min(n - g * GROUP));
                let (gq, gs) = (
                    &w.q[g * GROUP * k..],
                    &w.scales[g * GROUP * kb..(g + 1) * GROUP * kb],
                );
                // The kernel runs first and reports the group's scale range: a separate scan
                // was the first read of the scales, waiting on DRAM (~3 % of a decoder step's
                // samples at M = 8); a group whose range fails the guards is recomputed.
                let done = pa
                    .as_ref()
                    .filter(|_| normal_products(min_exp, -9))
                    .is_some_and(|pa| {
                        let (mut lo, mut hi) = (u8::MAX, 0);
                        let ran = (0..m).step_by(ROWS).all(|r0| {
                            let rows = (m - r0).min(ROWS);
                            let ap = pa[r0 * lda..].as_ptr();
                            let gp = (gq.as_ptr(), gs.as_ptr());
                            let out = &mut vals[r0..r0 + rows];
                            // SAFETY: avx512_bf16() checked (caller); the group's 16·k bytes and
                            // 16·k/32 scales and the rows' k/2 pairs are in bounds (asserted).
                            let range = unsafe {
                                match rows {
                                    1 => run::<1>(ap, lda, k, gp, out),
                                    2 => run::<2>(ap, lda, k, gp, out),
                                    3 => run::<3>(ap, lda, k, gp, out),
                                    4 => run::<4>(ap, lda, k, gp, out),
                                    5 => run::<5>(ap, lda, k, gp, out),
                                    6 => run::<6>(ap, lda, k, gp, out),
                                    7 => run::<7>(ap, lda, k, gp, out),
                                    _ => run::<8>(ap, lda, k, gp, out),
                                }
                            };
                            range
                                .inspect(|&[l, h]| (lo, hi) = (lo.min(l), hi.max(h)))
                                .is_some()
                        });
                        // Scaled products (|w| ≥ 2^-9) normal, 2^(s-127) finite.
                        ran && hi <= MAX_FAST_SCALE && normal_products(min_exp, lo as i32 - 127 - 9)
                    });
                if !done {
                    off_route(a, m, k, w, (n0, cols), &mut vals);
                }
                store_group(&y, n, (n0, cols), &mut vals, ep);
            }
        },
    );
}

/// A for the kernel, in row chunks on `par`: A in f32 (deq(A) of MX values; float values
/// widened), read by groups off the route, its bf16 rows ([`pack_a_row`], `a_stride(k)` pairs
/// apart), its smallest and largest exponents ([`min_exponent`], [`max_exponent`]) and whether
/// every value is exactly a bf16 (always for MX A; the bf16 rows are only read when it
/// holds). Each row is decoded, scanned
/// and converted while it is in L1, and the chunks run on all threads: as
/// three serial passes over the whole of A on the calling thread (while the other threads
/// waited for the GEMM's tasks) this was ~40 µs per call at M = 8, K = 6144, ~5 % of a decoder
/// step's calling-thread samples. Same values, bit for bit, as the passes it replaces.
fn prepare_a(
    a_in: MatA<'_>,
    m: usize,
    k: usize,
    par: &dyn Parallel,
) -> (Vec<f32>, Vec<u32>, (i32, i32), bool) {
    let (kb, lda) = (k / BLOCK, a_stride(k));
    // f32 rows written into reserved memory (as `matmul_mx::dequantize_a`: no zero fill).
    let mut a = Vec::<f32>::with_capacity(m * k);
    let mut bf16 = Vec::<u32>::with_capacity(m * lda);
    let min_exp = AtomicI32::new(i32::MAX);
    let max_exp = AtomicI32::new(i32::MIN);
    let inexact = AtomicBool::new(false);
    {
        let a_rows = SharedMut::new(&mut a.spare_capacity_mut()[..m * k]);
        let bf16_rows = SharedMut::new(&mut bf16.spare_capacity_mut()[..m * lda]);
        let tasks = m.min(par.concurrency()).max(1);
        let per = m.div_ceil(tasks);
        par.for_each(tasks, &|t| {
            for r in t * per..((t + 1) * per).min(m) {
                // SAFETY: row r of each buffer belongs to this task only; the callers reach this
                // module with AVX-512 BF16 (and so AVX2) detected; a row holds k values and
                // k/32 scales, k % 32 == 0.
                unsafe {
                    let dst = a_rows.piece(r * k, (r + 1) * k);
                    match a_in {
                        MatA::Mx { q, scales } => decode_mx_row_to(
                            &q[r * k..(r + 1) * k],
                            &scales[r * kb..(r + 1) * kb],
                            dst.as_mut_ptr() as *mut f32,
                        ),
                        other => {
                            let mut row = vec![0f32; k];
                            other.row_f32(r, k, &mut row);
                            if !bf16_exact(&row) {
                                inexact.store(true, Ordering::Relaxed);
                            }
                            for (d, v) in dst.iter_mut().zip(row) {
                                d.write(v);
                            }
                        }
                    }
                    let row = std::slice::from_raw_parts(dst.as_ptr() as *const f32, k);
                    min_exp.fetch_min(min_exponent(row), Ordering::Relaxed);
                    max_exp.fetch_max(max_exponent(row), Ordering::Relaxed);
                    pack_a_row(row, bf16_rows.piece(r * lda, (r + 1) * lda));
                }
            }
        });
    }
    // SAFETY: every row 0..m of the m·k reserved floats and of the m·lda pairs was written
    // above (no zero fill: on the calling thread before the split it was the `memset` of ~5 % of
    // that thread's samples in a decoder step at M = 8).
    unsafe {
        a.set_len(m * k);
        bf16.set_len(m * lda);
    }
    let exps = (min_exp.into_inner(), max_exp.into_inner());
    (a, bf16, exps, !inexact.into_inner())
}

/// One kernel call for R rows into `out` (R rows of 16 sums): the group's scale range, `None`
/// on a NaN weight.
///
/// # Safety
/// As [`nk_cols`].
unsafe fn run<const R: usize>(
    a: *const u32,
    lda: usize,
    k: usize,
    (q, s): (*const u8, *const u8),
    out: &mut [[f32; GROUP]],
) -> Option<[u8; 2]> {
    let out = out.first_chunk_mut::<R>().expect("R rows");
    nk_cols::<R>((a, lda), k, (q, s), out)
}

/// Columns n0..n0+cols by the row path (`matmul_mx::nk`, exact deq of every block) on the
/// group unpacked to `[N, K]`; raw sums (the caller applies the epilogue).
fn off_route(
    a: &[f32],
    m: usize,
    k: usize,
    w: MxColWeights<'_>,
    (n0, cols): (usize, usize),
    vals: &mut [[f32; GROUP]],
) {
    let (q, s) = unpack(w.q, w.scales, k, (n0, cols));
    let mut sums = vec![0f32; m * cols];
    super::matmul_mx::nk(
        a,
        m,
        k,
        cols,
        &q,
        &s,
        &mut sums,
        &Epilogue::default(),
        &Serial,
    );
    for (v, row) in vals.iter_mut().zip(sums.chunks_exact(cols)) {
        v[..cols].copy_from_slice(row);
    }
}

/// `store_block` of one group's sums (epilogue, then rows of `y`), whole groups converted 8
/// lanes at a time ([`Lanes::store8`]: the same RNE, NaN quieting and overflow as
/// `Element::from_f32`, bit for bit). `store_block`'s per-element conversion, which the compiler
/// leaves scalar-ish for bf16 and f16, was ~4 % of a call at M = 8, K = 768 (one thread,
/// weights in cache; 128 outputs per 12 KiB group: BENCHMARKS.md 2026-12-01 (7)); a tail group
/// keeps it.
fn store_group<O: Element>(
    y: &SharedMut<O>,
    n: usize,
    (n0, cols): (usize, usize),
    vals: &mut [[f32; GROUP]],
    ep: &Epilogue,
) {
    use std::any::TypeId;
    let is = |t: TypeId| TypeId::of::<O>() == t;
    let store: unsafe fn(*mut O, &[f32; GROUP]) = match () {
        _ if cols != GROUP => return store_block(y, n, (n0, cols), vals, ep),
        _ if is(TypeId::of::<bf16>()) => store16::<bf16, O>,
        _ if is(TypeId::of::<f16>()) => store16::<f16, O>,
        _ if is(TypeId::of::<f32>()) => store16::<f32, O>,
        _ => return store_block(y, n, (n0, cols), vals, ep),
    };
    ep.apply_block(n0, cols, vals);
    for (r, v) in vals.iter().enumerate() {
        // SAFETY: each task owns its groups' columns in every row: disjoint pieces, 16 values;
        // AVX2 / FMA / F16C: this module runs on AVX-512 BF16 CPUs.
        unsafe { store(y.piece(r * n + n0, r * n + n0 + GROUP).as_mut_ptr(), v) };
    }
}

/// The 16 values `v` as `T` at `p`.
///
/// # Safety
/// AVX2, FMA and F16C; `O` is `T`; `p` is valid for 16 writes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn store16<T: Lanes, O>(p: *mut O, v: &[f32; GROUP]) {
    use std::arch::x86_64::_mm256_loadu_ps;
    let p = p as *mut T;
    T::store8(p, _mm256_loadu_ps(v.as_ptr()));
    T::store8(p.add(8), _mm256_loadu_ps(v.as_ptr().add(8)));
}
