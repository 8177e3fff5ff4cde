//! Forward type and shape inference for values the loaded model does not describe.
//!
//! Many real models carry no `value_info` for intermediate tensors (AMD Quark output, graphs
//! saved without shape inference, hand-built graphs); ONNX's own shape inference also stops at
//! custom ops such as `com.amd.quark::MXQuantizeDequantize`. The rules need the element type and
//! the last dim of activations, so [`Graph::from_model`] runs this pass once, after the
//! topological sort: one walk over the nodes in order, each op's rule in [`ops`] computing its
//! outputs from what is known about its inputs (cheap: no tensor data is read except small
//! constant shape / axes inputs).
//!
//! What it changes and what it does not:
//! * Only the in-memory type a value reports through
//!   [`GraphView::tensor_info`](crate::view::GraphView::tensor_info) is filled in; the loaded
//!   `value_info` entries are what [`Graph::to_model`] writes, so a loaded model round-trips
//!   byte for byte.
//! * Known information wins: a graph input, initializer, graph output or `value_info` type is
//!   never overwritten. Inference only fills what is missing in it: an unknown element type
//!   (0) or an unknown rank (no shape). A loaded shape is kept whole, unknown dims included, so
//!   a model that declares a dim unknown is matched as declared; where the two disagree, the
//!   loaded type is kept as is.
//! * Ops without a rule leave their outputs unknown. An `If` / `Loop` / `Scan` node's outputs
//!   take the types its subgraphs declare for their outputs, completed by this inference run on
//!   the subgraph itself where they declare less (with the node's inputs: [`control_flow`]);
//!   what is inferred inside a subgraph is not kept; symbolic dims
//!   propagate as [`Dim::Symbolic`](crate::view::Dim::Symbolic), sizes that cannot be derived become
//!   [`Dim::Unknown`](crate::view::Dim::Unknown).
//! * The pass runs at load only. Values that rules add later come with their own type
//!   ([`Graph::add_value`]).

mod control_flow;
mod einsum;
mod layout;
mod linear_attention;
mod node;
mod ops;
mod resize;
mod shape;
mod values;

use super::Graph;
use crate::view::TensorInfo;

impl Graph {
    /// Fills in the types of node outputs in topological order (see the module docs).
    pub(super) fn infer_types(&mut self) {
        let mut shape_values = node::ShapeValues::new();
        for i in 0..self.order.len() {
            let n = self.order[i];
            let c = node::Node {
                g: self,
                n,
                values: &shape_values,
            };
            let Some(&out0) = self.node(n).outputs.first() else {
                continue;
            };
            // Nothing to fill when the model types every output (the common case after ONNX
            // shape inference): skip the rule.
            let complete = self.node(n).outputs.iter().all(|&v| {
                let value = self.value(v);
                value.omitted
                    || value
                        .info
                        .as_ref()
                        .is_some_and(|i| i.elem_type != 0 && i.shape.is_some())
            });
            let inferred = if complete {
                Vec::new()
            } else {
                ops::infer_node(&c)
            };
            for (slot, new) in inferred.into_iter().enumerate() {
                let Some(&v) = self.node(n).outputs.get(slot) else {
                    break;
                };
                let value = self.value_mut(v);
                if !value.omitted {
                    merge(&mut value.info, new);
                }
            }
            // Shape computations: needs the output's merged type, so after the merge.
            let Some(out) = self.value(out0).info.as_ref() else {
                continue;
            };
            let c = node::Node {
                g: self,
                n,
                values: &shape_values,
            };
            if let Some(vals) = values::output_values(&c, out) {
                shape_values.insert(out0, vals);
            }
        }
    }
}

/// Fills the unknown parts of `known` from `inferred`, keeping everything already known.
fn merge(known: &mut Option<TensorInfo>, inferred: TensorInfo) {
    if inferred.elem_type == 0 && inferred.shape.is_none() {
        return;
    }
    let Some(k) = known else {
        *known = Some(inferred);
        return;
    };
    if k.elem_type == 0 {
        k.elem_type = inferred.elem_type;
    }
    if k.shape.is_none() {
        k.shape = inferred.shape;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::Dim;

    fn info(elem_type: i32, shape: Option<Vec<Dim>>) -> TensorInfo {
        TensorInfo { elem_type, shape }
    }

    #[test]
    fn merge_fills_gaps_and_keeps_known_parts() {
        let loaded = vec![Dim::Known(2), Dim::Unknown];
        let mut k = Some(info(0, Some(loaded.clone())));
        merge(
            &mut k,
            info(1, Some(vec![Dim::Known(3), Dim::Symbolic("s".into())])),
        );
        assert_eq!(k, Some(info(1, Some(loaded))));

        let mut k = Some(info(10, None));
        merge(&mut k, info(1, Some(vec![Dim::Known(4)])));
        assert_eq!(k, Some(info(10, Some(vec![Dim::Known(4)]))));

        let mut k = Some(info(10, Some(vec![Dim::Known(4)])));
        merge(&mut k, info(10, Some(vec![Dim::Known(4), Dim::Known(1)])));
        assert_eq!(k, Some(info(10, Some(vec![Dim::Known(4)]))));

        let mut none = None;
        merge(&mut none, info(0, None));
        assert_eq!(none, None);
    }
}
