//! Hand-written `#[repr(C)]` layouts of the plugin-EP structs from `onnxruntime_ep_c_api.h`.
//!
//! `ort-sys` declares `OrtEpApi` as an opaque type and has no `OrtEp` / `OrtEpFactory` /
//! `OrtNodeComputeInfo`, so the few structs this library implements or calls are spelled out here.
//! Member order follows the header exactly (see shared/reference/onnxruntime/); a wrong order is
//! a crash, so every member is listed, including the ones we leave NULL.
//!
//! The copied header is API 30; ORT 1.31 may have appended members. We declare
//! `ort_version_supported = 31` and pad each struct ORT reads from with trailing NULL slots so ORT
//! never reads past our allocation: ORT only calls an optional member when it is non-NULL.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_void};

use ort_sys::{
    OrtCustomOpDomain, OrtGraph, OrtHardwareDevice, OrtKernelContext, OrtKeyValuePairs, OrtLogger,
    OrtNode, OrtSessionOptions, OrtStatusPtr,
};

/// The API version this library is written against (ORT 1.31).
pub const ORT_API_VERSION: u32 = 31;

/// Opaque ORT handle types that `ort-sys` does not declare.
#[repr(C)]
pub struct OrtEpDevice {
    _unused: [u8; 0],
}
#[repr(C)]
pub struct OrtEpGraphSupportInfo {
    _unused: [u8; 0],
}
#[repr(C)]
pub struct OrtNodeComputeContext {
    _unused: [u8; 0],
}

/// A pointer-sized slot for a member we never set.
pub type Unused = Option<unsafe extern "system" fn()>;

/// Trailing NULL slots after the members the header names (see module docs).
const PADDING: usize = 8;

/// `OrtEpApi`, first members only: we never read past `NodeComputeContext_NodeName`, and the
/// table is owned by ORT, so a prefix is a valid view of it.
#[repr(C)]
pub struct OrtEpApi {
    pub CreateEpDevice: unsafe extern "system" fn(
        factory: *mut OrtEpFactory,
        hardware_device: *const OrtHardwareDevice,
        ep_metadata: *const OrtKeyValuePairs,
        ep_options: *const OrtKeyValuePairs,
        ep_device: *mut *mut OrtEpDevice,
    ) -> OrtStatusPtr,
    pub ReleaseEpDevice: unsafe extern "system" fn(device: *mut OrtEpDevice),
    pub EpGraphSupportInfo_AddNodesToFuse: unsafe extern "system" fn(
        info: *mut OrtEpGraphSupportInfo,
        nodes: *const *const OrtNode,
        num_nodes: usize,
        options: *const OrtNodeFusionOptions,
    ) -> OrtStatusPtr,
    pub EpGraphSupportInfo_AddSingleNode: unsafe extern "system" fn(
        info: *mut OrtEpGraphSupportInfo,
        node: *const OrtNode,
    ) -> OrtStatusPtr,
    pub NodeComputeContext_NodeName:
        unsafe extern "system" fn(context: *const OrtNodeComputeContext) -> *const c_char,
}

#[repr(C)]
pub struct OrtNodeFusionOptions {
    pub ort_version_supported: u32,
    pub drop_constant_initializers: bool,
}

#[repr(C)]
pub struct OrtNodeComputeInfo {
    pub ort_version_supported: u32,
    pub CreateState: Option<
        unsafe extern "system" fn(
            this: *mut OrtNodeComputeInfo,
            context: *mut OrtNodeComputeContext,
            state: *mut *mut c_void,
        ) -> OrtStatusPtr,
    >,
    pub Compute: Option<
        unsafe extern "system" fn(
            this: *mut OrtNodeComputeInfo,
            state: *mut c_void,
            context: *mut OrtKernelContext,
        ) -> OrtStatusPtr,
    >,
    pub ReleaseState:
        Option<unsafe extern "system" fn(this: *mut OrtNodeComputeInfo, state: *mut c_void)>,
}

#[repr(C)]
pub struct OrtEp {
    pub ort_version_supported: u32,
    pub GetName: Option<unsafe extern "system" fn(this: *const OrtEp) -> *const c_char>,
    pub GetCapability: Option<
        unsafe extern "system" fn(
            this: *mut OrtEp,
            graph: *const OrtGraph,
            info: *mut OrtEpGraphSupportInfo,
        ) -> OrtStatusPtr,
    >,
    pub Compile: Option<
        unsafe extern "system" fn(
            this: *mut OrtEp,
            graphs: *const *const OrtGraph,
            fused_nodes: *const *const OrtNode,
            count: usize,
            compute_infos: *mut *mut OrtNodeComputeInfo,
            ep_context_nodes: *mut *mut OrtNode,
        ) -> OrtStatusPtr,
    >,
    pub ReleaseNodeComputeInfos: Option<
        unsafe extern "system" fn(
            this: *mut OrtEp,
            infos: *mut *mut OrtNodeComputeInfo,
            count: usize,
        ),
    >,
    pub GetPreferredDataLayout: Unused,
    pub ShouldConvertDataLayoutForOp: Unused,
    pub SetDynamicOptions: Option<
        unsafe extern "system" fn(
            this: *mut OrtEp,
            keys: *const *const c_char,
            values: *const *const c_char,
            count: usize,
        ) -> OrtStatusPtr,
    >,
    pub OnRunStart: Unused,
    /// (this, run options, sync_stream): the end of a `Run`; the GPU placement waits for the
    /// device there (`gpu::program` does not after each node).
    pub OnRunEnd: Option<
        unsafe extern "system" fn(
            this: *mut OrtEp,
            run_options: *const c_void,
            sync: bool,
        ) -> OrtStatusPtr,
    >,
    pub CreateAllocator: Unused,
    pub CreateSyncStreamForDevice: Unused,
    pub GetCompiledModelCompatibilityInfo: Unused,
    /// Set for sessions whose tensors live in device memory: the Memcpy kernels
    /// (`gpu::memcpy_kernels`); the registry is returned as an opaque pointer.
    pub GetKernelRegistry: Option<
        unsafe extern "system" fn(this: *mut OrtEp, registry: *mut *const c_void) -> OrtStatusPtr,
    >,
    pub IsConcurrentRunSupported: Unused,
    pub Sync: Unused,
    pub CreateProfiler: Unused,
    pub IsGraphCaptureEnabled: Unused,
    pub IsGraphCaptured: Unused,
    pub ReplayGraph: Unused,
    pub GetGraphCaptureNodeAssignmentPolicy: Unused,
    pub GetAvailableResource: Unused,
    pub OnSessionInitializationEnd: Unused,
    pub GetDefaultMemoryDevice: Unused,
    pub ReleaseCapturedGraph: Unused,
    pub GetWeightlessSupport: Unused,
    pub _padding: [Unused; PADDING],
}

#[repr(C)]
pub struct OrtEpFactory {
    pub ort_version_supported: u32,
    pub GetName: Option<unsafe extern "system" fn(this: *const OrtEpFactory) -> *const c_char>,
    pub GetVendor: Option<unsafe extern "system" fn(this: *const OrtEpFactory) -> *const c_char>,
    pub GetSupportedDevices: Option<
        unsafe extern "system" fn(
            this: *mut OrtEpFactory,
            devices: *const *const OrtHardwareDevice,
            num_devices: usize,
            ep_devices: *mut *mut OrtEpDevice,
            max_ep_devices: usize,
            num_ep_devices: *mut usize,
        ) -> OrtStatusPtr,
    >,
    pub CreateEp: Option<
        unsafe extern "system" fn(
            this: *mut OrtEpFactory,
            devices: *const *const OrtHardwareDevice,
            ep_metadata: *const *const OrtKeyValuePairs,
            num_devices: usize,
            session_options: *const OrtSessionOptions,
            logger: *const OrtLogger,
            ep: *mut *mut OrtEp,
        ) -> OrtStatusPtr,
    >,
    pub ReleaseEp: Option<unsafe extern "system" fn(this: *mut OrtEpFactory, ep: *mut OrtEp)>,
    pub GetVendorId: Option<unsafe extern "system" fn(this: *const OrtEpFactory) -> u32>,
    pub GetVersion: Option<unsafe extern "system" fn(this: *const OrtEpFactory) -> *const c_char>,
    pub ValidateCompiledModelCompatibilityInfo: Unused,
    /// Set when the EP offers device memory (`gpu::device`).
    pub CreateAllocator: Option<
        unsafe extern "system" fn(
            this: *mut OrtEpFactory,
            memory_info: *const ort_sys::OrtMemoryInfo,
            allocator_options: *const OrtKeyValuePairs,
            allocator: *mut *mut ort_sys::OrtAllocator,
        ) -> OrtStatusPtr,
    >,
    pub ReleaseAllocator: Option<
        unsafe extern "system" fn(this: *mut OrtEpFactory, allocator: *mut ort_sys::OrtAllocator),
    >,
    /// ORT 1.31.1 calls this unconditionally: it must be set (a NULL here crashes the host).
    pub CreateDataTransfer: Option<
        unsafe extern "system" fn(this: *mut OrtEpFactory, out: *mut *mut c_void) -> OrtStatusPtr,
    >,
    pub IsStreamAware: Option<unsafe extern "system" fn(this: *const OrtEpFactory) -> bool>,
    pub CreateSyncStreamForDevice: Unused,
    pub GetHardwareDeviceIncompatibilityDetails: Unused,
    pub CreateExternalResourceImporterForDevice: Unused,
    pub GetNumCustomOpDomains:
        Option<unsafe extern "system" fn(this: *mut OrtEpFactory, num: *mut usize) -> OrtStatusPtr>,
    pub GetCustomOpDomains: Option<
        unsafe extern "system" fn(
            this: *mut OrtEpFactory,
            domains: *mut *mut OrtCustomOpDomain,
            num: usize,
        ) -> OrtStatusPtr,
    >,
    pub InitGraphicsInterop: Unused,
    pub DeinitGraphicsInterop: Unused,
    pub SelectBestModelCandidate: Unused,
    pub _padding: [Unused; PADDING],
}
