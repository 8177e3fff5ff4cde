//! Fast `MxMatMul`: A is dequantized to f32 once; B is dequantized a tile at a time into an
//! L1/L2-resident scratch and multiplied with f32 FMA accumulation. Parallel over N, so the
//! small-M decode GEMMs (M ≤ 16, weight-bandwidth bound) use every core.
//!
//! f32 accumulation order (not bit-specified by docs/ops.md): per output, 8 interleaved lanes
//! over k, summed horizontally at the end. [`mx_matmul_quantize_a`] runs the same code after
//! quantizing A, so it equals quantize → GEMM exactly.

use super::shared::SharedMut;
use super::{FastElement, Isa};
use crate::codec::{e4m3_to_f32, e8m0_to_f32, QuantConfig, BLOCK};
use crate::element::Element;
use crate::error::Result;
use crate::parallel::{for_row_chunks, Parallel};
use crate::slices::{check_matmul_io, MatB};

/// Rows of A processed together against one decoded B tile.
const M_BLOCK: usize = 16;
/// Columns of y per task unit: two B rows (`trans_b`) or a 32-wide stripe (not transposed).
const N_UNIT: usize = 32;
/// Below this many multiply-adds the GEMM stays on the calling thread.
const MIN_PARALLEL_MACS: usize = 1 << 21;

/// Dequantizes A (`m × k` E4M3 values with `m × k/32` scales) to f32.
fn dequantize_a(a_q: &[u8], a_scales: &[u8], k: usize) -> Vec<f32> {
    let kb = k / BLOCK;
    a_q.iter()
        .enumerate()
        .map(|(i, &b)| e4m3_to_f32(b) * e8m0_to_f32(a_scales[(i / k) * kb + (i % k) / BLOCK]))
        .collect()
}

/// Decodes B as a `cols × k` f32 tile (column `c` of the tile is output column `n0 + c`), i.e.
/// transposed when B is `[K, N]`. Uses AVX2 for MXFP8 `[N, K]` rows.
#[allow(clippy::too_many_arguments)]
fn decode_b_tile(
    isa: Isa,
    b: &MatB<'_>,
    k: usize,
    n: usize,
    trans_b: bool,
    n0: usize,
    cols: usize,
    tile: &mut [f32],
) {
    for c in 0..cols {
        let dst = &mut tile[c * k..(c + 1) * k];
        let nn = n0 + c;
        match (isa, b, trans_b) {
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx2, MatB::Mx { q, scales }, true) => {
                let kb = k / BLOCK;
                // SAFETY: Avx2 implies the CPU features; the row and its scales are in bounds
                // (checked by check_matmul_io).
                unsafe {
                    avx2_mm::decode_mx_row(
                        &q[nn * k..(nn + 1) * k],
                        &scales[nn * kb..(nn + 1) * kb],
                        dst,
                    )
                }
            }
            (_, MatB::F32(v), true) => dst.copy_from_slice(&v[nn * k..(nn + 1) * k]),
            _ => {
                for (kk, d) in dst.iter_mut().enumerate() {
                    *d = crate::reference::b_value(b, k, n, kk, nn, trans_b);
                }
            }
        }
    }
}

/// `MxMatMul`: `y [m, n] = Σ_k deq(a)[m, k] · deq(b)[k, n]` with f32 accumulation, rounded to O.
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
    par: &dyn Parallel,
) -> Result<()> {
    check_matmul_io(m, k, n, a_q, a_scales, &b, y.len())?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let isa = Isa::detect();
    let a = dequantize_a(a_q, a_scales, k);
    let units = n.div_ceil(N_UNIT);
    let macs_per_unit = m * k * N_UNIT;
    let y = SharedMut::new(y);
    for_row_chunks(
        par,
        units,
        MIN_PARALLEL_MACS.div_ceil(macs_per_unit),
        &|u0, u1| {
            let (n0, n1) = (u0 * N_UNIT, (u1 * N_UNIT).min(n));
            let mut tile = vec![0f32; N_UNIT * k];
            let mut acc = vec![0f32; M_BLOCK * N_UNIT];
            for nt in (n0..n1).step_by(N_UNIT) {
                let cols = N_UNIT.min(n1 - nt);
                decode_b_tile(isa, &b, k, n, trans_b, nt, cols, &mut tile);
                for m0 in (0..m).step_by(M_BLOCK) {
                    let rows = M_BLOCK.min(m - m0);
                    dot_tile(
                        isa,
                        &a[m0 * k..(m0 + rows) * k],
                        &tile[..cols * k],
                        k,
                        rows,
                        cols,
                        &mut acc,
                    );
                    for r in 0..rows {
                        // SAFETY: each task owns the columns n0..n1 of every row; elements written
                        // here are (m0 + r, nt..nt+cols), disjoint from other tasks.
                        let out = unsafe { y.piece((m0 + r) * n + nt, (m0 + r) * n + nt + cols) };
                        for (o, &v) in out.iter_mut().zip(&acc[r * cols..(r + 1) * cols]) {
                            *o = O::from_f32(v);
                        }
                    }
                }
            }
        },
    );
    Ok(())
}

/// `acc[r * cols + c] = Σ_k a[r, k] · tile[c, k]` for an A block of `rows` and `cols` B columns.
fn dot_tile(
    isa: Isa,
    a: &[f32],
    tile: &[f32],
    k: usize,
    rows: usize,
    cols: usize,
    acc: &mut [f32],
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Avx2 implies the CPU features; slices are rows×k and cols×k, k % 32 == 0.
        Isa::Avx2 => unsafe { avx2_mm::dot_tile(a, tile, k, rows, cols, acc) },
        _ => {
            for r in 0..rows {
                for c in 0..cols {
                    let (ar, bc) = (&a[r * k..(r + 1) * k], &tile[c * k..(c + 1) * k]);
                    let mut lanes = [0f32; 8];
                    for (i, (x, w)) in ar.iter().zip(bc).enumerate() {
                        lanes[i % 8] += x * w;
                    }
                    acc[r * cols + c] = lanes.iter().sum();
                }
            }
        }
    }
}

/// Quantizes the activation rows `x` (`m × k`) to MXFP8 and multiplies them with B — the
/// small-M "quantize inside the GEMM" path. Equals `mx_quantize` followed by [`mx_matmul`].
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
    par: &dyn Parallel,
) -> Result<()> {
    crate::slices::check_len("x", x.len(), m * k)?;
    crate::slices::check_block_multiple("K", k)?;
    let mut a_q = vec![0u8; m * k];
    let mut a_s = vec![0u8; m * k / BLOCK];
    super::quantize::mx_quantize(x, k, &mut a_q, &mut a_s, cfg, par)?;
    mx_matmul(&a_q, &a_s, m, k, n, b, trans_b, y, par)
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_op_in_unsafe_fn)]
mod avx2_mm {
    use std::arch::x86_64::*;

    use crate::codec::{e8m0_to_f32, BLOCK};

    /// Decodes 8 E4M3FN bytes to exact f32 lanes (NaN bytes → NaN).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn decode8(p: *const u8) -> __m256 {
        let b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i));
        let mag = _mm256_and_si256(b, _mm256_set1_epi32(0x7F));
        let sign = _mm256_slli_epi32::<24>(_mm256_and_si256(b, _mm256_set1_epi32(0x80)));
        // Exponent/mantissa moved to f32 positions give value·2^-120 exactly (subnormals as f32
        // subnormals), so one multiply by 2^120 restores the value.
        let raw = _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32::<20>(mag), sign));
        let v = _mm256_mul_ps(raw, _mm256_set1_ps(f32::from_bits((127 + 120) << 23)));
        let nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7F)));
        _mm256_blendv_ps(v, _mm256_set1_ps(f32::NAN), nan)
    }

    /// deq of one MXFP8 row: `dst[k] = e4m3(q[k]) · 2^(scale[k/32] - 127)`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn decode_mx_row(q: &[u8], scales: &[u8], dst: &mut [f32]) {
        for (blk, &s) in scales.iter().enumerate() {
            let sv = _mm256_set1_ps(e8m0_to_f32(s));
            for c in 0..BLOCK / 8 {
                let i = blk * BLOCK + 8 * c;
                let v = _mm256_mul_ps(decode8(q.as_ptr().add(i)), sv);
                _mm256_storeu_ps(dst.as_mut_ptr().add(i), v);
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
    }

    /// AVX2 `dot_tile`: 4 rows × 2 columns of accumulators share each load.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_tile(
        a: &[f32],
        tile: &[f32],
        k: usize,
        rows: usize,
        cols: usize,
        acc: &mut [f32],
    ) {
        let (ap, bp) = (a.as_ptr(), tile.as_ptr());
        let mut r = 0;
        while r < rows {
            let rn = (rows - r).min(4);
            let mut c = 0;
            while c < cols {
                let cn = (cols - c).min(2);
                let mut s = [[_mm256_setzero_ps(); 2]; 4];
                let mut kk = 0;
                while kk < k {
                    let b0 = _mm256_loadu_ps(bp.add(c * k + kk));
                    let b1 = if cn == 2 {
                        _mm256_loadu_ps(bp.add((c + 1) * k + kk))
                    } else {
                        b0
                    };
                    for (ri, sr) in s.iter_mut().enumerate().take(rn) {
                        let av = _mm256_loadu_ps(ap.add((r + ri) * k + kk));
                        sr[0] = _mm256_fmadd_ps(av, b0, sr[0]);
                        sr[1] = _mm256_fmadd_ps(av, b1, sr[1]);
                    }
                    kk += 8;
                }
                for (ri, sr) in s.iter().enumerate().take(rn) {
                    for (ci, v) in sr.iter().enumerate().take(cn) {
                        acc[(r + ri) * cols + c + ci] = hsum(*v);
                    }
                }
                c += 2;
            }
            r += 4;
        }
    }
}
