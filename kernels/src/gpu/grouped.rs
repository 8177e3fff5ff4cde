//! One launch of the fragment-packed decode GEMM for the several consumers of one MXFP8
//! activation (q / k / v projections, gate / up): their constant weights packed one after
//! another, tile after tile ([`pack_frag_group`]), and the kernels of mx_matmul_frag.hip with the
//! segment table of kernels/gpu/mx_matmul_frag_grouped.hip. Why: a decode step's launches are
//! host-bound (2.2-3.4 µs of driver time each on the H200 hosts, BENCHMARKS.md session 27), and a
//! small N alone (k / v: 256 columns, 16 tiles) leaves most SMs idle, where the group's tiles fill
//! them.
//!
//! Each tile's arithmetic is the single-weight kernel's at the grid the whole group's N gets, so a
//! segment's output is, bit for bit, what the one-matrix kernel writes for those columns of the
//! concatenated weights (`gpu_kernels` checks it). Where the fragment GEMM does not serve the
//! rows (the prefill route's cuBLAS from 128 rows) each segment runs alone on its part of the
//! packing.

use super::error::GpuResult;
use super::launch::{
    check_aligned, check_frag_operands, check_k, dim_i32, dtype_suffix, frag_grid,
    frag_kernel_name, EpilogueParams, GpuEpilogue, GpuMatB, Params, StreamHandle,
};
use super::pack::pack_frag_weights;
use super::runtime::GpuRuntime;
use crate::element::DType;
use crate::error::KernelError;

/// The most consumers one grouped launch takes (`MX_FRAG_SEGS`).
pub const MAX_FRAG_SEGMENTS: usize = 4;

/// One consumer of a grouped GEMM: its output and its weight's place in the packing.
#[derive(Debug, Clone, Copy)]
pub struct FragSegment {
    /// Output columns (the weight's N); its packed tiles are `n.div_ceil(16)`.
    pub n: usize,
    /// `[M, n]` of the output dtype.
    pub y: u64,
    pub ep: GpuEpilogue,
    /// The weight's own [`super::pack::f16_weight_shift`] (the prefill route's f16 output), as
    /// [`GpuMatB::MxFrag`]'s.
    pub f16_shift: Option<i32>,
}

/// `struct MxFragSegs` of mx_matmul_frag.hip, passed by value (same C layout).
#[repr(C)]
#[derive(Clone, Copy)]
struct FragSegsParams {
    count: i32,
    tile0: [i32; MAX_FRAG_SEGMENTS + 1],
    n: [i32; MAX_FRAG_SEGMENTS],
    y: [u64; MAX_FRAG_SEGMENTS],
    ep: [EpilogueParams; MAX_FRAG_SEGMENTS],
}

/// The weights `(q, scales, n)` of a group (E4M3 `[n, k]` + E8M0 `[n, k / 32]` each) packed one
/// after another for [`GpuRuntime::mx_matmul_frag_grouped`]: each [`pack_frag_weights`], so
/// segment s's tiles start at tile Σ_{r < s} ceil(n_r / 16).
pub fn pack_frag_group(
    weights: &[(&[u8], &[u8], usize)],
    k: usize,
) -> GpuResult<(Vec<u8>, Vec<u8>)> {
    let (mut wf, mut wsf) = (Vec::new(), Vec::new());
    for &(q, scales, n) in weights {
        let (f, s) = pack_frag_weights(q, scales, n, k)?;
        wf.extend_from_slice(&f);
        wsf.extend_from_slice(&s);
    }
    Ok((wf, wsf))
}

impl GpuRuntime {
    /// `y_s[m, n] = Σ_k deq(a_q)[m, k] · deq(W_s)[n, k]` (with segment s's epilogue) for every
    /// segment of the weights packed by [`pack_frag_group`] at `(wf, wsf)`, in one launch where
    /// the fragment GEMM serves `m` rows, else one `mx_matmul` per segment on its part of the
    /// packing. At most [`MAX_FRAG_SEGMENTS`] segments; every output of `out_dtype`.
    #[allow(clippy::too_many_arguments)]
    pub fn mx_matmul_frag_grouped(
        &self,
        m: usize,
        k: usize,
        (a_q, a_scales): (u64, u64),
        (wf, wsf): (u64, u64),
        segs: &[FragSegment],
        out_dtype: DType,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        check_k("K", k)?;
        if segs.len() > MAX_FRAG_SEGMENTS {
            return Err(KernelError::Shape(format!(
                "a grouped GEMM takes at most {MAX_FRAG_SEGMENTS} weights, not {}",
                segs.len()
            ))
            .into());
        }
        let o = dtype_suffix(out_dtype)?;
        for s in segs {
            check_aligned("y (grouped GEMM)", s.y, out_dtype.size() as u64)?;
        }
        // Each segment's first tile in the packing, and the group's tiles.
        let tile0: Vec<usize> = segs
            .iter()
            .scan(0, |at, s| {
                let t = *at;
                *at += s.n.div_ceil(16);
                Some(t)
            })
            .collect();
        let tiles: usize = segs.iter().map(|s| s.n.div_ceil(16)).sum();
        if m == 0 || tiles == 0 {
            return Ok(());
        }
        // One `mx_matmul` per segment on its part of the packing: whole tiles of K / 32 k-blocks
        // of 512 bytes and K / 128 groups of 64 bytes of scale words.
        let alone = || -> GpuResult<()> {
            for (s, &t) in segs.iter().zip(&tile0).filter(|(s, _)| s.n > 0) {
                let b = GpuMatB::MxFrag {
                    q: wf + (t * (k / 32) * 512) as u64,
                    scales: wsf + (t * (k / 128) * 64) as u64,
                    f16_shift: s.f16_shift,
                };
                self.mx_matmul(m, k, s.n, a_q, a_scales, &b, s.y, out_dtype, &s.ep, stream)?;
            }
            Ok(())
        };
        let prefill = |s: &FragSegment| {
            let b = GpuMatB::MxFrag {
                q: wf,
                scales: wsf,
                f16_shift: s.f16_shift,
            };
            self.prefill_takes((m, k, s.n), DType::E4M3, &b, out_dtype, &s.ep)
        };
        if !self.frag_gemm_runs(k) || segs.iter().any(prefill) {
            return alone();
        }
        let n_total = 16 * tiles;
        let fk = self.fit_clusters(
            "mx_matmul_fragg_",
            o,
            m,
            n_total,
            self.frag_kernel_for(m, k, n_total, a_q, o),
        )?;
        // The plain (f16 / f32 output) kernels on the group's N may give each warp a longer
        // stream than the largest member's own launch (fewer warps a block): 6144 + 1024 + 1024 x
        // 6144 with f32 output measured 0.90-1.08x a launch per weight on the H200 at 1-16 rows
        // (every other measured group 1.25-2.3x; BENCHMARKS.md session 28), so those run alone.
        if out_dtype != DType::BF16 {
            let n_max = segs.iter().map(|s| s.n).max().unwrap_or(0);
            if fk.w < self.frag_kernel_for(m, k, n_max, a_q, o).w.min(4) {
                return alone();
            }
        }
        check_frag_operands((a_q, a_scales), (wf, wsf))?;
        let none = GpuEpilogue::NONE.params(1, 1, out_dtype)?;
        let mut p = FragSegsParams {
            count: segs.len() as i32,
            tile0: [0; MAX_FRAG_SEGMENTS + 1],
            n: [0; MAX_FRAG_SEGMENTS],
            y: [0; MAX_FRAG_SEGMENTS],
            ep: [none; MAX_FRAG_SEGMENTS],
        };
        for (i, (s, &t)) in segs.iter().zip(&tile0).enumerate() {
            p.tile0[i] = dim_i32("tiles", t)?;
            p.n[i] = dim_i32("N", s.n)?;
            p.y[i] = s.y;
            p.ep[i] = s.ep.params(m, s.n, out_dtype)?;
        }
        p.tile0[segs.len()] = dim_i32("tiles", tiles)?;
        let params = Params::new()
            .push(a_q)
            .push(a_scales)
            .push(wf)
            .push(wsf)
            .push(p)
            .push(dim_i32("M", m)?)
            .push(dim_i32("N", n_total)?)
            .push(dim_i32("K", k)?)
            .push(fk.pre());
        let name = frag_kernel_name("mx_matmul_fragg_", o, &fk);
        let grid = frag_grid(m, n_total, &fk)?;
        self.run(&name, grid, 32 * fk.w as u32, params, stream)
    }
}
