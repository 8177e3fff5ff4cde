//! The vendor's bf16 GEMM (cuBLAS), loaded at run time with `libloading` as the driver is: the
//! prefill route of `MxMatMul` ([`super::prefill`]) hands it the two operands it dequantized to
//! bf16. Nothing here is needed at build time; without the library that route is off and one
//! log line says so (`crate::log`). NVIDIA only for now: on ROCm hipBLASLt would take this place
//! (not written, since nothing here could run it).
//!
//! Where the library is looked for, first hit wins: the file in `MXFUSE_CUBLAS`; the sonames
//! through the dynamic loader (`LD_LIBRARY_PATH`, the ldconfig cache); then `lib64` of
//! `CUDA_HOME` / `CUDA_PATH` / `/usr/local/cuda`, and the pip wheels' `nvidia/cu13/lib`,
//! `nvidia/cublas/lib` of the Python installs in the usual prefixes. `libcublasLt` from the same
//! folder is opened first (libcublas needs it by soname, and a wheel's folder is not on the
//! loader's path).

use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};

use libloading::Library;

use super::driver::{sym, Driver};
use super::error::{GpuError, GpuResult};

/// The sonames tried, newest first.
const SONAMES: [&str; 4] = [
    "libcublas.so.13",
    "libcublas.so.12",
    "libcublas.so.11",
    "libcublas.so",
];

// cublas_api.h / library_types.h values (stable across CUDA 11-13).
const CUBLAS_OP_N: c_int = 0;
const CUBLAS_OP_T: c_int = 1;
const CUDA_R_32F: c_int = 0;
const CUDA_R_16BF: c_int = 14;
const CUDA_R_16F: c_int = 2;
const CUBLAS_COMPUTE_32F: c_int = 68;
const CUBLAS_GEMM_DEFAULT: c_int = -1;
/// `CUBLAS_DEFAULT_MATH` (0) with reductions kept in the compute type.
const CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION: c_int = 16;

type GemmExFn = unsafe extern "C" fn(
    *mut c_void,   // handle
    c_int,         // transa
    c_int,         // transb
    c_int,         // m
    c_int,         // n
    c_int,         // k
    *const c_void, // alpha
    *const c_void, // A
    c_int,         // Atype
    c_int,         // lda
    *const c_void, // B
    c_int,         // Btype
    c_int,         // ldb
    *const c_void, // beta
    *mut c_void,   // C
    c_int,         // Ctype
    c_int,         // ldc
    c_int,         // computeType
    c_int,         // algo
) -> c_int;

/// A loaded cuBLAS with one handle. Not `Sync` by itself: [`super::prefill`] keeps it behind
/// the runtime's prefill lock, which also orders its use of the scratch buffers.
pub struct Blas {
    handle: *mut c_void,
    set_stream: unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int,
    gemm_ex: GemmExFn,
    destroy: unsafe extern "C" fn(*mut c_void) -> c_int,
    /// Where it was found (for the log line).
    pub path: String,
    _lt: Option<Library>,
    _lib: Library,
}

// SAFETY: the handle is used only under the runtime's prefill mutex (one thread at a time);
// cuBLAS allows a handle to move between threads as long as calls do not overlap.
unsafe impl Send for Blas {}

/// Output element type of [`Blas::gemm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlasOut {
    Bf16,
    F16,
    F32,
}

/// Input element type of [`Blas::gemm`] (both operands), on tensor cores: products exact, f32
/// accumulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlasIn {
    Bf16,
    F16,
}

/// The folders searched after the loader's own path (see the module docs).
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Ok(v) = std::env::var(var) {
            dirs.push(Path::new(&v).join("lib64"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    let mut roots: Vec<PathBuf> = ["/usr/local/lib", "/usr/lib", "/opt/conda/lib"]
        .iter()
        .map(PathBuf::from)
        .collect();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Ok(v) = std::env::var(var) {
            roots.push(Path::new(&v).join("lib"));
        }
    }
    if let Ok(home) = std::env::var("HOME") {
        roots.push(Path::new(&home).join(".local/lib"));
    }
    for root in roots {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if !name.to_string_lossy().starts_with("python3") {
                continue;
            }
            for pkgs in ["site-packages", "dist-packages"] {
                for sub in ["nvidia/cu13/lib", "nvidia/cublas/lib"] {
                    dirs.push(e.path().join(pkgs).join(sub));
                }
            }
        }
    }
    dirs
}

/// Opens `path`, first its folder's `libcublasLt` of the same suffix (`libcublas.so.13` ->
/// `libcublasLt.so.13`) when the path names a folder.
fn open(path: &Path) -> Option<(Library, Option<Library>)> {
    let lt = match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) if !dir.as_os_str().is_empty() => {
            let lt_name = name.to_string_lossy().replace("libcublas", "libcublasLt");
            // SAFETY: a vendor library's initialisers, as for libcublas itself.
            unsafe { Library::new(dir.join(lt_name)) }.ok()
        }
        _ => None,
    };
    // SAFETY: loading cuBLAS runs its initialisers; it is the library NVIDIA documents for this.
    let lib = unsafe { Library::new(path) }.ok()?;
    Some((lib, lt))
}

impl Blas {
    /// Finds and opens cuBLAS and creates a handle on the driver's context. `Ok(Err(reason))`
    /// when no library is found (the route is off, the reason goes to the log); `Err` when one
    /// is found but does not work (a missing symbol, a failing `cublasCreate`).
    pub fn load(driver: &Driver) -> GpuResult<Result<Blas, String>> {
        let from_env = std::env::var("MXFUSE_CUBLAS").ok().map(PathBuf::from);
        let candidates = from_env
            .into_iter()
            .chain(SONAMES.iter().map(PathBuf::from))
            .chain(
                search_dirs()
                    .into_iter()
                    .flat_map(|d| SONAMES.iter().map(move |s| d.join(s))),
            );
        let Some((path, (lib, lt))) = candidates
            .into_iter()
            .find_map(|p| open(&p).map(|l| (p.to_string_lossy().into_owned(), l)))
        else {
            return Ok(Err(format!(
                "no cuBLAS found ({} through the loader, the CUDA and pip-wheel folders; MXFUSE_CUBLAS names the file)",
                SONAMES.join(", ")
            )));
        };
        // SAFETY: the signatures are cublas_api.h's (v2 API, CUDA 11-13).
        unsafe {
            let create: unsafe extern "C" fn(*mut *mut c_void) -> c_int =
                sym(&lib, &path, "cublasCreate_v2")?;
            let set_stream = sym(&lib, &path, "cublasSetStream_v2")?;
            let gemm_ex = sym(&lib, &path, "cublasGemmEx")?;
            let destroy: unsafe extern "C" fn(*mut c_void) -> c_int =
                sym(&lib, &path, "cublasDestroy_v2")?;
            // cuBLAS works on the calling thread's current context: the runtime's.
            driver.make_current()?;
            let mut handle = std::ptr::null_mut();
            let rc = create(&mut handle);
            if rc != 0 || handle.is_null() {
                return Err(GpuError::Library {
                    library: path,
                    message: format!("cublasCreate failed with status {rc}"),
                });
            }
            // Split-K partial sums in f32, the compute type: by default cuBLAS may reduce them
            // in the output type (bf16 / f16), adding a rounding per partial sum that the
            // documented arithmetic (f32 accumulation, one final rounding) does not have.
            let set_math: unsafe extern "C" fn(*mut c_void, c_int) -> c_int =
                sym(&lib, &path, "cublasSetMathMode")?;
            let rc = set_math(handle, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
            if rc != 0 {
                destroy(handle);
                return Err(GpuError::Library {
                    library: path,
                    message: format!("cublasSetMathMode failed with status {rc}"),
                });
            }
            Ok(Ok(Blas {
                handle,
                set_stream,
                gemm_ex,
                destroy,
                path,
                _lt: lt,
                _lib: lib,
            }))
        }
    }

    /// Row-major `y[m, n] = alpha · Σ_k a[m, k] · b[n, k] + beta · y[m, n]` with `a`, `b` of
    /// `input` on tensor cores (exact products, f32 accumulation), `y` of `out`, on `stream`.
    /// `beta` is 0 or 1 (then `y` holds the bias or the sum so far).
    ///
    /// # Safety
    /// The pointers must be device buffers of those extents on the driver's device, and the
    /// caller must make the driver's context current first.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn gemm(
        &self,
        (m, n, k): (c_int, c_int, c_int),
        alpha: f32,
        (a, b): (u64, u64),
        beta: f32,
        y: u64,
        (input, out): (BlasIn, BlasOut),
        stream: usize,
    ) -> GpuResult<()> {
        let status = |call: &'static str, rc: c_int| -> GpuResult<()> {
            if rc == 0 {
                Ok(())
            } else {
                Err(GpuError::Driver {
                    call,
                    code: rc,
                    message: format!("cuBLAS status {rc} ({})", self.path),
                })
            }
        };
        status(
            "cublasSetStream",
            (self.set_stream)(self.handle, stream as *mut c_void),
        )?;
        let ctype = match out {
            BlasOut::Bf16 => CUDA_R_16BF,
            BlasOut::F16 => CUDA_R_16F,
            BlasOut::F32 => CUDA_R_32F,
        };
        let itype = match input {
            BlasIn::Bf16 => CUDA_R_16BF,
            BlasIn::F16 => CUDA_R_16F,
        };
        let compute = CUBLAS_COMPUTE_32F;
        // Column-major view: y^T [n, m] = b [k, n]^T · a^T [k, m], so A = b (transposed, lda =
        // k), B = a (lda = k), C = y (ldc = n).
        status(
            "cublasGemmEx",
            (self.gemm_ex)(
                self.handle,
                CUBLAS_OP_T,
                CUBLAS_OP_N,
                n,
                m,
                k,
                (&alpha as *const f32).cast(),
                b as *const c_void,
                itype,
                k,
                a as *const c_void,
                itype,
                k,
                (&beta as *const f32).cast(),
                y as *mut c_void,
                ctype,
                n,
                compute,
                CUBLAS_GEMM_DEFAULT,
            ),
        )
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the handle came from cublasCreate and is destroyed once.
        unsafe {
            (self.destroy)(self.handle);
        }
    }
}
