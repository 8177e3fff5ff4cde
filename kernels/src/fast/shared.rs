//! Disjoint mutable access to one output buffer from several tasks; slices and norm outputs
//! viewed with the element type a type check proved they have.

use std::marker::PhantomData;

#[cfg(target_arch = "x86_64")]
use crate::slices::NormOutputs;

/// A mutable slice that tasks of one parallel call carve into disjoint pieces.
pub struct SharedMut<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: tasks only reach the data through `piece`, whose contract demands disjoint ranges, so
// no two threads alias an element; T: Send lets the pieces move to other threads.
unsafe impl<T: Send> Sync for SharedMut<'_, T> {}
unsafe impl<T: Send> Send for SharedMut<'_, T> {}

impl<'a, T> SharedMut<'a, T> {
    pub fn new(data: &'a mut [T]) -> Self {
        Self {
            ptr: data.as_mut_ptr(),
            len: data.len(),
            _borrow: PhantomData,
        }
    }

    /// The elements `start..end`.
    ///
    /// # Safety
    /// Ranges handed out while any of them is alive must not overlap.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn piece(&self, start: usize, end: usize) -> &mut [T] {
        assert!(
            start <= end && end <= self.len,
            "piece {start}..{end} of {}",
            self.len
        );
        std::slice::from_raw_parts_mut(self.ptr.add(start), end - start)
    }
}

/// `out` viewed with element type `U`, which is `T` (checked by the caller).
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn cast_outputs<T, U>(out: NormOutputs<'_, T>) -> NormOutputs<'_, U> {
    let cast = |s: &mut [T]| std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut U, s.len());
    NormOutputs {
        q: out.q,
        scales: out.scales,
        residual_out: out.residual_out.map(cast),
        normed: out.normed.map(cast),
    }
}

/// `x` viewed with element type `U`, which is `T` (checked by the caller).
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn cast_slice<T, U>(x: &[T]) -> &[U] {
    std::slice::from_raw_parts(x.as_ptr() as *const U, x.len())
}
