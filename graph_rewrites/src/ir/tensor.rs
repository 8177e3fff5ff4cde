//! Turning a `TensorProto` (raw bytes, typed fields or external data) into little-endian raw
//! bytes, and decoding `Constant` node values.

use std::borrow::Cow;
use std::path::Path;

use crate::io::external;
use crate::onnx_pb::{tensor_proto::DataType as D, AttributeProto, TensorProto};
use crate::view::{ConstBytes, ConstTensor};
use crate::Error;

/// Bits per element of an ONNX data type; `None` for strings and unknown types.
pub fn elem_size_bits(elem_type: i32) -> Option<u64> {
    let t = D::try_from(elem_type).ok()?;
    Some(match t {
        D::Uint2 | D::Int2 => 2,
        D::Uint4 | D::Int4 | D::Float4e2m1 => 4,
        D::Float6e2m3 | D::Float6e3m2 => 6,
        D::Uint8 | D::Int8 | D::Bool => 8,
        D::Float8e4m3fn | D::Float8e4m3fnuz | D::Float8e5m2 | D::Float8e5m2fnuz => 8,
        D::Float8e8m0 => 8,
        D::Uint16 | D::Int16 | D::Float16 | D::Bfloat16 => 16,
        D::Float | D::Int32 | D::Uint32 => 32,
        D::Double | D::Int64 | D::Uint64 | D::Complex64 => 64,
        D::Complex128 => 128,
        D::String | D::Undefined => return None,
    })
}

/// The tensor's bytes in `raw_data` layout. External data is read from `base_dir` only when it
/// is at most `max_external_bytes` (else `Ok(None)`); typed fields (`float_data`, `int32_data`,
/// ...) are converted. `Ok(None)` also for strings and sub-byte types stored in typed fields.
/// The byte count is checked against the dims so callers can index safely.
pub fn tensor_to_const(
    t: &TensorProto,
    base_dir: Option<&Path>,
    max_external_bytes: u64,
) -> Result<Option<ConstTensor>, Error> {
    Ok(
        tensor_bytes(t, base_dir, max_external_bytes)?.map(|b| ConstTensor {
            elem_type: b.elem_type,
            dims: b.dims,
            raw: b.raw.into_owned(),
        }),
    )
}

/// [`tensor_to_const`] with inline `raw_data` borrowed, not copied.
pub fn tensor_bytes<'a>(
    t: &'a TensorProto,
    base_dir: Option<&Path>,
    max_external_bytes: u64,
) -> Result<Option<ConstBytes<'a>>, Error> {
    let elem_type = t.data_type.unwrap_or(0);
    let name = t.name.as_deref().unwrap_or("");
    let Some(bits) = elem_size_bits(elem_type) else {
        return Ok(None);
    };
    let count = t.dims.iter().try_fold(1u64, |acc, &d| {
        u64::try_from(d).ok().and_then(|d| acc.checked_mul(d))
    });
    let Some(count) = count else {
        return Err(Error::Invalid(format!(
            "tensor '{name}' has invalid dims {:?}",
            t.dims
        )));
    };
    let expected = count.checked_mul(bits).map(|b| b.div_ceil(8));
    let raw = if external::is_external(t) {
        let Some(dir) = base_dir else {
            return Err(Error::Invalid(format!(
                "tensor '{name}' has external data but the model's directory is unknown"
            )));
        };
        match external::read_external(t, dir, max_external_bytes)? {
            Some(b) => Cow::Owned(b),
            None => return Ok(None),
        }
    } else if let Some(raw) = &t.raw_data {
        Cow::Borrowed(&raw[..])
    } else {
        match typed_to_raw(t, elem_type, bits) {
            Some(b) => Cow::Owned(b),
            None => return Ok(None),
        }
    };
    if Some(raw.len() as u64) != expected {
        return Err(Error::Invalid(format!(
            "tensor '{name}' holds {} bytes but dims {:?} of type {elem_type} need {}",
            raw.len(),
            t.dims,
            expected.map_or_else(|| "overflowing".to_owned(), |e| e.to_string())
        )));
    }
    Ok(Some(ConstBytes {
        elem_type,
        dims: t.dims.clone(),
        raw,
    }))
}

/// Converts the typed repeated fields ONNX uses when `raw_data` is absent.
fn typed_to_raw(t: &TensorProto, elem_type: i32, bits: u64) -> Option<Vec<u8>> {
    let d = D::try_from(elem_type).ok()?;
    Some(match d {
        D::Float | D::Complex64 => t.float_data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        D::Double | D::Complex128 => t.double_data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        D::Int64 => t.int64_data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        D::Uint64 => t.uint64_data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        D::Uint32 => t
            .uint64_data
            .iter()
            .flat_map(|&x| (x as u32).to_le_bytes())
            .collect(),
        D::Int32 => t.int32_data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        // int32_data holds one element per entry in its low bits for these types.
        _ if bits == 16 => t
            .int32_data
            .iter()
            .flat_map(|&x| (x as u16).to_le_bytes())
            .collect(),
        _ if bits == 8 => t.int32_data.iter().map(|&x| x as u8).collect(),
        _ => return None, // sub-byte packing in typed fields: not needed by any rule
    })
}

/// The value of a `Constant` node, from whichever `value*` attribute it carries; `None` for
/// sparse/string values or on malformed attributes.
pub(super) fn constant_node_value(attrs: &[AttributeProto]) -> Option<ConstTensor> {
    let a = attrs.first()?;
    let scalar = |elem_type: i32, raw: Vec<u8>| ConstTensor {
        elem_type,
        dims: vec![],
        raw,
    };
    let list = |elem_type: i32, n: usize, raw: Vec<u8>| ConstTensor {
        elem_type,
        dims: vec![n as i64],
        raw,
    };
    match a.name.as_deref()? {
        "value" => tensor_to_const(a.t.as_ref()?, None, 0).ok().flatten(),
        "value_float" => Some(scalar(D::Float as i32, a.f?.to_le_bytes().to_vec())),
        "value_int" => Some(scalar(D::Int64 as i32, a.i?.to_le_bytes().to_vec())),
        "value_floats" => Some(list(
            D::Float as i32,
            a.floats.len(),
            a.floats.iter().flat_map(|x| x.to_le_bytes()).collect(),
        )),
        "value_ints" => Some(list(
            D::Int64 as i32,
            a.ints.len(),
            a.ints.iter().flat_map(|x| x.to_le_bytes()).collect(),
        )),
        _ => None,
    }
}
