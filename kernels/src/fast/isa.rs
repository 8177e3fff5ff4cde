//! Which instruction set the fast kernels use: AVX2+FMA+F16C when the CPU has them (checked at
//! run time), the portable scalar path otherwise or when a caller forces it (tests, A/B runs).

use std::cell::Cell;

/// The code path a fast kernel takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Portable,
    Avx2,
}

thread_local! {
    static FORCE_PORTABLE: Cell<bool> = const { Cell::new(false) };
}

impl Isa {
    /// The best path for this CPU, unless the calling thread is inside [`with_portable`].
    pub fn detect() -> Isa {
        if FORCE_PORTABLE.with(Cell::get) {
            return Isa::Portable;
        }
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }
}

/// Runs `f` with the fast kernels called from this thread restricted to the portable path.
pub fn with_portable<R>(f: impl FnOnce() -> R) -> R {
    let prev = FORCE_PORTABLE.with(|c| c.replace(true));
    let out = f();
    FORCE_PORTABLE.with(|c| c.set(prev));
    out
}
