//! Reading constants and attributes for pattern predicates and rule checks.

use half::{bf16, f16};

use crate::view::{AttrValue, ConstTensor, Dim, GraphView, NodeId, ValueId};

/// ONNX `TensorProto.DataType` numbers used by the rules.
pub mod dtype {
    pub const FLOAT: i32 = 1;
    pub const UINT8: i32 = 2;
    pub const INT8: i32 = 3;
    pub const INT32: i32 = 6;
    pub const INT64: i32 = 7;
    pub const FLOAT16: i32 = 10;
    pub const DOUBLE: i32 = 11;
    pub const BFLOAT16: i32 = 16;
    pub const FLOAT8E4M3FN: i32 = 17;
    pub const FLOAT8E5M2: i32 = 19;
    pub const FLOAT4E2M1: i32 = 23;
    pub const FLOAT8E8M0: i32 = 24;

    /// Activation dtypes the fused kernels support.
    pub const ACTIVATION: [i32; 3] = [FLOAT, FLOAT16, BFLOAT16];

    pub fn name(t: i32) -> &'static str {
        match t {
            FLOAT => "float",
            UINT8 => "uint8",
            INT8 => "int8",
            INT32 => "int32",
            INT64 => "int64",
            FLOAT16 => "float16",
            DOUBLE => "double",
            BFLOAT16 => "bfloat16",
            FLOAT8E4M3FN => "float8e4m3fn",
            FLOAT8E5M2 => "float8e5m2",
            FLOAT4E2M1 => "float4e2m1",
            FLOAT8E8M0 => "float8e8m0",
            // The rest of ONNX's types, so a refusal names what the model has (new-user probe
            // 12: a FLOAT8E4M3FNUZ quantizer was refused as "other").
            4 => "uint16",
            5 => "int16",
            8 => "string",
            9 => "bool",
            12 => "uint32",
            13 => "uint64",
            14 => "complex64",
            15 => "complex128",
            18 => "float8e4m3fnuz",
            20 => "float8e5m2fnuz",
            21 => "uint4",
            22 => "int4",
            25 => "uint2",
            26 => "int2",
            0 => "unknown",
            _ => "other",
        }
    }
}

/// All elements of a float or integer constant as f64 (None for other dtypes or bad sizes).
pub fn values_f64(t: &ConstTensor) -> Option<Vec<f64>> {
    let raw = &t.raw;
    let (size, conv): (usize, fn(&[u8]) -> f64) = match t.elem_type {
        dtype::FLOAT => (4, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64),
        dtype::DOUBLE => (8, |b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8]))),
        dtype::FLOAT16 => (2, |b| f16::from_le_bytes([b[0], b[1]]).to_f64()),
        dtype::BFLOAT16 => (2, |b| bf16::from_le_bytes([b[0], b[1]]).to_f64()),
        dtype::INT64 => (8, |b| {
            i64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as f64
        }),
        dtype::INT32 => (4, |b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64),
        _ => return None,
    };
    if !raw.len().is_multiple_of(size) {
        return None;
    }
    Some(raw.chunks_exact(size).map(conv).collect())
}

/// The single element of a one-element numeric constant.
pub fn scalar_f64(t: &ConstTensor) -> Option<f64> {
    match values_f64(t)?.as_slice() {
        [v] => Some(*v),
        _ => None,
    }
}

/// All elements of an integer constant.
pub fn values_i64(t: &ConstTensor) -> Option<Vec<i64>> {
    match t.elem_type {
        dtype::INT64 | dtype::INT32 => {
            values_f64(t).map(|v| v.into_iter().map(|x| x as i64).collect())
        }
        _ => None,
    }
}

pub fn attr_int(a: Option<AttrValue>, default: i64) -> Option<i64> {
    match a {
        None => Some(default),
        Some(AttrValue::Int(v)) => Some(v),
        _ => None,
    }
}

pub fn attr_float(a: Option<AttrValue>, default: f32) -> Option<f32> {
    match a {
        None => Some(default),
        Some(AttrValue::Float(v)) => Some(v),
        _ => None,
    }
}

pub fn attr_string(a: Option<AttrValue>, default: &str) -> Option<String> {
    match a {
        None => Some(default.to_string()),
        Some(AttrValue::String(v)) => Some(v),
        _ => None,
    }
}

/// Known dims as `usize`, if every dim of `v` is known.
pub fn known_dims(g: &dyn GraphView, v: ValueId) -> Option<Vec<usize>> {
    g.tensor_info(v)?
        .shape?
        .iter()
        .map(|d| match d {
            Dim::Known(k) if *k >= 0 => Some(*k as usize),
            _ => None,
        })
        .collect()
}

/// Whether input 1 of Q/DQ node `n` (the scale) is FLOAT8E8M0: an MX quantizer.
pub fn scale_is_e8m0(g: &dyn GraphView, n: NodeId) -> bool {
    let s = g.inputs(n).get(1).copied().flatten();
    s.and_then(|s| g.tensor_info(s))
        .is_some_and(|i| i.elem_type == dtype::FLOAT8E8M0)
}

/// Whether float8 zero point `zp` is a constant zero everywhere: the only float8 zero point
/// ONNX allows. Its bytes are +0 (0x00) or −0 (0x80) in every float8 format.
pub fn is_float8_zero(g: &dyn GraphView, zp: ValueId) -> bool {
    g.const_value(zp)
        .is_some_and(|t| t.raw.iter().all(|&b| b & 0x7F == 0))
}

/// Checks that `QuantizeLinear` node `n` (opset ≥ 23) divides x by its scale in float: its
/// `precision` attribute unset (0) or FLOAT (1). Another precision rounds x and the scale to that
/// type before the division (f32 x with `precision = FLOAT16` quantizes the f16-rounded x), which
/// no mxfuse kernel reproduces. `op` names the node in the reason.
pub fn quantize_divides_in_float(
    g: &dyn GraphView,
    n: NodeId,
    op: &str,
) -> Result<(), crate::pattern::Reject> {
    let precision = attr_int(g.attr(n, "precision"), 0)
        .ok_or_else(|| crate::reject!("{op}: precision is not an int"))?;
    if precision != 0 && precision != dtype::FLOAT as i64 {
        return Err(crate::reject!(
            "{op} divides in precision {precision} ({}): the MX kernels divide in float (precision unset or 1)",
            dtype::name(precision as i32)
        ));
    }
    Ok(())
}

/// `(axis, block_size)` of E8M0-scaled Q/DQ node `n` (`op` names it in reasons: "QuantizeLinear
/// 'q1'"), checked by the kernels' own scale-layout rule (`kernels::ScaleMap`) where the shapes of
/// `x` and `scale` are known, so a layout the kernel would reject at run time is refused now.
pub fn mx_scale_layout(
    g: &dyn GraphView,
    n: NodeId,
    x: ValueId,
    scale: ValueId,
    op: &str,
) -> Result<(i64, i64), crate::pattern::Reject> {
    let axis =
        attr_int(g.attr(n, "axis"), 1).ok_or_else(|| crate::reject!("{op}: axis is not an int"))?;
    let block_size = attr_int(g.attr(n, "block_size"), 0)
        .filter(|b| *b >= 0)
        .ok_or_else(|| crate::reject!("{op}: block_size is not a non-negative int"))?;
    if let (Some(xd), Some(sd)) = (known_dims(g, x), known_dims(g, scale)) {
        kernels::ScaleMap::new(&xd, &sd, axis, block_size as usize)
            .map_err(|e| crate::reject!("{op}: {e}"))?;
    }
    Ok((axis, block_size))
}
