//! The thread-pool seam: kernels split their work into `n` independent tasks and hand them to a
//! [`Parallel`] implementation, so the provider can later pass ORT's intra-op pool instead.

/// CPUs this process may run on (`std::thread::available_parallelism`, at least 1), read once.
///
/// The std call is not cheap on Linux: it reads the process's cgroup files (`/proc/self/cgroup`,
/// the cgroup's `cpu.max`) on every call. Asked once per parallel call (ORT's pool in the
/// provider sizes its split with it), it took 3.6 % of the samples of a decoder step at M = 8
/// (~0.9 ms of a 13 ms step, on the calling thread while the worker waited; BENCHMARKS.md,
/// ONNX Runtime, "2026-12-01, session 14 (later)"). A CPU affinity or cgroup limit changed after the
/// first call is not seen.
pub fn available_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Runs `f(0)`, …, `f(n-1)`, possibly concurrently, and returns when all have finished.
pub trait Parallel: Sync {
    /// Executes every task index in `0..n` exactly once.
    fn for_each(&self, n: usize, f: &(dyn Fn(usize) + Sync));
    /// How many tasks may run at once (used to size the split).
    fn concurrency(&self) -> usize;
}

/// Runs every task on the calling thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct Serial;

impl Parallel for Serial {
    fn for_each(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        (0..n).for_each(f);
    }
    fn concurrency(&self) -> usize {
        1
    }
}

/// Spawns scoped std threads per call (the caller's thread works too). Cheap enough for the
/// sizes the fused ops see; a persistent pool can replace it through the trait.
#[derive(Debug, Clone, Copy)]
pub struct StdThreads {
    threads: usize,
}

impl StdThreads {
    /// A pool of `threads` workers (at least 1).
    pub fn new(threads: usize) -> Self {
        Self {
            threads: threads.max(1),
        }
    }

    /// One worker per available CPU.
    pub fn available() -> Self {
        Self::new(available_threads())
    }
}

impl Default for StdThreads {
    fn default() -> Self {
        Self::available()
    }
}

impl Parallel for StdThreads {
    fn for_each(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        let workers = self.threads.min(n);
        if workers <= 1 {
            return (0..n).for_each(f);
        }
        // Static interleaved split: task i goes to worker i % workers.
        std::thread::scope(|s| {
            for w in 1..workers {
                s.spawn(move || (w..n).step_by(workers).for_each(f));
            }
            (0..n).step_by(workers).for_each(f);
        });
    }
    fn concurrency(&self) -> usize {
        self.threads
    }
}

/// Chunks per thread of [`for_row_chunks`]: a few, so a thread that starts late (descheduled,
/// or still spinning up) leaves its share to the others instead of stalling the call.
const CHUNKS_PER_THREAD: usize = 4;

/// Splits `rows` into at most `CHUNKS_PER_THREAD · par.concurrency()` contiguous chunks of at
/// least `min_rows` rows and runs `f(start, end)` for each chunk.
pub fn for_row_chunks(
    par: &dyn Parallel,
    rows: usize,
    min_rows: usize,
    f: &(dyn Fn(usize, usize) + Sync),
) {
    if rows == 0 {
        return;
    }
    let max_chunks = rows.div_ceil(min_rows.max(1));
    let chunks = (par.concurrency() * CHUNKS_PER_THREAD).clamp(1, max_chunks);
    let per = rows.div_ceil(chunks);
    par.for_each(chunks, &|c| {
        let start = c * per;
        let end = (start + per).min(rows);
        if start < end {
            f(start, end);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_task_runs_once() {
        for par in [&Serial as &dyn Parallel, &StdThreads::new(3)] {
            let hits: Vec<AtomicUsize> = (0..17).map(|_| AtomicUsize::new(0)).collect();
            par.for_each(17, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn row_chunks_cover_all_rows() {
        let covered = AtomicUsize::new(0);
        for_row_chunks(&StdThreads::new(4), 10, 3, &|s, e| {
            covered.fetch_add(e - s, Ordering::Relaxed);
        });
        assert_eq!(covered.load(Ordering::Relaxed), 10);
    }
}
