//! Emitting a replacement into the IR: the only way rules mutate a graph.
//!
//! Created nodes are named `"{anchor}/{rule}"` (uniquified) so two runs give identical names,
//! and tagged with `metadata_props["mxfuse.rule"]`.

use crate::ir::{Graph, NewNode};
use crate::onnx_pb::{attribute_proto::AttributeType, AttributeProto, TensorProto};
use crate::view::{TensorInfo, ValueId, MXFUSE_DOMAIN};

/// Metadata key recording which rule created a node.
pub const RULE_METADATA_KEY: &str = "mxfuse.rule";

/// Opset version of the `com.mxfuse` domain the emitted ops belong to.
pub const MXFUSE_OPSET: i64 = 1;

/// A rule's handle on the graph while it emits its replacement.
pub struct Emit<'a> {
    g: &'a mut Graph,
    rule: &'static str,
    anchor_name: String,
    pub(crate) created: Vec<String>,
    /// The created nodes' ids, in the same order.
    pub(crate) created_ids: Vec<crate::view::NodeId>,
}

impl<'a> Emit<'a> {
    pub(crate) fn new(g: &'a mut Graph, rule: &'static str, anchor_name: String) -> Self {
        Emit {
            g,
            rule,
            anchor_name,
            created: Vec::new(),
            created_ids: Vec::new(),
        }
    }

    /// Read access to the graph (constants, types) while emitting.
    pub fn graph(&self) -> &Graph {
        self.g
    }

    /// A new value named after `base` (uniquified).
    pub fn value(&mut self, base: &str, info: Option<TensorInfo>) -> ValueId {
        self.g.add_value(base, info)
    }

    /// A new initializer named after `base` (uniquified).
    pub fn initializer(&mut self, base: &str, t: TensorProto) -> ValueId {
        self.g.add_initializer(base, t)
    }

    /// Starts a `com.mxfuse` node.
    pub fn op(&self, op_type: &str) -> NodeSpec {
        NodeSpec {
            domain: MXFUSE_DOMAIN.into(),
            op_type: op_type.into(),
            ..Default::default()
        }
    }

    /// Adds the node; returns its name.
    pub fn add(&mut self, spec: NodeSpec) -> Result<String, String> {
        let name = self
            .g
            .unique_node_name(&format!("{}/{}", self.anchor_name, self.rule));
        if spec.domain == MXFUSE_DOMAIN {
            self.g.ensure_opset(MXFUSE_DOMAIN, MXFUSE_OPSET);
        }
        let n = self
            .g
            .add_node(NewNode {
                domain: spec.domain,
                op_type: spec.op_type,
                name: name.clone(),
                inputs: spec.inputs,
                outputs: spec.outputs,
                attrs: spec.attrs,
            })
            .map_err(|e| e.to_string())?;
        self.g.set_node_metadata(n, RULE_METADATA_KEY, self.rule);
        self.created.push(name.clone());
        self.created_ids.push(n);
        Ok(name)
    }
}

/// A node to emit, built field by field.
#[derive(Default, Debug, Clone)]
pub struct NodeSpec {
    pub domain: String,
    pub op_type: String,
    pub inputs: Vec<Option<ValueId>>,
    pub outputs: Vec<ValueId>,
    pub attrs: Vec<AttributeProto>,
}

impl NodeSpec {
    pub fn input(mut self, v: ValueId) -> Self {
        self.inputs.push(Some(v));
        self
    }

    /// An optional input (`None` is written as the empty name).
    pub fn input_opt(mut self, v: Option<ValueId>) -> Self {
        self.inputs.push(v);
        self
    }

    pub fn output(mut self, v: ValueId) -> Self {
        self.outputs.push(v);
        self
    }

    pub fn attr_int(mut self, name: &str, v: i64) -> Self {
        self.attrs.push(AttributeProto {
            name: Some(name.into()),
            r#type: Some(AttributeType::Int as i32),
            i: Some(v),
            ..Default::default()
        });
        self
    }

    pub fn attr_float(mut self, name: &str, v: f32) -> Self {
        self.attrs.push(AttributeProto {
            name: Some(name.into()),
            r#type: Some(AttributeType::Float as i32),
            f: Some(v),
            ..Default::default()
        });
        self
    }

    pub fn attr_str(mut self, name: &str, v: &str) -> Self {
        self.attrs.push(AttributeProto {
            name: Some(name.into()),
            r#type: Some(AttributeType::String as i32),
            s: Some(v.as_bytes().to_vec()),
            ..Default::default()
        });
        self
    }
}
