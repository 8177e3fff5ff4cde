//! Errors of model I/O, IR construction and rewriting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Invalid(String),
}
