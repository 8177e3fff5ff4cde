//! Plugin-EP ABI pieces the GPU device needs beyond [`crate::ffi::ep_abi`]: the `OrtEpApi`
//! members up to `GetTensorDataType` (allocator info, memory devices, kernel registry), and the
//! `OrtDataTransferImpl` / `OrtKernelImpl` structs this library implements.
//!
//! Member order follows `onnxruntime_ep_c_api.h` exactly (shared/reference/onnxruntime/); every
//! slot up to the last one used is listed, unused ones as [`Unused`]. `OrtEpApi` is ORT's table,
//! so a longer prefix than `ffi::ep_abi::OrtEpApi` is an equally valid view of it.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int};

use ort_sys::{
    ONNXTensorElementDataType, OrtKernelContext, OrtKernelInfo, OrtMemType, OrtMemoryInfo,
    OrtMemoryInfoDeviceType, OrtStatusPtr, OrtSyncStream, OrtValue,
};

use crate::error::Result;
use crate::ffi::api::api;
use crate::ffi::ep_abi::{OrtEpDevice, Unused};

macro_rules! opaque {
    ($($name:ident),*) => {$(
        /// Opaque ORT handle.
        #[repr(C)]
        pub struct $name {
            _unused: [u8; 0],
        }
    )*};
}
opaque!(
    OrtMemoryDevice,
    OrtKernelRegistry,
    OrtKernelDefBuilder,
    OrtKernelDef,
    OrtDataType
);

/// `OrtKernelCreateFunc`.
pub type KernelCreateFn = unsafe extern "system" fn(
    state: *mut std::ffi::c_void,
    info: *const OrtKernelInfo,
    out: *mut *mut OrtKernelImpl,
) -> OrtStatusPtr;

/// `OrtEpApi`, members 0..=40 (`CreateEpDevice` .. `GetTensorDataType`).
#[repr(C)]
pub struct EpApiExt {
    pub CreateEpDevice: Unused,
    pub ReleaseEpDevice: Unused,
    pub EpGraphSupportInfo_AddNodesToFuse: Unused,
    pub EpGraphSupportInfo_AddSingleNode: Unused,
    pub NodeComputeContext_NodeName: Unused,
    pub EpDevice_AddAllocatorInfo: unsafe extern "system" fn(
        ep_device: *mut OrtEpDevice,
        memory_info: *const OrtMemoryInfo,
    ) -> OrtStatusPtr,
    pub MemoryInfo_GetMemoryDevice:
        unsafe extern "system" fn(memory_info: *const OrtMemoryInfo) -> *const OrtMemoryDevice,
    pub Value_GetMemoryDevice:
        unsafe extern "system" fn(value: *const OrtValue) -> *const OrtMemoryDevice,
    pub MemoryDevice_AreEqual:
        unsafe extern "system" fn(a: *const OrtMemoryDevice, b: *const OrtMemoryDevice) -> bool,
    pub MemoryDevice_GetDeviceType:
        unsafe extern "system" fn(device: *const OrtMemoryDevice) -> OrtMemoryInfoDeviceType,
    pub MemoryDevice_GetMemoryType: Unused,
    pub MemoryDevice_GetVendorId: unsafe extern "system" fn(device: *const OrtMemoryDevice) -> u32,
    pub MemoryDevice_GetDeviceId: Unused,
    pub SyncStream_GetImpl: Unused,
    pub SyncStream_GetSyncId: Unused,
    pub GetSyncIdForLastWaitOnSyncStream: Unused,
    pub CreateHardwareDevice: Unused,
    pub ReleaseHardwareDevice: Unused,
    pub CreateKernelRegistry:
        unsafe extern "system" fn(out: *mut *mut OrtKernelRegistry) -> OrtStatusPtr,
    pub ReleaseKernelRegistry: unsafe extern "system" fn(registry: *mut OrtKernelRegistry),
    pub KernelRegistry_AddKernel: unsafe extern "system" fn(
        registry: *mut OrtKernelRegistry,
        def: *const OrtKernelDef,
        create: KernelCreateFn,
        state: *mut std::ffi::c_void,
    ) -> OrtStatusPtr,
    pub CreateKernelDefBuilder:
        unsafe extern "system" fn(out: *mut *mut OrtKernelDefBuilder) -> OrtStatusPtr,
    pub ReleaseKernelDefBuilder: unsafe extern "system" fn(builder: *mut OrtKernelDefBuilder),
    pub KernelDefBuilder_SetOperatorType: unsafe extern "system" fn(
        builder: *mut OrtKernelDefBuilder,
        op_type: *const c_char,
    ) -> OrtStatusPtr,
    pub KernelDefBuilder_SetDomain: unsafe extern "system" fn(
        builder: *mut OrtKernelDefBuilder,
        domain: *const c_char,
    ) -> OrtStatusPtr,
    pub KernelDefBuilder_SetSinceVersion: unsafe extern "system" fn(
        builder: *mut OrtKernelDefBuilder,
        start: c_int,
        end: c_int,
    ) -> OrtStatusPtr,
    pub KernelDefBuilder_SetExecutionProvider: unsafe extern "system" fn(
        builder: *mut OrtKernelDefBuilder,
        ep_name: *const c_char,
    ) -> OrtStatusPtr,
    pub KernelDefBuilder_SetInputMemType: unsafe extern "system" fn(
        builder: *mut OrtKernelDefBuilder,
        index: usize,
        mem_type: OrtMemType,
    ) -> OrtStatusPtr,
    pub KernelDefBuilder_SetOutputMemType: unsafe extern "system" fn(
        builder: *mut OrtKernelDefBuilder,
        index: usize,
        mem_type: OrtMemType,
    ) -> OrtStatusPtr,
    pub KernelDefBuilder_AddTypeConstraint: unsafe extern "system" fn(
        builder: *mut OrtKernelDefBuilder,
        arg_name: *const c_char,
        types: *const *const OrtDataType,
        num_types: usize,
    ) -> OrtStatusPtr,
    pub KernelDefBuilder_AddInputOutputAliases: Unused,
    pub KernelDefBuilder_AddInputOutputMutableAliases: Unused,
    pub KernelDefBuilder_Build: unsafe extern "system" fn(
        builder: *mut OrtKernelDefBuilder,
        out: *mut *mut OrtKernelDef,
    ) -> OrtStatusPtr,
    pub ReleaseKernelDef: unsafe extern "system" fn(def: *mut OrtKernelDef),
    pub KernelDef_GetOperatorType: Unused,
    pub KernelDef_GetDomain: Unused,
    pub KernelDef_GetSinceVersion: Unused,
    pub KernelDef_GetExecutionProvider: Unused,
    pub KernelDef_GetInputMemType: Unused,
    pub KernelDef_GetOutputMemType: Unused,
    pub GetTensorDataType: unsafe extern "system" fn(
        elem_type: ONNXTensorElementDataType,
        out: *mut *const OrtDataType,
    ) -> OrtStatusPtr,
}

/// The extended view of the host's `OrtEpApi` table.
pub fn ep_api_ext() -> Result<&'static EpApiExt> {
    let ep = api()?.ep as *const crate::ffi::ep_abi::OrtEpApi as *const EpApiExt;
    // SAFETY: ORT >= 1.31 (checked by `ffi::api::init`) serves an OrtEpApi table with at least
    // these 41 members (the header this layout follows is API 30), owned by ORT for the process.
    Ok(unsafe { &*ep })
}

/// `OrtDataTransferImpl`.
#[repr(C)]
pub struct OrtDataTransferImpl {
    pub ort_version_supported: u32,
    pub Release: Option<unsafe extern "system" fn(this: *mut OrtDataTransferImpl)>,
    pub CanCopy: Option<
        unsafe extern "system" fn(
            this: *const OrtDataTransferImpl,
            src: *const OrtMemoryDevice,
            dst: *const OrtMemoryDevice,
        ) -> bool,
    >,
    pub CopyTensors: Option<
        unsafe extern "system" fn(
            this: *mut OrtDataTransferImpl,
            src: *const *const OrtValue,
            dst: *mut *mut OrtValue,
            streams: *mut *mut OrtSyncStream,
            count: usize,
        ) -> OrtStatusPtr,
    >,
}

/// `OrtKernelImpl`, with trailing NULL slots in case ORT 1.31 appended members (see
/// `ffi::ep_abi`'s module docs: ORT only calls optional members that are non-NULL).
#[repr(C)]
pub struct OrtKernelImpl {
    pub ort_version_supported: u32,
    /// Must be 0; ORT uses it internally.
    pub flags: u32,
    pub Compute: Option<
        unsafe extern "system" fn(
            this: *mut OrtKernelImpl,
            ctx: *mut OrtKernelContext,
        ) -> OrtStatusPtr,
    >,
    pub Release: Option<unsafe extern "system" fn(this: *mut OrtKernelImpl)>,
    pub PrePackWeight: Unused,
    pub SetSharedPrePackedWeight: Unused,
    pub _padding: [Unused; 8],
}
