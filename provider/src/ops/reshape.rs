//! ONNX `Reshape` with a constant shape: the one default-domain op a rewrite emits into a fused
//! subgraph (rule readers through torch's `view(-1, K)`: `MxMatMul` writes `[.., N]`, a Reshape
//! gives the linear's output its shape back; `graph_rewrites::rules::flat_linear`). The bytes
//! are copied as they are (row-major; only the dims change).

use graph_rewrites::pattern::predicates::{attr_int, values_i64};
use graph_rewrites::view::{GraphView, NodeId, ONNX_DOMAIN};

use super::{required, write_output0, Kernel};
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

/// The element count of `dims` (all known), or an error naming the overflow: the shape is the
/// model's constant and the input's dims come from ORT, so their product is not trusted to fit.
fn elements(dims: &[i64]) -> Result<i64> {
    dims.iter()
        .try_fold(1i64, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            Error::invalid(format!(
                "Reshape: {dims:?} has more elements than an i64 holds"
            ))
        })
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
                -1 => {
                    return Err(Error::invalid(format!(
                        "Reshape: shape {:?} has more than one -1",
                        self.shape
                    )))
                }
                d if d > 0 => d,
                d => return Err(Error::invalid(format!("Reshape: shape entry {d}"))),
            });
        }
        let cannot = || {
            Error::invalid(format!(
                "Reshape: {:?} cannot become {:?}",
                x.dims, self.shape
            ))
        };
        let known = |d: &[i64]| d.iter().all(|&v| v >= 0);
        // With a dim unknown (-1, ORT's shape inference) the inferred entry stays unknown.
        if let Some(i) = infer {
            if known(&x.dims) {
                let total = elements(&x.dims)?;
                let rest: Vec<i64> = dims.iter().copied().filter(|&d| d != -1).collect();
                let rest = elements(&rest)?;
                if rest == 0 || total % rest != 0 {
                    return Err(cannot());
                }
                dims[i] = total / rest;
            }
        }
        if known(&x.dims) && known(&dims) && elements(&x.dims)? != elements(&dims)? {
            return Err(cannot());
        }
        Ok(vec![Meta::new(x.dtype, dims)])
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        _par: &dyn kernels::Parallel,
    ) -> Result<()> {
        write_output0(outputs, "reshaped", required(inputs, 0, "data")?.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(shape: &[i64], x: &[i64]) -> Result<Vec<i64>> {
        let r = Reshape {
            shape: shape.to_vec(),
        };
        let x = Meta::new(1, x.to_vec());
        Ok(r.output_metas(&[Some(&x)])?.remove(0).dims)
    }

    #[test]
    fn output_dims_copy_zeros_and_infer_the_minus_one() {
        assert_eq!(out(&[-1, 64], &[2, 3, 32]).unwrap(), vec![3, 64]);
        assert_eq!(out(&[0, -1, 8], &[2, 3, 32]).unwrap(), vec![2, 12, 8]);
        // An unknown input dim leaves the inferred entry unknown.
        assert_eq!(out(&[-1, 32], &[-1, 3, 32]).unwrap(), vec![-1, 32]);
        for (shape, x, why) in [
            (&[-1, 5][..], &[2, 3, 32][..], "cannot become"),
            (&[4, 4][..], &[2, 3][..], "cannot become"),
            (&[-1, -1][..], &[2, 3][..], "more than one -1"),
            (&[0, 0, 0][..], &[2, 3][..], "past the input's rank"),
            (&[-2, 3][..], &[2, 3][..], "shape entry -2"),
        ] {
            let err = out(shape, x).unwrap_err().to_string();
            assert!(err.contains(why), "{shape:?} of {x:?}: {err}");
        }
    }

    /// The shape is a model constant and the input dims come from ORT: a product past i64 is an
    /// error, not an overflow (a panic in a debug build; in release a wrapped product that could
    /// pass the element-count check).
    #[test]
    fn huge_shapes_are_an_error_not_an_overflow() {
        let big = 1i64 << 40;
        for (shape, x) in [
            (&[big, big, -1][..], &[2, 3][..]),
            (&[-1, 2][..], &[big, big][..]),
            (&[big, big][..], &[2, 3][..]),
            (&[2, 3][..], &[big, big][..]),
        ] {
            let err = out(shape, x).unwrap_err().to_string();
            assert!(
                err.contains("more elements than an i64"),
                "{shape:?} of {x:?}: {err}"
            );
        }
    }
}
