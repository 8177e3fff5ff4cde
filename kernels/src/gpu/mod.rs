//! GPU kernels: HIP single-source (also compiles as CUDA) and the runtime that loads them.
//!
//! * kernels/gpu/*: the kernel sources, written once in HIP style; `mx_portability.h` maps the
//!   HIP-isms (wavefront 64 vs warp 32, shuffles, conversions) so NVRTC compiles them as CUDA.
//! * [`driver`]: CUDA driver + NVRTC or HIP + hipRTC, loaded with `libloading` (no GPU SDK at
//!   build time).
//! * [`runtime`]: [`GpuRuntime`] (compile once per architecture, cache, device buffers).
//! * [`launch`]: one launcher per `com.mxfuse` op (programmatic dependent launches on sm_90+);
//!   [`thresholds`]: the measured per-device launch tables; [`swiglu_table_kernel`]: when the
//!   SwiGLU table kernels run and their grid; [`shapes`]: cluster sizes of the
//!   split-row norm and the GEMMs; [`pack`]: constant weights packed for the fragment GEMM;
//!   [`prefill`]: `MxMatMul` at prefill sizes through the vendor's bf16 GEMM ([`blas`]);
//!   [`grouped`]: one launch for the several constant-weight GEMMs of one activation.
//!
//! Without a GPU library, [`GpuRuntime::load`] returns `Ok(None)` and logs that the CPU kernels
//! run. See docs/gpu.md for what was verified on which hardware.
/// A kernel-choice switch from the environment, read once per use site (a lock-free
/// `OnceLock` there): on unless the variable is "0" or "off". The launchers read their switches
/// on every launch, where `std::env::var` itself cost the decode GEMM's host side about a
/// microsecond (five reads a launch) against a ~3 µs kernel.
macro_rules! env_switch {
    ($var:literal) => {{
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ON.get_or_init(|| !std::env::var($var).is_ok_and(|v| v == "0" || v == "off"))
    }};
}

pub mod blas;
pub mod driver;
pub mod error;
pub mod gather;
pub mod grouped;
pub mod launch;
pub mod pack;
pub mod prefill;
pub mod prefill_moe;
pub mod runtime;
pub mod shapes;
pub mod sigma_table;
pub mod sources;
pub mod swiglu_table_kernel;
pub mod thresholds;
pub mod weight_only;

pub use driver::{Backend, DeviceInfo};
pub use error::{GpuError, GpuResult};
pub use gather::{index_error, GpuExperts, GpuGatherMatMul, GpuIndices, GATHER_ERR_BYTES};
pub use grouped::{pack_frag_group, FragSegment, MAX_FRAG_SEGMENTS};
pub use launch::{GpuBias, GpuEpilogue, GpuMatB, NormBuffers, StreamHandle, SwiGluBuffers};
pub use pack::{f16_weight_shift, pack_frag_experts, pack_frag_weights};
pub use prefill::PrefillA;
pub use runtime::{DeviceBuffer, GpuRuntime};
pub use thresholds::{FragGemmTable, InGemmQuantThresholds, PrefillTable};
