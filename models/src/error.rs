//! Errors of the model builders.

/// What can go wrong while building or writing a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration that cannot be built (bad shapes, unsupported spelling combination).
    #[error("invalid model configuration: {0}")]
    InvalidConfig(String),
    /// Writing the model or its external data failed.
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Result of the model builders.
pub type Result<T> = std::result::Result<T, Error>;
