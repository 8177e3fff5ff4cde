//! Errors of model I/O, IR construction and rewriting.
//!
//! Every variant renders as one line that names what is wrong and where, so the CLI can print
//! it as `error: ...` and exit 1. Bad input must end up here, never in a panic.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model (or a request made on it) is malformed: dangling names, duplicate producers,
    /// missing graph, bad external-data entries...
    #[error("{0}")]
    Invalid(String),
    /// The model is well formed but uses something mxfuse does not support (IR version, opset).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The graph has a cycle; the message names some nodes on it.
    #[error("graph has a cycle through {0}")]
    Cycle(String),
    /// The file is not a decodable ONNX protobuf (truncated, garbage, wrong wire types).
    #[error("{path}: not a valid ONNX model ({reason})")]
    Decode { path: PathBuf, reason: String },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
