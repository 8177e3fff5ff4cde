//! ONNX `Shape` (opset 1–24, with opset 15's `start` / `end`): the second default-domain op a
//! rewrite emits into a fused subgraph. Rule `add_rmsnorm_mxquant` reads a MoE block's
//! `Reshape(normed, [-1, H])` into the fused norm, which then writes only the flattened rows; a
//! TorchScript export also reads `Shape(normed)` (transformers' `batch, seq, hidden =
//! hidden_states.shape` before the `view(-1, hidden)`), so the rule re-emits that Shape on the
//! norm's input x (the same shape) and the plugin EP's programs run it: an int64 vector of the
//! input's dims, read from its meta (no element is read). ORT reads the dims of every tensor it
//! hands a kernel, so the values are right for symbolic batch / seq on every run.

use graph_rewrites::pattern::predicates::attr_int;
use graph_rewrites::view::{GraphView, NodeId, ONNX_DOMAIN};

use super::{required, write_output0, Kernel};
use crate::error::{Error, Result};
use crate::ort_types::onnx_dtype;
use crate::tensor::{Meta, TensorMut, TensorRef};

#[derive(Clone, Debug)]
pub struct Shape {
    start: i64,
    /// `None`: to the last dim.
    end: Option<i64>,
}

impl Shape {
    /// The kernel of node `n` when it is an ONNX `Shape`; `None` for any other node.
    pub fn of_node(g: &dyn GraphView, n: NodeId) -> Result<Option<Self>> {
        if g.domain(n) != ONNX_DOMAIN || g.op_type(n) != "Shape" {
            return Ok(None);
        }
        let int = |name: &str| match g.attr(n, name) {
            None => Ok(None),
            a => attr_int(a, 0).map(Some).ok_or_else(|| {
                Error::Unsupported(format!(
                    "Shape {}: attribute {name} is not an int",
                    g.node_label(n)
                ))
            }),
        };
        Ok(Some(Shape {
            start: int("start")?.unwrap_or(0),
            end: int("end")?,
        }))
    }

    /// The dims `[start, end)` of a tensor of dims `dims` (negative bounds count from the end;
    /// both are clamped to the rank, as ONNX specifies).
    pub fn values<'a>(&self, dims: &'a [i64]) -> &'a [i64] {
        let r = dims.len() as i64;
        let clamp = |x: i64| (if x < 0 { x.saturating_add(r) } else { x }).clamp(0, r) as usize;
        let (start, end) = (clamp(self.start), clamp(self.end.unwrap_or(r)));
        &dims[start..end.max(start)]
    }

    /// [`Shape::values`] as the little-endian bytes of the int64 output.
    pub fn bytes(&self, dims: &[i64]) -> Vec<u8> {
        self.values(dims)
            .iter()
            .flat_map(|d| d.to_le_bytes())
            .collect()
    }
}

impl Kernel for Shape {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let x = required(inputs, 0, "data")?;
        let len = self.values(&x.dims).len() as i64;
        Ok(vec![Meta::new(onnx_dtype::INT64, vec![len])])
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        _par: &dyn kernels::Parallel,
    ) -> Result<()> {
        let x = required(inputs, 0, "data")?;
        write_output0(outputs, "shape", &self.bytes(&x.meta.dims))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_follow_onnx_start_and_end() {
        let dims = [2, 37, 64];
        for (start, end, want) in [
            (0, None, &[2, 37, 64][..]),
            (1, None, &[37, 64][..]),
            (-1, None, &[64][..]),
            (0, Some(2), &[2, 37][..]),
            (0, Some(-1), &[2, 37][..]),
            (-10, Some(10), &[2, 37, 64][..]),
            (2, Some(1), &[][..]),
            (3, None, &[][..]),
        ] {
            let s = Shape { start, end };
            assert_eq!(s.values(&dims), want, "start {start} end {end:?}");
            let meta = Meta::new(1, dims.to_vec());
            let out = s.output_metas(&[Some(&meta)]).unwrap().remove(0);
            assert_eq!(out, Meta::new(onnx_dtype::INT64, vec![want.len() as i64]));
            let mut data = vec![0u8; 8 * want.len()];
            let x = TensorRef {
                meta: &meta,
                data: &[],
            };
            let mut outs = [Some(TensorMut {
                meta: &out,
                data: &mut data,
            })];
            s.compute(&[Some(x)], &mut outs, &kernels::Serial).unwrap();
            let got: Vec<i64> = data
                .chunks(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(got, want);
        }
    }
}
