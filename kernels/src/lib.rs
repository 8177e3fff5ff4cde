//! MXFP8 numerics and kernels for mxfuse. See docs/ops.md for the op contract.
//!
//! * [`codec`]: scalar E4M3FN / E8M0 codecs and the MX block quantizer (the definition).
//! * [`reference`](mod@reference): obviously-correct scalar ops, the oracle for tests and GPU kernels, plus
//!   [`reference::onnx_ops`], a per-op evaluator of the unfused ONNX graphs.
//! * [`fast`]: the row-parallel, AVX2-vectorized kernels (portable fallback when AVX2 is absent).
//! * [`Epilogue`]: `MxMatMul`'s `alpha · acc + beta · C`, shared by every GEMM path.
//! * [`ops`]: the dtype-tagged op-level API the provider calls.
//! * [`log`](mod@log): where the kernels' status lines go (stderr, or a sink the host installs).
//! * [`Parallel`]: the thread-pool seam; [`ThreadPool`] (persistent, `ThreadPool::global()`),
//!   [`StdThreads`] (scoped threads per call) and [`Serial`] implement it.
pub mod attrs;
pub mod codec;
pub mod element;
pub mod epilogue;
pub mod error;
pub mod fast;
pub mod gpu;
pub mod log;
pub mod ops;
pub mod parallel;
pub mod pool;
pub mod reference;
pub mod scale_map;
pub mod slices;

pub use attrs::{
    AddRmsNormAttrs, MxDequantAttrs, MxGatherDequantAttrs, MxGatherMatMulAttrs, MxMatMulAttrs,
    MxQuantAttrs, MxQuantLinearAttrs, SwiGluAttrs,
};
pub use element::{DType, Element};
pub use epilogue::Epilogue;
pub use error::{KernelError, Result};
pub use parallel::{Parallel, Serial, StdThreads};
pub use pool::ThreadPool;
pub use scale_map::ScaleMap;
