//! `MxMatMul` at prefill sizes: both operands dequantized to bf16 once, then the vendor's bf16
//! GEMM ([`super::blas`]), then an exactness guard (kernels/gpu/mx_prefill.hip says why bf16
//! holds the values exactly and when the guard recomputes).
//!
//! Why: the decode GEMMs (mx_matmul_frag.hip) read a weight tile once per 16 activation rows, so
//! their time grows with M; from a few dozen rows the library's tiled GEMM is far faster even
//! after paying one dequantization pass over the weights (BENCHMARKS.md, "prefill"). Hopper has
//! no block-scaled MMA; this is what the hardware offers until then.
//!
//! Taken when all hold (else the decode kernels run, as before): NVIDIA with cuBLAS found; M at
//! least the device's [`PrefillTable`] row (`MXFUSE_GPU_PREFILL_MIN_M` overrides it,
//! `MXFUSE_GPU_PREFILL=0` turns the route off); weights `[N, K]` (fragment-packed or plain with
//! `trans_b`); bf16, f16 or f32 output; no bias, or a bias with `beta = 1`; every extent within
//! cuBLAS's `int`. Results: float order only against the reference (f32 accumulation of exact
//! products), not the decode kernels' bits. The weight-only `MxMatMul` takes it too: bf16
//! activations as they are, f16 ones as the sum of two bf16 parts and f32 ones of three (exact:
//! mx_prefill.hip says why), one bf16 GEMM a part accumulated in f32. An f16 output, which the
//! library's bf16 GEMM cannot write, is accumulated in f32 rows (at most [`F32_ROWS_BYTES`] at a
//! time) that a last kernel rounds to f16 with the epilogue — except where the weights carry an
//! f16 shift ([`GpuMatB::MxFrag`]'s `f16_shift`): then MXFP8 activations go to f16 as well and
//! one f16 GEMM writes the f16 output (BENCHMARKS.md, session 26: 1.9-2.1x the bf16 output's
//! time before at 6144 x 768).
//!
//! Scratch: one device buffer per runtime, grown on demand and kept (the flag words, the
//! activations' bf16 parts, `N × K` bf16 weights, the f32 rows), used under the runtime's
//! prefill lock so that concurrent callers on the one stream never share it in flight.

use std::sync::Mutex;

use super::blas::{Blas, BlasIn, BlasOut};
use super::driver::Backend;
use super::error::{GpuError, GpuResult};
use super::gather::grid_dim;
use super::launch::{
    check_aligned, dim_i32, dim_u32, dtype_suffix, GpuEpilogue, GpuMatB, Params, StreamHandle,
};
use super::runtime::GpuRuntime;
use super::thresholds::PrefillTable;
use crate::element::DType;

/// The prefill route's state in a [`GpuRuntime`]: the library (loaded at first use) and the
/// scratch buffer.
#[derive(Default)]
pub(super) struct PrefillState {
    /// `None` until first asked; then the library or why there is none.
    blas: Option<Result<Blas, String>>,
    /// Device address and size of the scratch (0, 0 before the first call).
    scratch: (u64, usize),
    /// Which of the two flag words at the scratch's start this call uses (the guard of each call
    /// clears the other, so that no launch is spent clearing one).
    parity: bool,
}

pub(super) type PrefillLock = Mutex<PrefillState>;

/// The activations of a prefill-route product.
#[derive(Debug, Clone, Copy)]
pub enum PrefillA {
    /// MXFP8: E4M3 values `[M, K]` + E8M0 scales `[M, K/32]` (dequantized to bf16 first).
    Mx { q: u64, scales: u64 },
    /// bf16 `[M, K]` (the weight-only `MxMatMul`), read by the library as they are.
    Bf16(u64),
    /// f16 `[M, K]` (the weight-only `MxMatMul` of an f16 graph): two bf16 parts.
    F16(u64),
    /// f16 `[M, K]` against weights whose every value times `2^w_shift` is an f16
    /// ([`super::pack::f16_weight_shift`]): read as it is by one f16 GEMM on the weights
    /// dequantized to f16 and scaled, the result scaled back by `2^-w_shift` (exact). A shift
    /// that does not fit the weights (stale, wrong) sets the guard's flag: slower, never wrong.
    F16Shifted { a: u64, w_shift: i32 },
    /// f32 `[M, K]` (the weight-only `MxMatMul` of an f32 graph): three bf16 parts.
    F32(u64),
}

// The kernels' activation modes (mx_prefill.hip `MX_PREFILL_A_*`).
const A_MX: i32 = 0;
pub(super) const A_BF16: i32 = 1;
const A_F16: i32 = 2;
const A_F32: i32 = 3;

impl PrefillA {
    /// The kernels' activation mode.
    fn mode(self) -> i32 {
        match self {
            PrefillA::Mx { .. } => A_MX,
            PrefillA::Bf16(_) => A_BF16,
            PrefillA::F16(_) | PrefillA::F16Shifted { .. } => A_F16,
            PrefillA::F32(_) => A_F32,
        }
    }

    /// The activation type whose [`PrefillTable`] row decides whether this product takes the
    /// route: E4M3 for MXFP8, else the float type, except f16 on f16 weights, which is one GEMM
    /// as bf16 is (bf16's row).
    pub fn table_dtype(self) -> DType {
        match self {
            PrefillA::Mx { .. } => DType::E4M3,
            PrefillA::Bf16(_) | PrefillA::F16Shifted { .. } => DType::BF16,
            PrefillA::F16(_) => DType::F16,
            PrefillA::F32(_) => DType::F32,
        }
    }
}

/// How many bf16 parts hold a float activation of `mode` exactly (one for MXFP8 and bf16).
pub(super) fn bf16_parts(mode: i32) -> usize {
    match mode {
        A_F16 => 2,
        A_F32 => 3,
        _ => 1,
    }
}

/// The activation mode of a float activation type (`None` for others).
pub(super) fn float_a_mode(a: DType) -> Option<i32> {
    match a {
        DType::BF16 => Some(A_BF16),
        DType::F16 => Some(A_F16),
        DType::F32 => Some(A_F32),
        _ => None,
    }
}

/// `2^-shift`, the GEMM's factor that undoes an f16 weight shift
/// ([`super::pack::f16_weight_shift`]); an error when it would not be a normal f32 (that function
/// keeps |shift| <= 126).
pub(super) fn f16_shift_alpha(shift: i32) -> GpuResult<f32> {
    if !(-126..=126).contains(&shift) {
        return Err(crate::KernelError::Unsupported(format!(
            "the f16 weight shift {shift} is out of range"
        ))
        .into());
    }
    Ok(2f32.powi(-shift))
}

/// Most bytes of f32 accumulator rows an f16 output takes at a time.
pub const F32_ROWS_BYTES: usize = 256 << 20;

/// The output type for [`Blas::gemm`] (bf16, f16, else f32).
pub(super) fn blas_out(out: DType) -> BlasOut {
    match out {
        DType::BF16 => BlasOut::Bf16,
        DType::F16 => BlasOut::F16,
        _ => BlasOut::F32,
    }
}

/// Threads per block of the dequantization and guard kernels.
const BLOCK: u32 = 256;

fn align(bytes: usize) -> usize {
    bytes.div_ceil(256) * 256
}

/// Grid and block of a row-by-column launch (mx_prefill.hip `mx_prefill_bias_*`,
/// `mx_prefill_finish_f16`): `threads` threads along a row (a warp at least, [`BLOCK`] a block at
/// most), one grid row per output row up to the grid's 65535 (the kernels step by it).
fn row_grid(rows: usize, threads: usize) -> GpuResult<([u32; 3], u32)> {
    let block = threads.next_multiple_of(32).clamp(32, BLOCK as usize);
    let grid = [
        dim_u32("grid", threads.div_ceil(block))?,
        grid_dim("rows", rows.clamp(1, 65535))?,
        1,
    ];
    Ok((grid, block as u32))
}

impl GpuRuntime {
    /// Whether `MxMatMul` of these operands takes the prefill route (the module docs list the
    /// conditions); `a` is the activations' type (E4M3 for MXFP8, else the weight-only
    /// product's float type). Loads cuBLAS at the first call that would.
    pub fn prefill_takes(
        &self,
        (m, k, n): (usize, usize, usize),
        a: DType,
        b: &GpuMatB,
        out: DType,
        ep: &GpuEpilogue,
    ) -> bool {
        static MIN_M: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
        let min_m = MIN_M
            .get_or_init(|| {
                std::env::var("MXFUSE_GPU_PREFILL_MIN_M")
                    .ok()
                    .and_then(|v| v.parse::<usize>().ok())
            })
            .unwrap_or_else(|| PrefillTable::for_arch(&self.device().arch).min_m(n, k, a));
        if m < min_m || self.backend() != Backend::Cuda {
            return false;
        }
        // Read at every call that gets this far (M >= min_m, where a call costs >= 10 µs), so
        // that a benchmark can time both routes in one process.
        let on = std::env::var("MXFUSE_GPU_PREFILL").map_or(true, |v| v != "0" && v != "off");
        let layout = matches!(
            b,
            GpuMatB::MxFrag { .. } | GpuMatB::Mx { trans_b: true, .. }
        );
        let fits = [m, n, k].iter().all(|&d| d <= i32::MAX as usize)
            && m.checked_mul(k).is_some_and(|e| e <= i32::MAX as usize * 2)
            && n.checked_mul(k).is_some_and(|e| e <= i32::MAX as usize * 2);
        let epilogue = ep.bias.is_none() || ep.beta == 1.0;
        if !(on
            && layout
            && matches!(out, DType::BF16 | DType::F16 | DType::F32)
            && epilogue
            && fits)
        {
            return false;
        }
        self.prefill_blas_available()
    }

    /// Whether cuBLAS is there (loading it at the first ask).
    pub(super) fn prefill_blas_available(&self) -> bool {
        let mut state = self.prefill_state();
        Self::blas_in(&mut state, self).is_some()
    }

    /// The scratch of at least `need` bytes (grown, after the device finished with the old one,
    /// with a quarter to spare; its first 8 bytes zero when new). Its first 256 bytes are the
    /// dense route's flag words, which other users of the scratch leave alone (a stale nonzero
    /// word would make the next dense call recompute exactly, slowly).
    pub(super) fn prefill_scratch(&self, state: &mut PrefillState, need: usize) -> GpuResult<u64> {
        if state.scratch.1 < need {
            // The old buffer may still be read by queued work: wait, then replace it.
            if state.scratch.1 > 0 {
                self.driver().synchronize()?;
                self.driver().free(state.scratch.0)?;
                state.scratch = (0, 0);
            }
            let bytes = need + need / 4;
            let ptr = self.driver().alloc(bytes)?;
            self.driver().copy_to_device(ptr, &[0u8; 8])?;
            state.scratch = (ptr, bytes);
            state.parity = false;
        }
        Ok(state.scratch.0)
    }

    pub(super) fn prefill_state(&self) -> std::sync::MutexGuard<'_, PrefillState> {
        self.prefill_lock()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The library, loading it at the first ask (one log line either way, `crate::log`).
    pub(super) fn blas_in<'s>(state: &'s mut PrefillState, rt: &GpuRuntime) -> Option<&'s Blas> {
        let loaded = state
            .blas
            .get_or_insert_with(|| match Blas::load(rt.driver()) {
                Ok(Ok(b)) => {
                    crate::log::info(&format!(
                        "mxfuse: prefill GEMMs through cuBLAS ({})",
                        b.path
                    ));
                    Ok(b)
                }
                Ok(Err(reason)) => {
                    crate::log::info(&format!(
                        "mxfuse: {reason}; prefill GEMMs take the decode kernels"
                    ));
                    Err(reason)
                }
                Err(e) => {
                    crate::log::warn(&format!(
                        "mxfuse: cuBLAS unusable ({e}); prefill GEMMs take the decode kernels"
                    ));
                    Err(e.to_string())
                }
            });
        loaded.as_ref().ok()
    }

    /// The prefill route, whatever M (`mx_matmul` takes it where [`GpuRuntime::prefill_takes`]
    /// says so; tests and benchmarks call it directly): dequantize a and b to bf16 into the
    /// scratch, fill y with the bias when there is one, the library's GEMM, then the guard
    /// kernel that recomputes exactly when a scale was out of the bf16-safe range. Errors when
    /// cuBLAS is missing or the operands are not the route's (module docs).
    #[allow(clippy::too_many_arguments)]
    pub fn mx_matmul_prefill(
        &self,
        (m, k, n): (usize, usize, usize),
        a_q: u64,
        a_scales: u64,
        b: &GpuMatB,
        y: u64,
        out: DType,
        ep: &GpuEpilogue,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let a = PrefillA::Mx {
            q: a_q,
            scales: a_scales,
        };
        self.prefill_product((m, k, n), a, b, y, out, ep, stream)
    }

    /// [`GpuRuntime::mx_matmul_prefill`] for any kind of activations.
    #[allow(clippy::too_many_arguments)]
    pub fn prefill_product(
        &self,
        (m, k, n): (usize, usize, usize),
        a: PrefillA,
        b: &GpuMatB,
        y: u64,
        out: DType,
        ep: &GpuEpilogue,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let o = dtype_suffix(out)?;
        if !matches!(out, DType::BF16 | DType::F16 | DType::F32)
            || !(ep.bias.is_none() || ep.beta == 1.0)
        {
            return Err(crate::KernelError::Unsupported(format!(
                "the prefill GEMM writes bf16, f16 or f32 with beta = 1 under a bias, not {out:?} with beta = {}",
                ep.beta
            ))
            .into());
        }
        if m == 0 || n == 0 {
            return Ok(());
        }
        let epi = ep.params(m, n, out)?;
        let (wq, ws, wmode) = match *b {
            GpuMatB::MxFrag { q, scales, .. } => (q, scales, 1i32),
            GpuMatB::Mx {
                q,
                scales,
                trans_b: true,
            } => (q, scales, 0),
            _ => {
                return Err(GpuError::Kernel(crate::KernelError::Unsupported(
                    "the prefill GEMM takes [N, K] MX weights".into(),
                )))
            }
        };
        let amode = a.mode();
        // f16 a on f16 weights: one part read as it is, the weights to f16 times 2^shift.
        // MXFP8 a into an f16 output on weights with a shift: both operands dequantized to f16
        // (a unshifted: exact for scale bytes 112 ..= 134, blocks of amax 2^-7 .. 2^16, which
        // is every float16 activation but tiny blocks; others set the guard) and one f16 GEMM
        // writes y, instead of a bf16 GEMM into f32 rows that a last kernel rounds.
        let (parts, in_place, w_f16) = match (a, *b) {
            (PrefillA::F16Shifted { w_shift, .. }, _) => (1, true, Some(w_shift)),
            (
                PrefillA::Mx { .. },
                GpuMatB::MxFrag {
                    f16_shift: Some(c), ..
                },
            ) if out == DType::F16 => (1, false, Some(c)),
            _ => (bf16_parts(amode), amode == A_BF16, None),
        };
        let (input, alpha) = match w_f16 {
            Some(c) => (BlasIn::F16, ep.alpha * f16_shift_alpha(c)?),
            None => (BlasIn::Bf16, ep.alpha),
        };
        // (a's values, a's scales); bf16 a is read in place, the others prepared in the scratch.
        let (a_q, a_scales) = match a {
            PrefillA::Mx { q, scales } => (q, scales),
            PrefillA::Bf16(p)
            | PrefillA::F16(p)
            | PrefillA::F32(p)
            | PrefillA::F16Shifted { a: p, .. } => (p, 0),
        };
        if parts > 1 {
            // The split reads 16 bytes a lane.
            check_aligned("a", a_q, 16)?;
        }
        let a_bytes = if in_place {
            0
        } else {
            align(parts * m * k * 2)
        };
        // f16 out of bf16 GEMMs: f32 accumulator rows, then the epilogue's kernel.
        let via_rows = out == DType::F16 && w_f16.is_none();
        let rows_at_once = if via_rows {
            m.min((F32_ROWS_BYTES / (n * 4)).max(1))
        } else {
            0
        };
        let (w_bytes, t_bytes) = (align(n * k * 2), align(rows_at_once * n * 4));
        let mut state = self.prefill_state();
        let base = self.prefill_scratch(&mut state, 256 + a_bytes + w_bytes + t_bytes)?;
        let (flag, next_flag) = if state.parity {
            (base + 4, base)
        } else {
            (base, base + 4)
        };
        state.parity = !state.parity;
        let a16 = if in_place { a_q } else { base + 256 };
        let w16 = base + 256 + a_bytes as u64;
        let t = w16 + w_bytes as u64;
        let sms = self.multiprocessors();
        let blocks = |threads: usize| threads.div_ceil(BLOCK as usize).clamp(1, sms * 8);
        let grid = |threads: usize| -> GpuResult<[u32; 3]> {
            Ok([dim_u32("grid", blocks(threads))?, 1, 1])
        };
        let kk = dim_i32("K", k)?;
        // One launch prepares both: the activations' blocks first (none for a read in place),
        // then the weights'.
        let blocks_a = if in_place { 0 } else { blocks(m * k / 8) };
        let w_threads = if wmode == 1 {
            n.div_ceil(16) * k
        } else {
            n * k / 8
        };
        let p = Params::new()
            .push(a_q)
            .push(a_scales)
            .push(a16)
            .push(m as i64)
            .push(wq)
            .push(ws)
            .push(w16)
            .push(dim_i32("N", n)?)
            .push(wmode)
            .push(kk)
            .push(dim_i32("grid", blocks_a)?)
            .push(amode)
            .push(i32::from(w_f16.is_some()))
            .push(w_f16.unwrap_or(0))
            .push(flag);
        let total = dim_u32("grid", blocks_a + blocks(w_threads))?;
        self.run("mx_prefill_dequant", [total, 1, 1], BLOCK, p, stream)?;
        let part = |p: usize, row: usize| a16 + ((p * m + row) * k * 2) as u64;
        if via_rows {
            for m0 in (0..m).step_by(rows_at_once) {
                let rows = rows_at_once.min(m - m0);
                // The parts from the smallest: t = Σ_p a_p · w, then y = f16(epilogue(t)).
                for p in (0..parts).rev() {
                    let beta = if p + 1 < parts { 1.0 } else { 0.0 };
                    self.prefill_gemm(
                        &mut state,
                        (rows, n, k),
                        1.0,
                        (part(p, m0), w16),
                        beta,
                        t,
                        (BlasIn::Bf16, BlasOut::F32),
                        stream,
                    )?;
                }
                let p = Params::new()
                    .push(t)
                    .push(m0 as i64)
                    .push(rows as i64)
                    .push(dim_i32("N", n)?)
                    .push(y)
                    .push(epi);
                // (via_rows: out is f16.) Two columns a thread.
                let (g, block) = row_grid(rows, n.div_ceil(2))?;
                self.run("mx_prefill_finish_f16", g, block, p, stream)?;
            }
        } else {
            let biased = ep.bias.is_some();
            if biased {
                let p = Params::new()
                    .push(y)
                    .push(m as i64)
                    .push(dim_i32("N", n)?)
                    .push(epi);
                let (g, block) = row_grid(m, n)?;
                self.run(&format!("mx_prefill_bias_{o}"), g, block, p, stream)?;
            }
            // y = c + Σ_p alpha a_p · w, the parts from the smallest.
            for p in (0..parts).rev() {
                let beta = if biased || p + 1 < parts { 1.0 } else { 0.0 };
                self.prefill_gemm(
                    &mut state,
                    (m, n, k),
                    alpha,
                    (part(p, 0), w16),
                    beta,
                    y,
                    (input, blas_out(out)),
                    stream,
                )?;
            }
        }
        let p = Params::new()
            .push(flag)
            .push(next_flag)
            .push(amode)
            .push(a_q)
            .push(a_scales)
            .push(wq)
            .push(ws)
            .push(wmode)
            .push(y)
            .push(m as i64)
            .push(dim_i32("N", n)?)
            .push(kk)
            .push(epi);
        self.run(
            &format!("mx_prefill_exact_{o}"),
            grid(m * n)?,
            BLOCK,
            p,
            stream,
        )
    }

    /// One library GEMM `y[m, n] = alpha Σ_k a[m, k] · b[n, k] + beta y[m, n]` of bf16 or f16
    /// `a`, `b` (f32 accumulation) on `stream`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn prefill_gemm(
        &self,
        state: &mut PrefillState,
        (m, n, k): (usize, usize, usize),
        alpha: f32,
        (a, b): (u64, u64),
        beta: f32,
        y: u64,
        types: (BlasIn, BlasOut),
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let blas = Self::blas_in(state, self).ok_or_else(|| {
            crate::KernelError::Unsupported("the prefill GEMM needs cuBLAS".into())
        })?;
        let dims = (dim_i32("M", m)?, dim_i32("N", n)?, dim_i32("K", k)?);
        self.driver().make_current()?;
        // SAFETY: the callers pass device buffers of these extents (a: m × k, b: n × k bf16, y:
        // m × n of `out`) on this runtime's device and stream.
        unsafe { blas.gemm(dims, alpha, (a, b), beta, y, types, stream) }
    }

    /// The vendor's bf16 GEMM alone, `y[m, n] = Σ_k a[m, k] · b[n, k]` (bf16 `a`, `b`; bf16 or
    /// f32 `y`): the baseline the prefill benchmark measures the route against.
    #[allow(clippy::too_many_arguments)]
    pub fn vendor_gemm_bf16(
        &self,
        (m, k, n): (usize, usize, usize),
        a: u64,
        b: u64,
        y: u64,
        out: DType,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let mut state = self.prefill_state();
        self.prefill_gemm(
            &mut state,
            (m, n, k),
            1.0,
            (a, b),
            0.0,
            y,
            (BlasIn::Bf16, blas_out(out)),
            stream,
        )
    }

    /// Frees the prefill scratch (the runtime's drop).
    pub(super) fn free_prefill_scratch(&self) {
        let state = self.prefill_state();
        if state.scratch.1 > 0 {
            let _ = self.driver().synchronize();
            let _ = self.driver().free(state.scratch.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_grid_covers_every_column_and_strides_past_65535_rows() {
        // 6144 f16 columns, two a thread: 3072 threads, 12 blocks of 256, a grid row per row.
        assert_eq!(row_grid(2048, 3072).unwrap(), ([12, 2048, 1], 256));
        assert_eq!(row_grid(3, 257).unwrap(), ([2, 3, 1], 256));
        // Narrow rows: a warp-rounded block; more rows than the grid's y: the kernels step.
        assert_eq!(row_grid(100_000, 40).unwrap(), ([1, 65535, 1], 64));
        assert_eq!(row_grid(1, 1).unwrap(), ([1, 1, 1], 32));
    }

    #[test]
    fn f16_shift_alpha_is_an_exact_power_of_two_within_range() {
        assert_eq!(f16_shift_alpha(6).unwrap(), 1.0 / 64.0);
        assert_eq!(f16_shift_alpha(-126).unwrap(), 2f32.powi(126));
        assert_eq!(f16_shift_alpha(126).unwrap(), f32::MIN_POSITIVE);
        assert!(f16_shift_alpha(127).is_err() && f16_shift_alpha(-127).is_err());
    }
}
