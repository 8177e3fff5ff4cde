//! `MxGatherMatMul` at prefill sizes: the prefill route of [`super::prefill`] for stacked MoE
//! experts. The tensor-core gather kernels read an expert once per sample (or, grouped, once per
//! 16 of its samples, for at most 2048 samples), so a prompt of a few hundred tokens re-reads
//! every expert hundreds of times. Here the samples are sorted by expert on the device, each
//! selected expert is dequantized to bf16 once and multiplied by all its rows in one cuBLAS
//! GEMM, and the rows go back to their samples.
//!
//! Steps (kernels/gpu/mx_prefill.hip `mx_prefill_moe_*`): count the samples per expert; read
//! the counts on the host (one synchronization: the library's GEMMs need their row counts on
//! the host); from the exclusive scan, each sample takes a row of its expert's range and its
//! activation row goes there (bf16 copied; f16 / f32 as two / three bf16 parts, exact, as the
//! dense route splits them); the selected experts are dequantized to bf16 in chunks of at most
//! [`CHUNK_BYTES`] and multiplied, one GEMM a part accumulated in f32 (bf16 out: straight to
//! bf16); the output rows go back to their samples (f16: rounded from the f32 rows). A
//! sample's output depends only on its own row and expert, so the order of rows within an
//! expert (atomics) does not change any result.
//!
//! f16 activations on a stack whose [`super::pack::f16_weight_shift`] the caller computed (one
//! shift for all the experts; the plugin EP computes it when it packs them) take one f16 GEMM an
//! expert instead of two bf16 parts, as the dense route's `PrefillA::F16Shifted`: the rows copied
//! as they are, the experts dequantized to f16 times `2^shift`, `alpha = 2^-shift` (exact), f16 or
//! f32 rows straight from the library.
//!
//! Taken (`mx_gather_matmul_frag` asks [`GpuRuntime::gather_prefill_takes`]) when: NVIDIA with
//! cuBLAS; bf16 or f16 activations into their type or f32, or f32 activations into f32; one row and
//! one index a sample (a MoE layer's dispatch); more samples than the grouped kernel takes (`MXFUSE_GPU_PREFILL_MOE_MIN_S`
//! overrides the count, `MXFUSE_GPU_PREFILL=0` turns the route off). Not taken, and the kernels
//! run as before (they also record an index out of range as the op's error), when an index is
//! out of range or an expert's scale leaves the bf16-safe range, or with a shift a block leaves
//! f16's exact range after it (a stale or wrong shift: mx_prefill.hip; the kernels then recompute
//! every output exactly).

use super::blas::{BlasIn, BlasOut};
use super::error::GpuResult;
use super::gather::{GpuGatherMatMul, GpuIndices};
use super::launch::{dim_i32, dim_u32, Params, StreamHandle};
use super::prefill::{bf16_parts, f16_shift_alpha, float_a_mode, A_BF16};
use super::runtime::GpuRuntime;
use crate::element::DType;

/// Most bytes of bf16 experts dequantized at a time (the scratch grows by at most this for them).
pub const CHUNK_BYTES: usize = 512 << 20;

/// The grouped tensor-core kernel's sample limit (weight_only.rs `GROUP_MAX_SAMPLES`): below it
/// that kernel serves MoE steps well, above it the route starts by default.
const DEFAULT_MIN_SAMPLES: usize = 2049;

fn align(bytes: usize) -> usize {
    bytes.div_ceil(256) * 256
}

impl GpuRuntime {
    /// Whether `MxGatherMatMul` of `mm` on `e` fragment-packed experts `[N, K]` takes the MoE
    /// prefill route (module docs); loads cuBLAS at the first call that would.
    pub fn gather_prefill_takes(&self, mm: &GpuGatherMatMul, idx: &GpuIndices, e: usize) -> bool {
        static MIN_S: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let min_s = *MIN_S.get_or_init(|| {
            std::env::var("MXFUSE_GPU_PREFILL_MOE_MIN_S")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_MIN_SAMPLES)
        });
        let s = mm.samples;
        // bf16 / f16 a into their type or f32; f32 a into f32 (the weight-only kernels' types).
        let types = matches!(
            (mm.a_dtype, mm.y_dtype),
            (DType::BF16, DType::BF16 | DType::F32)
                | (DType::F16, DType::F16 | DType::F32)
                | (DType::F32, DType::F32)
        );
        if s < min_s
            || e == 0
            || !types
            || mm.p != 1
            || mm.a_samples != s
            || idx.count != s
            || s > u32::MAX as usize
        {
            return false;
        }
        // Read per call past the cheap checks (a benchmark times both routes in one process).
        let on = std::env::var("MXFUSE_GPU_PREFILL").map_or(true, |v| v != "0" && v != "off");
        on && self.prefill_blas_available()
    }

    /// The MoE prefill route for `mm` (one float row and one index a sample) on the `e`
    /// fragment-packed experts `(wf, wsf)` of `[N, K]`, with the whole stack's
    /// [`super::pack::f16_weight_shift`] when the caller computed one (f16 activations then take
    /// one f16 GEMM an expert instead of two bf16 ones; other types ignore it). `Ok(false)` when
    /// it did not produce the result (an index out of range, an out-of-range scale, a shift that
    /// does not fit the experts): the caller runs the kernels.
    pub fn mx_gather_matmul_prefill(
        &self,
        mm: &GpuGatherMatMul,
        (wf, wsf, e, n, k): (u64, u64, usize, usize, usize),
        f16_shift: Option<i32>,
        idx: GpuIndices,
        stream: StreamHandle,
    ) -> GpuResult<bool> {
        let s = mm.samples;
        if s == 0 || n == 0 {
            return Ok(true);
        }
        let amode = float_a_mode(mm.a_dtype).ok_or_else(|| {
            crate::KernelError::DType(format!(
                "the MoE prefill route reads float activations, not {:?}",
                mm.a_dtype
            ))
        })?;
        // f16 a on f16 experts: one part copied as it is (the scatter's 16-bit copy), the experts
        // to f16 times 2^shift, one f16 GEMM an expert scaled back by 2^-shift (exact), as the
        // dense route's `PrefillA::F16Shifted` (f16 or f32 out, the types the route takes f16 a
        // into).
        let w_shift = f16_shift
            .filter(|_| mm.a_dtype == DType::F16 && matches!(mm.y_dtype, DType::F16 | DType::F32));
        let (parts, scatter_mode, input, alpha) = match w_shift {
            Some(c) => (1, A_BF16, BlasIn::F16, f16_shift_alpha(c)?),
            None => (bf16_parts(amode), amode, BlasIn::Bf16, 1.0),
        };
        // The GEMMs' output rows t: y's type where the library writes it (bf16 out of one bf16
        // part, f16 out of the f16 GEMM), else f32 accumulators.
        let (t_out, tbytes) = match (mm.y_dtype, w_shift) {
            (DType::BF16, _) => (BlasOut::Bf16, 2),
            (DType::F16, Some(_)) => (BlasOut::F16, 2),
            _ => (BlasOut::F32, 4),
        };
        let ebytes = n * k * 2;
        let chunk = (CHUNK_BYTES / ebytes).clamp(1, e);
        let (counts_b, perm_b) = (align((e + 2) * 4), align(s * 4));
        let (a_b, t_b, ids_b) = (
            align(parts * s * k * 2),
            align(s * n * tbytes),
            align(e * 4),
        );
        // After the dense route's flag words (its first 256 bytes), which must stay as they are.
        let need = 256 + counts_b + perm_b + a_b + t_b + ids_b + chunk * ebytes;
        let mut state = self.prefill_state();
        let counts = self.prefill_scratch(&mut state, need)? + 256;
        let perm = counts + counts_b as u64;
        let a16 = perm + perm_b as u64;
        let t = a16 + a_b as u64;
        let ids = t + t_b as u64;
        let w16 = ids + ids_b as u64;
        let flag = counts + 4 * (e as u64 + 1);
        let (ee, kk, nn) = (dim_i32("E", e)?, dim_i32("K", k)?, dim_i32("N", n)?);
        let driver = self.driver();
        driver.memset_d32_async(counts, 0, e + 2, stream)?;
        let p = Params::new()
            .push(idx.ptr)
            .push(i32::from(idx.wide))
            .push(s as i64)
            .push(ee)
            .push(counts);
        let blocks = dim_u32("grid", s.div_ceil(256).min(1024))?;
        self.run("mx_prefill_moe_count", [blocks, 1, 1], 256, p, stream)?;
        // The library's GEMMs need the row counts here.
        driver.synchronize()?;
        let mut host = vec![0u8; (e + 1) * 4];
        driver.copy_to_host(&mut host, counts)?;
        let count: Vec<u32> = host
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if count[e] != 0 {
            return Ok(false); // an index out of range: the kernels record it
        }
        let mut offsets = Vec::with_capacity(e);
        let mut acc = 0u32;
        for &c in &count[..e] {
            offsets.push(acc);
            acc += c;
        }
        let used: Vec<u32> = (0..e as u32).filter(|&x| count[x as usize] > 0).collect();
        let le = |v: &[u32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        driver.copy_to_device(counts, &le(&offsets))?;
        driver.copy_to_device(ids, &le(&used))?;
        let p = Params::new()
            .push(idx.ptr)
            .push(i32::from(idx.wide))
            .push(ee)
            .push(counts)
            .push(perm)
            .push(mm.a)
            .push(a16)
            .push(kk)
            .push(scatter_mode)
            .push((s * k) as i64);
        self.run(
            "mx_prefill_moe_scatter",
            [dim_u32("samples", s)?, 1, 1],
            128,
            p,
            stream,
        )?;
        let sms = self.multiprocessors();
        let dq_blocks = dim_u32("grid", (n.div_ceil(16) * k).div_ceil(256).clamp(1, sms * 8))?;
        for (c, group) in used.chunks(chunk).enumerate() {
            let p = Params::new()
                .push(wf)
                .push(wsf)
                .push(ids + (4 * c * chunk) as u64)
                .push(dim_i32("experts", group.len())?)
                .push(w16)
                .push(nn)
                .push(kk)
                .push(i32::from(w_shift.is_some()))
                .push(w_shift.unwrap_or(0))
                .push(flag);
            self.run(
                "mx_prefill_dequant_experts",
                [dq_blocks, 1, 1],
                256,
                p,
                stream,
            )?;
            for (slot, &x) in group.iter().enumerate() {
                let (rows, off) = (count[x as usize] as usize, offsets[x as usize] as usize);
                // The parts from the smallest, accumulated in t's rows [off, off + rows).
                for p in (0..parts).rev() {
                    let beta = if p + 1 < parts { 1.0 } else { 0.0 };
                    let a_rows = a16 + ((p * s + off) * k * 2) as u64;
                    let w = w16 + (slot * ebytes) as u64;
                    let t_rows = t + (off * n * tbytes) as u64;
                    self.prefill_gemm(
                        &mut state,
                        (rows, n, k),
                        alpha,
                        (a_rows, w),
                        beta,
                        t_rows,
                        (input, t_out),
                        stream,
                    )?;
                }
            }
        }
        let p = Params::new()
            .push(perm)
            .push(t)
            .push(mm.y)
            .push(nn)
            .push(tbytes as i32)
            .push(i32::from(mm.y_dtype == DType::F16 && t_out == BlasOut::F32));
        self.run(
            "mx_prefill_moe_unpermute",
            [dim_u32("samples", s)?, 1, 1],
            128,
            p,
            stream,
        )?;
        driver.synchronize()?;
        let mut f = [0u8; 4];
        driver.copy_to_host(&mut f, flag)?;
        // An out-of-range scale (or a shift that does not fit the experts): the library may lose
        // products of such weights; the kernels recompute.
        Ok(u32::from_le_bytes(f) == 0)
    }
}
