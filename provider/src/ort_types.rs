//! Element types and shapes as ORT reports them, converted to ONNX's numbering.
//!
//! ORT's `ONNXTensorElementDataType` and ONNX's `TensorProto.DataType` agree up to 23
//! (FLOAT4E2M1) and then diverge: ORT has UINT4 = 21, INT4 = 22, FLOAT4E2M1 = 23, UINT2 = 24,
//! INT2 = 25, FLOAT8E8M0 = 26, while ONNX has FLOAT8E8M0 = 24, UINT2 = 25, INT2 = 26 (and the same
//! 21..23). Everything inside mxfuse uses ONNX's numbering; conversion happens only here.

use std::ffi::c_void;

use ort_sys::{
    ONNXTensorElementDataType as OrtType, OrtTensorTypeAndShapeInfo, OrtTypeInfo, OrtValue,
};

use crate::error::{Error, Result};
use crate::ffi::api::{api, check, owned_str};
use graph_rewrites::view::{Dim, TensorInfo};

/// ONNX `TensorProto.DataType` numbers used by the com.mxfuse ops.
pub mod onnx_dtype {
    pub const FLOAT: i32 = 1;
    pub const UINT8: i32 = 2;
    pub const INT32: i32 = 6;
    pub const INT64: i32 = 7;
    pub const FLOAT16: i32 = 10;
    pub const BFLOAT16: i32 = 16;
    pub const FLOAT8E4M3FN: i32 = 17;
    pub const FLOAT8E5M2: i32 = 19;
    pub const FLOAT8E8M0: i32 = 24;
    /// MXFP4 values, two per byte (ORT's and ONNX's number agree).
    pub const FLOAT4E2M1: i32 = 23;
}

/// ORT element type → ONNX data type number.
pub fn onnx_from_ort(t: OrtType) -> i32 {
    match t as i32 {
        24 => 25, // UINT2
        25 => 26, // INT2
        26 => onnx_dtype::FLOAT8E8M0,
        n => n,
    }
}

/// ONNX data type number → ORT element type, for the types this library produces.
pub fn ort_from_onnx(t: i32) -> Result<OrtType> {
    Ok(match t {
        onnx_dtype::FLOAT => OrtType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
        // TensorRT's E8M0 scales (`trt` ops, ops::trt).
        onnx_dtype::UINT8 => OrtType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
        onnx_dtype::FLOAT16 => OrtType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
        onnx_dtype::BFLOAT16 => OrtType::ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16,
        onnx_dtype::FLOAT8E4M3FN => OrtType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN,
        onnx_dtype::FLOAT8E5M2 => OrtType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2,
        onnx_dtype::FLOAT8E8M0 => OrtType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E8M0,
        onnx_dtype::FLOAT4E2M1 => OrtType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT4E2M1,
        other => return Err(Error::Unsupported(format!("element type {other}"))),
    })
}

/// Bytes per element for ONNX data type `t` (the types com.mxfuse ops read or write, plus the
/// common integer types), or `None` for sub-byte / variable-size types.
pub fn elem_size(t: i32) -> Option<usize> {
    Some(match t {
        2 | 3 | 9 | 17..=20 | 24 => 1, // u8, i8, bool, fp8 family, e8m0
        4 | 5 | 10 | 16 => 2,          // u16, i16, f16, bf16
        1 | 6 | 12 => 4,               // f32, i32, u32
        7 | 11 | 13 | 14 => 8,         // i64, f64, u64, complex64
        15 => 16,                      // complex128
        _ => return None,
    })
}

/// Bytes of a tensor of ONNX data type `t` with `count` elements: `count · elem_size(t)`, and
/// `ceil(count / 2)` for FLOAT4E2M1 (ORT stores it packed, two per byte, as ONNX does).
/// `Error::Unsupported` for types of no fixed size (strings, the other sub-byte types).
pub fn tensor_bytes(t: i32, count: usize) -> Result<usize> {
    if t == onnx_dtype::FLOAT4E2M1 {
        return Ok(count.div_ceil(2));
    }
    let size = elem_size(t).ok_or_else(|| Error::Unsupported(format!("element type {t}")))?;
    count
        .checked_mul(size)
        .ok_or_else(|| Error::invalid("tensor too large"))
}

/// Reads element type and dims (with symbolic names) from a tensor type-and-shape info.
///
/// # Safety
/// `info` must be a valid `OrtTensorTypeAndShapeInfo*`.
pub unsafe fn read_tensor_shape_info(info: *const OrtTensorTypeAndShapeInfo) -> Result<TensorInfo> {
    let ort = api()?.ort;
    let mut t = OrtType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    check((ort.GetTensorElementType)(info, &mut t))?;
    let mut rank = 0usize;
    check((ort.GetDimensionsCount)(info, &mut rank))?;
    let mut dims = vec![0i64; rank];
    check((ort.GetDimensions)(info, dims.as_mut_ptr(), rank))?;
    let mut names = vec![std::ptr::null(); rank];
    check((ort.GetSymbolicDimensions)(info, names.as_mut_ptr(), rank))?;
    let shape = dims
        .iter()
        .zip(&names)
        .map(|(&d, &name)| {
            let name = owned_str(name);
            if d >= 0 {
                Dim::Known(d)
            } else if !name.is_empty() {
                Dim::Symbolic(name)
            } else {
                Dim::Unknown
            }
        })
        .collect();
    Ok(TensorInfo {
        elem_type: onnx_from_ort(t),
        shape: Some(shape),
    })
}

/// Tensor info of a value's type, or `None` when it is not a tensor or has no type.
///
/// # Safety
/// `type_info` must be NULL or a valid `OrtTypeInfo*`.
pub unsafe fn tensor_info_of_type(type_info: *const OrtTypeInfo) -> Result<Option<TensorInfo>> {
    if type_info.is_null() {
        return Ok(None);
    }
    let ort = api()?.ort;
    let mut tensor_info: *const OrtTensorTypeAndShapeInfo = std::ptr::null();
    // Fails or yields NULL for non-tensor types (sequences, maps, optionals).
    if check((ort.CastTypeInfoToTensorInfo)(type_info, &mut tensor_info)).is_err()
        || tensor_info.is_null()
    {
        return Ok(None);
    }
    let mut info = read_tensor_shape_info(tensor_info)?;
    // An unranked tensor (a Loop's carried value ORT's inference could not type, a value
    // without a shape) reports 0 dims, like a scalar: only `HasShape` tells them apart. Read
    // as a scalar, the view called it complete, so `crate::shapes` never filled it in and the
    // rules refused what the offline rewrite, which knows the rank, fuses.
    if !(ort.TensorTypeAndShape_HasShape)(tensor_info) {
        info.shape = None;
    }
    // The names our custom ops' shape inference gives dims it does not know (ORT's API turns
    // a nameless unknown dim into -1) say nothing: read them as unknown, which
    // `crate::shapes` then fills in where the offline inference knows them (a Quark
    // export's linear after a fake-quant was `[1, mxfuse_unk_1, 64]` where x is `[1, seq, 64]`,
    // and the EP refused the residual norm reading both that the offline rewrite fuses).
    for d in info.shape.iter_mut().flatten() {
        if matches!(d, Dim::Symbolic(n) if n.starts_with(UNKNOWN_DIM_PREFIX)) {
            *d = Dim::Unknown;
        }
    }
    Ok(Some(info))
}

/// The prefix of the names `custom_ops` gives the output dims its shape inference does not know.
pub const UNKNOWN_DIM_PREFIX: &str = "mxfuse_unk_";

/// Element type (ONNX numbering) and dims of a tensor `OrtValue`.
///
/// # Safety
/// `value` must be a valid tensor `OrtValue*`.
pub unsafe fn value_type_and_dims(value: *const OrtValue) -> Result<(i32, Vec<i64>)> {
    let ort = api()?.ort;
    let mut t = OrtType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    let mut dims: *const i64 = std::ptr::null();
    let mut rank = 0usize;
    check((ort.GetTensorElementTypeAndShapeDataReference)(
        value, &mut t, &mut dims, &mut rank,
    ))?;
    let dims = if rank == 0 || dims.is_null() {
        Vec::new()
    } else {
        std::slice::from_raw_parts(dims, rank).to_vec()
    };
    Ok((onnx_from_ort(t), dims))
}

/// The data address of tensor `value` (host or device memory, where ORT placed it).
///
/// # Safety
/// `value` must be a valid tensor `OrtValue*`.
pub unsafe fn tensor_data(value: *const OrtValue) -> Result<*const c_void> {
    let mut p: *const c_void = std::ptr::null();
    check((api()?.ort.GetTensorData)(value, &mut p))?;
    Ok(p)
}

/// [`tensor_data`] to write.
///
/// # Safety
/// `value` must be a valid tensor `OrtValue*`.
pub unsafe fn tensor_data_mut(value: *mut OrtValue) -> Result<*mut c_void> {
    let mut p: *mut c_void = std::ptr::null_mut();
    check((api()?.ort.GetTensorMutableData)(value, &mut p))?;
    Ok(p)
}

/// Number of elements of `dims`, with overflow and negative dims reported as errors.
pub fn element_count(dims: &[i64]) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d)
            .ok()
            .and_then(|d| acc.checked_mul(d))
            .ok_or_else(|| Error::invalid(format!("bad shape {dims:?}")))
    })
}
