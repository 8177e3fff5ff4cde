//! `MxQuantize(x) -> (q, scale)`.

use super::quant_common::{check_activation, quant_outputs, QuantParams};
use super::{required, Attrs, Kernel};
use crate::error::Result;
use crate::tensor::{Meta, TensorMut, TensorRef};

pub struct MxQuantize {
    pub params: QuantParams,
}

impl MxQuantize {
    pub fn new(attrs: &Attrs) -> Result<Self> {
        Ok(MxQuantize {
            params: QuantParams::parse(attrs)?,
        })
    }
}

impl Kernel for MxQuantize {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let x = required("MxQuantize", inputs, 0, "x")?;
        check_activation("MxQuantize", "x", x)?;
        Ok(quant_outputs(&x.dims).to_vec())
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
    ) -> Result<()> {
        let x = required("MxQuantize", inputs, 0, "x")?;
        super::backend::mx_quantize(&self.params, x, outputs)
    }
}
