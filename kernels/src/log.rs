//! The kernels' one-line status messages ("GPU kernels ready on ...", "...; using the CPU
//! kernels", "programmatic dependent launch refused ...") and where they go.
//!
//! By default a message is one line on stderr, worded exactly as given ([`stderr_line`]). A
//! host that has a log of its own installs a process-wide sink with [`set_sink`]: the plugin
//! EP (`provider`) forwards the messages to ONNX Runtime's loggers, so they follow the user's
//! `log_severity_level` instead of always reaching stderr (docs/provider.md, "Log lines").
//!
//! The messages are rare (most once per process), so the sink sits behind an `RwLock` that is
//! only read to clone an `Arc` out of it; the sink itself runs after the lock is released, so
//! a sink may log, block or take its own locks without holding up [`set_sink`].

use std::sync::{Arc, RwLock};

/// How important a message is (mapped by a sink onto its host's levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Status: which path runs ("ready", "through cuBLAS", "using the CPU kernels").
    Info,
    /// Something degraded or failed that the caller cannot see otherwise (a refused launch
    /// configuration, a failed device allocation).
    Warning,
}

/// A sink for messages: the level and the whole line (it starts with `mxfuse: `).
pub type Sink = dyn Fn(Level, &str) + Send + Sync;

static SINK: RwLock<Option<Arc<Sink>>> = RwLock::new(None);

/// Sends every later message to `sink` instead of stderr (replacing any sink installed before).
pub fn set_sink(sink: impl Fn(Level, &str) + Send + Sync + 'static) {
    *SINK.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(sink));
}

/// Back to stderr.
pub fn clear_sink() {
    *SINK.write().unwrap_or_else(|e| e.into_inner()) = None;
}

/// Whether a sink is installed.
pub fn has_sink() -> bool {
    SINK.read().unwrap_or_else(|e| e.into_inner()).is_some()
}

/// The line written to stderr when no sink is installed: the message itself, whatever its
/// level (the wording before sinks existed; tests and docs quote it).
pub fn stderr_line(_level: Level, message: &str) -> String {
    message.to_string()
}

/// Writes `message` to stderr as [`stderr_line`] words it, whether or not a sink is installed
/// (for a sink that has nowhere else to put it).
pub fn to_stderr(level: Level, message: &str) {
    eprintln!("{}", stderr_line(level, message));
}

/// Sends `message` at `level` to the sink, or to stderr without one.
pub fn log(level: Level, message: &str) {
    let sink = SINK.read().unwrap_or_else(|e| e.into_inner()).clone();
    match sink {
        Some(sink) => sink(level, message),
        None => to_stderr(level, message),
    }
}

/// [`log`] at [`Level::Info`].
pub fn info(message: &str) {
    log(Level::Info, message)
}

/// [`log`] at [`Level::Warning`].
pub fn warn(message: &str) {
    log(Level::Warning, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Tests in this binary that install a sink run one at a time (the sink is process-wide);
    /// other tests' messages may still arrive, so each checks only its own.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn an_installed_sink_receives_the_message_and_its_level() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let got: Arc<Mutex<Vec<(Level, String)>>> = Arc::default();
        let into = got.clone();
        set_sink(move |level, message| {
            if message.contains("log-test-sink") {
                into.lock().unwrap().push((level, message.to_string()));
            }
        });
        assert!(has_sink());
        info("mxfuse: log-test-sink ready");
        warn("mxfuse: log-test-sink refused");
        log(Level::Info, "mxfuse: log-test-sink again");
        clear_sink();
        assert!(!has_sink());
        // After clearing, nothing reaches the old sink (this one goes to stderr).
        info("mxfuse: log-test-sink after clear_sink (expected on stderr)");
        assert_eq!(
            *got.lock().unwrap(),
            vec![
                (Level::Info, "mxfuse: log-test-sink ready".to_string()),
                (Level::Warning, "mxfuse: log-test-sink refused".to_string()),
                (Level::Info, "mxfuse: log-test-sink again".to_string()),
            ]
        );
    }

    #[test]
    fn a_sink_may_log_and_replace_the_sink_from_inside() {
        // The sink runs outside the lock: re-entering `log` / `set_sink` must not deadlock.
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let got: Arc<Mutex<Vec<String>>> = Arc::default();
        let into = got.clone();
        set_sink(move |_, message| {
            if message == "mxfuse: log-test-reentry outer" {
                into.lock().unwrap().push(message.to_string());
                let inner = into.clone();
                set_sink(move |_, m| {
                    if m.contains("log-test-reentry") {
                        inner.lock().unwrap().push(m.to_string())
                    }
                });
                info("mxfuse: log-test-reentry inner");
            }
        });
        info("mxfuse: log-test-reentry outer");
        clear_sink();
        assert_eq!(
            *got.lock().unwrap(),
            vec![
                "mxfuse: log-test-reentry outer".to_string(),
                "mxfuse: log-test-reentry inner".to_string()
            ]
        );
    }

    #[test]
    fn without_a_sink_the_stderr_line_is_the_message_unchanged() {
        for level in [Level::Info, Level::Warning] {
            assert_eq!(
                stderr_line(level, "mxfuse: MXFUSE_GPU=off: using the CPU kernels"),
                "mxfuse: MXFUSE_GPU=off: using the CPU kernels"
            );
        }
    }
}
