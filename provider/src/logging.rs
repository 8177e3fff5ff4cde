//! Messages through the session's ORT logger (the `OrtLogger` ORT passes to `CreateEp`), so they
//! follow the user's `log_severity_level` like ORT's own.

use ort_sys::{OrtLogger, OrtLoggingLevel};

use crate::ffi::api::{api, c_string, check};

/// The session logger; NULL logs nothing.
#[derive(Clone, Copy, Debug)]
pub struct Logger(*const OrtLogger);

// SAFETY: ORT's loggers are thread-safe and outlive the EP that was created with them.
unsafe impl Send for Logger {}
unsafe impl Sync for Logger {}

impl Logger {
    pub fn new(logger: *const OrtLogger) -> Self {
        Logger(logger)
    }

    /// Whether messages at `level` would be written (to skip building them otherwise).
    pub fn enabled(&self, level: OrtLoggingLevel) -> bool {
        let Ok(api) = api() else { return false };
        if self.0.is_null() {
            return false;
        }
        let mut current = OrtLoggingLevel::ORT_LOGGING_LEVEL_FATAL;
        // SAFETY: a live logger (see the Send/Sync note).
        check(unsafe { (api.ort.Logger_GetLoggingSeverityLevel)(self.0, &mut current) }).is_ok()
            && level as i32 >= current as i32
    }

    /// Logs `message` at `level`; logging failures are ignored (nothing to report them to).
    pub fn log(&self, level: OrtLoggingLevel, message: &str) {
        if !self.enabled(level) {
            return;
        }
        let Ok(api) = api() else { return };
        let (msg, file, func) = (c_string(message), c_string(file!()), c_string("mxfuse_ep"));
        // SAFETY: a live logger; all strings outlive the call.
        let _ = check(unsafe {
            (api.ort.Logger_LogMessage)(
                self.0,
                level,
                msg.as_ptr(),
                file.as_ptr() as *const _,
                0,
                func.as_ptr(),
            )
        });
    }
}
