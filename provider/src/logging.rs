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

/// Where a kernel message can be written: an ORT logger, or a stand-in in tests.
pub trait LogTarget {
    /// Whether a message at `level` would be written.
    fn admits(&self, level: kernels::log::Level) -> bool;
    /// Writes `message` at `level` (only called where [`LogTarget::admits`] said so).
    fn write(&self, level: kernels::log::Level, message: &str);
}

/// `kernels::log` levels on ORT's.
pub fn ort_level(level: kernels::log::Level) -> OrtLoggingLevel {
    match level {
        kernels::log::Level::Info => OrtLoggingLevel::ORT_LOGGING_LEVEL_INFO,
        kernels::log::Level::Warning => OrtLoggingLevel::ORT_LOGGING_LEVEL_WARNING,
    }
}

impl LogTarget for Logger {
    fn admits(&self, level: kernels::log::Level) -> bool {
        self.enabled(ort_level(level))
    }
    fn write(&self, level: kernels::log::Level, message: &str) {
        self.log(ort_level(level), message)
    }
}

/// How many messages [`Routes`] keeps for a later session (the registration-time ones are one
/// or two lines; a bound so that a process that never creates a session cannot grow it).
pub const KEPT_MAX: usize = 32;

/// Where the `kernels` crate's status lines (`kernels::log`) go when the library runs as a
/// plugin EP.
///
/// Why this shape: the sink is process-wide but ORT's loggers are not. A session's logger is
/// valid only while its EP lives (ORT destroys the session's EPs before its logger), the
/// environment's default logger (the one `CreateEpFactories` receives) while our factory does,
/// and several sessions may live at once. So the loggers are registered here for exactly those
/// lifetimes (`SessionRoute` with the EP, `set_default` / `clear_default` with the factory),
/// and a message is written under the lock that unregistration takes: a logger whose session
/// was released is never called. The routing:
/// * while sessions live: the newest live session's logger whose severity admits the message
///   (the messages are about the process-wide GPU runtime, not one session);
/// * else, with a factory: the environment's default logger if its severity admits the
///   message, otherwise the message is kept (up to [`KEPT_MAX`]) and written to the first
///   later session's logger that admits it, when that session's EP is created. That is where
///   the registration-time line ("no GPU runtime ...", from `GetSupportedDevices` inside
///   `RegisterExecutionProviderLibrary`, before any session exists) goes: a session created
///   with `log_severity_level=0` shows it, one at 3 does not, and it is written at most once;
/// * else (no logger at all: the factory was released and no session lives): stderr, as
///   without a sink.
pub struct Routes<T> {
    /// Live sessions' loggers by route id, oldest first.
    sessions: Vec<(u64, T)>,
    /// The environment's default logger while our factory lives.
    default: Option<T>,
    /// Messages no logger admitted yet, oldest first, and how many more were not kept.
    kept: Vec<(kernels::log::Level, String)>,
    not_kept: usize,
}

/// What [`Routes::route`] did with a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Routed {
    Written,
    /// No live logger admits it (sessions live) or it waits for a session (kept or counted).
    Withheld,
    /// No logger at all: the caller writes it to stderr.
    NoLogger,
}

impl<T: LogTarget> Routes<T> {
    pub const fn new() -> Self {
        Routes {
            sessions: Vec::new(),
            default: None,
            kept: Vec::new(),
            not_kept: 0,
        }
    }

    pub fn route(&mut self, level: kernels::log::Level, message: &str) -> Routed {
        if !self.sessions.is_empty() {
            if let Some((_, t)) = self.sessions.iter().rev().find(|(_, t)| t.admits(level)) {
                t.write(level, message);
                return Routed::Written;
            }
            return Routed::Withheld;
        }
        let Some(default) = &self.default else {
            return Routed::NoLogger;
        };
        if default.admits(level) {
            default.write(level, message);
            return Routed::Written;
        }
        if self.kept.len() < KEPT_MAX {
            self.kept.push((level, message.to_string()));
        } else {
            self.not_kept += 1;
        }
        Routed::Withheld
    }

    /// Registers a session's logger (route `id`) and writes to it the kept messages it admits.
    pub fn add_session(&mut self, id: u64, target: T) {
        self.write_kept(&target);
        if self.not_kept > 0 && target.admits(kernels::log::Level::Info) {
            target.write(
                kernels::log::Level::Info,
                &format!(
                    "mxfuse: {} more line(s) logged before this session were not kept",
                    self.not_kept
                ),
            );
            self.not_kept = 0;
        }
        self.sessions.push((id, target));
    }

    pub fn remove_session(&mut self, id: u64) {
        self.sessions.retain(|(i, _)| *i != id);
    }

    /// The environment's default logger (from `CreateEpFactories`); kept messages it admits
    /// are written to it now.
    pub fn set_default(&mut self, target: T) {
        self.write_kept(&target);
        self.default = Some(target);
    }

    /// Writes to `target` the kept messages it admits; the others stay kept.
    fn write_kept(&mut self, target: &T) {
        self.kept.retain(|(level, message)| {
            let admitted = target.admits(*level);
            if admitted {
                target.write(*level, message);
            }
            !admitted
        });
    }

    pub fn clear_default(&mut self) {
        self.default = None;
    }

    /// How many messages wait for a session.
    pub fn kept(&self) -> usize {
        self.kept.len()
    }
}

impl<T: LogTarget> Default for Routes<T> {
    fn default() -> Self {
        Self::new()
    }
}

static ROUTES: std::sync::Mutex<Routes<Logger>> = std::sync::Mutex::new(Routes::new());

fn routes() -> std::sync::MutexGuard<'static, Routes<Logger>> {
    ROUTES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The `kernels::log` sink of the plugin EP ([`Routes`]). The ORT logger is called under the
/// routes' lock, so a session being released waits until the message is written.
fn forward(level: kernels::log::Level, message: &str) {
    let routed = routes().route(level, message);
    if routed == Routed::NoLogger {
        kernels::log::to_stderr(level, message);
    }
}

/// `CreateEpFactories`: the kernels' messages go to ORT's loggers from now on; `default` is the
/// environment's logger ORT passed (NULL: none).
pub fn install_kernel_sink(default: *const OrtLogger) {
    {
        let mut r = routes();
        if default.is_null() {
            r.clear_default();
        } else {
            r.set_default(Logger::new(default));
        }
    }
    kernels::log::set_sink(forward);
}

/// `ReleaseEpFactory`: the environment's logger is not used after the factory is gone (the
/// sink stays: live sessions may still log, and without any logger it writes to stderr).
pub fn release_default_logger() {
    routes().clear_default();
}

/// A session's logger registered with the kernels' sink for as long as this lives (a field of
/// the session's EP).
#[derive(Debug)]
pub struct SessionRoute(Option<u64>);

impl SessionRoute {
    /// Registers `logger` (nothing for NULL) and writes to it the messages kept for a session.
    pub fn new(logger: *const OrtLogger) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        if logger.is_null() {
            return SessionRoute(None);
        }
        let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        routes().add_session(id, Logger::new(logger));
        SessionRoute(Some(id))
    }
}

impl Drop for SessionRoute {
    fn drop(&mut self) {
        if let Some(id) = self.0 {
            routes().remove_session(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels::log::Level;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// A logger at `min` severity recording what it writes.
    #[derive(Clone)]
    struct Fake {
        min: Level,
        lines: Rc<RefCell<Vec<(Level, String)>>>,
    }

    impl Fake {
        fn at(min: Level) -> Self {
            Fake {
                min,
                lines: Rc::default(),
            }
        }
        fn got(&self) -> Vec<(Level, String)> {
            self.lines.borrow().clone()
        }
    }

    impl LogTarget for Fake {
        fn admits(&self, level: Level) -> bool {
            level >= self.min
        }
        fn write(&self, level: Level, message: &str) {
            self.lines.borrow_mut().push((level, message.to_string()));
        }
    }

    const NO_GPU: &str = "mxfuse: no GPU runtime (libcuda.so.1 not found): using the CPU kernels";

    #[test]
    fn levels_map_onto_ort() {
        assert_eq!(
            ort_level(Level::Info),
            OrtLoggingLevel::ORT_LOGGING_LEVEL_INFO
        );
        assert_eq!(
            ort_level(Level::Warning),
            OrtLoggingLevel::ORT_LOGGING_LEVEL_WARNING
        );
    }

    #[test]
    fn without_any_logger_the_caller_writes_stderr() {
        let mut r = Routes::<Fake>::new();
        assert_eq!(r.route(Level::Info, NO_GPU), Routed::NoLogger);
        assert_eq!(r.kept(), 0);
    }

    #[test]
    fn a_registration_line_waits_for_the_first_session_that_admits_it() {
        let mut r = Routes::new();
        // The environment's logger at WARNING (ORT's default) does not take an INFO line.
        let env = Fake::at(Level::Warning);
        r.set_default(env.clone());
        assert_eq!(r.route(Level::Info, NO_GPU), Routed::Withheld);
        assert_eq!(r.route(Level::Warning, "mxfuse: w"), Routed::Written);
        assert_eq!(env.got(), vec![(Level::Warning, "mxfuse: w".to_string())]);
        // A session at WARNING: not written there, still kept.
        let quiet = Fake::at(Level::Warning);
        r.add_session(1, quiet.clone());
        assert!(quiet.got().is_empty());
        assert_eq!(r.kept(), 1);
        r.remove_session(1);
        // A verbose session gets it, once.
        let verbose = Fake::at(Level::Info);
        r.add_session(2, verbose.clone());
        assert_eq!(verbose.got(), vec![(Level::Info, NO_GPU.to_string())]);
        assert_eq!(r.kept(), 0);
        let again = Fake::at(Level::Info);
        r.add_session(3, again.clone());
        assert!(again.got().is_empty());
    }

    #[test]
    fn a_default_logger_that_admits_the_line_writes_it_and_nothing_is_kept() {
        let mut r = Routes::new();
        let env = Fake::at(Level::Info);
        r.set_default(env.clone());
        assert_eq!(r.route(Level::Info, NO_GPU), Routed::Written);
        assert_eq!(r.kept(), 0);
        let session = Fake::at(Level::Info);
        r.add_session(1, session.clone());
        assert!(
            session.got().is_empty(),
            "written once, by the env's logger"
        );
    }

    #[test]
    fn with_sessions_the_newest_that_admits_it_writes_and_released_ones_are_never_called() {
        let mut r = Routes::new();
        r.set_default(Fake::at(Level::Info));
        let (a, b, c) = (
            Fake::at(Level::Info),
            Fake::at(Level::Warning),
            Fake::at(Level::Info),
        );
        r.add_session(1, a.clone());
        r.add_session(2, b.clone());
        assert_eq!(r.route(Level::Info, "mxfuse: ready"), Routed::Written);
        assert_eq!(r.route(Level::Warning, "mxfuse: refused"), Routed::Written);
        assert_eq!(a.got(), vec![(Level::Info, "mxfuse: ready".to_string())]);
        assert_eq!(
            b.got(),
            vec![(Level::Warning, "mxfuse: refused".to_string())]
        );
        r.add_session(3, c.clone());
        r.remove_session(3);
        r.remove_session(1);
        // Only b lives, and it does not admit INFO: dropped, not kept, not sent to c or a.
        assert_eq!(r.route(Level::Info, "mxfuse: late"), Routed::Withheld);
        assert_eq!(r.kept(), 0);
        assert!(c.got().is_empty());
        assert_eq!(a.got().len(), 1);
        r.remove_session(2);
        r.clear_default();
        assert_eq!(r.route(Level::Info, "mxfuse: after"), Routed::NoLogger);
    }

    #[test]
    fn at_most_kept_max_lines_wait_and_the_rest_are_counted() {
        let mut r = Routes::new();
        r.set_default(Fake::at(Level::Warning));
        for i in 0..KEPT_MAX + 5 {
            assert_eq!(
                r.route(Level::Info, &format!("mxfuse: {i}")),
                Routed::Withheld
            );
        }
        assert_eq!(r.kept(), KEPT_MAX);
        let s = Fake::at(Level::Info);
        r.add_session(1, s.clone());
        let got = s.got();
        assert_eq!(got.len(), KEPT_MAX + 1);
        assert_eq!(got[0].1, "mxfuse: 0");
        assert_eq!(
            got[KEPT_MAX].1,
            "mxfuse: 5 more line(s) logged before this session were not kept"
        );
    }

    #[test]
    fn a_null_session_logger_registers_nothing() {
        let route = SessionRoute::new(std::ptr::null());
        assert!(route.0.is_none());
    }
}
