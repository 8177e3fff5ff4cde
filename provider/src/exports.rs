//! The C symbols ORT looks up in this library.

use std::ffi::c_char;

use ort_sys::{OrtApiBase, OrtLogger, OrtSessionOptions, OrtStatusPtr};

use crate::error::Error;
use crate::factory::Factory;
use crate::ffi::api::{api, init};
use crate::ffi::ep_abi::OrtEpFactory;
use crate::ffi::guard::guard_status;

/// Classic custom-op entry point: `SessionOptions.register_custom_ops_library(path)`.
///
/// # Safety
/// Called by ORT with valid pointers.
#[no_mangle]
pub unsafe extern "C" fn RegisterCustomOps(
    options: *mut OrtSessionOptions,
    base: *const OrtApiBase,
) -> OrtStatusPtr {
    if let Err(status) = init(base) {
        return status;
    }
    guard_status("RegisterCustomOps", || {
        let domain = crate::custom_ops::mxfuse_domain()?;
        crate::ffi::api::check((api()?.ort.AddCustomOpDomain)(options, domain))
    })
}

/// Plugin-EP entry point: `onnxruntime.register_execution_provider_library(name, path)`.
///
/// # Safety
/// Called by ORT with valid pointers; `factories` has room for `max_factories` entries.
#[no_mangle]
pub unsafe extern "C" fn CreateEpFactories(
    registration_name: *const c_char,
    base: *const OrtApiBase,
    logger: *const OrtLogger,
    factories: *mut *mut OrtEpFactory,
    max_factories: usize,
    num_factories: *mut usize,
) -> OrtStatusPtr {
    if let Err(status) = init(base) {
        return status;
    }
    guard_status("CreateEpFactories", || {
        pin_library();
        if factories.is_null() || num_factories.is_null() || max_factories < 1 {
            return Err(Error::invalid("CreateEpFactories: no room for a factory"));
        }
        let name = if registration_name.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(registration_name)
                .to_string_lossy()
                .into_owned()
        };
        *factories = Factory::new_registered(name)?.into_raw();
        *num_factories = 1;
        // The kernels' status lines (and ours through `kernels::log`) go to ORT's loggers from
        // here on: `logger` is the environment's, valid while this factory lives.
        crate::logging::install_kernel_sink(logger);
        Ok(())
    })
}

/// Releases a factory made by [`CreateEpFactories`].
///
/// # Safety
/// `factory` must come from [`CreateEpFactories`].
#[no_mangle]
pub unsafe extern "C" fn ReleaseEpFactory(factory: *mut OrtEpFactory) -> OrtStatusPtr {
    guard_status("ReleaseEpFactory", || {
        if !factory.is_null() {
            crate::logging::release_default_logger();
            Factory::release(factory);
        }
        Ok(())
    })
}

/// Keeps this library mapped until the process exits (`RTLD_NODELETE`). ORT's
/// `UnregisterExecutionProviderLibrary` unloads it even when a live session still runs our
/// fused nodes (the C API asks callers not to; in Python a session kept alive by a reference
/// cycle or a test fixture is enough), and that session's next run or release then jumped into
/// unmapped code (a segfault). A re-registration loads the same copy again.
fn pin_library() {
    static PINNED: std::sync::Once = std::sync::Once::new();
    PINNED.call_once(|| unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let here = CreateEpFactories as *const std::ffi::c_void;
        if libc::dladdr(here, &mut info) != 0 && !info.dli_fname.is_null() {
            // NOLOAD: only mark the copy already loaded (the handle is never closed).
            libc::dlopen(
                info.dli_fname,
                libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
            );
        }
    });
}
