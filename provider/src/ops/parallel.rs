//! Parallelism for the kernels: ONNX Runtime's intra-op thread pool (through
//! `KernelContext_ParallelFor`) or the `threads` provider option.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kernels::{Parallel, Serial, ThreadPool};
use ort_sys::{OrtApi, OrtKernelContext};

use crate::error::{Error, Result};
use crate::ffi::api::{api, check};

/// How kernels run in parallel, chosen once per session from the `threads` option.
#[derive(Clone, Default)]
pub enum Parallelism {
    /// ORT's intra-op thread pool (the default; honours `intra_op_num_threads`).
    #[default]
    OrtPool,
    /// One thread.
    Serial,
    /// The kernels crate's persistent pool, owned by the EP instance (one per session).
    Pool(Arc<ThreadPool>),
}

impl Parallelism {
    /// From the `threads` option: 0 = ORT's pool, 1 = serial, N = a pool of N threads; an
    /// error (and no thread left running) when the OS will not start them.
    pub fn from_threads(threads: usize) -> Result<Self> {
        Ok(match threads {
            0 => Parallelism::OrtPool,
            1 => Parallelism::Serial,
            n => Parallelism::Pool(Arc::new(ThreadPool::try_new(n).map_err(|e| {
                Error::Ort(format!(
                    "provider option threads = {n}: could not start the kernel threads: {e}"
                ))
            })?)),
        })
    }

    /// Runs `f` with the `Parallel` this choice stands for in kernel context `ctx`.
    pub fn with<R>(&self, ctx: *mut OrtKernelContext, f: impl FnOnce(&dyn Parallel) -> R) -> R {
        match self {
            Parallelism::OrtPool => match api() {
                Ok(api) => f(&OrtParallel { api: api.ort, ctx }),
                Err(_) => f(&Serial),
            },
            Parallelism::Serial => f(&Serial),
            Parallelism::Pool(pool) => f(pool.as_ref()),
        }
    }
}

/// [`Parallel`] over `KernelContext_ParallelFor`.
pub struct OrtParallel {
    api: &'static OrtApi,
    ctx: *mut OrtKernelContext,
}

// SAFETY: the context is only used to schedule work during the Compute call that owns it; ORT's
// thread pool is thread-safe.
unsafe impl Sync for OrtParallel {}

struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    panicked: AtomicBool,
}

/// Called on ORT's worker threads: a panic must not unwind into ORT, so it is recorded and
/// re-raised on the calling thread (where the FFI guard turns it into a status).
unsafe extern "C" fn trampoline(data: *mut c_void, i: usize) {
    let job = &*(data as *const Job<'_>);
    if catch_unwind(AssertUnwindSafe(|| (job.f)(i))).is_err() {
        job.panicked.store(true, Ordering::Relaxed);
    }
}

impl Parallel for OrtParallel {
    fn for_each(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if n <= 1 {
            return (0..n).for_each(f);
        }
        let job = Job {
            f,
            panicked: AtomicBool::new(false),
        };
        // SAFETY: `job` outlives the call, which returns after every invocation finished.
        let status = unsafe {
            (self.api.KernelContext_ParallelFor)(
                self.ctx,
                trampoline,
                n,
                0,
                &job as *const Job<'_> as *mut c_void,
            )
        };
        if check(status).is_err() {
            // No pool available (should not happen on the CPU EP): run inline.
            return (0..n).for_each(f);
        }
        if job.panicked.load(Ordering::Relaxed) {
            panic!("a kernel task panicked on an ONNX Runtime worker thread");
        }
    }

    fn concurrency(&self) -> usize {
        kernels::parallel::available_threads()
    }
}
