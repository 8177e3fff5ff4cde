//! When to quantize a GEMM's activations inside the GEMM instead of in a separate launch.
//!
//! In-GEMM quantization saves a launch and a round trip of the quantized activations, but every
//! block of the GEMM quantizes its K range for all M rows again, so it loses once M·K grows.
//! vLLM hard-codes M <= 16, K <= 1024 for MI355X; here the crossover is a per-device table filled
//! from measurements (bench/gpu/bench.py, BENCHMARKS.md "GPU kernels"), with vLLM's rule as the
//! default for devices not measured.

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
        // NVIDIA H200 (bench/gpu/bench.py, 2026-11-30): in-GEMM wins only at K = 768 for
        // M <= 8; at K >= 2048 the separate quantize launch is cheaper for every M <= 16.
        (
            "sm_90",
            Self {
                max_m: 8,
                max_k: 768,
            },
        ),
    ];

    /// The thresholds for a device architecture ("sm_90", "gfx950", ...).
    pub fn for_arch(arch: &str) -> Self {
        Self::MEASURED
            .iter()
            .find(|(a, _)| *a == arch)
            .map_or(Self::DEFAULT, |(_, t)| *t)
    }

    /// Whether a GEMM with `m` activation rows and reduction length `k` should quantize in-kernel.
    pub fn use_in_gemm(&self, m: usize, k: usize) -> bool {
        m <= self.max_m && k <= self.max_k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let t = InGemmQuantThresholds::for_arch("sm_90");
        assert_ne!(t, InGemmQuantThresholds::DEFAULT);
        assert!(t.use_in_gemm(1, 768));
        assert!(!t.use_in_gemm(1, 6144));
    }
}
