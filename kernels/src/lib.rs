//! MXFP8 numerics and kernels for mxfuse. See docs/ops.md for the op contract.
pub mod gpu;
