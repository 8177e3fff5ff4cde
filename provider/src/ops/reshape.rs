//! ONNX `Reshape` with a constant shape: the one default-domain op a rewrite emits into a fused
//! subgraph (rule readers through torch's `view(-1, K)`: `MxMatMul` writes `[.., N]`, a Reshape
//! gives the linear's output its shape back; `graph_rewrites::rules::mx_consumers`). The bytes
//! are copied as they are (row-major; only the dims change).

use graph_rewrites::pattern::predicates::{attr_int, values_i64};
use graph_rewrites::view::{GraphView, NodeId, ONNX_DOMAIN};

use super::{required, Kernel};
use crate::error::{Error, Result};
use crate::tensor::{Meta, TensorMut, TensorRef};

pub struct Reshape {
    /// The constant shape (`allowzero = 0`: a 0 copies the input's dim, one -1 is inferred).
    shape: Vec<i64>,
}

impl Reshape {
    /// The kernel of node `n` when it is an ONNX `Reshape` of a constant shape with
    /// `allowzero = 0`; `None` for any other node.
    pub fn of_node(g: &dyn GraphView, n: NodeId) -> Result<Option<Self>> {
        if g.domain(n) != ONNX_DOMAIN || g.op_type(n) != "Reshape" {
            return Ok(None);
        }
        let name = g.node_label(n);
        if attr_int(g.attr(n, "allowzero"), 0) != Some(0) {
            return Err(Error::Unsupported(format!("Reshape {name}: allowzero = 1")));
        }
        let shape = g
            .inputs(n)
            .get(1)
            .copied()
            .flatten()
            .and_then(|s| g.const_value(s))
            .and_then(|t| values_i64(&t))
            .ok_or_else(|| {
                Error::Unsupported(format!("Reshape {name}: the shape is not a constant"))
            })?;
        Ok(Some(Reshape { shape }))
    }
}

impl Kernel for Reshape {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let x = required(inputs, 0, "data")?;
        let mut dims = Vec::with_capacity(self.shape.len());
        let mut infer = None;
        for (i, &d) in self.shape.iter().enumerate() {
            dims.push(match d {
                0 => *x.dims.get(i).ok_or_else(|| {
                    Error::invalid(format!(
                        "Reshape: shape entry {i} is 0 past the input's rank"
                    ))
                })?,
                -1 if infer.is_none() => {
                    infer = Some(i);
                    -1
                }
                d if d > 0 => d,
                d => return Err(Error::invalid(format!("Reshape: shape entry {d}"))),
            });
        }
        // With a dim unknown (-1, ORT's shape inference) the inferred entry stays unknown.
        if let Some(i) = infer {
            if x.dims.iter().all(|&d| d >= 0) {
                let total: i64 = x.dims.iter().product();
                let rest: i64 = dims.iter().filter(|&&d| d != -1).product();
                if rest == 0 || total % rest != 0 {
                    return Err(Error::invalid(format!(
                        "Reshape: {:?} cannot become {:?}",
                        x.dims, self.shape
                    )));
                }
                dims[i] = total / rest;
            }
        }
        let known = |d: &[i64]| d.iter().all(|&v| v >= 0);
        if known(&x.dims)
            && known(&dims)
            && x.dims.iter().product::<i64>() != dims.iter().product::<i64>()
        {
            return Err(Error::invalid(format!(
                "Reshape: {:?} cannot become {:?}",
                x.dims, self.shape
            )));
        }
        Ok(vec![Meta::new(x.dtype, dims)])
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        _par: &dyn kernels::Parallel,
    ) -> Result<()> {
        let x = required(inputs, 0, "data")?;
        let y = outputs
            .get_mut(0)
            .and_then(Option::as_mut)
            .ok_or_else(|| Error::invalid("missing output reshaped"))?;
        if y.data.len() != x.data.len() {
            return Err(Error::invalid(format!(
                "Reshape: {} bytes in, {} out",
                x.data.len(),
                y.data.len()
            )));
        }
        y.data.copy_from_slice(x.data);
        Ok(())
    }
}
