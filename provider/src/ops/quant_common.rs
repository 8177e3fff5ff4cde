//! What every quantizing op shares: the block attributes and the `[..., K] -> [..., K/32]` shapes.

use super::Attrs;
use crate::error::{Error, Result};
use crate::ort_types::onnx_dtype;
use crate::tensor::Meta;

/// MX block size; the only one docs/ops.md allows.
pub const BLOCK: i64 = 32;

/// `scale_rule` / `nan_policy` of a quantizing op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantParams {
    pub rceil: bool,
    pub nan_ignore: bool,
}

impl QuantParams {
    pub fn parse(attrs: &Attrs) -> Result<Self> {
        let block = attrs.int("block_size", BLOCK);
        if block != BLOCK {
            return Err(Error::invalid(format!(
                "{}: block_size = {block}, only 32 is supported",
                attrs.op()
            )));
        }
        Ok(QuantParams {
            rceil: attrs.choice("scale_rule", &["floor", "rceil"])? == "rceil",
            nan_ignore: attrs.choice("nan_policy", &["propagate", "ignore"])? == "ignore",
        })
    }
}

/// Whether `dtype` is an activation type the ops accept (f32, f16, bf16).
pub fn is_float(dtype: i32) -> bool {
    matches!(
        dtype,
        onnx_dtype::FLOAT | onnx_dtype::FLOAT16 | onnx_dtype::BFLOAT16
    )
}

/// Checks that `x` is a float tensor of rank >= 1 whose last dim is a multiple of 32.
pub fn check_activation(op: &str, what: &str, x: &Meta) -> Result<i64> {
    if !is_float(x.dtype) {
        return Err(Error::invalid(format!(
            "{op}: {what} has element type {}, expected float, float16 or bfloat16",
            x.dtype
        )));
    }
    let k = *x
        .dims
        .last()
        .ok_or_else(|| Error::invalid(format!("{op}: {what} must have rank >= 1")))?;
    if k % BLOCK != 0 {
        return Err(Error::invalid(format!(
            "{op}: last dimension of {what} is {k}, not a multiple of 32"
        )));
    }
    Ok(k)
}

/// `(q, scale)` metas for quantizing a tensor of `dims` (last dim K, a multiple of 32).
pub fn quant_outputs(dims: &[i64]) -> [Meta; 2] {
    let mut scale_dims = dims.to_vec();
    if let Some(k) = scale_dims.last_mut() {
        *k /= BLOCK;
    }
    [
        Meta::new(onnx_dtype::FLOAT8E4M3FN, dims.to_vec()),
        Meta::new(onnx_dtype::FLOAT8E8M0, scale_dims),
    ]
}
