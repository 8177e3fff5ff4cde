//! A persistent thread pool implementing [`Parallel`]: workers sleep on a condvar between calls
//! (after a short spin), so a kernel call of a few tens of microseconds can still use every core —
//! spawning threads per call ([`crate::StdThreads`]) costs about as much as such a call.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::parallel::Parallel;

/// How long an idle worker polls for the next job before sleeping.
const SPIN: Duration = Duration::from_micros(30);

/// The task closure of the running job, lifetime-erased (see `for_each`).
#[derive(Clone, Copy)]
struct JobPtr(*const (dyn Fn(usize) + Sync + 'static));
// SAFETY: the pointee is Sync and `for_each` keeps it alive until every worker has left the job.
unsafe impl Send for JobPtr {}

struct Slot {
    job: Option<JobPtr>,
    n: usize,
    shutdown: bool,
    panicked: bool,
}

struct Inner {
    slot: Mutex<Slot>,
    work: Condvar,
    done: Condvar,
    /// Bumped once per job; workers poll it while spinning.
    epoch: AtomicU64,
    /// Next task index of the current job.
    next: AtomicUsize,
    /// Workers still inside the current job (the caller spins on it before sleeping).
    running: AtomicUsize,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        // A panic never happens while the lock is held, but stay usable if one did.
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Runs tasks of the current job until none are left.
fn drain(next: &AtomicUsize, n: usize, f: &(dyn Fn(usize) + Sync)) {
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            return;
        }
        f(i);
    }
}

fn worker(inner: Arc<Inner>) {
    let mut seen = 0u64;
    loop {
        let spin_until = Instant::now() + SPIN;
        while inner.epoch.load(Ordering::Acquire) == seen && Instant::now() < spin_until {
            std::hint::spin_loop();
        }
        let (job, n) = {
            let mut s = inner.lock();
            while !s.shutdown && inner.epoch.load(Ordering::Acquire) == seen {
                s = inner.work.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            if s.shutdown {
                return;
            }
            seen = inner.epoch.load(Ordering::Acquire);
            (s.job.expect("a job is published with its epoch"), s.n)
        };
        // SAFETY: `for_each` does not return (or unwind) before `running` drops to 0 below.
        let f = unsafe { &*job.0 };
        let ok = catch_unwind(AssertUnwindSafe(|| drain(&inner.next, n, f))).is_ok();
        let mut s = inner.lock();
        s.panicked |= !ok;
        // Decrement under the lock so a caller that checked `running` under it and went to
        // sleep is woken by this notify.
        if inner.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            inner.done.notify_all();
        }
    }
}

/// A fixed set of worker threads plus the calling thread. Calls from several threads are
/// serialised; a task must not call `for_each` on the same pool (that would deadlock).
pub struct ThreadPool {
    inner: Arc<Inner>,
    workers: Vec<JoinHandle<()>>,
    /// Serialises concurrent `for_each` calls on one pool.
    call: Mutex<()>,
}

impl ThreadPool {
    /// A pool that runs tasks on `threads` threads in total (the caller + `threads - 1` workers).
    /// Panics if a worker cannot be started; [`ThreadPool::try_new`] reports it instead.
    pub fn new(threads: usize) -> Self {
        Self::try_new(threads).expect("spawning a kernel worker thread")
    }

    /// As [`ThreadPool::new`], or the error of the first worker the OS would not start (the
    /// workers already started are stopped and joined before it returns: none is left behind).
    pub fn try_new(threads: usize) -> std::io::Result<Self> {
        let inner = Arc::new(Inner {
            slot: Mutex::new(Slot {
                job: None,
                n: 0,
                shutdown: false,
                panicked: false,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            epoch: AtomicU64::new(0),
            next: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
        });
        let mut pool = Self {
            inner,
            workers: Vec::new(),
            call: Mutex::new(()),
        };
        for i in 1..threads.max(1) {
            let inner = Arc::clone(&pool.inner);
            let worker = std::thread::Builder::new()
                .name(format!("mxfuse-kernels-{i}"))
                .spawn(move || worker(inner))?; // `pool` drops here: its Drop joins the others
            pool.workers.push(worker);
        }
        Ok(pool)
    }

    /// One thread per available CPU.
    pub fn available() -> Self {
        Self::new(crate::parallel::available_threads())
    }

    /// A process-wide pool sized to the machine, created on first use.
    pub fn global() -> &'static ThreadPool {
        static POOL: OnceLock<ThreadPool> = OnceLock::new();
        POOL.get_or_init(ThreadPool::available)
    }
}

/// Waits (also while unwinding) until every worker has left the current job.
struct WaitForWorkers<'a>(&'a Inner);

impl Drop for WaitForWorkers<'_> {
    fn drop(&mut self) {
        let spin_until = Instant::now() + SPIN;
        while self.0.running.load(Ordering::Acquire) > 0 && Instant::now() < spin_until {
            std::hint::spin_loop();
        }
        let mut s = self.0.lock();
        while self.0.running.load(Ordering::Acquire) > 0 {
            s = self.0.done.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.job = None;
    }
}

impl Parallel for ThreadPool {
    fn for_each(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if self.workers.is_empty() || n <= 1 {
            return (0..n).for_each(f);
        }
        let _call = self.call.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: only the lifetime is erased; WaitForWorkers keeps this call from returning or
        // unwinding while any worker may still use the pointer.
        let job = JobPtr(unsafe {
            std::mem::transmute::<
                *const (dyn Fn(usize) + Sync + '_),
                *const (dyn Fn(usize) + Sync + 'static),
            >(f)
        });
        {
            let mut s = self.inner.lock();
            s.job = Some(job);
            s.n = n;
            self.inner
                .running
                .store(self.workers.len(), Ordering::Relaxed);
            s.panicked = false;
            self.inner.next.store(0, Ordering::Relaxed);
            self.inner.epoch.fetch_add(1, Ordering::Release);
        }
        self.inner.work.notify_all();
        let wait = WaitForWorkers(&self.inner);
        drain(&self.inner.next, n, f);
        drop(wait);
        if self.inner.lock().panicked {
            panic!("a kernel task panicked on a pool worker");
        }
    }

    fn concurrency(&self) -> usize {
        self.workers.len() + 1
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.inner.lock().shutdown = true;
        self.inner.work.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_new_builds_the_same_pool() {
        let pool = ThreadPool::try_new(3).unwrap();
        assert_eq!(pool.concurrency(), 3);
        let hits = AtomicUsize::new(0);
        pool.for_each(10, &|_| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(hits.load(Ordering::Relaxed), 10);
    }

    #[test]
    fn runs_every_task_once_across_many_calls() {
        let pool = ThreadPool::new(3);
        for n in [0, 1, 2, 7, 100] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            for _ in 0..50 {
                pool.for_each(n, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
            }
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 50));
        }
    }

    #[test]
    fn a_worker_panic_reaches_the_caller_and_the_pool_survives() {
        let pool = ThreadPool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.for_each(64, &|i| {
                if i == 63 {
                    panic!("task failure");
                }
            })
        }));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        pool.for_each(10, &|_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 10);
    }
}
