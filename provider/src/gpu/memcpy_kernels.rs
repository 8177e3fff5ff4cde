//! `MemcpyFromHost` / `MemcpyToHost` kernels. Once our fused nodes read and write device memory,
//! ORT inserts these two ops between them and the CPU EP's nodes and assigns them to us, so the
//! EP must publish kernels for them (`OrtEp::GetKernelRegistry`); they copy through
//! [`DeviceMemory`].

use std::ffi::{c_void, CStr};
use std::ptr;
use std::sync::{Arc, Mutex};

use ort_sys::{
    ONNXTensorElementDataType as T, OrtKernelContext, OrtKernelInfo, OrtMemType, OrtStatusPtr,
    OrtValue,
};

use super::data_transfer::{copy_bytes, Direction};
use super::ep_api::{ep_api_ext, OrtDataType, OrtKernelImpl, OrtKernelRegistry};
use super::memory::DeviceMemory;
use crate::error::{Error, Result};
use crate::ffi::api::{api, c_string, check};
use crate::ffi::ep_abi::{Unused, ORT_API_VERSION};
use crate::ffi::guard::{guard_status, guard_value};
use crate::options::EP_NAME;
use crate::ort_types::{tensor_data, tensor_data_mut, value_type_and_dims};

/// Element types the copies accept (every fixed-size tensor type).
const TYPES: &[T] = &[
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FNUZ,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2FNUZ,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E8M0,
    T::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT4E2M1,
];

/// What a kernel-creation call needs; leaked once per registry (it lives as long as ORT may
/// create kernels from it, i.e. the process).
struct KernelState {
    memory: Arc<dyn DeviceMemory>,
    direction: Direction,
}

/// `OrtKernelImpl` first, so ORT's pointer is also a `*mut MemcpyKernel`.
#[repr(C)]
struct MemcpyKernel {
    base: OrtKernelImpl,
    memory: Arc<dyn DeviceMemory>,
    direction: Direction,
}

/// The process-wide registry (address), built on first use for the process's device memory.
static REGISTRY: Mutex<usize> = Mutex::new(0);

/// The kernel registry holding both Memcpy kernels for `memory` (built once per process: the
/// process has one device memory).
pub fn registry(memory: &Arc<dyn DeviceMemory>) -> Result<*const OrtKernelRegistry> {
    let mut reg = REGISTRY
        .lock()
        .map_err(|_| Error::invalid("poisoned lock"))?;
    if *reg == 0 {
        // SAFETY: ORT calls made with valid arguments; the registry is kept for the process.
        *reg = unsafe { build_registry(memory)? } as usize;
    }
    Ok(*reg as *const OrtKernelRegistry)
}

/// `OrtEp::GetKernelRegistry` of device-memory sessions (set by `MxEp::with_placement`, which
/// built the registry first).
///
/// # Safety
/// Called by ORT with a writable `out`.
pub unsafe extern "system" fn get_kernel_registry(
    _ep: *mut crate::ffi::ep_abi::OrtEp,
    out: *mut *const c_void,
) -> OrtStatusPtr {
    guard_status("GetKernelRegistry", || {
        if out.is_null() {
            return Err(Error::invalid("GetKernelRegistry: NULL output pointer"));
        }
        let reg = REGISTRY
            .lock()
            .map_err(|_| Error::invalid("poisoned lock"))?;
        *out = *reg as *const c_void;
        Ok(())
    })
}

unsafe fn build_registry(memory: &Arc<dyn DeviceMemory>) -> Result<*mut OrtKernelRegistry> {
    let ep = ep_api_ext()?;
    let mut types: Vec<*const OrtDataType> = Vec::new();
    for &t in TYPES {
        let mut dt: *const OrtDataType = ptr::null();
        // A type this runtime does not know is skipped, not an error.
        if check((ep.GetTensorDataType)(t, &mut dt)).is_ok() && !dt.is_null() {
            types.push(dt);
        }
    }
    let mut reg: *mut OrtKernelRegistry = ptr::null_mut();
    check((ep.CreateKernelRegistry)(&mut reg))?;
    for (op, direction) in [
        (c"MemcpyFromHost", Direction::HostToDevice),
        (c"MemcpyToHost", Direction::DeviceToHost),
    ] {
        if let Err(e) = add_kernel(reg, op, direction, &types, memory) {
            (ep.ReleaseKernelRegistry)(reg);
            return Err(e);
        }
    }
    Ok(reg)
}

unsafe fn add_kernel(
    reg: *mut OrtKernelRegistry,
    op: &CStr,
    direction: Direction,
    types: &[*const OrtDataType],
    memory: &Arc<dyn DeviceMemory>,
) -> Result<()> {
    let ep = ep_api_ext()?;
    let mut b = ptr::null_mut();
    check((ep.CreateKernelDefBuilder)(&mut b))?;
    let ep_name = c_string(EP_NAME);
    let built = (|| -> Result<*mut super::ep_api::OrtKernelDef> {
        check((ep.KernelDefBuilder_SetOperatorType)(b, op.as_ptr()))?;
        check((ep.KernelDefBuilder_SetDomain)(b, c"".as_ptr()))?;
        check((ep.KernelDefBuilder_SetSinceVersion)(b, 1, i32::MAX))?;
        check((ep.KernelDefBuilder_SetExecutionProvider)(
            b,
            ep_name.as_ptr(),
        ))?;
        // The host side of each copy is CPU memory; the other side is our default memory.
        if direction == Direction::HostToDevice {
            check((ep.KernelDefBuilder_SetInputMemType)(
                b,
                0,
                OrtMemType::OrtMemTypeCPUInput,
            ))?;
        } else {
            check((ep.KernelDefBuilder_SetOutputMemType)(
                b,
                0,
                OrtMemType::OrtMemTypeCPUOutput,
            ))?;
        }
        check((ep.KernelDefBuilder_AddTypeConstraint)(
            b,
            c"T".as_ptr(),
            types.as_ptr(),
            types.len(),
        ))?;
        let mut def = ptr::null_mut();
        check((ep.KernelDefBuilder_Build)(b, &mut def))?;
        Ok(def)
    })();
    (ep.ReleaseKernelDefBuilder)(b);
    let def = built?;
    let state = Box::into_raw(Box::new(KernelState {
        memory: memory.clone(),
        direction,
    }));
    let added = check((ep.KernelRegistry_AddKernel)(
        reg,
        def,
        create_kernel,
        state as *mut c_void,
    ));
    (ep.ReleaseKernelDef)(def);
    if added.is_err() {
        drop(Box::from_raw(state));
    }
    added
}

unsafe extern "system" fn create_kernel(
    state: *mut c_void,
    _info: *const OrtKernelInfo,
    out: *mut *mut OrtKernelImpl,
) -> OrtStatusPtr {
    guard_status("Memcpy kernel", || {
        let state = &*(state as *const KernelState);
        let kernel = Box::new(MemcpyKernel {
            base: OrtKernelImpl {
                ort_version_supported: ORT_API_VERSION,
                flags: 0,
                Compute: Some(compute),
                Release: Some(release),
                PrePackWeight: None,
                SetSharedPrePackedWeight: None,
                _padding: [None as Unused; 8],
            },
            memory: state.memory.clone(),
            direction: state.direction,
        });
        *out = Box::into_raw(kernel) as *mut OrtKernelImpl;
        Ok(())
    })
}

unsafe extern "system" fn compute(
    this: *mut OrtKernelImpl,
    ctx: *mut OrtKernelContext,
) -> OrtStatusPtr {
    guard_status("Memcpy", || {
        let k = &*(this as *const MemcpyKernel);
        let ort = api()?.ort;
        let mut input: *const OrtValue = ptr::null();
        check((ort.KernelContext_GetInput)(ctx, 0, &mut input))?;
        if input.is_null() {
            return Err(Error::invalid("Memcpy without an input"));
        }
        let (_, dims) = value_type_and_dims(input)?;
        let mut output: *mut OrtValue = ptr::null_mut();
        check((ort.KernelContext_GetOutput)(
            ctx,
            0,
            dims.as_ptr(),
            dims.len(),
            &mut output,
        ))?;
        let mut bytes = 0usize;
        check((ort.GetTensorSizeInBytes)(input, &mut bytes))?;
        let (src, dst) = (tensor_data(input)?, tensor_data_mut(output)?);
        copy_bytes(&*k.memory, k.direction, src as u64, dst as u64, bytes)
    })
}

unsafe extern "system" fn release(this: *mut OrtKernelImpl) {
    guard_value((), || {
        if !this.is_null() {
            drop(Box::from_raw(this as *mut MemcpyKernel));
        }
    })
}
