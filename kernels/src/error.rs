//! The one error type of the kernels crate: every bad input (shape, dtype, attribute) becomes a
//! [`KernelError`], never a panic or an out-of-bounds access.

use thiserror::Error;

/// What went wrong when a kernel was called with inputs it cannot compute.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KernelError {
    /// A tensor's shape does not fit the op (wrong rank, mismatched dims, K not a multiple of 32).
    #[error("shape error: {0}")]
    Shape(String),
    /// A tensor has a dtype the op does not accept, or two tensors disagree on their dtype.
    #[error("dtype error: {0}")]
    DType(String),
    /// An attribute is unknown, malformed or out of range.
    #[error("attribute error: {0}")]
    Attribute(String),
    /// A buffer is too short or not aligned for its element type.
    #[error("buffer error: {0}")]
    Buffer(String),
    /// The op is valid but this build does not support it (e.g. multi-rank AllReduce).
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// Shorthand used by every fallible kernel entry point.
pub type Result<T> = std::result::Result<T, KernelError>;

/// Builds a [`KernelError::Shape`] from format arguments.
macro_rules! shape_err {
    ($($arg:tt)*) => { $crate::error::KernelError::Shape(format!($($arg)*)) };
}
pub(crate) use shape_err;
