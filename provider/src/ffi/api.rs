//! The ORT API tables this library calls, negotiated once, and `OrtStatus` helpers.

use std::ffi::{c_char, CStr, CString};
use std::ptr;
use std::sync::OnceLock;

use ort_sys::{OrtApi, OrtApiBase, OrtErrorCode, OrtStatus, OrtStatusPtr};

use super::ep_abi::{OrtEpApi, ORT_API_VERSION};
use crate::error::{Error, Result};

/// The host's API tables. ORT owns them for the life of the process.
pub struct Api {
    pub ort: &'static OrtApi,
    pub ep: &'static OrtEpApi,
}

// SAFETY: both tables are immutable function-pointer tables owned by ORT.
unsafe impl Send for Api {}
unsafe impl Sync for Api {}

static API: OnceLock<Api> = OnceLock::new();

/// Negotiates the API version with the host ORT. Newer runtimes serve older API versions, so
/// asking for ours (31) works on ORT >= 1.31; an older runtime returns NULL and gets a clear
/// error (returned as a status built through API 1, which every runtime has).
///
/// # Safety
/// `base` must be the `OrtApiBase*` ORT passed to an entry point (or NULL).
pub unsafe fn init(base: *const OrtApiBase) -> std::result::Result<&'static Api, OrtStatusPtr> {
    if let Some(api) = API.get() {
        return Ok(api);
    }
    if base.is_null() {
        // Nothing to build a status with; a NULL base is a host bug we cannot report.
        return Err(OrtStatusPtr(ptr::null_mut()));
    }
    let ort = ((*base).GetApi)(ORT_API_VERSION);
    if ort.is_null() {
        let version = CStr::from_ptr(((*base).GetVersionString)())
            .to_string_lossy()
            .into_owned();
        let v1 = ((*base).GetApi)(1);
        let msg = c_string(&format!(
            "mxfuse_ep needs ONNX Runtime >= 1.31 (API {ORT_API_VERSION}); this runtime is {version}"
        ));
        return Err(if v1.is_null() {
            OrtStatusPtr(ptr::null_mut())
        } else {
            ((*v1).CreateStatus)(OrtErrorCode::ORT_NOT_IMPLEMENTED, msg.as_ptr())
        });
    }
    let ort: &'static OrtApi = &*ort;
    let ep = (ort.GetEpApi)() as *const OrtEpApi;
    if ep.is_null() {
        let msg = c_string("mxfuse_ep: this ONNX Runtime has no plugin-EP API");
        return Err((ort.CreateStatus)(
            OrtErrorCode::ORT_NOT_IMPLEMENTED,
            msg.as_ptr(),
        ));
    }
    Ok(API.get_or_init(|| Api { ort, ep: &*ep }))
}

/// The negotiated tables. Every callback ORT makes into us comes after an entry point ran
/// [`init`], so a missing table is a host bug reported as an error.
pub fn api() -> Result<&'static Api> {
    API.get()
        .ok_or_else(|| Error::Ort("mxfuse_ep used before ONNX Runtime initialised it".into()))
}

/// Turns a returned `OrtStatus` into a `Result`, releasing the status.
pub fn check(status: OrtStatusPtr) -> Result<()> {
    if status.0.is_null() {
        return Ok(());
    }
    let msg = match api() {
        Ok(api) => unsafe {
            let m = CStr::from_ptr((api.ort.GetErrorMessage)(status.0))
                .to_string_lossy()
                .into_owned();
            (api.ort.ReleaseStatus)(status.0);
            m
        },
        Err(_) => "unknown ONNX Runtime error".to_string(),
    };
    Err(Error::Ort(msg))
}

/// Builds an `OrtStatus` for `err` (NULL only if the API was never negotiated).
pub fn to_status(err: &Error) -> OrtStatusPtr {
    let Ok(api) = api() else {
        return OrtStatusPtr(ptr::null_mut());
    };
    let msg = c_string(&format!("mxfuse: {err}"));
    unsafe { (api.ort.CreateStatus)(err.code(), msg.as_ptr()) }
}

/// A C string from `s`, with interior NULs replaced (messages and names must never fail).
pub fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "?")).unwrap_or_default()
}

/// Copies a NUL-terminated string from ORT; NULL reads as "".
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string.
pub unsafe fn owned_str(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// A raw `OrtStatus*` for "success".
pub fn ok_status() -> OrtStatusPtr {
    OrtStatusPtr(ptr::null_mut::<OrtStatus>())
}
