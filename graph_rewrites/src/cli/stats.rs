//! `--stats`: wall time per phase and the process's peak resident memory.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Wall times of the phases of one command.
#[derive(Debug)]
pub struct PhaseTimer {
    start: Instant,
    last: Instant,
    phases: Vec<(&'static str, Duration)>,
}

impl PhaseTimer {
    pub fn start() -> PhaseTimer {
        let now = Instant::now();
        PhaseTimer {
            start: now,
            last: now,
            phases: Vec::new(),
        }
    }

    /// Ends the current phase under `name`.
    pub fn lap(&mut self, name: &'static str) {
        let now = Instant::now();
        self.phases.push((name, now - self.last));
        self.last = now;
    }

    /// One line: `stats: load 0.012 s, ..., total 0.030 s, peak RSS 11.2 MiB`. The line is
    /// parsed by `benches/rewrite_io.rs`; keep its shape.
    pub fn summary(&self) -> String {
        let mut out = String::from("stats:");
        for (name, d) in &self.phases {
            let _ = write!(out, " {name} {:.3} s,", d.as_secs_f64());
        }
        let _ = write!(out, " total {:.3} s", self.start.elapsed().as_secs_f64());
        match peak_rss_bytes() {
            Some(b) => {
                let _ = write!(out, ", peak RSS {:.1} MiB", b as f64 / (1u64 << 20) as f64);
            }
            None => out.push_str(", peak RSS n/a"),
        }
        out
    }
}

/// Peak resident set size of this process (`VmHWM` of /proc/self/status); `None` where that
/// file does not exist (non-Linux).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
