//! The provider's error type and its mapping to ORT error codes.

use ort_sys::OrtErrorCode;

/// Everything that can go wrong inside the library. Every variant ends up as an `OrtStatus`
/// returned to ONNX Runtime, never as a panic.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An ORT API call failed; the message is ORT's.
    #[error("ONNX Runtime: {0}")]
    Ort(String),
    /// The model or a tensor is malformed for our op (bad attribute, bad shape, bad dtype).
    #[error("{0}")]
    Invalid(String),
    /// Valid input we do not implement (yet).
    #[error("not supported: {0}")]
    Unsupported(String),
    /// A panic caught at the FFI boundary (a bug in this library).
    #[error("internal error (panic) in {0}")]
    Panic(String),
}

impl Error {
    /// Shorthand for [`Error::Invalid`].
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }

    /// The ORT error code this error is reported with.
    pub fn code(&self) -> OrtErrorCode {
        match self {
            Error::Ort(_) => OrtErrorCode::ORT_FAIL,
            Error::Invalid(_) => OrtErrorCode::ORT_INVALID_ARGUMENT,
            Error::Unsupported(_) => OrtErrorCode::ORT_NOT_IMPLEMENTED,
            Error::Panic(_) => OrtErrorCode::ORT_EP_FAIL,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
