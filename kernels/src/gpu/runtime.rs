//! [`GpuRuntime`]: one loaded driver, the kernel modules compiled for its device, and device
//! buffers. The program is compiled as the modules of [`super::sources::MODULES`], the eager
//! ones on parallel threads when the runtime loads (NVRTC; hipRTC one after another), the others
//! when a kernel only they hold is first asked for. Compilation happens once per device
//! architecture per process, and once per machine: each code object is kept on disk keyed by
//! its program text, the architecture and the compiler options, in `MXFUSE_KERNEL_CACHE`
//! (default `$XDG_CACHE_HOME/mxfuse` or `~/.cache/mxfuse`; set it to the empty string to
//! disable). The first GPU session on a machine compiles (a line says so, `crate::log`; ~2 minutes
//! as one program on the H200's host, the largest module alone ~25 s on a small host), later
//! ones load from the cache.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::driver::{Backend, DeviceInfo, Driver};
use super::error::{GpuError, GpuResult};
use super::prefill::PrefillLock;
use super::sources::{module_text, owner_of, MODULES};

/// A device and the compiled kernels, shared by every op that runs on it.
pub struct GpuRuntime {
    driver: Driver,
    /// Per [`MODULES`] entry: its loaded module, once compiled and loaded.
    modules: Mutex<Vec<Option<usize>>>,
    /// By kernel name: its handle and how many parameters it takes (when the driver says).
    functions: Mutex<HashMap<String, (usize, Option<usize>)>>,
    /// [`GpuRuntime::resident_blocks`] by (kernel, block size), asked once.
    resident: Mutex<HashMap<(String, u32), Option<usize>>>,
    /// [`GpuRuntime::active_clusters`] by (kernel, block size), asked once.
    clusters: Mutex<HashMap<(String, u32), Option<usize>>>,
    /// Set when the driver refused a programmatic dependent launch: later launches are ordinary.
    pdl_refused: AtomicBool,
    /// The prefill GEMM route's library and scratch ([`super::prefill`]).
    prefill: PrefillLock,
}

/// Code objects by (architecture, module name).
type Images = HashMap<(String, &'static str), Arc<Vec<u8>>>;

/// Code objects compiled in this process (a second runtime for the same device type loads
/// instead of recompiling).
fn compiled_images() -> &'static Mutex<Images> {
    static IMAGES: OnceLock<Mutex<Images>> = OnceLock::new();
    IMAGES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The process-wide runtime, loaded on first use (see [`GpuRuntime::load`]).
static SHARED: OnceLock<Result<Option<Arc<GpuRuntime>>, GpuError>> = OnceLock::new();

impl GpuRuntime {
    /// Loads the GPU stack and compiles the kernels for device 0.
    ///
    /// `Ok(None)` when this machine has no usable GPU library or device (or `MXFUSE_GPU=off`);
    /// then the CPU kernels run, and one log line says so (stderr, or the host's sink:
    /// `crate::log`). `Err` when a GPU stack is present but fails (a missing symbol, a compile
    /// error): that is a bug to report, not a reason to silently change the numerics path.
    pub fn load() -> GpuResult<Option<Arc<GpuRuntime>>> {
        if std::env::var("MXFUSE_GPU").is_ok_and(|v| v == "off" || v == "0") {
            crate::log::info("mxfuse: MXFUSE_GPU=off: using the CPU kernels");
            return Ok(None);
        }
        let driver = match Driver::load()? {
            Ok(d) => d,
            Err(reason) => {
                crate::log::info(&format!("mxfuse: {reason}; using the CPU kernels"));
                return Ok(None);
            }
        };
        let eager: Vec<usize> = (0..MODULES.len()).filter(|&i| MODULES[i].eager).collect();
        let images = Self::images_for(&driver, &eager)?;
        let mut modules = vec![None; MODULES.len()];
        for (&i, image) in eager.iter().zip(&images) {
            modules[i] = Some(driver.load_module(image)?);
        }
        let info = driver.info();
        crate::log::info(&format!(
            "mxfuse: GPU kernels ready on {} ({}, {:?})",
            info.name,
            info.arch,
            driver.backend()
        ));
        Ok(Some(Arc::new(GpuRuntime {
            driver,
            modules: Mutex::new(modules),
            functions: Mutex::new(HashMap::new()),
            resident: Mutex::new(HashMap::new()),
            clusters: Mutex::new(HashMap::new()),
            pdl_refused: AtomicBool::new(false),
            prefill: PrefillLock::default(),
        })))
    }

    /// [`GpuRuntime::load`] once per process; later calls return the same runtime (or result).
    pub fn shared() -> GpuResult<Option<Arc<GpuRuntime>>> {
        SHARED.get_or_init(Self::load).clone()
    }

    /// Compiler options for this device: the exact architecture (so Hopper code uses sm_90
    /// instructions), C++17, no fast-math (the numerics depend on IEEE division, sqrt, denormals).
    fn compile_options(driver: &Driver) -> Vec<String> {
        let info = driver.info();
        match driver.backend() {
            Backend::Cuda => cuda_compile_options(&info.arch),
            Backend::Hip => {
                let mut o = vec!["-std=c++17".to_string()];
                if let Ok(arch) = std::env::var("MXFUSE_HIP_ARCH") {
                    o.push(format!("--offload-arch={arch}"));
                }
                o
            }
        }
    }

    /// The code objects of modules `which` (indices into [`MODULES`]): from this process, the
    /// disk cache, or compiled — NVRTC programs on parallel threads (hipRTC serially: its
    /// thread safety is not documented). One log line (a warning) when anything compiles.
    fn images_for(driver: &Driver, which: &[usize]) -> GpuResult<Vec<Arc<Vec<u8>>>> {
        let arch = driver.info().arch.clone();
        let options = Self::compile_options(driver);
        let cache_dir = kernel_cache_dir();
        let known = |i: usize| -> Option<Arc<Vec<u8>>> {
            let key = (arch.clone(), MODULES[i].name);
            let images = compiled_images().lock().unwrap_or_else(|e| e.into_inner());
            images.get(&key).cloned()
        };
        // Per module: its image from this process or the disk cache, else (slot, source, cache
        // file) to compile.
        let mut found: Vec<Option<Arc<Vec<u8>>>> = Vec::with_capacity(which.len());
        let mut to_compile = Vec::new();
        for (slot, &i) in which.iter().enumerate() {
            if let Some(img) = known(i) {
                found.push(Some(img));
                continue;
            }
            let source = module_text(&MODULES[i]);
            let file = cache_dir
                .as_ref()
                .map(|d| d.join(cache_file_name(&source, &arch, &options)));
            let cached = file.as_ref().and_then(|f| std::fs::read(f).ok());
            match cached.filter(|img| !img.is_empty()) {
                Some(img) => found.push(Some(Arc::new(img))),
                None => {
                    found.push(None);
                    to_compile.push((slot, source, file));
                }
            }
        }
        if !to_compile.is_empty() {
            let names: Vec<&str> = to_compile
                .iter()
                .map(|(slot, _, _)| MODULES[which[*slot]].name)
                .collect();
            // A warning, not info: it explains a stall of tens of seconds in session creation,
            // which a user at ORT's default level (WARNING) should not have to guess at.
            crate::log::warn(&format!(
                "mxfuse: compiling GPU kernels for {arch} ({}; once per machine, cached in {})",
                names.join(", "),
                cache_dir
                    .as_ref()
                    .map_or("no cache: MXFUSE_KERNEL_CACHE is empty".into(), |d| d
                        .display()
                        .to_string())
            ));
            let compile = |source: &String| driver.compile(source, &options);
            let results: Vec<GpuResult<Vec<u8>>> = if driver.backend() == Backend::Cuda {
                std::thread::scope(|s| {
                    let handles: Vec<_> = to_compile
                        .iter()
                        .map(|(_, src, _)| s.spawn(move || compile(src)))
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| {
                            h.join().unwrap_or_else(|_| {
                                Err(GpuError::Compile {
                                    arch: arch.clone(),
                                    log: "the compiler thread panicked".into(),
                                })
                            })
                        })
                        .collect()
                })
            } else {
                to_compile.iter().map(|(_, src, _)| compile(src)).collect()
            };
            for ((slot, _, file), result) in to_compile.iter().zip(results) {
                let image = result?;
                if let (Some(dir), Some(file)) = (&cache_dir, file) {
                    // A failed cache write only costs a recompile next time.
                    let _ = std::fs::create_dir_all(dir);
                    let _ = std::fs::write(file, &image);
                }
                found[*slot] = Some(Arc::new(image));
            }
        }
        let mut images = compiled_images().lock().unwrap_or_else(|e| e.into_inner());
        Ok(which
            .iter()
            .zip(found)
            .map(|(&i, img)| {
                let img = img.expect("every module found or compiled");
                images.insert((arch.clone(), MODULES[i].name), img.clone());
                img
            })
            .collect())
    }

    /// The vendor stack in use.
    pub fn backend(&self) -> Backend {
        self.driver.backend()
    }

    /// The device (name, architecture, multiprocessors, warp size).
    pub fn device(&self) -> &DeviceInfo {
        self.driver.info()
    }

    pub(crate) fn driver(&self) -> &Driver {
        &self.driver
    }

    pub(super) fn prefill_lock(&self) -> &PrefillLock {
        &self.prefill
    }

    /// The kernel `name` (looked up once) from the module whose name prefixes claim it
    /// ([`owner_of`]), compiled and loaded now if it is not yet. Only that module is asked: asking
    /// the others fails with "named symbol not found", which compute-sanitizer reports as errors.
    pub(crate) fn function(&self, name: &str) -> GpuResult<usize> {
        Ok(self.function_and_arity(name)?.0)
    }

    /// [`GpuRuntime::function`] and the kernel's parameter count where the driver reports it.
    pub(crate) fn function_and_arity(&self, name: &str) -> GpuResult<(usize, Option<usize>)> {
        let mut table = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&f) = table.get(name) {
            return Ok(f);
        }
        let i = owner_of(name).ok_or_else(|| GpuError::Library {
            library: "mxfuse kernels".into(),
            message: format!("no module holds kernel {name}"),
        })?;
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        let m = match modules[i] {
            Some(m) => m,
            None => {
                let image = Self::images_for(&self.driver, &[i])?.remove(0);
                let m = self.driver.load_module(&image)?;
                modules[i] = Some(m);
                m
            }
        };
        let f = self.driver.function(m, name)?;
        // MXFUSE_GPU_ARITY_CHECK=0 skips the count: the driver query ends on an "invalid value"
        // for the index past the last parameter, which compute-sanitizer reports as an API
        // error (bench/gpu/device_verify.sh sets it for the sanitizer runs).
        let arity = if env_switch!("MXFUSE_GPU_ARITY_CHECK") {
            self.driver.param_count(f)?
        } else {
            None
        };
        let entry = (f, arity);
        table.insert(name.to_string(), entry);
        Ok(entry)
    }

    /// How many blocks of `block` lanes of kernel `name` one multiprocessor holds at once (the
    /// driver's occupancy query, asked once per kernel and block size); `None` where the driver
    /// has no such query.
    pub(crate) fn resident_blocks(&self, name: &str, block: u32) -> GpuResult<Option<usize>> {
        Self::asked_once(&self.resident, name, block, || {
            self.driver.resident_blocks(self.function(name)?, block)
        })
    }

    /// How many clusters of cluster kernel `name` the device holds at once on `grid` blocks of
    /// `block` lanes (the driver's cluster occupancy query, asked once per kernel and block size:
    /// the answer is a capacity, not a function of the grid); `None` where the driver has no such
    /// query.
    pub(crate) fn active_clusters(
        &self,
        name: &str,
        grid: [u32; 3],
        block: u32,
    ) -> GpuResult<Option<usize>> {
        Self::asked_once(&self.clusters, name, block, || {
            self.driver
                .active_clusters(self.function(name)?, grid, block)
        })
    }

    /// A driver query about kernel `name` at `block` lanes, from `cache` or, the first time, from
    /// `ask` (kept: occupancy answers depend only on the kernel and the block size).
    fn asked_once(
        cache: &Mutex<HashMap<(String, u32), Option<usize>>>,
        name: &str,
        block: u32,
        ask: impl FnOnce() -> GpuResult<Option<usize>>,
    ) -> GpuResult<Option<usize>> {
        let key = (name.to_string(), block);
        if let Some(&r) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(r);
        }
        let r = ask()?;
        cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, r);
        Ok(r)
    }

    /// Whether programmatic dependent launches are still allowed (the driver has not refused one).
    pub(crate) fn pdl_allowed(&self) -> bool {
        !self.pdl_refused.load(Ordering::Relaxed)
    }

    /// Records that the driver refused a programmatic dependent launch.
    pub(crate) fn pdl_refused(&self) {
        self.pdl_refused.store(true, Ordering::Relaxed);
    }

    /// Allocates an uninitialised device buffer of `bytes` bytes.
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> GpuResult<DeviceBuffer> {
        Ok(DeviceBuffer {
            ptr: self.driver.alloc(bytes)?,
            bytes,
            runtime: self.clone(),
        })
    }

    /// Allocates a device buffer holding a copy of `data`.
    pub fn upload<T: pod::Pod>(self: &Arc<Self>, data: &[T]) -> GpuResult<DeviceBuffer> {
        let bytes = pod::as_bytes(data);
        let buf = self.alloc(bytes.len())?;
        self.driver.copy_to_device(buf.ptr, bytes)?;
        Ok(buf)
    }

    /// Waits until the device has finished all queued work.
    pub fn synchronize(&self) -> GpuResult<()> {
        self.driver.synchronize()
    }
}

impl Drop for GpuRuntime {
    fn drop(&mut self) {
        self.free_prefill_scratch();
    }
}

/// NVRTC options for an NVIDIA architecture ("sm_90").
pub fn cuda_compile_options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "-std=c++17".into(),
        "-lineinfo".into(),
    ]
}

/// Where compiled code objects are kept: `MXFUSE_KERNEL_CACHE` if set (empty = no cache), else
/// `$XDG_CACHE_HOME/mxfuse`, else `$HOME/.cache/mxfuse`.
pub fn kernel_cache_dir() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    match std::env::var_os("MXFUSE_KERNEL_CACHE") {
        Some(dir) if dir.is_empty() => None,
        Some(dir) => Some(PathBuf::from(dir)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|d| d.join("mxfuse")),
    }
}

/// The file name under [`kernel_cache_dir`] of `source` compiled for `arch` with `options`
/// (a hash of all three, so a stale code object is never loaded). Public so that a code object
/// compiled elsewhere (bench/gpu/offline_compile.py) can be placed where the runtime looks.
pub fn cache_file_name(source: &str, arch: &str, options: &[String]) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (source, arch, options).hash(&mut h);
    format!("mxfuse-{arch}-{:016x}.bin", h.finish())
}

/// Device memory owned by Rust; freed on drop.
pub struct DeviceBuffer {
    ptr: u64,
    bytes: usize,
    runtime: Arc<GpuRuntime>,
}

impl DeviceBuffer {
    /// The device address, for the launch functions.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Copies the buffer's first `out.len()` elements to the host (synchronous: waits for the
    /// kernels queued on the default stream).
    pub fn download<T: pod::Pod>(&self, out: &mut [T]) -> GpuResult<()> {
        let dst = pod::as_bytes_mut(out);
        if dst.len() > self.bytes {
            return Err(crate::error::KernelError::Buffer(format!(
                "download of {} bytes from a {}-byte device buffer",
                dst.len(),
                self.bytes
            ))
            .into());
        }
        self.runtime.driver.copy_to_host(dst, self.ptr)
    }

    /// Overwrites the buffer's start with `data`.
    pub fn upload_from<T: pod::Pod>(&self, data: &[T]) -> GpuResult<()> {
        let src = pod::as_bytes(data);
        if src.len() > self.bytes {
            return Err(crate::error::KernelError::Buffer(format!(
                "upload of {} bytes into a {}-byte device buffer",
                src.len(),
                self.bytes
            ))
            .into());
        }
        self.runtime.driver.copy_to_device(self.ptr, src)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // Nothing useful can be done with a failed free during drop.
        let _ = self.runtime.driver.free(self.ptr);
    }
}

/// Plain-old-data views for host <-> device copies, without a dependency.
pub mod pod {
    /// Types whose every bit pattern is valid and that hold no padding or pointers.
    ///
    /// # Safety
    /// Implement only for such types.
    pub unsafe trait Pod: Copy + 'static {}
    // SAFETY: primitive numbers and the `half` floats are plain bits without padding.
    unsafe impl Pod for u8 {}
    // SAFETY: as above.
    unsafe impl Pod for u16 {}
    // SAFETY: as above.
    unsafe impl Pod for u32 {}
    // SAFETY: as above.
    unsafe impl Pod for u64 {}
    // SAFETY: as above.
    unsafe impl Pod for i32 {}
    // SAFETY: as above.
    unsafe impl Pod for i64 {}
    // SAFETY: as above.
    unsafe impl Pod for f32 {}
    // SAFETY: as above.
    unsafe impl Pod for half::f16 {}
    // SAFETY: as above.
    unsafe impl Pod for half::bf16 {}

    /// The bytes of a slice of plain data.
    pub fn as_bytes<T: Pod>(v: &[T]) -> &[u8] {
        // SAFETY: T is Pod (no padding), so its memory is initialised bytes.
        unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
    }

    /// The bytes of a mutable slice of plain data (any bytes written are a valid T).
    pub fn as_bytes_mut<T: Pod>(v: &mut [T]) -> &mut [u8] {
        // SAFETY: T is Pod: every bit pattern written through the byte view is a valid T.
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v)) }
    }
}
