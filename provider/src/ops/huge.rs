//! Byte buffers for prepacked weights, in transparent huge pages where the kernel grants them.
//!
//! A decoder step streams every weight once from DRAM (176 MB for the 4-layer MiniMax-M3 TP4
//! stack): with 4 KiB pages that is a TLB miss every 4 KiB, and under a hypervisor each miss is
//! a two-level page walk. 2 MiB pages cut the misses 512-fold. Linux grants them to an anonymous
//! mapping that asks (`madvise(MADV_HUGEPAGE)`, THP in `madvise` mode) and is 2 MiB aligned;
//! where it does not (THP off, no free huge page, not Linux) the buffer is ordinary memory.
//! The cost: up to one 2 MiB page per buffer of padding (the size is rounded up to the granule).
//! The bytes are written straight into the buffer by its producer (the prepack's transpose), so
//! no extra copy of a weight is made.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::mem::MaybeUninit;
use std::ops::Deref;
use std::ptr::NonNull;

/// Alignment and size granule of a huge page on x86-64 Linux.
const HUGE: usize = 2 << 20;
/// Smaller buffers are not worth a 2 MiB granule.
const MIN_HUGE_LEN: usize = HUGE;

/// An immutable byte buffer, written once by the function that builds it.
pub(crate) struct HugeBytes {
    ptr: NonNull<u8>,
    len: usize,
    layout: Option<Layout>,
}

// SAFETY: an owned, immutable heap buffer.
unsafe impl Send for HugeBytes {}
unsafe impl Sync for HugeBytes {}

#[cfg(target_os = "linux")]
fn advise_huge(ptr: *mut u8, len: usize) {
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    const MADV_HUGEPAGE: i32 = 14;
    // SAFETY: [ptr, ptr + len) is one 2 MiB aligned allocation of ours; a failure (THP not
    // configured) leaves ordinary pages, which is fine.
    unsafe { madvise(ptr.cast(), len, MADV_HUGEPAGE) };
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_: *mut u8, _: usize) {}

impl HugeBytes {
    /// A `len`-byte buffer whose bytes `fill` writes; ≥ 2 MiB in a 2 MiB aligned allocation
    /// advised for huge pages before its first touch (`fill`'s writes fault the pages in).
    ///
    /// # Safety
    /// `fill` must initialise every byte of the slice it is given.
    pub(crate) unsafe fn init_with(len: usize, fill: impl FnOnce(&mut [MaybeUninit<u8>])) -> Self {
        if len < MIN_HUGE_LEN {
            let mut v = Vec::with_capacity(len);
            fill(&mut v.spare_capacity_mut()[..len]);
            // SAFETY: `fill` initialised the first `len` bytes (the caller's contract).
            unsafe { v.set_len(len) };
            let b: Box<[u8]> = v.into_boxed_slice();
            // SAFETY: a Box's pointer is non-null; reclaimed in Drop through Box::from_raw.
            let ptr = unsafe { NonNull::new_unchecked(Box::into_raw(b).cast::<u8>()) };
            return HugeBytes {
                ptr,
                len,
                layout: None,
            };
        }
        let size = len.next_multiple_of(HUGE);
        let layout = Layout::from_size_align(size, HUGE).expect("a 2 MiB aligned layout");
        // SAFETY: non-zero size.
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        advise_huge(raw, size);
        // SAFETY: `size ≥ len` bytes allocated above and owned here; MaybeUninit needs no
        // initialisation, and `fill` initialises all `len` (the caller's contract).
        fill(unsafe { std::slice::from_raw_parts_mut(raw.cast::<MaybeUninit<u8>>(), len) });
        HugeBytes {
            ptr,
            len,
            layout: Some(layout),
        }
    }
}

impl Deref for HugeBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes at `ptr`, owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for HugeBytes {
    fn drop(&mut self) {
        match self.layout {
            // SAFETY: allocated in init_with with this layout.
            Some(layout) => unsafe { dealloc(self.ptr.as_ptr(), layout) },
            // SAFETY: from Box::into_raw of a `len`-byte boxed slice in init_with.
            None => unsafe {
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.ptr.as_ptr(),
                    self.len,
                )))
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_what_fill_wrote_small_and_huge() {
        for len in [0, 1, 4095, HUGE - 1, HUGE, HUGE + 17, 3 * HUGE] {
            let src: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            // SAFETY: the closure writes all `len` bytes.
            let b = unsafe {
                HugeBytes::init_with(len, |d| {
                    for (d, &s) in d.iter_mut().zip(&src) {
                        d.write(s);
                    }
                })
            };
            assert_eq!(&b[..], &src[..], "len {len}");
            if len >= MIN_HUGE_LEN {
                assert_eq!(b.as_ptr() as usize % HUGE, 0);
            }
        }
    }
}
