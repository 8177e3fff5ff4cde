//! `MxGatherDequantize` over `kernels::ops::mx_gather_dequantize`: `Gather(DequantizeLinear(x,
//! scale), indices)` dequantizing only the gathered slices (docs/ops.md).

use kernels::ops as k;
use kernels::{DType, MxGatherDequantAttrs};

use super::{
    dims_of, dtype, from_dims, out_dims, out_views, required, take, to_dims, view, Kernel,
};
use crate::error::{Error, Result};
use crate::ort_types::onnx_dtype;
use crate::tensor::{Meta, TensorMut, TensorRef};

/// The indices as i64 (ONNX Gather takes int32 or int64).
pub(super) fn indices_i64(t: &TensorRef<'_>) -> Result<Vec<i64>> {
    match t.meta.dtype {
        onnx_dtype::INT64 => Ok(t
            .data
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect()),
        onnx_dtype::INT32 => Ok(t
            .data
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap_or_default()) as i64)
            .collect()),
        other => Err(Error::invalid(format!(
            "indices must be int32 or int64, got element type {other}"
        ))),
    }
}

impl Kernel for MxGatherDequantAttrs {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let x = required(inputs, 0, "x")?;
        required(inputs, 1, "scale")?;
        let idx = required(inputs, 2, "indices")?;
        if !matches!(dtype(x.dtype)?, DType::E4M3 | DType::E5M2 | DType::E2M1) {
            return Err(Error::invalid(format!(
                "x must be float8e4m3fn, float8e5m2 or float4e2m1, got element type {}",
                x.dtype
            )));
        }
        if !matches!(idx.dtype, onnx_dtype::INT32 | onnx_dtype::INT64) {
            return Err(Error::invalid(format!(
                "indices must be int32 or int64, got element type {}",
                idx.dtype
            )));
        }
        // Gather's shape rule, the kernel's own (unknown dims pass through as -1).
        let ((xd, x_unknown), (id, i_unknown)) = (to_dims(&x.dims), to_dims(&idx.dims));
        let dims = from_dims(
            &k::gather_shape(&xd, &id, self.gather_axis)?,
            x_unknown || i_unknown,
        );
        Ok(vec![Meta::new(self.dequant.output_dtype.onnx_code(), dims)])
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        par: &dyn kernels::Parallel,
    ) -> Result<()> {
        let x = required(inputs, 0, "x")?;
        let scale = required(inputs, 1, "scale")?;
        let idx = required(inputs, 2, "indices")?;
        let (xd, sd, id) = (dims_of(x), dims_of(scale), dims_of(idx));
        let values = indices_i64(idx)?;
        let od = out_dims(outputs);
        let mut outs = out_views(outputs, &od)?;
        let y = take(&mut outs, 0, "y")?;
        Ok(k::mx_gather_dequantize(
            view(x, &xd)?,
            view(scale, &sd)?,
            &values,
            &id,
            y,
            self,
            par,
        )?)
    }
}
