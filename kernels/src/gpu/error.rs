//! Errors of the GPU runtime. Every failure of a loader, the compiler or a driver call becomes a
//! [`GpuError`] with the call and the driver's own message; nothing in this module panics.

use thiserror::Error;

use crate::error::KernelError;

/// What went wrong in the GPU runtime.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GpuError {
    /// A runtime library was found but is unusable (a symbol is missing, a load failed).
    #[error("GPU library {library}: {message}")]
    Library { library: String, message: String },
    /// A driver / runtime call returned an error code.
    #[error("{call} failed with code {code}: {message}")]
    Driver {
        call: &'static str,
        code: i32,
        message: String,
    },
    /// NVRTC / hipRTC rejected the kernel sources; the compiler log is attached.
    #[error("run-time compilation for {arch} failed:\n{log}")]
    Compile { arch: String, log: String },
    /// The op's inputs are invalid (shape, dtype, attribute) or not supported on this device.
    #[error(transparent)]
    Kernel(#[from] KernelError),
}

/// Shorthand for the GPU runtime's results.
pub type GpuResult<T> = std::result::Result<T, GpuError>;
