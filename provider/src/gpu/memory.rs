//! [`DeviceMemory`]: where the EP's device tensors live and how bytes move in and out.
//!
//! [`GpuMemory`] drives the GPU through `kernels::gpu::driver::Driver` (device 0, the same
//! primary context the kernel launchers use). [`HostMemory`] is host memory standing in for
//! device memory: with `MXFUSE_EP_TEST_DEVICE_MEMORY=host` the CPU-device EP registers it as its
//! device memory, so the ORT plumbing (allocator, data transfer, Memcpy kernels, copies ORT
//! inserts) is exercised on machines without a GPU.

use std::alloc::Layout;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kernels::gpu::driver::Driver;

use crate::error::{Error, Result};

/// Allocation alignment: the launchers need 16-byte aligned vectors; GPU allocators give 256.
pub const ALIGN: usize = 256;

/// Allocation and copies of one device's memory. Addresses are `u64` device addresses (host
/// addresses for [`HostMemory`]).
pub trait DeviceMemory: Send + Sync {
    /// Allocates `bytes` (at least 1) of device memory, [`ALIGN`]-aligned.
    fn alloc(&self, bytes: usize) -> Result<u64>;
    /// Frees an address returned by [`DeviceMemory::alloc`].
    fn free(&self, ptr: u64) -> Result<()>;
    /// Host → device, synchronous.
    fn host_to_device(&self, dst: u64, src: &[u8]) -> Result<()>;
    /// Device → host, synchronous (waits for queued kernels).
    fn device_to_host(&self, dst: &mut [u8], src: u64) -> Result<()>;
    /// Device → device, synchronous.
    fn device_to_device(&self, dst: u64, src: u64, bytes: usize) -> Result<()>;
    /// Whether device addresses are host addresses (the test stand-in).
    fn is_host(&self) -> bool;
}

/// The size a cached device buffer for `bytes` is allocated with (the programs' `BufferPool`,
/// the allocator's block cache): the next of 4, 5, 6, 7 × 2^j (at least
/// 256 bytes), so at most a quarter more. Why classes: a serving session's token count changes
/// from run to run, and with exact sizes every new count allocated and freed its intermediates
/// (a device free synchronizes on CUDA); with classes nearby counts share buffers.
pub fn size_class(bytes: usize) -> usize {
    let b = bytes.max(256);
    let j = usize::BITS - 1 - b.leading_zeros() - 2; // b = [4, 8) × 2^j
    let step = 1usize << j;
    b.div_ceil(step) * step
}

fn gpu_err(e: kernels::gpu::GpuError) -> Error {
    Error::Ort(format!("GPU: {e}"))
}

/// Device 0's memory through the vendor driver.
pub struct GpuMemory {
    driver: Driver,
}

impl GpuMemory {
    pub fn new(driver: Driver) -> Self {
        GpuMemory { driver }
    }

    /// The loaded driver (device name, vendor stack).
    pub fn driver(&self) -> &Driver {
        &self.driver
    }
}

impl DeviceMemory for GpuMemory {
    fn alloc(&self, bytes: usize) -> Result<u64> {
        self.driver.alloc(bytes).map_err(gpu_err)
    }

    fn free(&self, ptr: u64) -> Result<()> {
        self.driver.free(ptr).map_err(gpu_err)
    }

    fn host_to_device(&self, dst: u64, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.driver.copy_to_device(dst, src).map_err(gpu_err)
    }

    fn device_to_host(&self, dst: &mut [u8], src: u64) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.driver.copy_to_host(dst, src).map_err(gpu_err)
    }

    /// Through a host buffer: `kernels::gpu` exposes no device-to-device copy. ORT needs this only
    /// for copies between two of our device tensors (rare: a graph output that is also an input).
    fn device_to_device(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        let mut staging = vec![0u8; bytes];
        self.device_to_host(&mut staging, src)?;
        self.host_to_device(dst, &staging)
    }

    fn is_host(&self) -> bool {
        false
    }
}

/// Host memory posing as device memory (tests of the device-memory plumbing without a GPU).
#[derive(Default)]
pub struct HostMemory {
    live: Mutex<HashMap<u64, Layout>>,
}

impl HostMemory {
    /// Number of live allocations (tests check that ORT frees what it allocates).
    pub fn live_allocations(&self) -> usize {
        self.live.lock().map(|m| m.len()).unwrap_or(0)
    }
}

impl DeviceMemory for HostMemory {
    fn alloc(&self, bytes: usize) -> Result<u64> {
        let layout = Layout::from_size_align(bytes.max(1), ALIGN)
            .map_err(|e| Error::invalid(format!("allocation of {bytes} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(Error::Ort(format!("out of host memory ({bytes} bytes)")));
        }
        let mut live = self
            .live
            .lock()
            .map_err(|_| Error::invalid("poisoned lock"))?;
        live.insert(p as u64, layout);
        Ok(p as u64)
    }

    fn free(&self, ptr: u64) -> Result<()> {
        let mut live = self
            .live
            .lock()
            .map_err(|_| Error::invalid("poisoned lock"))?;
        let layout = live
            .remove(&ptr)
            .ok_or_else(|| Error::invalid(format!("free of {ptr:#x}: not allocated here")))?;
        // SAFETY: `ptr` was allocated by `alloc` with this layout and is freed once (removed).
        unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        Ok(())
    }

    fn host_to_device(&self, dst: u64, src: &[u8]) -> Result<()> {
        // SAFETY: the caller passes a destination of at least `src.len()` bytes (a tensor's
        // data pointer and its byte size, as ORT reports them).
        unsafe { std::ptr::copy(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    fn device_to_host(&self, dst: &mut [u8], src: u64) -> Result<()> {
        // SAFETY: as above, for a source of `dst.len()` bytes.
        unsafe { std::ptr::copy(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn device_to_device(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        // SAFETY: as above.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
        Ok(())
    }

    fn is_host(&self) -> bool {
        true
    }
}

/// One device allocation, freed on drop (program constants and per-run intermediates).
pub struct DeviceBox {
    ptr: u64,
    bytes: usize,
    memory: Arc<dyn DeviceMemory>,
}

impl DeviceBox {
    /// `bytes` of uninitialised device memory.
    pub fn new(memory: &Arc<dyn DeviceMemory>, bytes: usize) -> Result<Self> {
        Ok(DeviceBox {
            ptr: memory.alloc(bytes)?,
            bytes,
            memory: memory.clone(),
        })
    }

    /// A device copy of `data`.
    pub fn upload(memory: &Arc<dyn DeviceMemory>, data: &[u8]) -> Result<Self> {
        let b = Self::new(memory, data.len())?;
        memory.host_to_device(b.ptr, data)?;
        Ok(b)
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether the allocation holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

impl Drop for DeviceBox {
    fn drop(&mut self) {
        // A failed free cannot be reported from drop; it only leaks device memory.
        let _ = self.memory.free(self.ptr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_memory_round_trips_and_tracks_allocations() {
        let m = HostMemory::default();
        let a = m.alloc(100).unwrap();
        let b = m.alloc(0).unwrap();
        assert_eq!(a % ALIGN as u64, 0);
        assert_eq!(m.live_allocations(), 2);
        let src: Vec<u8> = (0..100).collect();
        m.host_to_device(a, &src).unwrap();
        let c = m.alloc(100).unwrap();
        m.device_to_device(c, a, 100).unwrap();
        let mut back = vec![0u8; 100];
        m.device_to_host(&mut back, c).unwrap();
        assert_eq!(back, src);
        for p in [a, b, c] {
            m.free(p).unwrap();
        }
        assert_eq!(m.live_allocations(), 0);
    }

    #[test]
    fn size_classes_waste_at_most_a_quarter() {
        assert_eq!(size_class(0), 256);
        assert_eq!(size_class(256), 256);
        assert_eq!(size_class(257), 320);
        assert_eq!(size_class(1 << 20), 1 << 20);
        for bytes in (1..100_000).step_by(37) {
            let c = size_class(bytes);
            assert!(
                c >= bytes && c < bytes.max(256) * 5 / 4 + 1,
                "{bytes} -> {c}"
            );
        }
    }

    #[test]
    fn device_box_frees_on_drop() {
        let h = Arc::new(HostMemory::default());
        let m: Arc<dyn DeviceMemory> = h.clone();
        {
            let b = DeviceBox::upload(&m, &[1, 2, 3]).unwrap();
            assert_eq!(b.len(), 3);
            let mut back = [0u8; 3];
            m.device_to_host(&mut back, b.ptr()).unwrap();
            assert_eq!(back, [1, 2, 3]);
            assert_eq!(h.live_allocations(), 1);
        }
        assert_eq!(h.live_allocations(), 0);
    }

    #[test]
    fn host_memory_refuses_foreign_and_double_frees() {
        let m = HostMemory::default();
        let a = m.alloc(8).unwrap();
        m.free(a).unwrap();
        let err = m.free(a).unwrap_err().to_string();
        assert!(err.contains("not allocated here"), "{err}");
        assert!(m.free(0x1234).is_err());
    }
}
