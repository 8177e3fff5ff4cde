//! Reading node attributes (`OrtOpAttr`) and constant tensors (`OrtValue`) through the ORT API.

use std::borrow::Cow;
use std::ffi::{c_char, c_void};
use std::ptr;

use ort_sys::{OrtNode, OrtOpAttr, OrtOpAttrType, OrtStatusPtr, OrtValue};

use crate::error::{Error, Result};
use crate::ffi::api::{api, c_string, check, owned_str};
use crate::ort_types::{element_count, tensor_bytes, tensor_data, value_type_and_dims};
use crate::tensor::raw_bytes;
use graph_rewrites::view::{AttrValue, ConstBytes, ConstTensor};

/// Largest constant tensor copied out of ORT for the matcher: the offline graph's cap
/// (`graph_rewrites::ir::CONST_VALUE_MAX_BYTES`), so the EP claims what `mxfuse rewrite` fuses.
/// Rules read small constants (epsilons, scale multipliers, shapes); bigger ones read as "not
/// loaded" (`None`). The Quark fake-quantized float weights they quantize and check are read
/// in place instead, up to their own cap (`GraphView::const_bytes`, [`borrow_tensor`]; 4 GiB by
/// default, setting `quark_weight_max_mib`). (The EP's
/// own 16 MiB cap until session 21 left every Quark weight above it unfused online, 16 of the
/// 24 of `mxfuse-gen-model --preset m3-tp4 --dtype f32 --quant quark --weights quark`.)
pub const MAX_CONST_BYTES: usize = graph_rewrites::ir::CONST_VALUE_MAX_BYTES as usize;

/// The attribute `name` of `node`, or `None` when the node has no such attribute.
///
/// # Safety
/// `node` must be a valid `OrtNode*`.
pub unsafe fn node_attr(node: *const OrtNode, name: &str) -> Result<Option<AttrValue>> {
    let ort = api()?.ort;
    attr_by_name(name, |c_name, attr| {
        (ort.Node_GetAttributeByName)(node, c_name, attr)
    })
}

/// The attribute `name` that `lookup(c_name, &mut attr)` (an ORT `*_GetAttribute*` call) finds,
/// or `None` when it has no such attribute.
///
/// # Safety
/// `lookup` must be an ORT call that leaves a valid `OrtOpAttr*` (or null) in its out pointer.
pub unsafe fn attr_by_name(
    name: &str,
    lookup: impl FnOnce(*const c_char, *mut *const OrtOpAttr) -> OrtStatusPtr,
) -> Result<Option<AttrValue>> {
    let c_name = c_string(name);
    let mut attr: *const OrtOpAttr = ptr::null();
    // An unknown name is reported as an ORT_NOT_FOUND status: that is "absent", not an error.
    if check(lookup(c_name.as_ptr(), &mut attr)).is_err() || attr.is_null() {
        return Ok(None);
    }
    read_attr(attr).map(Some)
}

/// Names of all attributes set on `node` (including defaults ORT filled in).
///
/// # Safety
/// `node` must be a valid `OrtNode*`.
pub unsafe fn node_attr_names(node: *const OrtNode) -> Result<Vec<String>> {
    let ort = api()?.ort;
    let mut n = 0usize;
    check((ort.Node_GetNumAttributes)(node, &mut n))?;
    let mut attrs = vec![ptr::null::<OrtOpAttr>(); n];
    check((ort.Node_GetAttributes)(node, attrs.as_mut_ptr(), n))?;
    attrs
        .into_iter()
        .map(|a| {
            let mut name = ptr::null();
            check((ort.OpAttr_GetName)(a, &mut name))?;
            Ok(owned_str(name))
        })
        .collect()
}

/// Reads `len` bytes of attribute payload, asking ORT for the size first.
unsafe fn read_raw(attr: *const OrtOpAttr, ty: OrtOpAttrType) -> Result<Vec<u8>> {
    let ort = api()?.ort;
    let mut needed = 0usize;
    // The sizing call reports failure (buffer too small) while setting `needed`; only the
    // second call's status matters.
    let status = (ort.ReadOpAttr)(attr, ty, ptr::null_mut(), 0, &mut needed);
    let _ = check(status);
    let mut buf = vec![0u8; needed];
    let mut written = 0usize;
    check((ort.ReadOpAttr)(
        attr,
        ty,
        buf.as_mut_ptr() as *mut c_void,
        needed,
        &mut written,
    ))?;
    buf.truncate(written);
    Ok(buf)
}

fn i64s(buf: &[u8]) -> Vec<i64> {
    buf.chunks_exact(8)
        .map(|c| i64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect()
}

fn f32s(buf: &[u8]) -> Vec<f32> {
    buf.chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Decodes one attribute.
///
/// # Safety
/// `attr` must be a valid `OrtOpAttr*`.
pub unsafe fn read_attr(attr: *const OrtOpAttr) -> Result<AttrValue> {
    let ort = api()?.ort;
    let mut ty = OrtOpAttrType::ORT_OP_ATTR_UNDEFINED;
    check((ort.OpAttr_GetType)(attr, &mut ty))?;
    Ok(match ty {
        OrtOpAttrType::ORT_OP_ATTR_INT => {
            let v = i64s(&read_raw(attr, ty)?);
            AttrValue::Int(
                *v.first()
                    .ok_or_else(|| Error::Ort("empty int attribute".into()))?,
            )
        }
        OrtOpAttrType::ORT_OP_ATTR_FLOAT => {
            let v = f32s(&read_raw(attr, ty)?);
            AttrValue::Float(
                *v.first()
                    .ok_or_else(|| Error::Ort("empty float attribute".into()))?,
            )
        }
        OrtOpAttrType::ORT_OP_ATTR_INTS => AttrValue::Ints(i64s(&read_raw(attr, ty)?)),
        OrtOpAttrType::ORT_OP_ATTR_FLOATS => AttrValue::Floats(f32s(&read_raw(attr, ty)?)),
        OrtOpAttrType::ORT_OP_ATTR_STRING => {
            let b = read_raw(attr, ty)?;
            AttrValue::String(
                String::from_utf8_lossy(&b)
                    .trim_end_matches('\0')
                    .to_string(),
            )
        }
        OrtOpAttrType::ORT_OP_ATTR_STRINGS => {
            // ORT writes the strings back to back, each NUL-terminated.
            let b = read_raw(attr, ty)?;
            let mut parts: Vec<String> = b
                .split(|&c| c == 0)
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect();
            if b.last() == Some(&0) {
                parts.pop();
            }
            AttrValue::Strings(parts)
        }
        OrtOpAttrType::ORT_OP_ATTR_TENSOR => {
            let mut value: *mut OrtValue = ptr::null_mut();
            check((ort.OpAttr_GetTensorAttributeAsOrtValue)(attr, &mut value))?;
            // We own this value: release it whatever copying it gives.
            let copied = copy_tensor(value, usize::MAX);
            (ort.ReleaseValue)(value);
            match copied? {
                Some(t) => AttrValue::Tensor(t),
                None => AttrValue::Other,
            }
        }
        _ => AttrValue::Other,
    })
}

/// Copies a CPU tensor's bytes, or `None` when it is larger than `max_bytes` or of a type
/// without a fixed byte size (strings, sub-byte types other than FLOAT4E2M1, which is packed
/// two per byte: an MXFP4 weight the EP reads).
///
/// # Safety
/// `value` must be a valid tensor `OrtValue*` in CPU memory.
pub unsafe fn copy_tensor(value: *const OrtValue, max_bytes: usize) -> Result<Option<ConstTensor>> {
    Ok(borrow_tensor(value, max_bytes)?.map(|b| ConstTensor {
        elem_type: b.elem_type,
        dims: b.dims,
        raw: b.raw.into_owned(),
    }))
}

/// [`copy_tensor`] without the copy: the bytes in ORT's buffer.
///
/// # Safety
/// As [`copy_tensor`], and `value` must outlive `'a`.
pub unsafe fn borrow_tensor<'a>(
    value: *const OrtValue,
    max_bytes: usize,
) -> Result<Option<ConstBytes<'a>>> {
    let (elem_type, dims) = value_type_and_dims(value)?;
    let bytes = match tensor_bytes(elem_type, element_count(&dims)?) {
        Ok(b) => b,
        Err(Error::Unsupported(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    if bytes > max_bytes {
        return Ok(None);
    }
    let raw = raw_bytes(tensor_data(value)? as *const u8, bytes);
    Ok(Some(ConstBytes {
        elem_type,
        dims,
        raw: Cow::Borrowed(raw),
    }))
}
