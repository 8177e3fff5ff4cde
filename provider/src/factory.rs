//! The EP factory ORT gets from `CreateEpFactories`: advertises the CPU device, creates
//! [`crate::ep::MxEp`] instances, and publishes the `com.mxfuse` custom-op domain so models that
//! already hold com.mxfuse nodes load with only the EP registered.

use std::ffi::{c_char, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use ort_sys::{
    OrtCustomOpDomain, OrtHardwareDevice, OrtHardwareDeviceType, OrtKeyValuePairs, OrtLogger,
    OrtSessionOptions, OrtStatusPtr,
};

use crate::ep::MxEp;
use crate::error::{Error, Result};
use crate::ffi::api::{api, check, owned_str};
use crate::ffi::ep_abi::{OrtEp, OrtEpDevice, OrtEpFactory, ORT_API_VERSION};
use crate::ffi::guard::{guard_status, guard_value};
use crate::options::EpOptions;

const NAME: &CStr = c"MxFuseExecutionProvider";
const VENDOR: &CStr = c"mxfuse";
const VERSION: &CStr = c"0.1.0";

/// `OrtEpFactory` first, so ORT's `OrtEpFactory*` is also a `*mut Factory`.
#[repr(C)]
pub struct Factory {
    base: OrtEpFactory,
}

impl Factory {
    pub fn new() -> Box<Self> {
        Box::new(Factory {
            base: OrtEpFactory {
                ort_version_supported: ORT_API_VERSION,
                GetName: Some(get_name),
                GetVendor: Some(get_vendor),
                GetSupportedDevices: Some(get_supported_devices),
                CreateEp: Some(create_ep),
                ReleaseEp: Some(release_ep),
                GetVendorId: Some(get_vendor_id),
                GetVersion: Some(get_version),
                ValidateCompiledModelCompatibilityInfo: None,
                CreateAllocator: Some(crate::gpu::device::create_allocator),
                ReleaseAllocator: Some(crate::gpu::device::release_allocator),
                CreateDataTransfer: Some(create_data_transfer),
                IsStreamAware: Some(is_stream_aware),
                CreateSyncStreamForDevice: None,
                GetHardwareDeviceIncompatibilityDetails: None,
                CreateExternalResourceImporterForDevice: None,
                GetNumCustomOpDomains: Some(get_num_custom_op_domains),
                GetCustomOpDomains: Some(get_custom_op_domains),
                InitGraphicsInterop: None,
                DeinitGraphicsInterop: None,
                SelectBestModelCandidate: None,
                _padding: [None; 8],
            },
        })
    }

    /// The factory of a library registration (`CreateEpFactories`). One registration at a
    /// time: under a second name ORT would list our devices twice (one per factory), and a
    /// session given both fails with ORT's "All OrtEpDevice values in ep_devices must have the
    /// same execution provider", while `providers=["MxFuseExecutionProvider"]` picks one of
    /// them; the second registration is refused instead, naming the first.
    pub fn new_registered(name: String) -> Result<Box<Self>> {
        let mut registered = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(first) = registered.as_ref() {
            return Err(Error::invalid(format!(
                "this library is already registered with ONNX Runtime as {first:?} (registering it again as {name:?} would offer every device twice); unregister {first:?} first, or use it"
            )));
        }
        *registered = Some(name);
        Ok(Self::new())
    }

    pub fn into_raw(self: Box<Self>) -> *mut OrtEpFactory {
        Box::into_raw(self) as *mut OrtEpFactory
    }

    /// Frees a factory ORT is done with, or, while an EP it created is still alive, keeps it
    /// until the last such EP is released: ORT's `UnregisterExecutionProviderLibrary` releases
    /// the factory even when a session still holds one of its EPs (the C API asks callers not to
    /// do that; Python's garbage collector makes it easy), and that session's end calls
    /// `factory->ReleaseEp`, which must not read freed memory. The library itself stays mapped
    /// (`exports::pin_library`).
    ///
    /// # Safety
    /// `f` must come from [`Factory::into_raw`] and not be used afterwards, except by ORT to
    /// release the EPs it created.
    pub unsafe fn release(f: *mut OrtEpFactory) {
        *REGISTERED.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let mut orphans = ORPHANS.lock().unwrap_or_else(|e| e.into_inner());
        if LIVE_EPS.load(Ordering::SeqCst) > 0 {
            orphans.push(f as usize);
        } else {
            drop(Box::from_raw(f as *mut Factory));
        }
    }
}

/// The registration name of the factory ORT holds (made by `CreateEpFactories`, not yet
/// released).
static REGISTERED: Mutex<Option<String>> = Mutex::new(None);
/// EPs created by any factory of this library and not yet released.
static LIVE_EPS: AtomicUsize = AtomicUsize::new(0);
/// Factories released by ORT while EPs were alive (addresses): freed with the last EP.
static ORPHANS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

unsafe extern "system" fn get_name(_f: *const OrtEpFactory) -> *const c_char {
    NAME.as_ptr()
}
unsafe extern "system" fn get_vendor(_f: *const OrtEpFactory) -> *const c_char {
    VENDOR.as_ptr()
}
unsafe extern "system" fn get_vendor_id(_f: *const OrtEpFactory) -> u32 {
    0
}
unsafe extern "system" fn get_version(_f: *const OrtEpFactory) -> *const c_char {
    VERSION.as_ptr()
}
unsafe extern "system" fn is_stream_aware(_f: *const OrtEpFactory) -> bool {
    false
}

/// ORT 1.31 calls this unconditionally: NULL (plain CPU memory, nothing to copy) unless we
/// offer device memory (`gpu::device`).
unsafe extern "system" fn create_data_transfer(
    _f: *mut OrtEpFactory,
    out: *mut *mut c_void,
) -> OrtStatusPtr {
    guard_status("CreateDataTransfer", || {
        crate::gpu::device::create_data_transfer(out)
    })
}

unsafe extern "system" fn get_supported_devices(
    f: *mut OrtEpFactory,
    devices: *const *const OrtHardwareDevice,
    num_devices: usize,
    ep_devices: *mut *mut OrtEpDevice,
    max_ep_devices: usize,
    num_ep_devices: *mut usize,
) -> OrtStatusPtr {
    guard_status("GetSupportedDevices", || {
        let api = api()?;
        let mut n = 0usize;
        for i in 0..num_devices {
            let dev = *devices.add(i);
            if n >= max_ep_devices
                || (api.ort.HardwareDevice_Type)(dev)
                    != OrtHardwareDeviceType::OrtHardwareDeviceType_CPU
            {
                continue;
            }
            let mut ep_device: *mut OrtEpDevice = ptr::null_mut();
            check((api.ep.CreateEpDevice)(
                f,
                dev,
                ptr::null(),
                ptr::null(),
                &mut ep_device,
            ))?;
            crate::gpu::device::on_cpu_device(ep_device)?;
            *ep_devices.add(n) = ep_device;
            n += 1;
            // One CPU device is enough: ORT exposes a single CPU hardware device anyway.
            break;
        }
        // The GPU device, when the GPU runtime loads (else one log line).
        crate::gpu::device::offer_gpu_device(
            f,
            devices,
            num_devices,
            ep_devices,
            max_ep_devices,
            &mut n,
        )?;
        *num_ep_devices = n;
        Ok(())
    })
}

/// Reads our provider options out of the session config.
unsafe fn read_options(session_options: *const OrtSessionOptions) -> Result<EpOptions> {
    let ort = api()?.ort;
    let mut kvps: *mut OrtKeyValuePairs = ptr::null_mut();
    check((ort.GetSessionOptionsConfigEntries)(
        session_options,
        &mut kvps,
    ))?;
    let mut keys: *const *const c_char = ptr::null();
    let mut values: *const *const c_char = ptr::null();
    let mut n = 0usize;
    (ort.GetKeyValuePairs)(kvps, &mut keys, &mut values, &mut n);
    let pairs: Vec<(String, String)> = (0..n)
        .map(|i| (owned_str(*keys.add(i)), owned_str(*values.add(i))))
        .collect();
    (ort.ReleaseKeyValuePairs)(kvps);
    let rules = graph_rewrites::pipeline::rule_names();
    EpOptions::from_config(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())), &rules)
}

unsafe extern "system" fn create_ep(
    _f: *mut OrtEpFactory,
    devices: *const *const OrtHardwareDevice,
    _metadata: *const *const OrtKeyValuePairs,
    num_devices: usize,
    session_options: *const OrtSessionOptions,
    logger: *const OrtLogger,
    ep: *mut *mut OrtEp,
) -> OrtStatusPtr {
    guard_status("CreateEp", || {
        if ep.is_null() {
            return Err(Error::Ort("CreateEp: NULL output pointer".into()));
        }
        let options = read_options(session_options)?;
        let placement = crate::gpu::Placement::for_session(devices, num_devices, &options)?;
        *ep = MxEp::new(options, logger)?
            .with_placement(placement)?
            .into_raw();
        LIVE_EPS.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
}

unsafe extern "system" fn release_ep(_f: *mut OrtEpFactory, ep: *mut OrtEp) {
    guard_value((), || {
        if ep.is_null() {
            return;
        }
        MxEp::release(ep);
        let mut orphans = ORPHANS.lock().unwrap_or_else(|e| e.into_inner());
        // The last live EP: free the factories ORT already released (`_f` may be one of them;
        // ORT does not touch it after this call returns).
        if LIVE_EPS.fetch_sub(1, Ordering::SeqCst) == 1 {
            for f in orphans.drain(..) {
                drop(Box::from_raw(f as *mut Factory));
            }
        }
    })
}

unsafe extern "system" fn get_num_custom_op_domains(
    _f: *mut OrtEpFactory,
    num: *mut usize,
) -> OrtStatusPtr {
    guard_status("GetNumCustomOpDomains", || {
        *num = crate::custom_ops::ep_domains()?.len();
        Ok(())
    })
}

unsafe extern "system" fn get_custom_op_domains(
    _f: *mut OrtEpFactory,
    domains: *mut *mut OrtCustomOpDomain,
    num: usize,
) -> OrtStatusPtr {
    guard_status("GetCustomOpDomains", || {
        for (i, d) in crate::custom_ops::ep_domains()?
            .into_iter()
            .take(num)
            .enumerate()
        {
            *domains.add(i) = d;
        }
        Ok(())
    })
}
