//! The `OrtAllocator` ORT allocates our device tensors with (`OrtEpFactory::CreateAllocator`).
//! Not an arena (ORT reserves `OrtArenaAllocator` for itself): on a real device, freed blocks are
//! kept by size class and reused ([`super::block_cache`], why it is safe there); on the host
//! stand-in each `Alloc` is one [`DeviceMemory::alloc`], so tests see every allocation.

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use ort_sys::{OrtAllocator, OrtMemoryInfo};

use super::block_cache::BlockCache;
use super::memory::DeviceMemory;
use crate::ffi::ep_abi::ORT_API_VERSION;
use crate::ffi::guard::guard_value;

/// `OrtAllocator` first, so ORT's `OrtAllocator*` is also a `*mut DeviceAllocator`.
#[repr(C)]
pub struct DeviceAllocator {
    base: OrtAllocator,
    info: *const OrtMemoryInfo,
    memory: BlockCache,
}

impl DeviceAllocator {
    /// An allocator over `memory`, described to ORT by `info` (ORT's memory info of the
    /// `OrtEpDevice`, which outlives every session allocator).
    pub fn new(info: *const OrtMemoryInfo, memory: Arc<dyn DeviceMemory>) -> Box<Self> {
        Box::new(DeviceAllocator {
            base: OrtAllocator {
                version: ORT_API_VERSION,
                Alloc: Some(alloc),
                Free: Some(free),
                Info: Some(info_fn),
                Reserve: Some(reserve),
                GetStats: None,
                AllocOnStream: None,
                Shrink: None,
            },
            info,
            memory: {
                let limit = if memory.is_host() {
                    0
                } else {
                    BlockCache::limit_from_env()
                };
                BlockCache::new(memory, limit)
            },
        })
    }

    pub fn into_raw(self: Box<Self>) -> *mut OrtAllocator {
        Box::into_raw(self) as *mut OrtAllocator
    }

    /// # Safety
    /// `a` must come from [`DeviceAllocator::into_raw`] and not be used afterwards.
    pub unsafe fn release(a: *mut OrtAllocator) {
        if !a.is_null() {
            drop(Box::from_raw(a as *mut DeviceAllocator));
        }
    }

    unsafe fn from_raw<'a>(a: *const OrtAllocator) -> &'a DeviceAllocator {
        &*(a as *const DeviceAllocator)
    }
}

/// `Alloc` cannot return a status: a failed allocation is a NULL pointer, which ORT reports as
/// out of memory for the tensor it was allocating.
unsafe extern "system" fn alloc(this: *mut OrtAllocator, size: usize) -> *mut c_void {
    guard_value(ptr::null_mut(), || {
        match DeviceAllocator::from_raw(this).memory.alloc(size) {
            Ok(p) => p as *mut c_void,
            Err(e) => {
                kernels::log::warn(&format!(
                    "mxfuse: device allocation of {size} bytes failed: {e}"
                ));
                ptr::null_mut()
            }
        }
    })
}

unsafe extern "system" fn reserve(this: *const OrtAllocator, size: usize) -> *mut c_void {
    alloc(this as *mut OrtAllocator, size)
}

unsafe extern "system" fn free(this: *mut OrtAllocator, p: *mut c_void) {
    guard_value((), || {
        if p.is_null() {
            return;
        }
        if let Err(e) = DeviceAllocator::from_raw(this).memory.free(p as u64) {
            kernels::log::warn(&format!("mxfuse: device free failed: {e}"));
        }
    })
}

unsafe extern "system" fn info_fn(this: *const OrtAllocator) -> *const OrtMemoryInfo {
    guard_value(ptr::null(), || DeviceAllocator::from_raw(this).info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::memory::HostMemory;

    #[test]
    fn allocator_allocates_and_frees_through_device_memory() {
        let memory = Arc::new(HostMemory::default());
        let a = DeviceAllocator::new(ptr::null(), memory.clone()).into_raw();
        unsafe {
            let base = &*a;
            let p = (base.Alloc.unwrap())(a, 64);
            assert!(!p.is_null());
            let r = (base.Reserve.unwrap())(a, 32);
            assert_eq!(memory.live_allocations(), 2);
            (base.Free.unwrap())(a, p);
            (base.Free.unwrap())(a, r);
            // NULL frees are no-ops, as ORT expects.
            (base.Free.unwrap())(a, ptr::null_mut());
            assert_eq!(memory.live_allocations(), 0);
            assert!((base.Info.unwrap())(a).is_null());
            DeviceAllocator::release(a);
        }
    }
}
