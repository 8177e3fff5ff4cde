//! `OrtDataTransferImpl` (`OrtEpFactory::CreateDataTransfer`): copies between host memory and
//! our device memory, and within device memory. ORT uses it for graph inputs / outputs, for the
//! initializers our fused nodes read, and through our Memcpy kernels. Copies are synchronous
//! (the factory is not stream aware), so ORT never waits on a stream of ours.

use std::ffi::c_void;
use std::sync::Arc;

use ort_sys::{OrtMemoryInfoDeviceType, OrtStatusPtr, OrtSyncStream, OrtValue};

use super::ep_api::{ep_api_ext, OrtDataTransferImpl, OrtMemoryDevice};
use super::memory::DeviceMemory;
use crate::error::{Error, Result};
use crate::ffi::api::{api, check};
use crate::ffi::ep_abi::ORT_API_VERSION;
use crate::ffi::guard::{guard_status, guard_value};
use crate::ort_types::{tensor_data, tensor_data_mut};

/// Which way one copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
}

impl Direction {
    /// The direction for a source / destination on our device (`true`) or in host memory;
    /// `None` for host → host, which ORT's CPU data transfer does.
    pub fn of(src_on_device: bool, dst_on_device: bool) -> Option<Direction> {
        match (src_on_device, dst_on_device) {
            (false, true) => Some(Direction::HostToDevice),
            (true, false) => Some(Direction::DeviceToHost),
            (true, true) => Some(Direction::DeviceToDevice),
            (false, false) => None,
        }
    }
}

/// Copies `bytes` bytes from `src` to `dst` in `direction`.
///
/// # Safety
/// Host addresses must be valid for `bytes` bytes; device addresses must be `memory`'s.
pub unsafe fn copy_bytes(
    memory: &dyn DeviceMemory,
    direction: Direction,
    src: u64,
    dst: u64,
    bytes: usize,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    if src == 0 || dst == 0 {
        return Err(Error::invalid(format!(
            "copy of {bytes} bytes with a NULL tensor pointer"
        )));
    }
    match direction {
        Direction::HostToDevice => {
            memory.host_to_device(dst, std::slice::from_raw_parts(src as *const u8, bytes))
        }
        Direction::DeviceToHost => {
            memory.device_to_host(std::slice::from_raw_parts_mut(dst as *mut u8, bytes), src)
        }
        Direction::DeviceToDevice => memory.device_to_device(dst, src, bytes),
    }
}

/// `OrtDataTransferImpl` first, so ORT's pointer is also a `*mut DataTransfer`.
#[repr(C)]
pub struct DataTransfer {
    base: OrtDataTransferImpl,
    memory: Arc<dyn DeviceMemory>,
    /// The vendor id of our device memory info (tells our memory from another EP's GPU memory).
    vendor_id: u32,
}

impl DataTransfer {
    pub fn new(memory: Arc<dyn DeviceMemory>, vendor_id: u32) -> Box<Self> {
        Box::new(DataTransfer {
            base: OrtDataTransferImpl {
                ort_version_supported: ORT_API_VERSION,
                Release: Some(release),
                CanCopy: Some(can_copy),
                CopyTensors: Some(copy_tensors),
            },
            memory,
            vendor_id,
        })
    }

    pub fn into_raw(self: Box<Self>) -> *mut c_void {
        Box::into_raw(self) as *mut c_void
    }

    /// Whether `device` is our device memory (`false` for host memory); `Err` for memory of
    /// another device, which we cannot reach.
    unsafe fn on_our_device(&self, device: *const OrtMemoryDevice) -> Result<bool> {
        if device.is_null() {
            return Ok(false);
        }
        let ep = ep_api_ext()?;
        match (ep.MemoryDevice_GetDeviceType)(device) {
            OrtMemoryInfoDeviceType::OrtMemoryInfoDeviceType_CPU => Ok(false),
            OrtMemoryInfoDeviceType::OrtMemoryInfoDeviceType_GPU
                if (ep.MemoryDevice_GetVendorId)(device) == self.vendor_id =>
            {
                Ok(true)
            }
            other => Err(Error::Unsupported(format!(
                "copy involving {other:?} memory of vendor {:#x}",
                (ep.MemoryDevice_GetVendorId)(device)
            ))),
        }
    }

    unsafe fn copy_one(&self, src: *const OrtValue, dst: *mut OrtValue) -> Result<()> {
        let (ort, ep) = (api()?.ort, ep_api_ext()?);
        let from = self.on_our_device((ep.Value_GetMemoryDevice)(src))?;
        let to = self.on_our_device((ep.Value_GetMemoryDevice)(dst))?;
        let direction = Direction::of(from, to)
            .ok_or_else(|| Error::invalid("host-to-host copy offered to the mxfuse EP"))?;
        let (mut bytes, mut dst_bytes) = (0usize, 0usize);
        check((ort.GetTensorSizeInBytes)(src, &mut bytes))?;
        check((ort.GetTensorSizeInBytes)(dst, &mut dst_bytes))?;
        if dst_bytes < bytes {
            return Err(Error::invalid(format!(
                "copy of {bytes} bytes into a {dst_bytes}-byte tensor"
            )));
        }
        let (s, d) = (tensor_data(src)?, tensor_data_mut(dst)?);
        copy_bytes(&*self.memory, direction, s as u64, d as u64, bytes)
    }
}

unsafe extern "system" fn release(this: *mut OrtDataTransferImpl) {
    guard_value((), || {
        if !this.is_null() {
            drop(Box::from_raw(this as *mut DataTransfer));
        }
    })
}

unsafe extern "system" fn can_copy(
    this: *const OrtDataTransferImpl,
    src: *const OrtMemoryDevice,
    dst: *const OrtMemoryDevice,
) -> bool {
    guard_value(false, || {
        let t = &*(this as *const DataTransfer);
        match (t.on_our_device(src), t.on_our_device(dst)) {
            (Ok(a), Ok(b)) => a || b,
            _ => false,
        }
    })
}

unsafe extern "system" fn copy_tensors(
    this: *mut OrtDataTransferImpl,
    src: *const *const OrtValue,
    dst: *mut *mut OrtValue,
    _streams: *mut *mut OrtSyncStream,
    count: usize,
) -> OrtStatusPtr {
    guard_status("CopyTensors", || {
        let t = &*(this as *const DataTransfer);
        for i in 0..count {
            t.copy_one(*src.add(i), *dst.add(i))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::memory::HostMemory;

    #[test]
    fn directions() {
        assert_eq!(Direction::of(false, true), Some(Direction::HostToDevice));
        assert_eq!(Direction::of(true, false), Some(Direction::DeviceToHost));
        assert_eq!(Direction::of(true, true), Some(Direction::DeviceToDevice));
        assert_eq!(Direction::of(false, false), None);
    }

    #[test]
    fn copies_every_direction_and_refuses_null_pointers() {
        let m = HostMemory::default();
        let host: Vec<u8> = (0..48).map(|i| i as u8 * 3).collect();
        let (a, b) = (m.alloc(48).unwrap(), m.alloc(48).unwrap());
        let mut back = vec![0u8; 48];
        unsafe {
            copy_bytes(&m, Direction::HostToDevice, host.as_ptr() as u64, a, 48).unwrap();
            copy_bytes(&m, Direction::DeviceToDevice, a, b, 48).unwrap();
            copy_bytes(&m, Direction::DeviceToHost, b, back.as_mut_ptr() as u64, 48).unwrap();
            // Empty tensors may have NULL data: nothing to copy, no error.
            copy_bytes(&m, Direction::DeviceToHost, 0, 0, 0).unwrap();
            let err = copy_bytes(&m, Direction::HostToDevice, 0, a, 4).unwrap_err();
            assert!(err.to_string().contains("NULL"), "{err}");
        }
        assert_eq!(back, host);
        m.free(a).unwrap();
        m.free(b).unwrap();
    }
}
