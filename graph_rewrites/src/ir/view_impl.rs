//! [`GraphView`] over the arena IR.

use std::borrow::Cow;

use super::tensor::{constant_node_value, tensor_bytes, tensor_to_const};
use super::{Graph, CONST_VALUE_MAX_BYTES};
use crate::io::external;
use crate::onnx_pb::{attribute_proto::AttributeType as A, AttributeProto};
use crate::view::{
    canonical_domain, AttrValue, ConstBytes, ConstTensor, Dim, GraphView, NodeId, TensorInfo,
    ValueId,
};

impl GraphView for Graph {
    /// The current order; when edits left it dirty, a stably re-sorted copy (call
    /// [`Graph::topo_sort`] after edits to avoid re-sorting on every call).
    fn nodes(&self) -> Cow<'_, [NodeId]> {
        if self.order_dirty {
            if let Ok(sorted) = self.stable_topo_order() {
                return Cow::Owned(sorted);
            }
        }
        Cow::Borrowed(&self.order)
    }

    fn op_type(&self, n: NodeId) -> &str {
        self.node(n).proto.op_type.as_deref().unwrap_or("")
    }

    fn domain(&self, n: NodeId) -> &str {
        &self.node(n).domain
    }

    fn node_name(&self, n: NodeId) -> &str {
        self.node(n).proto.name.as_deref().unwrap_or("")
    }

    fn inputs(&self, n: NodeId) -> &[Option<ValueId>] {
        &self.node(n).inputs
    }

    fn outputs(&self, n: NodeId) -> &[ValueId] {
        &self.node(n).outputs
    }

    fn attr(&self, n: NodeId, name: &str) -> Option<AttrValue> {
        let a = self
            .node(n)
            .proto
            .attribute
            .iter()
            .find(|a| a.name.as_deref() == Some(name))?;
        Some(decode_attr(a))
    }

    fn attr_names(&self, n: NodeId) -> Vec<String> {
        self.node(n)
            .proto
            .attribute
            .iter()
            .filter_map(|a| a.name.clone())
            .collect()
    }

    fn opset(&self, domain: &str) -> Option<i64> {
        self.opset_version(canonical_domain(domain))
    }

    fn value_name(&self, v: ValueId) -> &str {
        &self.value(v).name
    }

    fn producer(&self, v: ValueId) -> Option<(NodeId, usize)> {
        self.value(v).producer
    }

    fn consumers(&self, v: ValueId) -> Cow<'_, [(NodeId, usize)]> {
        Cow::Borrowed(&self.value(v).consumers)
    }

    fn is_graph_output(&self, v: ValueId) -> bool {
        self.value(v).graph_output
    }

    fn is_graph_input(&self, v: ValueId) -> bool {
        self.value(v).graph_input
    }

    fn tensor_info(&self, v: ValueId) -> Option<TensorInfo> {
        if let Some(i) = &self.value(v).info {
            return Some(i.clone());
        }
        // A Constant node's output type follows from its value.
        let c = self.constant_node_output(v)?;
        Some(TensorInfo {
            elem_type: c.elem_type,
            shape: Some(c.dims.iter().map(|&d| Dim::Known(d)).collect()),
        })
    }

    /// Initializers that are not graph inputs (inline, or external up to
    /// [`CONST_VALUE_MAX_BYTES`], read on demand) and `Constant` node outputs.
    fn const_value(&self, v: ValueId) -> Option<ConstTensor> {
        let value = self.value(v);
        if value.graph_input {
            return None; // overridable at run time
        }
        if let Some(t) = self.initializer_tensor(v) {
            let inline_len = t.raw_data.as_ref().map_or(0, |r| r.len() as u64);
            if !external::is_external(t) && inline_len > CONST_VALUE_MAX_BYTES {
                return None;
            }
            return tensor_to_const(t, self.base_dir(), CONST_VALUE_MAX_BYTES)
                .ok()
                .flatten();
        }
        self.constant_node_output(v)
    }

    /// [`Self::const_value`] up to `max_bytes`, inline or external; inline bytes borrowed.
    fn const_bytes(&self, v: ValueId, max_bytes: u64) -> Option<ConstBytes<'_>> {
        if self.value(v).graph_input {
            return None;
        }
        if let Some(t) = self.initializer_tensor(v) {
            let inline_len = t.raw_data.as_ref().map_or(0, |r| r.len() as u64);
            if !external::is_external(t) && inline_len > max_bytes {
                return None;
            }
            return tensor_bytes(t, self.base_dir(), max_bytes).ok().flatten();
        }
        self.constant_node_output(v)
            .filter(|t| t.raw.len() as u64 <= max_bytes)
            .map(ConstBytes::from)
    }

    fn is_constant(&self, v: ValueId) -> bool {
        let value = self.value(v);
        if value.graph_input {
            return false;
        }
        value.initializer.is_some() || value.sparse_initializer || self.is_constant_node_output(v)
    }
}

impl Graph {
    fn is_constant_node_output(&self, v: ValueId) -> bool {
        self.value(v).producer.is_some_and(|(p, _)| {
            let node = self.node(p);
            node.domain.is_empty() && node.proto.op_type.as_deref() == Some("Constant")
        })
    }

    fn constant_node_output(&self, v: ValueId) -> Option<ConstTensor> {
        if !self.is_constant_node_output(v) {
            return None;
        }
        let (p, _) = self.value(v).producer?;
        constant_node_value(&self.node(p).proto.attribute)
    }
}

/// Decodes an attribute; graphs, sparse tensors, type protos and tensors whose bytes are not
/// available in memory decode as [`AttrValue::Other`].
pub(crate) fn decode_attr(a: &AttributeProto) -> AttrValue {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let kind = a
        .r#type
        .and_then(|t| A::try_from(t).ok())
        .unwrap_or_else(|| infer_type(a));
    match kind {
        A::Float => a.f.map_or(AttrValue::Other, AttrValue::Float),
        A::Int => a.i.map_or(AttrValue::Other, AttrValue::Int),
        A::String => {
            a.s.as_deref()
                .map_or(AttrValue::Other, |s| AttrValue::String(text(s)))
        }
        A::Floats => AttrValue::Floats(a.floats.clone()),
        A::Ints => AttrValue::Ints(a.ints.clone()),
        A::Strings => AttrValue::Strings(a.strings.iter().map(|s| text(s)).collect()),
        A::Tensor => {
            a.t.as_ref()
                .and_then(|t| tensor_to_const(t, None, 0).ok().flatten())
                .map_or(AttrValue::Other, AttrValue::Tensor)
        }
        _ => AttrValue::Other,
    }
}

/// The attribute type of an untyped (IR < 2 style) attribute, from the field that is set.
fn infer_type(a: &AttributeProto) -> A {
    if a.f.is_some() {
        A::Float
    } else if a.i.is_some() {
        A::Int
    } else if a.s.is_some() {
        A::String
    } else if a.t.is_some() {
        A::Tensor
    } else if !a.floats.is_empty() {
        A::Floats
    } else if !a.ints.is_empty() {
        A::Ints
    } else if !a.strings.is_empty() {
        A::Strings
    } else {
        A::Undefined
    }
}
