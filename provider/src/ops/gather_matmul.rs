//! `MxGatherMatMul` over `kernels::ops::mx_gather_matmul`: each sample's activation times the MX
//! weight of the expert its index selects, the stacked weights read in place (docs/ops.md).

use kernels::ops as k;
use kernels::MxGatherMatMulAttrs;

use super::gather_dequant::indices_i64;
use super::{dims_of, float_input, out_dims, out_views, required, take, view, Kernel};
use crate::error::{Error, Result};
use crate::tensor::{Meta, TensorMut, TensorRef};

impl Kernel for MxGatherMatMulAttrs {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let a = required(inputs, 0, "a")?;
        float_input(a, "a")?;
        let b = required(inputs, 1, "b")?;
        required(inputs, 2, "b_scale")?;
        let idx = required(inputs, 3, "indices")?;
        let (ad, bd) = (&a.dims, &b.dims);
        if ad.len() != 3 || bd.len() != 3 || idx.dims.len() != 1 {
            return Err(Error::invalid(format!(
                "a {ad:?} and b {bd:?} must have rank 3 and indices {:?} rank 1",
                idx.dims
            )));
        }
        // The sample dim broadcasts as MatMul's batch dim (-1: unknown until run time).
        let s = match (ad[0], idx.dims[0]) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            (-1, y) | (y, -1) if y > 1 => y,
            (-1, _) | (_, -1) => -1,
            (x, _) => x, // a mismatch: the kernel names it at run time
        };
        // Weight first: y [S, N, 1]; weight second: y [S, P, N].
        let dims = if self.trans_b {
            vec![s, bd[1], 1]
        } else {
            vec![s, ad[1], bd[2]]
        };
        Ok(vec![Meta::new(self.output_dtype.onnx_code(), dims)])
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        par: &dyn kernels::Parallel,
    ) -> Result<()> {
        let a = required(inputs, 0, "a")?;
        let b = required(inputs, 1, "b")?;
        let bs = required(inputs, 2, "b_scale")?;
        let idx = required(inputs, 3, "indices")?;
        let (ad, bd, sd) = (dims_of(a), dims_of(b), dims_of(bs));
        let values = indices_i64(idx)?;
        let od = out_dims(outputs);
        let mut outs = out_views(outputs, &od)?;
        let y = take(&mut outs, 0, "y")?;
        Ok(k::mx_gather_matmul(
            view(a, &ad)?,
            view(b, &bd)?,
            view(bs, &sd)?,
            &values,
            y,
            self,
            par,
        )?)
    }
}
