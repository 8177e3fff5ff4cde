//! Fast `MxMatMul`: A is dequantized to f32 once. MXFP8 weights on AVX2 (either layout) take the
//! register-blocked kernels of `matmul_mx`; float weights (and every B on the portable path) are
//! dequantized a tile at a time (two `[N, K]` rows × 256 k, or a 32-column × 256-k stripe of
//! `[K, N]`) into an L1 scratch and multiplied with 4×2 register tiles of f32 FMAs. Parallel over
//! output columns, so the weight-bandwidth-bound small-M GEMMs use every core.
//!
//! f32 accumulation order of the tile path (docs/ops.md leaves it open): per output and per
//! tile of K, 8 lanes over k summed horizontally, tiles added in k order (`matmul_mx` documents
//! its own). [`mx_matmul_quantize_a`] runs the same code after quantizing A, so it equals
//! quantize → GEMM exactly.

use super::shared::SharedMut;
use super::{FastElement, Isa};
use crate::codec::{e4m3_to_f32, e8m0_to_f32, QuantConfig, BLOCK};
use crate::element::Element;
use crate::epilogue::Epilogue;
use crate::error::Result;
use crate::parallel::{for_row_chunks, Parallel};
use crate::reference;
use crate::slices::{check_matmul_a_io, MatA, MatB};

/// Below this many multiply-adds the GEMM stays on the calling thread.
const MIN_PARALLEL_MACS: usize = 1 << 21;

/// How B is cut into decoded tiles: `cols` output columns × `kc` of K at a time, small enough
/// to stay in L1 with the matching 256-k slice of up to 16 A rows: two `[N, K]` rows (2 KiB),
/// or a 32-column stripe of `[K, N]` (32 KiB, so each B cache line is decoded once).
fn tiling(trans_b: bool, k: usize) -> (usize, usize) {
    if trans_b {
        (2, k.min(256))
    } else {
        (32, k.min(256))
    }
}

/// Decodes deq(B)[k0..k0+kc, n0..n0+cols] into `tile`, column-major (`tile[c * kc + kk]`).
#[allow(clippy::too_many_arguments)]
fn decode_b_tile(
    isa: Isa,
    b: &MatB<'_>,
    (k, n): (usize, usize),
    trans_b: bool,
    (n0, cols): (usize, usize),
    (k0, kc): (usize, usize),
    tile: &mut [f32],
) {
    if trans_b {
        for c in 0..cols {
            let (row, dst) = ((n0 + c) * k, &mut tile[c * kc..(c + 1) * kc]);
            match (isa, b) {
                #[cfg(target_arch = "x86_64")]
                (Isa::Avx2, MatB::Mx { q, scales }) => {
                    let kb = k / BLOCK;
                    let srow = (n0 + c) * kb + k0 / BLOCK;
                    // SAFETY: Avx2 implies the CPU features; k0 and kc are multiples of 32 and
                    // the ranges are in bounds (check_matmul_io).
                    unsafe {
                        super::avx2_mx::decode_mx_row(
                            &q[row + k0..row + k0 + kc],
                            &scales[srow..srow + kc / BLOCK],
                            dst,
                        )
                    }
                }
                (_, MatB::F32(v)) => dst.copy_from_slice(&v[row + k0..row + k0 + kc]),
                (_, MatB::F16(v)) => dst
                    .iter_mut()
                    .zip(&v[row + k0..row + k0 + kc])
                    .for_each(|(d, x)| *d = x.to_f32()),
                (_, MatB::BF16(v)) => dst
                    .iter_mut()
                    .zip(&v[row + k0..row + k0 + kc])
                    .for_each(|(d, x)| *d = x.to_f32()),
                _ => dst
                    .iter_mut()
                    .enumerate()
                    .for_each(|(kk, d)| *d = reference::b_value(b, k, n, k0 + kk, n0 + c, true)),
            }
        }
        return;
    }
    for kk in 0..kc {
        let row = (k0 + kk) * n + n0;
        let put = |c: usize, v: f32, tile: &mut [f32]| tile[c * kc + kk] = v;
        match b {
            MatB::F32(v) => v[row..row + cols]
                .iter()
                .enumerate()
                .for_each(|(c, &x)| put(c, x, tile)),
            MatB::F16(v) => v[row..row + cols]
                .iter()
                .enumerate()
                .for_each(|(c, x)| put(c, x.to_f32(), tile)),
            MatB::BF16(v) => v[row..row + cols]
                .iter()
                .enumerate()
                .for_each(|(c, x)| put(c, x.to_f32(), tile)),
            MatB::Mx { q, scales } => {
                let srow = ((k0 + kk) / BLOCK) * n + n0;
                for c in 0..cols {
                    put(
                        c,
                        e4m3_to_f32(q[row + c]) * e8m0_to_f32(scales[srow + c]),
                        tile,
                    );
                }
            }
        }
    }
}

/// `MxMatMul`: `y [m, n] = ep(Σ_k deq(a)[m, k] · deq(b)[k, n])` with f32 accumulation, the
/// epilogue (`alpha`, `beta`, bias) applied to each f32 sum as it is rounded to O.
#[allow(clippy::too_many_arguments)]
pub fn mx_matmul<O: Element>(
    a_q: &[u8],
    a_scales: &[u8],
    m: usize,
    k: usize,
    n: usize,
    b: MatB<'_>,
    trans_b: bool,
    y: &mut [O],
    ep: &Epilogue,
    par: &dyn Parallel,
) -> Result<()> {
    let a = MatA::Mx {
        q: a_q,
        scales: a_scales,
    };
    mx_matmul_a(a, m, k, n, b, trans_b, y, ep, par)
}

/// [`mx_matmul`] for either form of A: MXFP8 values + scales, or float rows (`y = ep(Σ_k
/// a[m, k] · deq(b)[k, n])`, the float values widened exactly to f32). Float A takes the same
/// kernels as deq(A); the AVX-512 BF16 routes only when every value of A is exactly a bf16
/// (`matmul_mx::bf16_a`, `matmul_cols`), so the products stay exact f32 products.
#[allow(clippy::too_many_arguments)]
pub fn mx_matmul_a<O: Element>(
    a_in: MatA<'_>,
    m: usize,
    k: usize,
    n: usize,
    b: MatB<'_>,
    trans_b: bool,
    y: &mut [O],
    ep: &Epilogue,
    par: &dyn Parallel,
) -> Result<()> {
    check_matmul_a_io(m, k, n, &a_in, &b, y.len())?;
    ep.check_dims(m, n)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let isa = Isa::detect();
    #[cfg(target_arch = "x86_64")]
    if let (Isa::Avx2, MatB::Mx { q, scales }) = (isa, b) {
        // A float A that is not bf16-exact runs as its bf16 parts (`float_a`) where the `[N, K]`
        // kernels would take a bf16 route (`[K, N]` runs f32 FMAs either way).
        let parts = |pa: MatA<'_>, rows: usize, sums: &mut [f32]| {
            mx_matmul_a(pa, rows, k, n, b, trans_b, sums, &Epilogue::default(), par)
        };
        if trans_b {
            if let Some(done) = super::float_a::run_split(a_in, m, k, n, y, ep, parts) {
                return done;
            }
        }
        let mx_a = matches!(a_in, MatA::Mx { .. });
        if mx_a && trans_b && m <= super::matmul_cols::MAX_M && super::cols_layout::wanted() {
            // Where constant weights are prepacked for the column-lane kernel, a weight that was
            // not (a runtime one) is packed per call and takes the same kernel: the same bits
            // whichever way the weight came. (The provider keeps a float A's weight `[N, K]`.)
            let (q, scales) = super::cols_layout::pack(q, scales, n, k);
            let w = super::cols_layout::MxColWeights {
                q: &q,
                scales: &scales,
                n,
                k,
            };
            super::matmul_cols::nk(a_in, m, w, y, ep, par);
        } else {
            let a = match a_in {
                MatA::Mx { q, scales } => super::matmul_mx::dequantize_a(q, scales, k),
                other => other.to_f32(m, k),
            };
            if trans_b {
                super::matmul_mx::nk(&a, m, k, n, q, scales, y, ep, par);
            } else {
                super::matmul_mx::kn(&a, m, k, n, q, scales, y, ep, par);
            }
        }
        return Ok(());
    }
    let a = a_in.to_f32(m, k);
    let (n_unit, kc) = tiling(trans_b, k);
    let units = n.div_ceil(n_unit);
    let y = SharedMut::new(y);
    for_row_chunks(
        par,
        units,
        MIN_PARALLEL_MACS.div_ceil(m * k * n_unit),
        &|u0, u1| {
            let mut tile = vec![0f32; n_unit * kc];
            let mut acc = vec![0f32; m * n_unit];
            for u in u0..u1 {
                let n0 = u * n_unit;
                let cols = n_unit.min(n - n0);
                acc.fill(0.0);
                for k0 in (0..k).step_by(kc) {
                    // The last K tile may be shorter (still a multiple of 32).
                    let kt = kc.min(k - k0);
                    decode_b_tile(isa, &b, (k, n), trans_b, (n0, cols), (k0, kt), &mut tile);
                    dot_tile(isa, &a, k, k0, &tile, kt, m, cols, &mut acc);
                }
                for (r, sums) in acc.chunks_exact_mut(cols).take(m).enumerate() {
                    ep.apply_row(r, n0, sums);
                    // SAFETY: each task owns the output columns of its units in every row, so the
                    // pieces (r, n0..n0+cols) of different tasks are disjoint.
                    let out = unsafe { y.piece(r * n + n0, r * n + n0 + cols) };
                    for (o, &v) in out.iter_mut().zip(sums.iter()) {
                        *o = O::from_f32(v);
                    }
                }
            }
        },
    );
    Ok(())
}

/// `acc[r * cols + c] += Σ_{kk < kc} a[r, k0 + kk] · tile[c * kc + kk]` for all `rows` of A
/// (row stride `lda`) and `cols` tile columns.
#[allow(clippy::too_many_arguments)]
fn dot_tile(
    isa: Isa,
    a: &[f32],
    lda: usize,
    k0: usize,
    tile: &[f32],
    kc: usize,
    rows: usize,
    cols: usize,
    acc: &mut [f32],
) {
    assert!(
        a.len() >= rows * lda
            && k0 + kc <= lda
            && tile.len() >= cols * kc
            && acc.len() >= rows * cols
    );
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Avx2 implies the CPU features; bounds asserted above, kc % 8 == 0.
        Isa::Avx2 => unsafe {
            avx2_mm::dot_tile(a.as_ptr().add(k0), lda, tile.as_ptr(), kc, rows, cols, acc)
        },
        _ => {
            for r in 0..rows {
                for c in 0..cols {
                    let (ar, bc) = (
                        &a[r * lda + k0..r * lda + k0 + kc],
                        &tile[c * kc..(c + 1) * kc],
                    );
                    let mut lanes = [0f32; 8];
                    for (i, (x, w)) in ar.iter().zip(bc).enumerate() {
                        lanes[i % 8] += x * w;
                    }
                    acc[r * cols + c] += lanes.iter().sum::<f32>();
                }
            }
        }
    }
}

/// Quantizes the activation rows `x` (`m × k`) to MXFP8 and multiplies them with B — the
/// small-M "quantize inside the GEMM" path. Equals `mx_quantize` followed by [`mx_matmul`]
/// (same epilogue).
#[allow(clippy::too_many_arguments)]
pub fn mx_matmul_quantize_a<T: FastElement, O: Element>(
    x: &[T],
    m: usize,
    k: usize,
    n: usize,
    b: MatB<'_>,
    trans_b: bool,
    cfg: QuantConfig,
    y: &mut [O],
    ep: &Epilogue,
    par: &dyn Parallel,
) -> Result<()> {
    crate::slices::check_len("x", x.len(), crate::slices::elems("A", m, k)?)?;
    crate::slices::check_block_multiple("K", k)?;
    let mut a_q = vec![0u8; m * k];
    let mut a_s = vec![0u8; m * k / BLOCK];
    super::quantize::mx_quantize(x, k, &mut a_q, &mut a_s, cfg, par)?;
    mx_matmul(&a_q, &a_s, m, k, n, b, trans_b, y, ep, par)
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_op_in_unsafe_fn)]
mod avx2_mm {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
    }

    /// One row against two columns: four independent accumulators (two per column, 16 k per
    /// step) so the FMA latency chain does not bound the small-M GEMV. `kc % 16 == 0`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dot_row_pair(a: *const f32, b0: *const f32, b1: *const f32, kc: usize) -> (f32, f32) {
        let z = _mm256_setzero_ps();
        let (mut s0a, mut s0b, mut s1a, mut s1b) = (z, z, z, z);
        for kk in (0..kc).step_by(16) {
            let (xa, xb) = (_mm256_loadu_ps(a.add(kk)), _mm256_loadu_ps(a.add(kk + 8)));
            s0a = _mm256_fmadd_ps(xa, _mm256_loadu_ps(b0.add(kk)), s0a);
            s0b = _mm256_fmadd_ps(xb, _mm256_loadu_ps(b0.add(kk + 8)), s0b);
            s1a = _mm256_fmadd_ps(xa, _mm256_loadu_ps(b1.add(kk)), s1a);
            s1b = _mm256_fmadd_ps(xb, _mm256_loadu_ps(b1.add(kk + 8)), s1b);
        }
        (hsum(_mm256_add_ps(s0a, s0b)), hsum(_mm256_add_ps(s1a, s1b)))
    }

    /// AVX2 `dot_tile`: 4 rows × 2 columns of register accumulators share each load.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_tile(
        a: *const f32,
        lda: usize,
        t: *const f32,
        kc: usize,
        rows: usize,
        cols: usize,
        acc: &mut [f32],
    ) {
        let full_r = rows - rows % 4;
        let full_c = cols - cols % 2;
        for r in (0..full_r).step_by(4) {
            let (a0, a1, a2, a3) = (
                a.add(r * lda),
                a.add((r + 1) * lda),
                a.add((r + 2) * lda),
                a.add((r + 3) * lda),
            );
            for c in (0..full_c).step_by(2) {
                let (b0p, b1p) = (t.add(c * kc), t.add((c + 1) * kc));
                let z = _mm256_setzero_ps();
                let (mut s00, mut s01, mut s10, mut s11) = (z, z, z, z);
                let (mut s20, mut s21, mut s30, mut s31) = (z, z, z, z);
                for kk in (0..kc).step_by(8) {
                    let (b0, b1) = (_mm256_loadu_ps(b0p.add(kk)), _mm256_loadu_ps(b1p.add(kk)));
                    let x = _mm256_loadu_ps(a0.add(kk));
                    s00 = _mm256_fmadd_ps(x, b0, s00);
                    s01 = _mm256_fmadd_ps(x, b1, s01);
                    let x = _mm256_loadu_ps(a1.add(kk));
                    s10 = _mm256_fmadd_ps(x, b0, s10);
                    s11 = _mm256_fmadd_ps(x, b1, s11);
                    let x = _mm256_loadu_ps(a2.add(kk));
                    s20 = _mm256_fmadd_ps(x, b0, s20);
                    s21 = _mm256_fmadd_ps(x, b1, s21);
                    let x = _mm256_loadu_ps(a3.add(kk));
                    s30 = _mm256_fmadd_ps(x, b0, s30);
                    s31 = _mm256_fmadd_ps(x, b1, s31);
                }
                for (i, s) in [s00, s01, s10, s11, s20, s21, s30, s31]
                    .into_iter()
                    .enumerate()
                {
                    acc[(r + i / 2) * cols + c + i % 2] += hsum(s);
                }
            }
        }
        // Edges: rows below full_r for every column (in pairs), and the last odd column. The
        // odd column reuses the pair kernel against itself and keeps the first result.
        for r in 0..rows {
            let c_start = if r < full_r { full_c } else { 0 };
            let ar = a.add(r * lda);
            let mut c = c_start;
            while c < cols {
                let b0 = t.add(c * kc);
                if c + 1 < cols {
                    let (x, y) = dot_row_pair(ar, b0, t.add((c + 1) * kc), kc);
                    acc[r * cols + c] += x;
                    acc[r * cols + c + 1] += y;
                    c += 2;
                } else {
                    acc[r * cols + c] += dot_row_pair(ar, b0, b0, kc).0;
                    c += 1;
                }
            }
        }
    }
}
