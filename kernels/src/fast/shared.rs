//! Disjoint mutable access to one output buffer from several tasks.

use std::marker::PhantomData;

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
