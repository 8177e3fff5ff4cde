//! Per-device launch choices filled from measurements (bench/gpu/bench.py, BENCHMARKS.md "GPU
//! kernels"), with a default for devices not measured: when to quantize a GEMM's activations inside
//! the GEMM ([`InGemmQuantThresholds`]), how `AddRmsNormMxQuant` spreads rows over the device
//! ([`NormLaunchTable`]), how `SwiGluMxQuant` sizes its lanes and blocks ([`SwiGluLaunchTable`]) and
//! which launch shape the decode GEMM takes ([`PipeGemmTable`], [`FragGemmTable`] for
//! fragment-packed weights), and from how many rows `MxMatMul` leaves the decode kernels for the
//! prefill route ([`PrefillTable`]).
//!
//! In-GEMM quantization saves a launch and a round trip of the quantized activations, but every
//! block of the GEMM quantizes its K range for all M rows again, so it loses once M·K grows.
//! vLLM hard-codes M <= 16, K <= 1024 for MI355X; here the crossover is a per-device table filled
//! from measurements (bench/gpu/bench.py, BENCHMARKS.md "GPU kernels"), with vLLM's rule as the
//! default for devices not measured.

use crate::element::DType;

/// The largest M and K for which in-GEMM activation quantization is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InGemmQuantThresholds {
    /// Largest number of activation rows.
    pub max_m: usize,
    /// Largest reduction length.
    pub max_k: usize,
}

impl InGemmQuantThresholds {
    /// vLLM's MI355X rule (`_FUSED_QUANT_MAX_M = 16`, K <= 1024): the default.
    pub const DEFAULT: Self = Self {
        max_m: 16,
        max_k: 1024,
    };

    /// Measured crossovers, by compile architecture (see the module docs).
    const MEASURED: [(&'static str, Self); 1] = [
        // NVIDIA H200 (bench/gpu/bench.py, 2026-11-30): with the first tensor-core kernel
        // in-GEMM won only at K = 768 for M <= 8; since the pipeline GEMM (mx_matmul_pipe.hip,
        // pre-quantized activations only) a separate quantize launch + that GEMM is as fast or
        // faster at every measured shape (6144 x 768, M = 1 / 2 / 4 / 8: 5.94 / 6.04 / 5.99 /
        // 5.75 us vs in-GEMM 5.85 / 5.96 / 6.07 / 6.17; results/issue6_gemm_final_*) and it keeps
        // `mx_matmul_quantizing_a` bit-identical to quantize + `mx_matmul` (one GEMM kernel for
        // both). So: never.
        ("sm_90", Self { max_m: 0, max_k: 0 }),
    ];

    /// The thresholds for a device architecture ("sm_90", "gfx950", ...).
    pub fn for_arch(arch: &str) -> Self {
        table_for_arch(&Self::MEASURED, arch, Self::DEFAULT)
    }

    /// Whether a GEMM with `m` activation rows and reduction length `k` should quantize in-kernel.
    pub fn use_in_gemm(&self, m: usize, k: usize) -> bool {
        m <= self.max_m && k <= self.max_k
    }
}

/// From how many activation rows `MxMatMul` takes the prefill route (dequantize to bf16 + the
/// vendor's bf16 GEMM, [`super::prefill`]) instead of the decode kernels. Below a few hundred
/// rows the route's time is mostly the host's (three launches and the library's call, 15-27 µs
/// on the H200's host, which varied by half between two machines), which weighs more on small
/// weights: a row count for large weights and one for the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillTable {
    /// Smallest M that takes the route for weights of at least `large` elements (N · K).
    pub min_m_large: usize,
    /// Smallest M for smaller weights.
    pub min_m_small: usize,
    /// The N · K from which `min_m_large` applies.
    pub large: usize,
    /// `(large, small)` for the weight-only `MxMatMul` of f16 activations (two bf16 parts a
    /// row: two library GEMMs, f32 rows, against a weight-only kernel as fast as bf16's).
    pub f16_a: (usize, usize),
    /// The same for f32 activations (three parts, against the weight-only kernel's own three).
    pub f32_a: (usize, usize),
}

impl PrefillTable {
    /// Devices not measured: 256 rows, where on the H200 the decode kernels were 1.7-2.3x
    /// slower than the route at every measured weight (512 for f16 activations).
    pub const DEFAULT: Self = Self {
        min_m_large: 256,
        min_m_small: 256,
        large: 0,
        f16_a: (512, 512),
        f32_a: (256, 256),
    };

    /// Measured crossovers, by compile architecture.
    const MEASURED: [(&'static str, Self); 1] = [
        // NVIDIA H200 (kernels/examples/prefill_bench.rs, session 23 calls 2-3; BENCHMARKS.md
        // "prefill"): decode kernels / route at M = 96 | 128 | 256 were 1.04 | 1.34-1.35 | 2.30
        // at 6144 x 6144 (38 M weights), 1.05 | 1.07 | 1.71 at 1536 x 6144, 0.87 | 0.74-1.10 |
        // 1.92 at 6144 x 768 (the small ones host-bound at 128). Weight-only (session 24 call
        // 3, weight-only kernel / route): f16 a at M = 128 | 192 | 256 | 384 0.79 | 1.06 | 1.34 |
        // 1.72 at 6144 x 6144, 0.43 | 0.58 | 0.87 | 1.14 at 1536 x 6144, 0.44 | 0.65 | 0.87 |
        // 1.25 at 6144 x 768; f32 a at M = 64 | 128: 1.12 | 2.09, 0.64 | 1.12, 0.84 | 1.54.
        (
            "sm_90",
            Self {
                min_m_large: 128,
                min_m_small: 256,
                large: 1 << 25,
                f16_a: (192, 384),
                f32_a: (64, 128),
            },
        ),
    ];

    /// The table for a device architecture.
    pub fn for_arch(arch: &str) -> Self {
        table_for_arch(&Self::MEASURED, arch, Self::DEFAULT)
    }

    /// The smallest M that takes the route for `[n, k]` weights and activations of type `a`
    /// (E4M3 for MXFP8, or the float type of a weight-only product).
    pub fn min_m(&self, n: usize, k: usize, a: DType) -> usize {
        let (large, small) = match a {
            DType::F16 => self.f16_a,
            DType::F32 => self.f32_a,
            _ => (self.min_m_large, self.min_m_small),
        };
        if n.saturating_mul(k) >= self.large {
            large
        } else {
            small
        }
    }
}

/// The measured table of `arch` in `measured`, else `default` (devices not measured).
fn table_for_arch<T: Copy>(measured: &[(&str, T)], arch: &str, default: T) -> T {
    measured
        .iter()
        .find(|(a, _)| *a == arch)
        .map_or(default, |(_, t)| *t)
}

/// The `(w, s)` of the first GEMM table row `(n, k, max_m, w, s)` with this `n`, `k` and
/// `m <= max_m`.
fn measured_row(
    rows: &[(usize, usize, usize, usize, usize)],
    n: usize,
    k: usize,
    m: usize,
) -> Option<(usize, usize)> {
    rows.iter()
        .find(|&&(rn, rk, max_m, _, _)| rn == n && rk == k && m <= max_m)
        .map(|&(_, _, _, w, s)| (w, s))
}

/// Launch shape of the cp.async pipeline decode GEMM (kernels/gpu/mx_matmul_pipe.hip): `w` warps
/// per block (each its own 16-column tile; 1, 2 or 4) and `s` blocks of a cluster splitting K
/// (1, 2, 4 or 8), or the first tensor-core kernel (mx_matmul.hip) where that measured faster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipeGemmTable {
    /// Measured shapes `(n, k, max_m, w, s)`: the first row with this `n`, `k` and `m <= max_m`
    /// wins; `w = 0` = the first tensor-core kernel. Other shapes take the rule below.
    pub rows: &'static [(usize, usize, usize, usize, usize)],
    /// The rule (`shapes::pipe_shape`): 1 warp per block up to this many activation rows, else 2;
    pub one_warp_max_m: usize,
    /// the fewest splits that give at least this many warps (16-column tiles x splits) per SM,
    pub min_warps_per_sm: usize,
    /// but never fewer than this many groups of 4 k-blocks per split.
    pub min_groups_per_split: usize,
}

impl PipeGemmTable {
    /// Devices not measured: the rule, with the constants that reproduce the H200's best shapes.
    pub const DEFAULT: Self = Self {
        rows: &[],
        one_warp_max_m: 4,
        min_warps_per_sm: 3,
        min_groups_per_split: 4,
    };

    const MEASURED: [(&'static str, Self); 1] = [(
        "sm_90",
        // NVIDIA H200, bench/gpu/bench.py gemm (CUDA-graph replay, us, weights from HBM),
        // 2026-11-30, results/issue6_gemm_run2_*: best (w, s) of the 12 shapes vs the first
        // kernel. 1536 x 6144: M <= 4 w1 s8 6.46-6.60 (first 7.76-7.90); M = 8 w2 s8 6.73 (7.92);
        // M = 12 / 16 w2 s4 8.55 / 8.38 (9.75 / 10.16). 6144 x 768: w2 s1 4.21-4.58 at every M
        // (first 4.69-7.33). 6144 x 6144: M <= 4 the first kernel 16.27-16.89 (best pipeline
        // w1 s2 16.70-17.10); M = 8 / 12 / 16 w2 s2 16.70 / 20.87 / 20.06 (first 17.40 / 24.92 /
        // 26.78).
        Self {
            rows: &[
                (1536, 6144, 4, 1, 8),
                (1536, 6144, 8, 2, 8),
                (1536, 6144, 16, 2, 4),
                (6144, 768, 16, 2, 1),
                (6144, 6144, 4, 0, 0),
                (6144, 6144, 16, 2, 2),
            ],
            ..Self::DEFAULT
        },
    )];

    /// The table for a device architecture.
    pub fn for_arch(arch: &str) -> Self {
        table_for_arch(&Self::MEASURED, arch, Self::DEFAULT)
    }

    /// The measured `(w, s)` for this shape, if any (`w = 0`: the first kernel).
    pub fn measured(&self, n: usize, k: usize, m: usize) -> Option<(usize, usize)> {
        measured_row(self.rows, n, k, m)
    }
}

/// Launch shape of the fragment-packed decode GEMM (kernels/gpu/mx_matmul_frag.hip): `w` warps
/// per block (2, 4 or 8) and `s` blocks of a cluster (1, 2, 4 or 8), all splitting K of one
/// 16-column tile (`shapes::frag_kernel` then gives the m8 kernel 3 warps where the fourth would
/// be idle: `shapes::trim_idle_warp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragGemmTable {
    /// Measured shapes `(n, k, max_m, w, s)`: the first row with this `n`, `k` and `m <= max_m`
    /// wins. Other shapes take the rule below.
    pub rows: &'static [(usize, usize, usize, usize, usize)],
    /// The rule (`shapes::frag_shape`): warps of the kernel resident per SM (registers: ~160 a
    /// lane at w = 2 / 4, so 12; at w = 8 one block of 8),
    pub resident_warps_per_sm: usize,
    /// and the fewest groups of 4 k-blocks a warp should keep (each warp double-buffers its
    /// groups; one group leaves nothing to overlap).
    pub min_groups: usize,
    /// From this many activation rows (up to 16) a grid that leaves SMs idle takes the `_fsa`
    /// loop (activations staged through shared memory; `shapes::frag_kernel`).
    pub staged_a_from_rows: usize,
}

impl FragGemmTable {
    /// Devices not measured: the rule (bench/gpu/mxgpu.py `FRAG_RESIDENT_WARPS`, `FRAG_MIN_GROUPS`).
    pub const DEFAULT: Self = Self {
        rows: &[],
        resident_warps_per_sm: 12,
        min_groups: 2,
        // H200, BENCHMARKS.md follow-up 13: 1536 x 6144 M = 16 5.78 against 6.63 us, M = 12
        // 5.62 against 5.42 (rows 12-15 are then broadcasts of row 11, cheap for `_fs`).
        staged_a_from_rows: 13,
    };

    const MEASURED: [(&'static str, Self); 1] = [(
        "sm_90",
        // NVIDIA H200, bench/gpu/bench_frag_pdl.py, 2026-11-30 17:20 (BENCHMARKS.md; all 12
        // (w, s) per shape, with and without PDL): best 1536 x 6144 w8 s1 at M = 1-16 (w4 s2 /
        // w2 s4 within 1-3 % at M = 4 / 8); 6144 x 768 w4 s1 (w2 s1 within 1 % at M = 4 / 8
        // without PDL; the m8 kernel then runs on 3 warps, session 17); 6144 x 6144 w4 s1 at
        // every M <= 16 (w8 s1 at 145 registers holds one block per SM: 21.7 us at M = 16
        // against 16.2).
        Self {
            rows: &[
                (1536, 6144, 16, 8, 1),
                (6144, 768, 16, 4, 1),
                (6144, 6144, 16, 4, 1),
            ],
            ..Self::DEFAULT
        },
    )];

    /// The table for a device architecture.
    pub fn for_arch(arch: &str) -> Self {
        table_for_arch(&Self::MEASURED, arch, Self::DEFAULT)
    }

    /// The measured `(w, s)` for this shape, if any.
    pub fn measured(&self, n: usize, k: usize, m: usize) -> Option<(usize, usize)> {
        measured_row(self.rows, n, k, m)
    }
}

/// Kernel choice of `AddRmsNormMxQuant` (kernels/gpu/add_rmsnorm_mxquant.hip) by row count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NormLaunchTable {
    /// Up to this many rows a row is split over a thread-block cluster (`_c1_s<S>`, S from
    /// `shapes::norm_split`; CUDA sm_90+ only); 0 = never.
    pub split_max_rows: usize,
    /// From `many_rows_per_sm` rows per multiprocessor on, `many_rows_nch` chunks per lane (fewer
    /// lanes per row, more rows per SM); below, the fewest chunks per lane that hold the row.
    pub many_rows_per_sm: usize,
    pub many_rows_nch: usize,
}

impl NormLaunchTable {
    /// Devices not measured: no split rows, 2 chunks per lane from 2 rows per SM (the rule the
    /// first H200 run measured best, 2026-11-30).
    pub const DEFAULT: Self = Self {
        split_max_rows: 0,
        many_rows_per_sm: 2,
        many_rows_nch: 2,
    };

    const MEASURED: [(&'static str, Self); 1] = [
        // NVIDIA H200, bench/gpu/bench.py norm (H = 6144, bf16, CUDA-graph replay, us), 2026-11-30
        // after the packed-register rewrite: rows split over a cluster won up to M = 64 (M = 8:
        // 2.73 split 8 vs 3.36 one block per row; 16: 2.88 vs 3.31; 32: 3.05 split 4 vs 3.39;
        // 64: 3.23 split 2 vs 3.42), one block per row from M = 128 (3.66 vs 3.87 split 2); at
        // M = 8192 3 chunks per lane (B = 256, 62 registers: 4 rows per SM) 114.8, 2 chunks 116.0,
        // 4 chunks 120.4, 1 chunk 196 (that build: 41 registers, one 768-lane block per SM; the
        // previous kernel: 126.0 with 1 chunk, 161.5 with 2, the persistent kernel 191-229, removed).
        (
            "sm_90",
            Self {
                split_max_rows: 64,
                many_rows_per_sm: 2,
                many_rows_nch: 3,
            },
        ),
    ];

    /// The table for a device architecture ("sm_90", "gfx950", ...).
    pub fn for_arch(arch: &str) -> Self {
        table_for_arch(&Self::MEASURED, arch, Self::DEFAULT)
    }

    /// Whether `rows` rows are few enough to split each over a cluster.
    pub fn split_rows(&self, rows: usize) -> bool {
        rows <= self.split_max_rows
    }

    /// Chunks per lane for `rows` rows on `sms` multiprocessors when rows are not split: `fit` is
    /// the fewest chunks per lane whose block holds the row; `holds(nch)` whether a block of the
    /// `nch` kernel holds the row.
    pub fn chunks_per_lane(
        &self,
        rows: usize,
        sms: usize,
        fit: usize,
        holds: impl Fn(usize) -> bool,
    ) -> usize {
        if rows >= self.many_rows_per_sm * sms && holds(self.many_rows_nch) {
            self.many_rows_nch
        } else {
            fit
        }
    }
}

/// Elements per lane and lanes per block of `SwiGluMxQuant` (kernels/gpu/swiglu_mxquant.hip) by
/// output size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwiGluLaunchTable {
    /// `(below, elements per lane, block size)`, by increasing `below`: the first tier whose
    /// `below` exceeds the output count; `large` past the last.
    pub tiers: &'static [(usize, usize, usize)],
    pub large: (usize, usize),
    /// Below how many outputs the launch asks for the pinned logistic on every element instead of
    /// the certified fast one (`F_SIGMA_PINNED`; same bits), for the bf16-rounded and the fp32
    /// activation: in a grid of about one wave the kernel lasts as long as its slowest warp, and
    /// a warp's rare exact redo is that warp.
    pub pinned_below: (usize, usize),
    /// From how many outputs the table kernels (`_table`, [`super::swiglu_table_kernel`]) serve
    /// the attributes they take; `usize::MAX` = never.
    pub table_from: usize,
}

impl SwiGluLaunchTable {
    /// Devices not measured: 2 elements per lane below 2^21 outputs (short per-lane chains when the
    /// grid cannot fill the device), else 8; 256-lane blocks; the H200's pinned-logistic bounds;
    /// no table kernels (measured on the H200 only).
    pub const DEFAULT: Self = Self {
        tiers: &[(1 << 21, 2, 256)],
        large: (8, 256),
        pinned_below: (1 << 20, 1 << 22),
        table_from: usize::MAX,
    };

    const MEASURED: [(&'static str, Self); 1] = [
        // NVIDIA H200 (bench/gpu/bench.py swiglu, OAI, I = 768, us), 2026-11-30: M = 8 (6144
        // outputs) 1 element per lane 1.72-1.73 (256 / 128 lanes a block) vs 2 per lane 1.80-1.83;
        // M = 192: 2 per lane 2.25 (best of 15 shapes); M = 8192: 8 per lane 19.1-19.4 for 64-512
        // lanes a block. M = 64 (49152 outputs), two calls of the day: 1 per lane with 512-lane
        // blocks 1.85 / 1.78 vs 2 per lane, 256 lanes 1.92 / 1.90 (issue 6 follow-up 2, after the
        // redux.sync group max: results/issue6_norm2_run1_*); 2^15-2^16 outputs take that shape.
        // 2026-12-01 (issue 6 follow-up 6: packed bf16 path and certified fast sigmoid for 8 per
        // lane, bench/gpu/ab_swiglu.py, split halves, PDL): 8 per lane overtakes 2 per lane between
        // M = 192 (2 per lane 1.63 vs 1.67 pinned) and M = 384 (3.04 vs 1.90); 128-lane blocks
        // best or within 1 % from M = 384 to 8192 (M = 8192: 10.84 vs 11.08 for 256 lanes). The
        // certified logistic against the pinned one (OAI, us): rounded activation M = 768 2.66 vs
        // 2.41, M = 1024 3.45 vs 3.59, M = 1536 3.47 vs 3.64, M = 8192 10.84 vs 13.58; fp32
        // activation M = 1536 3.40 vs 3.31, M = 2048 4.01 vs 4.20, M = 4096 6.55 vs 6.72 (SiLU
        // 6.37 vs 6.10), M = 8192 11.91 vs 12.45 (SiLU 11.36 vs 11.26).
        // 2026-12-01 (issue 6 follow-up 7, bench/gpu/ab_sigtab.py, PDL): the table kernel (256
        // lanes) vs the choice above, OAI / SiLU: M = 8 1.34 vs 1.25 / 1.33 vs 1.24 (slower),
        // M = 192 1.47 vs 1.66 / 1.46 vs 1.58, M = 2048 3.10 vs 3.65 / 3.42 vs 3.46, M = 4096
        // 5.12-5.46 vs 5.84 / 4.91 vs 5.34: from 2^17 outputs (M = 171 at I = 768). Follow-up 9
        // (its split-halves loop, BENCHMARKS.md; the verification call's ab_sigtab.py SIGWIRE=1,
        // the table kernel vs the choice below it, OAI / SiLU): M = 8 1.21 vs 1.25 / 1.22 vs
        // 1.24, M = 16 1.21 vs 1.26 / 1.23 vs 1.23, M = 64 1.28 vs 1.33 / 1.27 vs 1.30, M = 128
        // 1.30 vs 1.49 / 1.28 vs 1.43: from 2^12 outputs (M = 6 at I = 768; below, unmeasured).
        (
            "sm_90",
            Self {
                tiers: &[
                    (1 << 14, 1, 256),
                    (1 << 15, 2, 256),
                    (1 << 16, 1, 512),
                    (1 << 18, 2, 256),
                ],
                large: (8, 128),
                pinned_below: (1 << 20, 1 << 22),
                table_from: 1 << 12,
            },
        ),
    ];

    /// The table for a device architecture.
    pub fn for_arch(arch: &str) -> Self {
        table_for_arch(&Self::MEASURED, arch, Self::DEFAULT)
    }

    /// Whether a launch of `outputs` outputs takes the pinned logistic everywhere.
    pub fn pinned(&self, outputs: usize, fp32_activation: bool) -> bool {
        let (rounded, fp32) = self.pinned_below;
        outputs < if fp32_activation { fp32 } else { rounded }
    }

    /// Whether a launch of `outputs` outputs takes the table kernel (where its preconditions
    /// hold: [`super::swiglu_table_kernel::refusal`]).
    pub fn table(&self, outputs: usize) -> bool {
        outputs >= self.table_from
    }

    /// (elements per lane, block size) for `outputs` outputs.
    pub fn shape(&self, outputs: usize) -> (usize, usize) {
        self.tiers
            .iter()
            .find(|(below, _, _)| outputs < *below)
            .map_or(self.large, |&(_, e, block)| (e, block))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefill_route_starts_earlier_for_large_weights_on_the_h200() {
        let h200 = PrefillTable::for_arch("sm_90");
        let e4 = DType::E4M3;
        assert_eq!(h200.min_m(6144, 6144, e4), 128);
        assert_eq!(h200.min_m(1536, 6144, e4), 256);
        assert_eq!(h200.min_m(6144, 768, DType::BF16), 256);
        assert_eq!(h200.min_m(6144, 768, DType::F16), 384);
        assert_eq!(h200.min_m(6144, 6144, DType::F16), 192);
        assert_eq!(h200.min_m(6144, 768, DType::F32), 128);
        assert_eq!(h200.min_m(6144, 6144, DType::F32), 64);
        assert_eq!(PrefillTable::for_arch("gfx950").min_m(6144, 6144, e4), 256);
    }

    #[test]
    fn unknown_devices_get_the_vllm_rule() {
        let t = InGemmQuantThresholds::for_arch("gfx950");
        assert_eq!(t, InGemmQuantThresholds::DEFAULT);
        assert!(t.use_in_gemm(16, 1024));
        assert!(!t.use_in_gemm(17, 1024));
        assert!(!t.use_in_gemm(16, 1056));
    }

    #[test]
    fn measured_devices_use_their_row() {
        // The H200 quantizes separately at every shape (the pipeline GEMM takes quantized A).
        let t = InGemmQuantThresholds::for_arch("sm_90");
        assert_ne!(t, InGemmQuantThresholds::DEFAULT);
        assert!(!t.use_in_gemm(1, 768));
        assert!(!t.use_in_gemm(1, 6144));
    }

    #[test]
    fn norm_table_splits_few_rows_on_the_h200_only() {
        let h200 = NormLaunchTable::for_arch("sm_90");
        assert!(h200.split_rows(8) && h200.split_rows(64) && !h200.split_rows(128));
        let other = NormLaunchTable::for_arch("gfx942");
        assert_eq!(other, NormLaunchTable::DEFAULT);
        assert!(!other.split_rows(1));
        // Many rows: the table's chunks per lane where its block holds the row, else the fit.
        assert_eq!(other.chunks_per_lane(8192, 132, 1, |_| true), 2);
        assert_eq!(other.chunks_per_lane(8192, 132, 1, |_| false), 1);
        assert_eq!(other.chunks_per_lane(100, 132, 1, |_| true), 1);
        assert_eq!(
            h200.chunks_per_lane(8192, 132, 1, |_| true),
            h200.many_rows_nch
        );
    }

    /// The bf16 8-per-lane SwiGLU kernels carry `__launch_bounds__(256, 6)`: a larger block would
    /// fail to launch.
    #[test]
    fn swiglu_tables_keep_8_per_lane_blocks_within_the_launch_bounds() {
        let tables = SwiGluLaunchTable::MEASURED.iter().map(|(_, t)| t);
        for t in tables.chain([&SwiGluLaunchTable::DEFAULT]) {
            let shapes = t.tiers.iter().map(|&(_, e, b)| (e, b)).chain([t.large]);
            for (e, block) in shapes {
                assert!(e != 8 || block <= 256, "{t:?}");
            }
        }
    }

    #[test]
    fn swiglu_table_picks_by_output_count() {
        let t = SwiGluLaunchTable::DEFAULT;
        assert_eq!(t.shape(8 * 768), (2, 256));
        assert_eq!(t.shape(8192 * 768), (8, 256));
        let h200 = SwiGluLaunchTable::for_arch("sm_90");
        assert_eq!(h200.shape(8 * 768), (1, 256));
        assert_eq!(h200.shape(32 * 768), (2, 256));
        assert_eq!(h200.shape(64 * 768), (1, 512));
        assert_eq!(h200.shape(192 * 768), (2, 256));
        assert_eq!(h200.shape(384 * 768), (8, 128));
        assert_eq!(h200.shape(8192 * 768), (8, 128));
        assert!(h200.pinned(768 * 768, false) && !h200.pinned(1536 * 768, false));
        assert!(h200.pinned(4096 * 768, true) && !h200.pinned(8192 * 768, true));
    }

    #[test]
    fn swiglu_table_kernel_from_2_12_outputs_on_the_h200_only() {
        let h200 = SwiGluLaunchTable::for_arch("sm_90");
        assert!(!h200.table(4 * 768) && !h200.table((1 << 12) - 1));
        assert!(h200.table(8 * 768) && h200.table(128 * 768) && h200.table(8192 * 768));
        for arch in ["sm_80", "sm_100", "gfx942"] {
            assert!(
                !SwiGluLaunchTable::for_arch(arch).table(usize::MAX - 1),
                "{arch}"
            );
        }
    }

    #[test]
    fn frag_table_rows_match_by_shape_and_rows() {
        let h200 = FragGemmTable::for_arch("sm_90");
        assert_eq!(h200.measured(1536, 6144, 8), Some((8, 1)));
        assert_eq!(h200.measured(1536, 6144, 9), Some((8, 1)));
        assert_eq!(h200.measured(6144, 768, 16), Some((4, 1)));
        assert_eq!(h200.measured(6144, 6144, 12), Some((4, 1)));
        assert_eq!(h200.measured(6144, 6144, 17), None);
        assert_eq!(FragGemmTable::for_arch("sm_100"), FragGemmTable::DEFAULT);
    }
}
