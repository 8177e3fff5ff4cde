//! The GPU driver and run-time compiler, loaded with `libloading` at run time: the CUDA driver
//! (`libcuda`) + NVRTC on NVIDIA, HIP (`libamdhip64`) + hipRTC on ROCm. Nothing here is needed
//! at build time. The two APIs have the same shape (module load, function lookup, launch, memory),
//! so one [`Driver`] holds either, with device pointers as `u64` (both ABIs pass them as 64-bit
//! values).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

use libloading::Library;

use super::error::{GpuError, GpuResult};

/// Which vendor stack a [`Driver`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// NVIDIA: CUDA driver API + NVRTC.
    Cuda,
    /// AMD: HIP + hipRTC.
    Hip,
}

type LaunchFn = unsafe extern "C" fn(
    *mut c_void,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> c_int;

/// `CUlaunchAttribute` (cuda.h): a 4-byte id, 4 pad bytes, a 64-byte value union (8-aligned).
#[repr(C)]
struct LaunchAttribute {
    id: c_uint,
    pad: [u8; 4],
    value: [u64; 8],
}

/// `CUlaunchConfig` (cuda.h).
#[repr(C)]
struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_mem_bytes: c_uint,
    stream: *mut c_void,
    attrs: *mut LaunchAttribute,
    num_attrs: c_uint,
}

/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`: the kernel may start while the
/// previous kernel of the stream still runs; it waits for it in `griddepcontrol.wait`.
const CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: c_uint = 6;

type LaunchExFn = unsafe extern "C" fn(
    *const LaunchConfig,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> c_int;

/// Entry points of the driver half, with the CUDA names' signatures (HIP's are ABI-identical).
struct DriverFns {
    module_load_data: unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> c_int,
    module_get_function:
        unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> c_int,
    launch: LaunchFn,
    /// CUDA 12+: `cuLaunchKernelEx`, for programmatic dependent launches; `None` on HIP and on
    /// older drivers (then every launch is an ordinary one).
    launch_ex: Option<LaunchExFn>,
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> c_int,
    mem_free: unsafe extern "C" fn(u64) -> c_int,
    memcpy_htod: unsafe extern "C" fn(u64, *const c_void, usize) -> c_int,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> c_int,
    /// `cuMemsetD32Async` / `hipMemsetD32Async` (pointer, value, count, stream); `None` where the
    /// library lacks it.
    memset_d32_async: Option<unsafe extern "C" fn(u64, c_uint, usize, *mut c_void) -> c_int>,
    synchronize: unsafe extern "C" fn() -> c_int,
    /// CUDA only: the primary context, made current on every calling thread.
    ctx_set_current: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    /// `cuOccupancyMaxActiveBlocksPerMultiprocessor` /
    /// `hipModuleOccupancyMaxActiveBlocksPerMultiprocessor` (blocks, function, block size,
    /// dynamic shared bytes); `None` where the library lacks it.
    occupancy: Option<OccupancyFn>,
    /// `cuOccupancyMaxActiveClusters` (CUDA 12+: clusters, function, launch configuration);
    /// `None` on HIP and older drivers.
    max_clusters:
        Option<unsafe extern "C" fn(*mut c_int, *mut c_void, *const LaunchConfig) -> c_int>,
    /// `cuFuncGetParamInfo` (CUDA 12.4+: function, parameter index, offset, size); `None` on HIP
    /// and older drivers.
    param_info: Option<unsafe extern "C" fn(*mut c_void, usize, *mut usize, *mut usize) -> c_int>,
}

type OccupancyFn = unsafe extern "C" fn(*mut c_int, *mut c_void, c_int, usize) -> c_int;

/// Entry points of the run-time compiler (NVRTC and hipRTC share the shape).
struct RtcFns {
    create: unsafe extern "C" fn(
        *mut *mut c_void,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int,
    compile: unsafe extern "C" fn(*mut c_void, c_int, *const *const c_char) -> c_int,
    log_size: unsafe extern "C" fn(*mut c_void, *mut usize) -> c_int,
    log: unsafe extern "C" fn(*mut c_void, *mut c_char) -> c_int,
    code_size: unsafe extern "C" fn(*mut c_void, *mut usize) -> c_int,
    code: unsafe extern "C" fn(*mut c_void, *mut c_char) -> c_int,
    destroy: unsafe extern "C" fn(*mut *mut c_void) -> c_int,
}

/// What the runtime knows about the device it drives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device's marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// The compile target and cache key: "sm_90" on NVIDIA, the device name (or `MXFUSE_HIP_ARCH`)
    /// on AMD.
    pub arch: String,
    /// NVIDIA compute capability as major * 10 + minor (0 on AMD).
    pub compute_capability: u32,
    /// Multiprocessors (SMs / CUs); 0 when unknown.
    pub multiprocessors: u32,
    /// Lanes per warp / wavefront.
    pub warp_size: u32,
}

/// A loaded driver + compiler pair for one device (device 0).
pub struct Driver {
    backend: Backend,
    fns: DriverFns,
    rtc: RtcFns,
    /// HIP: `hipGetErrorString(code) -> const char*`; CUDA: `cuGetErrorString(code, &str)`.
    error_string: ErrorStringFn,
    context: usize,
    info: DeviceInfo,
    // Kept last: the function pointers above live as long as these libraries stay loaded.
    _driver_lib: Library,
    _rtc_lib: Library,
}

#[derive(Clone, Copy)]
enum ErrorStringFn {
    Cuda(unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int),
    Hip(unsafe extern "C" fn(c_int) -> *const c_char),
}

/// Opens the first library of `names` that loads; the `env` variable, when set, names the file.
fn open_first(env: &str, names: &[&str]) -> Option<(Library, String)> {
    let from_env = std::env::var(env).ok();
    for name in from_env
        .iter()
        .map(String::as_str)
        .chain(names.iter().copied())
    {
        // SAFETY: loading a vendor runtime library runs its initialisers; these are the
        // libraries the vendor documents for exactly this use.
        if let Ok(lib) = unsafe { Library::new(name) } {
            return Some((lib, name.to_string()));
        }
    }
    None
}

/// Looks up `name` in `lib` as a function pointer of type `T`.
///
/// # Safety
/// `T` must be the exact C signature of the symbol.
pub(super) unsafe fn sym<T: Copy>(lib: &Library, lib_name: &str, name: &str) -> GpuResult<T> {
    let cname = format!("{name}\0");
    lib.get::<T>(cname.as_bytes())
        .map(|s| *s)
        .map_err(|e| GpuError::Library {
            library: lib_name.to_string(),
            message: format!("missing symbol {name}: {e}"),
        })
}

/// The library names tried for each backend (a path in the env variable is tried first).
pub const CUDA_DRIVER_LIBS: [&str; 2] = ["libcuda.so.1", "libcuda.so"];
pub const NVRTC_LIBS: [&str; 5] = [
    "libnvrtc.so",
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
    "libnvrtc.so.11.1",
];
pub const HIP_LIBS: [&str; 4] = [
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];
pub const HIPRTC_LIBS: [&str; 4] = [
    "libhiprtc.so",
    "libhiprtc.so.7",
    "libhiprtc.so.6",
    "libhiprtc.so.5",
];

/// A stack's driver and run-time compiler libraries as opened, with the names they were opened
/// by (for error messages).
struct Opened<'a> {
    drv: Library,
    dn: &'a str,
    rtc: Library,
    rn: &'a str,
}

/// One GPU stack [`Driver::load`] tries: a driver library, its run-time compiler, and the loader
/// that binds both (it must only bind that stack's signatures).
struct Stack {
    /// The API named in "reports no … device".
    api: &'static str,
    driver_env: &'static str,
    driver_libs: &'static [&'static str],
    /// The compiler named in "no … was found".
    rtc: &'static str,
    rtc_env: &'static str,
    rtc_libs: &'static [&'static str],
    load: unsafe fn(Opened<'_>) -> GpuResult<Option<Driver>>,
}

/// The stacks in order of preference.
const STACKS: [Stack; 2] = [
    Stack {
        api: "CUDA",
        driver_env: "MXFUSE_CUDA_DRIVER",
        driver_libs: &CUDA_DRIVER_LIBS,
        rtc: "NVRTC",
        rtc_env: "MXFUSE_NVRTC",
        rtc_libs: &NVRTC_LIBS,
        load: Driver::load_cuda,
    },
    Stack {
        api: "HIP",
        driver_env: "MXFUSE_HIP",
        driver_libs: &HIP_LIBS,
        rtc: "hipRTC",
        rtc_env: "MXFUSE_HIPRTC",
        rtc_libs: &HIPRTC_LIBS,
        load: Driver::load_hip,
    },
];

impl Driver {
    /// Loads CUDA (preferred) or HIP. `Ok(Err(reason))`: no usable GPU stack on this machine (no
    /// library, a driver without its run-time compiler, or no device), with the reason for the
    /// log line; `Err`: a stack is there but broken (a missing symbol, a failing call).
    pub fn load() -> GpuResult<Result<Driver, String>> {
        let mut reasons = Vec::new();
        for b in &STACKS {
            let Some((drv, drv_name)) = open_first(b.driver_env, b.driver_libs) else {
                continue;
            };
            match open_first(b.rtc_env, b.rtc_libs) {
                Some((rtc, rtc_name)) => {
                    let libs = Opened {
                        drv,
                        dn: &drv_name,
                        rtc,
                        rn: &rtc_name,
                    };
                    // SAFETY: each loader binds the signatures of its own stack (load_cuda: the
                    // CUDA driver API and NVRTC; load_hip: HIP and hipRTC), opened just above.
                    match unsafe { (b.load)(libs)? } {
                        Some(d) => return Ok(Ok(d)),
                        None => reasons.push(format!("{drv_name} reports no {} device", b.api)),
                    }
                }
                None => reasons.push(format!(
                    "{drv_name} loads but no {} was found (set {})",
                    b.rtc, b.rtc_env
                )),
            }
        }
        if reasons.is_empty() {
            reasons.push("no CUDA driver + NVRTC or HIP + hipRTC library found".into());
        }
        Ok(Err(reasons.join("; ")))
    }

    unsafe fn load_rtc(rtc: &Library, n: &str, prefix: &str, code: &str) -> GpuResult<RtcFns> {
        Ok(RtcFns {
            create: sym(rtc, n, &format!("{prefix}CreateProgram"))?,
            compile: sym(rtc, n, &format!("{prefix}CompileProgram"))?,
            log_size: sym(rtc, n, &format!("{prefix}GetProgramLogSize"))?,
            log: sym(rtc, n, &format!("{prefix}GetProgramLog"))?,
            code_size: sym(rtc, n, &format!("{prefix}Get{code}Size"))?,
            code: sym(rtc, n, &format!("{prefix}Get{code}"))?,
            destroy: sym(rtc, n, &format!("{prefix}DestroyProgram"))?,
        })
    }

    /// A driver over freshly bound symbols whose device is not asked yet: `info` holds only the
    /// warp size until the loader fills it in.
    fn unprobed(
        backend: Backend,
        fns: DriverFns,
        rtc: RtcFns,
        error_string: ErrorStringFn,
        warp_size: u32,
        driver_lib: Library,
        rtc_lib: Library,
    ) -> Driver {
        Driver {
            backend,
            fns,
            rtc,
            error_string,
            context: 0,
            info: DeviceInfo {
                name: String::new(),
                arch: String::new(),
                compute_capability: 0,
                multiprocessors: 0,
                warp_size,
            },
            _driver_lib: driver_lib,
            _rtc_lib: rtc_lib,
        }
    }

    /// The name of device `dev` through `get_name` (`cuDeviceGetName` / `hipDeviceGetName`,
    /// named `call` in errors).
    ///
    /// # Safety
    /// `get_name` must be that function of this driver's library.
    unsafe fn device_name(
        &self,
        call: &'static str,
        get_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int,
        dev: c_int,
    ) -> GpuResult<String> {
        let mut name = [0 as c_char; 256];
        self.check(call, get_name(name.as_mut_ptr(), 256, dev))?;
        // The runtime writes a NUL-terminated string into the 256 bytes it was given.
        Ok(CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned())
    }

    unsafe fn load_cuda(Opened { drv, dn, rtc, rn }: Opened<'_>) -> GpuResult<Option<Driver>> {
        let init: unsafe extern "C" fn(c_uint) -> c_int = sym(&drv, dn, "cuInit")?;
        let device_get: unsafe extern "C" fn(*mut c_int, c_int) -> c_int =
            sym(&drv, dn, "cuDeviceGet")?;
        let get_attr: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int =
            sym(&drv, dn, "cuDeviceGetAttribute")?;
        let get_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int =
            sym(&drv, dn, "cuDeviceGetName")?;
        let retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int =
            sym(&drv, dn, "cuDevicePrimaryCtxRetain")?;
        let error_string = ErrorStringFn::Cuda(sym(&drv, dn, "cuGetErrorString")?);
        let fns = DriverFns {
            module_load_data: sym(&drv, dn, "cuModuleLoadData")?,
            module_get_function: sym(&drv, dn, "cuModuleGetFunction")?,
            launch: sym(&drv, dn, "cuLaunchKernel")?,
            launch_ex: sym(&drv, dn, "cuLaunchKernelEx").ok(),
            mem_alloc: sym(&drv, dn, "cuMemAlloc_v2")?,
            mem_free: sym(&drv, dn, "cuMemFree_v2")?,
            memcpy_htod: sym(&drv, dn, "cuMemcpyHtoD_v2")?,
            memcpy_dtoh: sym(&drv, dn, "cuMemcpyDtoH_v2")?,
            memset_d32_async: sym(&drv, dn, "cuMemsetD32Async").ok(),
            synchronize: sym(&drv, dn, "cuCtxSynchronize")?,
            ctx_set_current: Some(sym(&drv, dn, "cuCtxSetCurrent")?),
            occupancy: sym(&drv, dn, "cuOccupancyMaxActiveBlocksPerMultiprocessor").ok(),
            max_clusters: sym(&drv, dn, "cuOccupancyMaxActiveClusters").ok(),
            param_info: sym(&drv, dn, "cuFuncGetParamInfo").ok(),
        };
        let rtc_fns = Self::load_rtc(&rtc, rn, "nvrtc", "CUBIN")?;
        let mut driver = Self::unprobed(Backend::Cuda, fns, rtc_fns, error_string, 32, drv, rtc);
        // CUDA_ERROR_NO_DEVICE (100) or a driver without a GPU: no GPU here, not an error.
        let rc = init(0);
        if rc != 0 {
            return Ok(None);
        }
        let mut dev: c_int = 0;
        if device_get(&mut dev, 0) != 0 {
            return Ok(None);
        }
        let attr = |a: c_int| -> GpuResult<u32> {
            let mut v: c_int = 0;
            driver.check("cuDeviceGetAttribute", get_attr(&mut v, a, dev))?;
            Ok(v.max(0) as u32)
        };
        // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR / MULTIPROCESSOR_COUNT.
        let (major, minor, sms) = (attr(75)?, attr(76)?, attr(16)?);
        let name = driver.device_name("cuDeviceGetName", get_name, dev)?;
        let mut ctx: *mut c_void = std::ptr::null_mut();
        driver.check("cuDevicePrimaryCtxRetain", retain(&mut ctx, dev))?;
        driver.context = ctx as usize;
        driver.info = DeviceInfo {
            name,
            arch: format!("sm_{major}{minor}"),
            compute_capability: major * 10 + minor,
            multiprocessors: sms,
            warp_size: 32,
        };
        Ok(Some(driver))
    }

    unsafe fn load_hip(Opened { drv, dn, rtc, rn }: Opened<'_>) -> GpuResult<Option<Driver>> {
        let init: unsafe extern "C" fn(c_uint) -> c_int = sym(&drv, dn, "hipInit")?;
        let set_device: unsafe extern "C" fn(c_int) -> c_int = sym(&drv, dn, "hipSetDevice")?;
        let get_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int =
            sym(&drv, dn, "hipDeviceGetName")?;
        let error_string = ErrorStringFn::Hip(sym(&drv, dn, "hipGetErrorString")?);
        let fns = DriverFns {
            module_load_data: sym(&drv, dn, "hipModuleLoadData")?,
            module_get_function: sym(&drv, dn, "hipModuleGetFunction")?,
            launch: sym(&drv, dn, "hipModuleLaunchKernel")?,
            launch_ex: None,
            mem_alloc: sym(&drv, dn, "hipMalloc")?,
            mem_free: sym(&drv, dn, "hipFree")?,
            memcpy_htod: sym(&drv, dn, "hipMemcpyHtoD")?,
            memcpy_dtoh: sym(&drv, dn, "hipMemcpyDtoH")?,
            memset_d32_async: sym(&drv, dn, "hipMemsetD32Async").ok(),
            synchronize: sym(&drv, dn, "hipDeviceSynchronize")?,
            ctx_set_current: None,
            occupancy: sym(
                &drv,
                dn,
                "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor",
            )
            .ok(),
            max_clusters: None,
            param_info: None,
        };
        let rtc_fns = Self::load_rtc(&rtc, rn, "hiprtc", "Code")?;
        if init(0) != 0 || set_device(0) != 0 {
            return Ok(None);
        }
        let mut driver = Self::unprobed(Backend::Hip, fns, rtc_fns, error_string, 64, drv, rtc);
        let name = driver.device_name("hipDeviceGetName", get_name, 0)?;
        // hipRTC compiles for the current device when no target is named; MXFUSE_HIP_ARCH
        // (e.g. "gfx942") names one explicitly and becomes the cache key.
        let arch = std::env::var("MXFUSE_HIP_ARCH").unwrap_or_else(|_| format!("hip:{name}"));
        driver.info = DeviceInfo {
            name,
            arch,
            compute_capability: 0,
            multiprocessors: 0,
            warp_size: 64,
        };
        Ok(Some(driver))
    }

    /// The vendor stack in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The device this driver drives.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn message(&self, code: c_int) -> String {
        // SAFETY: both functions return static strings owned by the runtime (or null).
        let p = unsafe {
            match self.error_string {
                ErrorStringFn::Cuda(f) => {
                    let mut p: *const c_char = std::ptr::null();
                    f(code, &mut p);
                    p
                }
                ErrorStringFn::Hip(f) => f(code),
            }
        };
        if p.is_null() {
            "unknown error".into()
        } else {
            // SAFETY: non-null, NUL-terminated static string from the runtime.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    }

    fn check(&self, call: &'static str, code: c_int) -> GpuResult<()> {
        if code == 0 {
            Ok(())
        } else {
            Err(GpuError::Driver {
                call,
                code,
                message: self.message(code),
            })
        }
    }

    /// Makes the device's context current on the calling thread (CUDA; a no-op on HIP).
    pub fn make_current(&self) -> GpuResult<()> {
        match self.fns.ctx_set_current {
            // SAFETY: the context was retained at load and is never released.
            Some(f) => self.check("cuCtxSetCurrent", unsafe { f(self.context as *mut c_void) }),
            None => Ok(()),
        }
    }

    /// Compiles `source` for this device; returns the loadable code object (CUBIN / HSACO).
    pub fn compile(&self, source: &str, options: &[String]) -> GpuResult<Vec<u8>> {
        let compile_err = |log: String| GpuError::Compile {
            arch: self.info.arch.clone(),
            log,
        };
        let src =
            CString::new(source).map_err(|_| compile_err("source holds a NUL byte".into()))?;
        let opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()))
            .collect::<Result<_, _>>()
            .map_err(|_| compile_err("an option holds a NUL byte".into()))?;
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let mut prog: *mut c_void = std::ptr::null_mut();
        let name = c"mxfuse_kernels.cu";
        // SAFETY: all pointers are valid NUL-terminated strings for the duration of the calls;
        // the program is destroyed on every path below.
        unsafe {
            let rc = (self.rtc.create)(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            );
            if rc != 0 {
                return Err(compile_err(format!("create program failed with code {rc}")));
            }
            let rc = (self.rtc.compile)(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr());
            let mut log_len = 0usize;
            (self.rtc.log_size)(prog, &mut log_len);
            let mut log = vec![0u8; log_len.max(1)];
            (self.rtc.log)(prog, log.as_mut_ptr() as *mut c_char);
            let log = String::from_utf8_lossy(&log)
                .trim_end_matches('\0')
                .to_string();
            if rc != 0 {
                (self.rtc.destroy)(&mut prog);
                return Err(compile_err(log));
            }
            let mut size = 0usize;
            let rc = (self.rtc.code_size)(prog, &mut size);
            let mut code = vec![0u8; size];
            let rc2 = if rc == 0 {
                (self.rtc.code)(prog, code.as_mut_ptr() as *mut c_char)
            } else {
                rc
            };
            (self.rtc.destroy)(&mut prog);
            if rc2 != 0 || size == 0 {
                return Err(compile_err(format!("no code object (code {rc2})")));
            }
            Ok(code)
        }
    }

    /// Loads a code object; returns the module handle.
    pub fn load_module(&self, image: &[u8]) -> GpuResult<usize> {
        self.make_current()?;
        let mut module: *mut c_void = std::ptr::null_mut();
        // SAFETY: `image` is a complete code object produced by `compile` (or the disk cache).
        self.check("module load", unsafe {
            (self.fns.module_load_data)(&mut module, image.as_ptr().cast())
        })?;
        Ok(module as usize)
    }

    /// Looks up a kernel in a loaded module.
    pub fn function(&self, module: usize, name: &str) -> GpuResult<usize> {
        let cname = CString::new(name).map_err(|_| GpuError::Library {
            library: "kernels".into(),
            message: format!("bad kernel name {name:?}"),
        })?;
        let mut f: *mut c_void = std::ptr::null_mut();
        // SAFETY: `module` is a live module handle from `load_module`.
        self.check("module get function", unsafe {
            (self.fns.module_get_function)(&mut f, module as *mut c_void, cname.as_ptr())
        })?;
        Ok(f as usize)
    }

    /// Whether [`Driver::launch`] can make programmatic dependent launches (`cuLaunchKernelEx`
    /// was found).
    pub fn has_launch_ex(&self) -> bool {
        self.fns.launch_ex.is_some()
    }

    /// How many blocks of `block` lanes of `function` (no dynamic shared memory) fit on one
    /// multiprocessor at once, by the driver's occupancy calculator (registers, static shared
    /// memory, `__launch_bounds__`); `Ok(None)` where the driver has no such query.
    /// How many parameters kernel `function` takes (`cuFuncGetParamInfo` until it fails), or
    /// `None` where the driver cannot say. The launchers check their argument count against it
    /// (`GpuRuntime::run`): the launch API reads one pointer per parameter from the caller's
    /// array, so a missing argument would be a read past it in this process.
    pub fn param_count(&self, function: usize) -> GpuResult<Option<usize>> {
        let Some(info) = self.fns.param_info else {
            return Ok(None);
        };
        self.make_current()?;
        let mut n = 0;
        loop {
            let (mut off, mut size) = (0usize, 0usize);
            // SAFETY: a live function handle; out-pointers to locals.
            let rc = unsafe { info(function as *mut c_void, n, &mut off, &mut size) };
            if rc != 0 {
                return Ok(Some(n));
            }
            n += 1;
            if n > 4096 {
                return Ok(None);
            }
        }
    }

    pub fn resident_blocks(&self, function: usize, block: u32) -> GpuResult<Option<usize>> {
        let Some(query) = self.fns.occupancy else {
            return Ok(None);
        };
        self.make_current()?;
        let mut blocks: c_int = 0;
        // SAFETY: `function` is a live function handle from `function`; out-pointer to a local.
        self.check("occupancy query", unsafe {
            query(&mut blocks, function as *mut c_void, block as c_int, 0)
        })?;
        Ok(Some(blocks.max(0) as usize))
    }

    /// How many clusters of `function` (compiled with `__cluster_dims__`) the device holds at once
    /// for `grid` blocks of `block` lanes (`cuOccupancyMaxActiveClusters`: a cluster's blocks
    /// must all fit in one GPC, so this can be fewer than multiprocessors / cluster size);
    /// `Ok(None)` where the driver has no such query.
    pub fn active_clusters(
        &self,
        function: usize,
        grid: [u32; 3],
        block: u32,
    ) -> GpuResult<Option<usize>> {
        let Some(query) = self.fns.max_clusters else {
            return Ok(None);
        };
        self.make_current()?;
        let config = LaunchConfig {
            grid,
            block: [block, 1, 1],
            shared_mem_bytes: 0,
            stream: std::ptr::null_mut(),
            attrs: std::ptr::null_mut(),
            num_attrs: 0,
        };
        let mut clusters: c_int = 0;
        // SAFETY: a live function handle; the configuration and out-pointer are locals.
        self.check("cluster occupancy query", unsafe {
            query(&mut clusters, function as *mut c_void, &config)
        })?;
        Ok(Some(clusters.max(0) as usize))
    }

    /// Launches `function` on `stream` (0 = the default stream); `pdl`: as a programmatic
    /// dependent launch when the driver has `cuLaunchKernelEx` (else an ordinary launch). A PDL
    /// launch the driver refuses is retried as an ordinary one, and `Ok(false)` says so (the
    /// caller stops asking); `Ok(true)` otherwise.
    ///
    /// # Safety
    /// `params` must point at one value per kernel parameter, each of the parameter's exact type,
    /// and every device pointer among them must be valid for the extents the kernel touches. With
    /// `pdl`, the kernel must wait (`griddepcontrol.wait`, MX_PDL_ENTRY) before it touches memory
    /// an earlier kernel of the stream writes or reads.
    pub unsafe fn launch(
        &self,
        function: usize,
        grid: [u32; 3],
        block: [u32; 3],
        stream: usize,
        params: &mut [*mut c_void],
        pdl: bool,
    ) -> GpuResult<bool> {
        self.make_current()?;
        let mut pdl_refused = false;
        if let (true, Some(launch_ex)) = (pdl, self.fns.launch_ex) {
            let mut attr = LaunchAttribute {
                id: CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                value: [0; 8],
            };
            // The union's `programmaticStreamSerializationAllowed` int: 1 (little-endian).
            attr.value[0] = 1;
            let config = LaunchConfig {
                grid,
                block,
                shared_mem_bytes: 0,
                stream: stream as *mut c_void,
                attrs: &mut attr,
                num_attrs: 1,
            };
            let rc = launch_ex(
                &config,
                function as *mut c_void,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            );
            if rc == 0 {
                return Ok(true);
            }
            // A refused launch configuration is not a sticky error: launch it the ordinary way.
            crate::log::warn(&format!(
                "mxfuse: programmatic dependent launch refused ({}); launching without it",
                self.message(rc)
            ));
            pdl_refused = true;
        }
        // The ordinary launch: `cuLaunchKernel` / `hipModuleLaunchKernel`.
        self.check(
            "kernel launch",
            (self.fns.launch)(
                function as *mut c_void,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                0,
                stream as *mut c_void,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            ),
        )?;
        Ok(!pdl_refused)
    }

    /// Allocates `bytes` of device memory (at least 1 byte).
    pub fn alloc(&self, bytes: usize) -> GpuResult<u64> {
        self.make_current()?;
        let mut ptr = 0u64;
        // SAFETY: out-pointer to a local.
        self.check("device alloc", unsafe {
            (self.fns.mem_alloc)(&mut ptr, bytes.max(1))
        })?;
        Ok(ptr)
    }

    /// Frees device memory from [`Driver::alloc`].
    pub fn free(&self, ptr: u64) -> GpuResult<()> {
        self.make_current()?;
        // SAFETY: `ptr` came from `alloc` and is freed once (DeviceBuffer's Drop).
        self.check("device free", unsafe { (self.fns.mem_free)(ptr) })
    }

    /// Copies host bytes to device memory (synchronous).
    pub fn copy_to_device(&self, dst: u64, src: &[u8]) -> GpuResult<()> {
        self.make_current()?;
        // SAFETY: the caller's buffer holds at least `src.len()` bytes at `dst`.
        self.check("copy to device", unsafe {
            (self.fns.memcpy_htod)(dst, src.as_ptr().cast(), src.len())
        })
    }

    /// Copies device bytes to the host (synchronous).
    pub fn copy_to_host(&self, dst: &mut [u8], src: u64) -> GpuResult<()> {
        self.make_current()?;
        // SAFETY: the caller's buffer holds at least `dst.len()` bytes at `src`.
        self.check("copy to host", unsafe {
            (self.fns.memcpy_dtoh)(dst.as_mut_ptr().cast(), src, dst.len())
        })
    }

    /// Sets `count` 32-bit words at `dst` to `value`, in stream order on `stream`.
    pub fn memset_d32_async(
        &self,
        dst: u64,
        value: u32,
        count: usize,
        stream: usize,
    ) -> GpuResult<()> {
        self.make_current()?;
        let f = self.fns.memset_d32_async.ok_or_else(|| GpuError::Library {
            library: "GPU driver".into(),
            message: "no cuMemsetD32Async / hipMemsetD32Async".into(),
        })?;
        // SAFETY: the caller's buffer holds at least `count` words at `dst`.
        self.check("memset", unsafe {
            f(dst, value, count, stream as *mut c_void)
        })
    }

    /// Waits for all work on the device.
    pub fn synchronize(&self) -> GpuResult<()> {
        self.make_current()?;
        // SAFETY: no arguments.
        self.check("synchronize", unsafe { (self.fns.synchronize)() })
    }
}

// SAFETY: the driver APIs are thread-safe; the context handle is only passed to cuCtxSetCurrent.
unsafe impl Send for Driver {}
// SAFETY: as above; no interior mutability.
unsafe impl Sync for Driver {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_structs_have_the_cuda_h_layout() {
        // CUlaunchAttribute: 72 bytes, value at 8; CUlaunchConfig: 56 bytes, hStream at 32.
        assert_eq!(std::mem::size_of::<LaunchAttribute>(), 72);
        assert_eq!(std::mem::offset_of!(LaunchAttribute, value), 8);
        assert_eq!(std::mem::size_of::<LaunchConfig>(), 56);
        assert_eq!(std::mem::offset_of!(LaunchConfig, stream), 32);
        assert_eq!(std::mem::offset_of!(LaunchConfig, attrs), 40);
        assert_eq!(std::mem::offset_of!(LaunchConfig, num_attrs), 48);
    }
}
