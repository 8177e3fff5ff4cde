//! Launchers of the weight-only `MxMatMul` (a float `a` times one MX weight, docs/ops.md): on
//! CUDA sm_90 with f16 / bf16 / f32 activations and a constant weight packed for the fragment GEMM
//! (`K % 128 == 0`), the tensor-core kernel of kernels/gpu/mx_matmul_frag_wo.hip; otherwise the
//! gathered GEMV of kernels/gpu/mx_gather.hip on one "expert" (`[N, K]` E4M3 rows: the CUDA-core
//! kernel that matched cuBLAS bf16 at M = 1 and fell behind it from M = 4, BENCHMARKS.md
//! session 21).

use super::error::GpuResult;
use super::gather::{check_broadcast, grid_dim, i64_of, GpuExperts, GpuGatherMatMul, GpuIndices};
use super::launch::{
    check_aligned, dim_i32, dim_u32, dtype_suffix, GpuEpilogue, GpuMatB, Params, StreamHandle,
};
use super::prefill::PrefillA;
use super::runtime::GpuRuntime;
use crate::codec::BLOCK;
use crate::element::DType;
use crate::error::KernelError;

/// Rows of the tensor-core kernel's tile (`MT = 2` tiles of 8).
const FRAG_WO_ROWS: usize = 16;

/// The grouped kernel's limits (`MX_GROUP_MAX_S`, `MX_GROUP_MAX_E` of mx_matmul_frag_wo.hip: the
/// samples' experts and the counts per expert live in shared memory).
const GROUP_MAX_SAMPLES: usize = 2048;
const GROUP_MAX_EXPERTS: usize = 1024;

/// Whether `MxGatherMatMul` groups its samples by expert on the device, and then the grid's
/// slots: an upper bound of the groups of up to 16 samples of one expert. Grouped: one row a
/// sample, an index a sample (not broadcast), the kernel's limits, and at least as many samples
/// as experts, unless `MXFUSE_GPU_GROUP=0` (or `off`). Why the last: a block's grouping
/// prologue (the indices, counts, a compaction) costs about 2 us of latency, so where the
/// samples rarely share an expert the per-sample kernel is faster (H200, 32 experts, top-8,
/// bf16: 8 / 16 samples grouped 24.9 / 44.7 against 22.5 / 43.5 us at K = 6144, 22.1 / 41.7
/// against 19.7 / 37.7 at K = 768; 32 samples 68.5 against 84.5 and 60.3 against 72.3,
/// 128 samples 98 against 333 and 87 against 282; BENCHMARKS.md session 22).
/// With `d <= min(E, S)` experts selected, `sum ceil(c_e / 16) <= (S + 15 d) / 16`, and never
/// more than `S`.
fn grouped_slots(mm: &GpuGatherMatMul, idx: &GpuIndices, e: usize) -> Option<usize> {
    let s = mm.samples;
    let on = env_switch!("MXFUSE_GPU_GROUP");
    (on && mm.p == 1
        && idx.count == s
        && s <= GROUP_MAX_SAMPLES
        && e <= GROUP_MAX_EXPERTS
        && s >= e.max(2))
    .then(|| s.min((s + 15 * e.min(s)) / 16).max(1))
}

/// The first arguments of both tensor-core `MxGatherMatMul` kernels: a, the packed experts, the
/// indices, y.
fn gather_params(mm: &GpuGatherMatMul, (wf, wsf): (u64, u64), idx: &GpuIndices) -> Params {
    Params::new()
        .push(mm.a)
        .push(wf)
        .push(wsf)
        .push(idx.ptr)
        .push(i32::from(idx.wide))
        .push(mm.y)
}

/// Longest K for which the grouped kernel takes 4 tiles a block (`_t4`).
const GROUP_SHORT_K: usize = 1024;

impl GpuRuntime {
    /// The weight-only `MxMatMul`: `y [M, N] = epilogue(a [M, K] · deq(w))` with a float `a`
    /// (`a_dtype`) and one MX weight `w` (`e = 1`; `[N, K]` when `w.nk`, else `[K, N]`; E4M3 or
    /// FLOAT4E2M1), y of `y_dtype`, the MxMatMul epilogue `ep` (a Gemm's alpha, beta, bias).
    #[allow(clippy::too_many_arguments)]
    pub fn mx_matmul_float_a(
        &self,
        (m, a, a_dtype): (usize, u64, DType),
        w: &GpuExperts,
        y: u64,
        y_dtype: DType,
        ep: &GpuEpilogue,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let (k, n) = (w.k, w.n);
        if k == 0 || !k.is_multiple_of(BLOCK) {
            return Err(KernelError::Shape(format!(
                "MxMatMul K = {k} must be a positive multiple of 32"
            ))
            .into());
        }
        if w.e != 1 {
            return Err(KernelError::Shape(format!("one weight, not {}", w.e)).into());
        }
        if m == 0 || n == 0 {
            return Ok(());
        }
        let (ta, to) = (dtype_suffix(a_dtype)?, dtype_suffix(y_dtype)?);
        check_aligned("a", a, 16)?;
        check_aligned("b", w.q, 16)?;
        check_aligned("b_scale", w.scales, 1)?;
        check_aligned("y", y, y_dtype.size() as u64)?;
        let epi = ep.params(m, n, y_dtype)?;
        let params = Params::new()
            .push(a)
            .push(w.q)
            .push(w.scales)
            .push(y)
            .push(dim_i32("M", m)?)
            .push(dim_i32("K", k)?)
            .push(dim_i32("N", n)?);
        i64_of("weight elements", n.saturating_mul(k))?;
        self.run_gemv(
            "mx_matmul_float_a_",
            (ta, to),
            w,
            (1, m),
            params,
            |q| q.push(epi),
            stream,
        )
    }

    /// Warps a block of the tensor-core kernels on a grid of `blocks`: fewer than two a
    /// multiprocessor split K over 8 warps, others over 4. All blocks count (column tiles times
    /// row tiles or samples or groups: counting the tiles alone gave a MoE step's 8 samples on
    /// 96 tiles 8 warps a block, 31 against 25 us on 4 at gate_up, session 22).
    fn frag_wo_warps(&self, blocks: usize) -> usize {
        if blocks < 2 * self.multiprocessors() {
            8
        } else {
            4
        }
    }

    /// The tensor-core kernels' 16-column tiles of `n` and warps a block
    /// ([`Self::frag_wo_warps`]) for `per_tile` blocks on each tile.
    fn frag_wo_grid(&self, n: usize, per_tile: usize) -> (usize, usize) {
        let tiles = n.div_ceil(16);
        (tiles, self.frag_wo_warps(tiles.saturating_mul(per_tile)))
    }

    /// Whether the tensor-core weight-only kernel serves an activation of `a_dtype` with output
    /// `y_dtype` at reduction length `k` (its weight then packed by
    /// [`super::pack::pack_frag_weights`]): CUDA sm_90+, `k % 128 == 0`, f16 `a` into f16 / f32,
    /// bf16 `a` into bf16 / f32, f32 `a` into f32 (split into three bf16 parts: exact products,
    /// BENCHMARKS.md session 22), unless `MXFUSE_GPU_FRAG_WO=0` (or `off`) keeps the CUDA-core
    /// GEMV.
    pub fn weight_only_frag_available(&self, k: usize, a_dtype: DType, y_dtype: DType) -> bool {
        self.frag_gemm_available(k)
            && matches!(
                (a_dtype, y_dtype),
                (DType::F16, DType::F16 | DType::F32)
                    | (DType::BF16, DType::BF16 | DType::F32)
                    | (DType::F32, DType::F32)
            )
            && env_switch!("MXFUSE_GPU_FRAG_WO")
    }

    /// `MxGatherMatMul` on tensor cores (kernels/gpu/mx_matmul_frag_wo.hip): the `e` experts
    /// `[N, K]` each packed by [`super::pack::pack_frag_weights`] and concatenated (`wf`, `wsf`),
    /// f16 / bf16 / f32 `a` (see [`GpuRuntime::weight_only_frag_available`]); otherwise as
    /// [`GpuRuntime::mx_gather_matmul`] (`mm`, `idx`, the error record `err`). `f16_shift`: the
    /// whole stack's [`super::pack::f16_weight_shift`] when the caller computed one (the MoE
    /// prefill route of f16 activations then takes one f16 GEMM an expert instead of two bf16
    /// ones).
    pub fn mx_gather_matmul_frag(
        &self,
        mm: &GpuGatherMatMul,
        (wf, wsf, e, n, k): (u64, u64, usize, usize, usize),
        f16_shift: Option<i32>,
        idx: GpuIndices,
        err: u64,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let s = mm.samples;
        if !self.weight_only_frag_available(k, mm.a_dtype, mm.y_dtype) {
            return Err(KernelError::Unsupported(format!(
                "the tensor-core MxGatherMatMul takes f16 / bf16 a (into its type or f32) or f32 a into f32 on CUDA sm_90+ with K a multiple of 128 (a {:?}, y {:?}, K = {k})",
                mm.a_dtype, mm.y_dtype
            ))
            .into());
        }
        check_broadcast(mm, &idx)?;
        if s == 0 || mm.p == 0 || n == 0 {
            return Ok(());
        }
        if e == 0 {
            return Err(KernelError::Shape("no experts to select from".into()).into());
        }
        let (ta, to) = (dtype_suffix(mm.a_dtype)?, dtype_suffix(mm.y_dtype)?);
        check_aligned("indices", idx.ptr, if idx.wide { 8 } else { 4 })?;
        check_aligned("a", mm.a, 16)?;
        check_aligned("b (fragment-packed)", wf, 16)?;
        check_aligned("b_scales (fragment-packed)", wsf, 4)?;
        check_aligned("y", mm.y, mm.y_dtype.size() as u64)?;
        check_aligned("err", err, 8)?;
        i64_of(
            "expert elements",
            e.saturating_mul(n.div_ceil(16) * 16).saturating_mul(k),
        )?;
        if self.gather_prefill_takes(mm, &idx, e)
            && self.mx_gather_matmul_prefill(mm, (wf, wsf, e, n, k), f16_shift, idx, stream)?
        {
            return Ok(());
        }
        if let Some(slots) = grouped_slots(mm, &idx, e) {
            return self.mx_gather_matmul_grouped(mm, (wf, wsf, e, n, k), idx, slots, err, stream);
        }
        let (tiles, w) = self.frag_wo_grid(n, s * mm.p.div_ceil(FRAG_WO_ROWS));
        let params = gather_params(mm, (wf, wsf), &idx)
            .push(dim_i32("P", mm.p)?)
            .push(dim_i32("N", n)?)
            .push(dim_i32("K", k)?)
            .push(dim_i32("E", e)?)
            .push(i32::from(mm.a_samples == 1))
            .push(i32::from(idx.count == 1))
            .push(err);
        let grid = [
            dim_u32("P / 16", mm.p.div_ceil(FRAG_WO_ROWS))?,
            grid_dim("N / 16", tiles)?,
            grid_dim("samples", s)?,
        ];
        let name = format!("mx_matmul_frag_wo_gather_{ta}_{to}_w{w}");
        self.run(&name, grid, 32 * w as u32, params, stream)
    }

    /// [`GpuRuntime::mx_gather_matmul_frag`] with the samples grouped by expert on the device
    /// (`mx_matmul_frag_wo_ggroup_*`): each selected expert's tile is read once per 16 of its
    /// samples; `slots` bounds the groups (grid x). Checked by the caller.
    fn mx_gather_matmul_grouped(
        &self,
        mm: &GpuGatherMatMul,
        (wf, wsf, e, n, k): (u64, u64, usize, usize, usize),
        idx: GpuIndices,
        slots: usize,
        err: u64,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let (ta, to) = (dtype_suffix(mm.a_dtype)?, dtype_suffix(mm.y_dtype)?);
        // Short K: 4 tiles a block, so the grouping prologue is paid once per 4 tiles.
        let (nt, sfx) = if k <= GROUP_SHORT_K {
            (4, "_t4")
        } else {
            (1, "")
        };
        let tiles = n.div_ceil(16 * nt);
        let w = self.frag_wo_warps(slots * tiles);
        let params = gather_params(mm, (wf, wsf), &idx)
            .push(dim_i32("S", mm.samples)?)
            .push(dim_i32("N", n)?)
            .push(dim_i32("K", k)?)
            .push(dim_i32("E", e)?)
            .push(i32::from(mm.a_samples == 1))
            .push(err);
        let grid = [grid_dim("groups", slots)?, grid_dim("N / 16", tiles)?, 1];
        let name = format!("mx_matmul_frag_wo_ggroup_{ta}_{to}_w{w}{sfx}");
        self.run(&name, grid, 32 * w as u32, params, stream)
    }

    /// The weight-only `MxMatMul` on tensor cores: `a [M, K]` f16 / bf16 / f32, the weight
    /// `(wf, wsf)` packed by [`super::pack::pack_frag_weights`] (`[N, K]` rows) with its
    /// [`super::pack::f16_weight_shift`] when the caller computed one (the prefill route of f16
    /// activations then takes one f16 GEMM instead of two bf16 ones), y of `y_dtype`, the
    /// epilogue `ep`. See [`GpuRuntime::weight_only_frag_available`].
    #[allow(clippy::too_many_arguments)]
    pub fn mx_matmul_float_a_frag(
        &self,
        (m, a, a_dtype): (usize, u64, DType),
        (wf, wsf, f16_shift): (u64, u64, Option<i32>),
        (n, k): (usize, usize),
        y: u64,
        y_dtype: DType,
        ep: &GpuEpilogue,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        if !self.frag_gemm_available(k) {
            return Err(KernelError::Unsupported(format!(
                "the tensor-core weight-only MxMatMul needs CUDA sm_90+ and K a multiple of 128 (K = {k})"
            ))
            .into());
        }
        let (ta, to) = (dtype_suffix(a_dtype)?, dtype_suffix(y_dtype)?);
        if !matches!(
            (a_dtype, y_dtype),
            (DType::F16, DType::F16 | DType::F32)
                | (DType::BF16, DType::BF16 | DType::F32)
                | (DType::F32, DType::F32)
        ) {
            return Err(KernelError::DType(format!(
                "the tensor-core weight-only MxMatMul takes f16 or bf16 a into its type or f32, or f32 a into f32, got {a_dtype:?} into {y_dtype:?}"
            ))
            .into());
        }
        if m == 0 || n == 0 {
            return Ok(());
        }
        let packed = GpuMatB::MxFrag {
            q: wf,
            scales: wsf,
            f16_shift,
        };
        // The prefill route: bf16 a as it is, f16 / f32 a as two / three exact bf16 parts.
        let route_a = match (a_dtype, f16_shift) {
            (DType::BF16, _) => PrefillA::Bf16(a),
            (DType::F16, Some(w_shift)) => PrefillA::F16Shifted { a, w_shift },
            (DType::F16, None) => PrefillA::F16(a),
            _ => PrefillA::F32(a),
        };
        // Checked before the route too: its split of f16 / f32 rows reads 16 bytes a lane.
        check_aligned("a", a, 16)?;
        check_aligned("b (fragment-packed)", wf, 16)?;
        check_aligned("b_scales (fragment-packed)", wsf, 4)?;
        check_aligned("y", y, y_dtype.size() as u64)?;
        if self.prefill_takes((m, k, n), route_a.table_dtype(), &packed, y_dtype, ep) {
            return self.prefill_product((m, k, n), route_a, &packed, y, y_dtype, ep, stream);
        }
        let epi = ep.params(m, n, y_dtype)?;
        let (tiles, w) = self.frag_wo_grid(n, m.div_ceil(FRAG_WO_ROWS));
        let params = Params::new()
            .push(a)
            .push(wf)
            .push(wsf)
            .push(y)
            .push(dim_i32("M", m)?)
            .push(dim_i32("N", n)?)
            .push(dim_i32("K", k)?)
            .push(epi);
        let grid = [
            dim_u32("M / 16", m.div_ceil(FRAG_WO_ROWS))?,
            grid_dim("N / 16", tiles)?,
            1,
        ];
        let name = format!("mx_matmul_frag_wo_{ta}_{to}_w{w}");
        self.run(&name, grid, 32 * w as u32, params, stream)
    }
}
