//! `AddRmsNormMxQuant(x, [residual], gamma) -> (q, scale, [residual_out], [normed])`.

use super::quant_common::{check_activation, quant_outputs, QuantParams};
use super::{required, Attrs, Kernel};
use crate::error::{Error, Result};
use crate::ort_types::onnx_dtype;
use crate::tensor::{Meta, TensorMut, TensorRef};

const OP: &str = "AddRmsNormMxQuant";

pub struct AddRmsNormMxQuant {
    pub quant: QuantParams,
    pub epsilon: f32,
    pub gemma: bool,
    pub gamma_in_f32: bool,
    /// `"rsqrt"`, `"recip_mul"` or `"div"` (docs/ops.md).
    pub inv_form: &'static str,
}

impl AddRmsNormMxQuant {
    pub fn new(attrs: &Attrs) -> Result<Self> {
        if attrs.flag("allreduce", false)? {
            // World size is 1 in-process: the absorbed AllReduce is the identity.
            // (Multi-rank support would have to fail here; docs/ops.md.)
        }
        let epsilon = attrs.float("epsilon", 1e-6);
        if !(epsilon.is_finite() && epsilon >= 0.0) {
            return Err(Error::invalid(format!(
                "{OP}: epsilon = {epsilon} must be finite and >= 0"
            )));
        }
        let inv_form = match attrs.choice("inv_form", &["rsqrt", "recip_mul", "div"])? {
            "rsqrt" => "rsqrt",
            "recip_mul" => "recip_mul",
            _ => "div",
        };
        Ok(AddRmsNormMxQuant {
            quant: QuantParams::parse(attrs)?,
            epsilon,
            gemma: attrs.flag("gemma", false)?,
            gamma_in_f32: attrs.flag("gamma_in_f32", true)?,
            inv_form,
        })
    }
}

impl Kernel for AddRmsNormMxQuant {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let x = required(OP, inputs, 0, "x")?;
        let h = check_activation(OP, "x", x)?;
        if let Some(Some(r)) = inputs.get(1) {
            if r.dtype != x.dtype || r.dims != x.dims {
                return Err(Error::invalid(format!(
                    "{OP}: residual {r:?} must match x {x:?}"
                )));
            }
        }
        let gamma = required(OP, inputs, 2, "gamma")?;
        if gamma.dims != [h] || !(gamma.dtype == x.dtype || gamma.dtype == onnx_dtype::FLOAT) {
            return Err(Error::invalid(format!(
                "{OP}: gamma {gamma:?} must be [{h}] of x's type or float"
            )));
        }
        let [q, s] = quant_outputs(&x.dims);
        let same = Meta::new(x.dtype, x.dims.clone());
        Ok(vec![q, s, same.clone(), same])
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
    ) -> Result<()> {
        super::backend::add_rms_norm_mx_quant(self, inputs, outputs)
    }
}
