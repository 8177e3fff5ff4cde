//! `SwiGluMxQuant(gate_or_gate_up, [up]) -> (q, scale)`.

use super::quant_common::{check_activation, is_float, quant_outputs, QuantParams, BLOCK};
use super::{required, Attrs, Kernel};
use crate::error::{Error, Result};
use crate::tensor::{Meta, TensorMut, TensorRef};

const OP: &str = "SwiGluMxQuant";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Separate,
    SplitHalves,
    Interleaved,
}

pub struct SwiGluMxQuant {
    pub quant: QuantParams,
    pub layout: Layout,
    /// `true` for SwiGLU-OAI (clamped gate/up, `up + beta`).
    pub oai: bool,
    pub alpha: f32,
    pub limit: f32,
    pub beta: f32,
    pub fp32_activation: bool,
}

impl SwiGluMxQuant {
    pub fn new(attrs: &Attrs) -> Result<Self> {
        let layout = match attrs.choice("layout", &["separate", "split_halves", "interleaved"])? {
            "separate" => Layout::Separate,
            "split_halves" => Layout::SplitHalves,
            _ => Layout::Interleaved,
        };
        Ok(SwiGluMxQuant {
            quant: QuantParams::parse(attrs)?,
            layout,
            oai: attrs.choice("activation", &["silu", "oai"])? == "oai",
            alpha: attrs.float("alpha", 1.0),
            limit: attrs.float("limit", 7.0),
            beta: attrs.float("beta", 1.0),
            fp32_activation: attrs.flag("fp32_activation", false)?,
        })
    }
}

impl Kernel for SwiGluMxQuant {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let gate = required(OP, inputs, 0, "gate")?;
        let up = inputs.get(1).copied().flatten();
        let mut dims = gate.dims.clone();
        match (self.layout, up) {
            (Layout::Separate, Some(up)) => {
                if up.dims != gate.dims || up.dtype != gate.dtype {
                    return Err(Error::invalid(format!(
                        "{OP}: up {up:?} must match gate {gate:?}"
                    )));
                }
            }
            (Layout::Separate, None) => {
                return Err(Error::invalid(format!(
                    "{OP}: layout \"separate\" needs input up"
                )))
            }
            (_, Some(_)) => {
                return Err(Error::invalid(format!(
                    "{OP}: a packed layout takes one input"
                )))
            }
            (_, None) => {
                if !is_float(gate.dtype) {
                    return Err(Error::invalid(format!(
                        "{OP}: gate_up has element type {}",
                        gate.dtype
                    )));
                }
                let last = dims
                    .last_mut()
                    .ok_or_else(|| Error::invalid(format!("{OP}: gate_up must have rank >= 1")))?;
                if *last % (2 * BLOCK) != 0 {
                    return Err(Error::invalid(format!(
                        "{OP}: last dimension of gate_up is {last}, not a multiple of 64"
                    )));
                }
                *last /= 2;
            }
        }
        check_activation(OP, "the activation", &Meta::new(gate.dtype, dims.clone()))?;
        Ok(quant_outputs(&dims).to_vec())
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
    ) -> Result<()> {
        super::backend::swiglu_mx_quant(self, inputs, outputs)
    }
}
