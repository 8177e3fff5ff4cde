//! Which devices the factory offers and where a session's fused nodes run.
//!
//! `GetSupportedDevices` offers the CPU device (as before) and, when the `kernels::gpu` driver
//! loads (CUDA driver + NVRTC on NVIDIA, HIP + hipRTC on AMD), the matching GPU
//! `OrtHardwareDevice` with our device memory registered on it. Without a GPU stack one INFO
//! line says why (in ORT's log: `crate::logging::Routes`) and only the CPU device is offered.
//! `CreateEp` then picks the session's [`Placement`] from the device ORT chose and the `device`
//! provider option.

use std::ffi::c_void;
use std::ptr;
use std::sync::{Arc, Once, OnceLock};

use kernels::gpu::driver::Driver;
use kernels::gpu::{Backend as GpuBackend, GpuRuntime};
use ort_sys::{
    OrtAllocator, OrtAllocatorType, OrtDeviceMemoryType, OrtHardwareDevice, OrtHardwareDeviceType,
    OrtKeyValuePairs, OrtMemoryInfo, OrtMemoryInfoDeviceType, OrtStatusPtr,
};

use super::allocator::DeviceAllocator;
use super::data_transfer::DataTransfer;
use super::ep_api::ep_api_ext;
use super::memory::{DeviceMemory, GpuMemory, HostMemory};
use super::program::Backend;
use crate::error::{Error, Result};
use crate::ffi::api::{api, check};
use crate::ffi::ep_abi::{OrtEpDevice, OrtEpFactory};
use crate::ffi::guard::{guard_status, guard_value};
use crate::options::{DeviceChoice, EpOptions};

/// PCI vendor ids of the GPU vendors `kernels::gpu` drives.
pub const VENDOR_NVIDIA: u32 = 0x10de;
pub const VENDOR_AMD: u32 = 0x1002;
/// Vendor id of the host memory that stands in for device memory in tests ("MX").
pub const TEST_VENDOR: u32 = 0x4d58;

/// `MXFUSE_EP_TEST_DEVICE_MEMORY=host`: the CPU device registers host memory posing as GPU
/// memory, so ORT's device-memory plumbing runs (and is tested) without a GPU.
pub const TEST_MEMORY_ENV: &str = "MXFUSE_EP_TEST_DEVICE_MEMORY";

/// The GPU driver, probed once per process: `Err(reason)` when this machine has none.
fn gpu_memory() -> &'static std::result::Result<Arc<GpuMemory>, String> {
    static PROBE: OnceLock<std::result::Result<Arc<GpuMemory>, String>> = OnceLock::new();
    PROBE.get_or_init(|| {
        if std::env::var("MXFUSE_GPU").is_ok_and(|v| v == "off" || v == "0") {
            return Err("MXFUSE_GPU=off".into());
        }
        match Driver::load() {
            Ok(Ok(driver)) => Ok(Arc::new(GpuMemory::new(driver))),
            Ok(Err(reason)) => Err(reason),
            Err(e) => Err(format!("the GPU stack failed to load: {e}")),
        }
    })
}

/// The one line saying the CPU kernels run (exact wording is tested).
pub fn no_gpu_line(reason: &str) -> String {
    format!("mxfuse: no GPU runtime ({reason}): using the CPU kernels")
}

/// One line per process (ORT may ask for the devices more than once), through the kernels'
/// log: ORT's loggers inside a plugin EP (`crate::logging::Routes`), else stderr.
fn log_once(level: kernels::log::Level, line: String) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| kernels::log::log(level, &line));
}

fn test_memory_enabled() -> bool {
    std::env::var(TEST_MEMORY_ENV).is_ok_and(|v| v == "host")
}

fn test_memory() -> Arc<HostMemory> {
    static MEM: OnceLock<Arc<HostMemory>> = OnceLock::new();
    MEM.get_or_init(|| Arc::new(HostMemory::default())).clone()
}

/// The PCI vendor id of the GPUs a backend drives.
pub fn vendor_of(backend: GpuBackend) -> u32 {
    match backend {
        GpuBackend::Cuda => VENDOR_NVIDIA,
        GpuBackend::Hip => VENDOR_AMD,
    }
}

/// Memory infos we registered (ORT copies what it needs, but the example EP keeps them alive
/// for the factory's life; ours live for the process).
struct MemoryInfo(*mut OrtMemoryInfo);
// SAFETY: an immutable ORT object, only read after creation.
unsafe impl Send for MemoryInfo {}
unsafe impl Sync for MemoryInfo {}

/// Our GPU memory info for `vendor` (created once per process).
unsafe fn memory_info(vendor: u32) -> Result<*const OrtMemoryInfo> {
    static INFOS: std::sync::Mutex<Vec<(u32, MemoryInfo)>> = std::sync::Mutex::new(Vec::new());
    let mut infos = INFOS.lock().map_err(|_| Error::invalid("poisoned lock"))?;
    if let Some((_, info)) = infos.iter().find(|(v, _)| *v == vendor) {
        return Ok(info.0);
    }
    let mut info: *mut OrtMemoryInfo = ptr::null_mut();
    check((api()?.ort.CreateMemoryInfo_V2)(
        c"MxFuse_GPU".as_ptr(),
        OrtMemoryInfoDeviceType::OrtMemoryInfoDeviceType_GPU,
        vendor,
        0,
        OrtDeviceMemoryType::OrtDeviceMemoryType_DEFAULT,
        super::memory::ALIGN,
        OrtAllocatorType::OrtDeviceAllocator,
        &mut info,
    ))?;
    infos.push((vendor, MemoryInfo(info)));
    Ok(info)
}

/// Hook after the CPU `OrtEpDevice` is created: in test mode, register the stand-in device
/// memory on it (as ORT's example EP does with its pretend GPU memory).
///
/// # Safety
/// `ep_device` must be the device ORT just created for us.
pub unsafe fn on_cpu_device(ep_device: *mut OrtEpDevice) -> Result<()> {
    if !test_memory_enabled() {
        return Ok(());
    }
    check((ep_api_ext()?.EpDevice_AddAllocatorInfo)(
        ep_device,
        memory_info(TEST_VENDOR)?,
    ))
}

/// Hook at the end of `GetSupportedDevices`: offers the GPU device `kernels::gpu` drives (device
/// 0: the first ORT GPU device of its vendor), or logs why the CPU kernels run.
///
/// # Safety
/// Arguments as ORT passes them to `GetSupportedDevices`; `*n` entries are already filled.
pub unsafe fn offer_gpu_device(
    f: *mut OrtEpFactory,
    devices: *const *const OrtHardwareDevice,
    num_devices: usize,
    ep_devices: *mut *mut OrtEpDevice,
    max_ep_devices: usize,
    n: &mut usize,
) -> Result<()> {
    let gpu = match gpu_memory() {
        Ok(gpu) => gpu,
        Err(reason) => {
            log_once(kernels::log::Level::Info, no_gpu_line(reason));
            return Ok(());
        }
    };
    if test_memory_enabled() {
        // Test mode emulates device memory on the CPU device only; the data transfer serves
        // the stand-in memory, so no real GPU device may be offered next to it.
        return Ok(());
    }
    let api = api()?;
    let vendor = vendor_of(gpu.driver().backend());
    let hw = (0..num_devices).map(|i| *devices.add(i)).find(|&d| {
        (api.ort.HardwareDevice_Type)(d) == OrtHardwareDeviceType::OrtHardwareDeviceType_GPU
            && (api.ort.HardwareDevice_VendorId)(d) == vendor
    });
    let Some(hw) = hw else {
        log_once(
            kernels::log::Level::Warning,
            format!(
            "mxfuse: GPU runtime on {} but ONNX Runtime lists no GPU device of vendor {vendor:#x}: \
             only the CPU device is offered (provider option device=gpu runs the fused nodes on \
             the GPU with host-staged inputs)",
            gpu.driver().info().name
        ),
        );
        return Ok(());
    };
    if *n >= max_ep_devices {
        return Ok(());
    }
    let mut ep_device: *mut OrtEpDevice = ptr::null_mut();
    check((api.ep.CreateEpDevice)(
        f,
        hw,
        ptr::null::<OrtKeyValuePairs>(),
        ptr::null::<OrtKeyValuePairs>(),
        &mut ep_device,
    ))?;
    check((ep_api_ext()?.EpDevice_AddAllocatorInfo)(
        ep_device,
        memory_info(vendor)?,
    ))?;
    *ep_devices.add(*n) = ep_device;
    *n += 1;
    Ok(())
}

/// The device memory behind a memory info we registered.
unsafe fn memory_for(info: *const OrtMemoryInfo) -> Result<(Arc<dyn DeviceMemory>, u32)> {
    let ep = ep_api_ext()?;
    let vendor = (ep.MemoryDevice_GetVendorId)((ep.MemoryInfo_GetMemoryDevice)(info));
    if vendor == TEST_VENDOR && test_memory_enabled() {
        return Ok((test_memory(), vendor));
    }
    match gpu_memory() {
        Ok(gpu) if vendor_of(gpu.driver().backend()) == vendor => Ok((gpu.clone(), vendor)),
        _ => Err(Error::invalid(format!(
            "no mxfuse device memory of vendor {vendor:#x}"
        ))),
    }
}

/// `OrtEpFactory::CreateAllocator`.
///
/// # Safety
/// Called by ORT with a memory info of ours and a writable `out`.
pub unsafe extern "system" fn create_allocator(
    _f: *mut OrtEpFactory,
    info: *const OrtMemoryInfo,
    _options: *const OrtKeyValuePairs,
    out: *mut *mut OrtAllocator,
) -> OrtStatusPtr {
    guard_status("CreateAllocator", || {
        if out.is_null() || info.is_null() {
            return Err(Error::invalid("CreateAllocator: NULL argument"));
        }
        let (memory, _) = memory_for(info)?;
        *out = DeviceAllocator::new(info, memory).into_raw();
        Ok(())
    })
}

/// `OrtEpFactory::ReleaseAllocator`.
///
/// # Safety
/// `a` must come from [`create_allocator`] and is not used afterwards.
pub unsafe extern "system" fn release_allocator(_f: *mut OrtEpFactory, a: *mut OrtAllocator) {
    guard_value((), || DeviceAllocator::release(a))
}

/// `OrtEpFactory::CreateDataTransfer` body: a transfer for our device memory, or NULL when we
/// offer none (ORT 1.31 calls this unconditionally at registration).
///
/// # Safety
/// `out` must be NULL or writable.
pub unsafe fn create_data_transfer(out: *mut *mut c_void) -> Result<()> {
    if out.is_null() {
        return Ok(());
    }
    *out = if test_memory_enabled() {
        DataTransfer::new(test_memory(), TEST_VENDOR).into_raw()
    } else if let Ok(gpu) = gpu_memory() {
        DataTransfer::new(gpu.clone(), vendor_of(gpu.driver().backend())).into_raw()
    } else {
        ptr::null_mut()
    };
    Ok(())
}

/// Where a session's device program runs and how ORT hands it tensors.
#[derive(Clone)]
pub struct DevicePlacement {
    pub backend: Backend,
    /// Where the program's buffers (constants, intermediates) live.
    pub memory: Arc<dyn DeviceMemory>,
    /// ORT hands our nodes host tensors: inputs are uploaded and outputs downloaded per run.
    pub staged: bool,
    /// ORT allocates our nodes' tensors in `memory` (the session needs our Memcpy kernels).
    pub ort_tensors_in_memory: bool,
}

/// Where a session's fused nodes run.
#[derive(Clone)]
pub enum Placement {
    /// Host memory, CPU kernels (the CPU device; the default).
    Cpu,
    /// The device program (`gpu::program`): GPU launchers, or in test mode the CPU kernels on
    /// host memory registered as device memory.
    Device(DevicePlacement),
}

/// The loaded GPU runtime and memory, or why there is none.
fn gpu_runtime() -> Result<(Backend, Arc<dyn DeviceMemory>)> {
    let memory = gpu_memory()
        .as_ref()
        .map_err(|r| Error::Unsupported(format!("no GPU runtime ({r})")))?
        .clone();
    let runtime = GpuRuntime::shared()
        .map_err(|e| Error::Ort(format!("GPU runtime: {e}")))?
        .ok_or_else(|| Error::Unsupported("no GPU runtime (see the log line above)".into()))?;
    Ok((Backend::Gpu(runtime), memory))
}

impl Placement {
    /// The placement for a session on `devices` (ORT's hardware devices for our EP).
    ///
    /// # Safety
    /// `devices` holds `num_devices` valid hardware devices (or is NULL with 0).
    pub unsafe fn for_session(
        devices: *const *const OrtHardwareDevice,
        num_devices: usize,
        options: &EpOptions,
    ) -> Result<Placement> {
        let ort = api()?.ort;
        let on_gpu = (0..num_devices).any(|i| {
            (ort.HardwareDevice_Type)(*devices.add(i))
                == OrtHardwareDeviceType::OrtHardwareDeviceType_GPU
        });
        Self::choose(on_gpu, options.device, test_memory_enabled())
    }

    fn choose(on_gpu: bool, choice: DeviceChoice, test_memory: bool) -> Result<Placement> {
        let device = |(backend, memory), staged, ort_tensors_in_memory| {
            Ok(Placement::Device(DevicePlacement {
                backend,
                memory,
                staged,
                ort_tensors_in_memory,
            }))
        };
        match (on_gpu, choice, test_memory) {
            (true, DeviceChoice::Cpu, _) => Err(Error::invalid(
                "provider option device=cpu on the GPU device: select the CPU OrtEpDevice instead",
            )),
            (true, _, _) => device(gpu_runtime()?, false, true),
            // Test mode: ORT's tensors are in the stand-in memory (host addresses); `device=gpu`
            // takes the staged path over them.
            (false, choice, true) => device(
                (Backend::Host, test_memory_as_dyn()),
                choice == DeviceChoice::Gpu,
                true,
            ),
            (false, DeviceChoice::Gpu, false) => {
                let gpu = gpu_runtime().map_err(|e| {
                    // The message without the variant's own "not supported: " prefix.
                    let why = match e {
                        Error::Unsupported(why) | Error::Ort(why) => why,
                        other => other.to_string(),
                    };
                    Error::Unsupported(format!("provider option device=gpu: {why}"))
                })?;
                device(gpu, true, false)
            }
            (false, _, false) => Ok(Placement::Cpu),
        }
    }

    /// The memory ORT allocates our tensors in, when that is not host memory (those sessions
    /// need the Memcpy kernels).
    pub fn device_memory(&self) -> Option<&Arc<dyn DeviceMemory>> {
        match self {
            Placement::Device(d) if d.ort_tensors_in_memory => Some(&d.memory),
            _ => None,
        }
    }

    /// A short name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Placement::Cpu => "cpu",
            Placement::Device(d) => match (&d.backend, d.staged) {
                (Backend::Gpu(_), false) => "gpu",
                (Backend::Gpu(_), true) => "gpu (host-staged)",
                (Backend::Host, false) => "test device memory",
                (Backend::Host, true) => "test device memory (staged)",
            },
        }
    }
}

fn test_memory_as_dyn() -> Arc<dyn DeviceMemory> {
    test_memory()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_line_wording() {
        assert_eq!(
            no_gpu_line("libcuda.so.1 not found"),
            "mxfuse: no GPU runtime (libcuda.so.1 not found): using the CPU kernels"
        );
    }

    #[test]
    fn placement_choice_without_a_gpu() {
        // This machine has no GPU stack (or MXFUSE_GPU=off): CPU placements only.
        if gpu_memory().is_ok() {
            return;
        }
        assert!(matches!(
            Placement::choose(false, DeviceChoice::Auto, false),
            Ok(Placement::Cpu)
        ));
        assert!(matches!(
            Placement::choose(false, DeviceChoice::Cpu, false),
            Ok(Placement::Cpu)
        ));
        let test = Placement::choose(false, DeviceChoice::Auto, true).map(|p| p.name());
        assert_eq!(test.ok(), Some("test device memory"));
        let test = Placement::choose(false, DeviceChoice::Gpu, true).map(|p| p.name());
        assert_eq!(test.ok(), Some("test device memory (staged)"));
        let err = Placement::choose(false, DeviceChoice::Gpu, false)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("device=gpu") && err.contains("no GPU runtime"),
            "{err}"
        );
        let err = Placement::choose(true, DeviceChoice::Cpu, false)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("device=cpu"), "{err}");
    }
}
