//! `MxMatMul(a_q, a_scale, b, [b_scale]) -> y`.

use super::quant_common::BLOCK;
use super::{required, Attrs, Kernel};
use crate::error::{Error, Result};
use crate::ort_types::onnx_dtype;
use crate::tensor::{Meta, TensorMut, TensorRef};

const OP: &str = "MxMatMul";

pub struct MxMatMul {
    pub trans_b: bool,
    pub output_dtype: i32,
}

impl MxMatMul {
    pub fn new(attrs: &Attrs) -> Result<Self> {
        let output_dtype = attrs.int("output_dtype", onnx_dtype::FLOAT as i64) as i32;
        if !matches!(
            output_dtype,
            onnx_dtype::FLOAT | onnx_dtype::FLOAT16 | onnx_dtype::BFLOAT16
        ) {
            return Err(Error::invalid(format!(
                "{OP}: output_dtype = {output_dtype}, expected 1, 10 or 16"
            )));
        }
        Ok(MxMatMul {
            trans_b: attrs.flag("trans_b", false)?,
            output_dtype,
        })
    }
}

impl Kernel for MxMatMul {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let a = required(OP, inputs, 0, "a_q")?;
        let a_scale = required(OP, inputs, 1, "a_scale")?;
        let b = required(OP, inputs, 2, "b")?;
        let b_scale = inputs.get(3).copied().flatten();
        let k = *a
            .dims
            .last()
            .ok_or_else(|| Error::invalid(format!("{OP}: a_q must have rank >= 1")))?;
        if a.dtype != onnx_dtype::FLOAT8E4M3FN
            || a_scale.dtype != onnx_dtype::FLOAT8E8M0
            || k % BLOCK != 0
        {
            return Err(Error::invalid(format!(
                "{OP}: a_q {a:?} / a_scale {a_scale:?} are not MXFP8"
            )));
        }
        let mut scale_dims = a.dims.clone();
        *scale_dims.last_mut().unwrap_or(&mut 0) = k / BLOCK;
        if a_scale.dims != scale_dims {
            return Err(Error::invalid(format!(
                "{OP}: a_scale dims {:?}, expected {scale_dims:?}",
                a_scale.dims
            )));
        }
        if b.dims.len() != 2 {
            return Err(Error::invalid(format!(
                "{OP}: b must be 2-D, got {:?}",
                b.dims
            )));
        }
        let (bk, n) = if self.trans_b {
            (b.dims[1], b.dims[0])
        } else {
            (b.dims[0], b.dims[1])
        };
        if bk != k {
            return Err(Error::invalid(format!(
                "{OP}: K mismatch: a_q has {k}, b {:?} (trans_b={})",
                b.dims, self.trans_b
            )));
        }
        match b_scale {
            None if super::quant_common::is_float(b.dtype) => {}
            Some(bs)
                if b.dtype == onnx_dtype::FLOAT8E4M3FN && bs.dtype == onnx_dtype::FLOAT8E8M0 =>
            {
                let want = if self.trans_b {
                    vec![n, k / BLOCK]
                } else {
                    vec![k / BLOCK, n]
                };
                if bs.dims != want {
                    return Err(Error::invalid(format!(
                        "{OP}: b_scale dims {:?}, expected {want:?}",
                        bs.dims
                    )));
                }
            }
            _ => {
                return Err(Error::invalid(format!(
                    "{OP}: b {b:?} with b_scale {b_scale:?} is not a supported weight form"
                )))
            }
        }
        let mut y = a.dims.clone();
        *y.last_mut().unwrap_or(&mut 0) = n;
        Ok(vec![Meta::new(self.output_dtype, y)])
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
    ) -> Result<()> {
        super::backend::mx_matmul(self, inputs, outputs)
    }
}
