//! Panic guards for every `extern "C"` entry point: a panic must never unwind into ONNX Runtime
//! (undefined behaviour) or abort the host process; it becomes an `OrtStatus` error instead.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use ort_sys::OrtStatusPtr;

use super::api::{ok_status, to_status};
use crate::error::{Error, Result};

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string())
}

/// Runs `f`, mapping `Err` and panics to an `OrtStatus` (NULL on success).
pub fn guard_status(what: &str, f: impl FnOnce() -> Result<()>) -> OrtStatusPtr {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => ok_status(),
        Ok(Err(e)) => to_status(&e),
        Err(payload) => to_status(&Error::Panic(format!(
            "{what}: {}",
            panic_message(&*payload)
        ))),
    }
}

/// Runs `f` for a callback that cannot report errors (release functions, getters); on a panic
/// returns `fallback`.
pub fn guard_value<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}
