//! The `If` / `Loop` / `Scan` bodies of ORT's graph as graph attributes of the model
//! `crate::shapes` infers, so the EP types those nodes' outputs as `mxfuse rewrite` does.
//!
//! Why: ORT's attribute API does not read graph-valued attributes (`Node_GetSubgraphs` hands the
//! bodies out as `OrtGraph`s instead), so the inference model carried none and
//! `graph_rewrites::ir::infer`'s control-flow rules left every output unknown. Where ORT's own
//! inference leaves such an output unranked (a Loop's carried value), the EP then refused the
//! norm and the SwiGLU after it that the offline rewrite, which reads the bodies, fuses.
//!
//! A body becomes a `GraphProto` as the offline loader sees one: its formal inputs and outputs
//! in ORT's order (positional for the control-flow rules), its nodes and their types as
//! [`Purpose::Inference`] writes them (shapes with an unknown dim left to the inference), its
//! own small constants; the outer-scope values it reads are left undeclared, so the inference
//! types them from the enclosing graph. A body that cannot be read is left out: the node's
//! outputs then stay as ORT typed them, and the rules refuse what that does not prove.

use graph_rewrites::onnx_pb::{attribute_proto::AttributeType, AttributeProto, GraphProto};
use graph_rewrites::view::{GraphView, NodeId, ValueId};
use ort_sys::OrtGraph;

use crate::error::Result;
use crate::ort_graph_view::OrtGraphView;
use crate::view_to_model::{inference_info, model_for, value_info, Purpose};

/// Node `n`'s bodies as graph attributes (those that convert; see the module docs).
pub fn subgraph_attributes(view: &OrtGraphView, n: NodeId) -> Vec<AttributeProto> {
    view.subgraphs(n)
        .iter()
        .filter_map(|(name, g)| {
            // SAFETY: ORT owns the body as long as the graph the view borrows.
            let body = unsafe { body_graph(*g) }.ok()?;
            Some(AttributeProto {
                name: Some(name.clone()),
                r#type: Some(AttributeType::Graph as i32),
                g: Some(body),
                ..Default::default()
            })
        })
        .collect()
}

/// One body as the offline loader reads it.
///
/// # Safety
/// `graph` must be a valid `OrtGraph*` for the duration of the call.
unsafe fn body_graph(graph: *const OrtGraph) -> Result<GraphProto> {
    let view = OrtGraphView::new(graph)?;
    let mut body = model_for(&view, Purpose::Inference)?
        .graph
        .unwrap_or_default();
    let declared = |v: &ValueId| value_info(view.value_name(*v), inference_info(&view, *v));
    // `model_for` declares every value read and not produced (the outer-scope ones too) and
    // the outputs a node computes, in node order; a body's parameters are exactly its formal
    // ones, in order (the node-computed outputs are not in `value_info`: nothing to drop).
    body.input = view.graph_inputs().iter().map(declared).collect();
    body.output = view.graph_outputs().iter().map(declared).collect();
    Ok(body)
}
