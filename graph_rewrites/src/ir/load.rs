//! Building a [`Graph`] from a `ModelProto`, with validation.

use std::collections::HashMap;
use std::path::Path;

use super::{info, subgraph, Graph, Initializer, Node, Value};
use crate::io::external;
use crate::onnx_pb::ModelProto;
use crate::view::{canonical_domain, NodeId, ValueId};
use crate::Error;

/// Oldest IR version accepted: IR 3 introduced opset imports, which matching depends on.
pub const MIN_IR_VERSION: i64 = 3;
/// Newest IR version accepted (what the pinned onnx.proto and onnx 1.23 know).
pub const MAX_IR_VERSION: i64 = 14;
/// Newest default-domain opset accepted.
pub const MAX_ONNX_OPSET: i64 = 28;

impl Graph {
    /// Builds the IR from a model, taking ownership (initializer bytes are moved, not copied).
    ///
    /// `base_dir` is where external data `location`s resolve (the model file's directory); when
    /// given, each external file is checked to exist and be long enough, from its metadata only.
    ///
    /// Nodes keep their file order when it is topological (ONNX requires it); a file listing
    /// them out of order loads and is re-sorted stably — the only normalisation on save.
    ///
    /// Values the file gives no type (no `value_info`) get one from forward type and shape
    /// inference (`ir/infer.rs`), visible through `GraphView::tensor_info` and never written back.
    ///
    /// Errors: missing graph, unsupported IR version or default-domain opset, node domains
    /// without an opset import, empty or duplicate names, values with two producers, inputs or
    /// outputs naming no value (dangling), malformed external data entries, missing external
    /// files, cycles.
    pub fn from_model(mut model: ModelProto, base_dir: Option<&Path>) -> Result<Graph, Error> {
        check_versions(&model)?;
        let mut gp = model
            .graph
            .take()
            .ok_or_else(|| Error::Invalid("model has no graph".into()))?;
        let node_protos = std::mem::take(&mut gp.node);
        let inits = std::mem::take(&mut gp.initializer);
        let inputs = std::mem::take(&mut gp.input);
        let outputs = std::mem::take(&mut gp.output);
        let value_info = std::mem::take(&mut gp.value_info);
        let sparse_names: Vec<String> = gp
            .sparse_initializer
            .iter()
            .map(|s| {
                s.values
                    .as_ref()
                    .and_then(|t| t.name.clone())
                    .unwrap_or_default()
            })
            .collect();
        model.graph = Some(gp);
        let mut g = Graph {
            shell: model,
            base_dir: base_dir.map(Path::to_path_buf),
            nodes: Vec::with_capacity(node_protos.len()),
            order: Vec::with_capacity(node_protos.len()),
            order_dirty: false,
            values: Vec::new(),
            by_name: HashMap::new(),
            names: Default::default(),
            inputs: Vec::with_capacity(inputs.len()),
            outputs: Vec::with_capacity(outputs.len()),
            value_info: Vec::with_capacity(value_info.len()),
            initializers: Vec::with_capacity(inits.len()),
            dce_candidates: Default::default(),
        };

        for vi in inputs {
            let name = required_name(vi.name.as_deref(), "graph input")?;
            if g.by_name.contains_key(name) {
                return Err(Error::Invalid(format!(
                    "graph input '{name}' is listed twice"
                )));
            }
            let v = g.new_named_value(name);
            let value = g.value_mut(v);
            value.graph_input = true;
            value.info = info::info_from_value_info(&vi);
            g.inputs.push((vi, v));
        }

        for tensor in inits {
            let name = required_name(tensor.name.as_deref(), "initializer")?;
            if let (Some(dir), true) = (base_dir, external::is_external(&tensor)) {
                external::check_external(&tensor, dir)?;
            } else if external::is_external(&tensor) {
                external::external_ref(&tensor)?;
            }
            // An initializer may share its name with a graph input (IR < 4 style, or an
            // overridable default); anything else is a second definition.
            let v = match g.by_name.get(name) {
                Some(&v) if g.value(v).graph_input && g.value(v).initializer.is_none() => v,
                Some(_) => {
                    return Err(Error::Invalid(format!(
                        "initializer '{name}' is defined twice"
                    )))
                }
                None => g.new_named_value(name),
            };
            let index = g.initializers.len();
            let value = g.value_mut(v);
            value.initializer = Some(index);
            if value.info.is_none() {
                value.info = Some(info::info_from_tensor(&tensor));
            }
            g.initializers.push(Initializer {
                tensor,
                alive: true,
                created: false,
            });
        }

        for name in &sparse_names {
            let name = required_name(Some(name), "sparse initializer")?;
            if g.by_name.contains_key(name) && !g.value(g.by_name[name]).graph_input {
                return Err(Error::Invalid(format!(
                    "sparse initializer '{name}' is defined twice"
                )));
            }
            let v = match g.by_name.get(name) {
                Some(&v) => v,
                None => g.new_named_value(name),
            };
            g.value_mut(v).sparse_initializer = true;
        }

        g.add_loaded_nodes(node_protos)?;

        for vi in outputs {
            let name = required_name(vi.name.as_deref(), "graph output")?;
            let v = g.by_name.get(name).copied().ok_or_else(|| {
                Error::Invalid(format!(
                    "graph output '{name}' is not produced by any node, graph input or initializer"
                ))
            })?;
            let value = g.value_mut(v);
            value.graph_output = true;
            if value.info.is_none() {
                value.info = info::info_from_value_info(&vi);
            }
            g.outputs.push((vi, v));
        }

        for vi in value_info {
            let v = vi.name.as_deref().and_then(|n| g.by_name.get(n).copied());
            if let Some(v) = v {
                // First informative source wins: graph input, initializer, output, value_info.
                if g.value(v).info.is_none() {
                    g.value_mut(v).info = info::info_from_value_info(&vi);
                }
            }
            g.value_info.push((vi, v));
        }

        g.topo_sort()?;
        // Types of values the file does not describe (see `infer`): in memory only.
        g.infer_types();
        Ok(g)
    }

    /// Adds the loaded nodes: outputs first (so files listing nodes out of order still load),
    /// then inputs and subgraph references, which must all resolve.
    fn add_loaded_nodes(&mut self, protos: Vec<crate::onnx_pb::NodeProto>) -> Result<(), Error> {
        let mut pending_inputs = Vec::with_capacity(protos.len());
        for mut proto in protos {
            let id = NodeId(self.nodes.len() as u32);
            let op = proto.op_type.clone().unwrap_or_default();
            if op.is_empty() {
                return Err(Error::Invalid(format!(
                    "node '{}' has no op_type",
                    proto.name.as_deref().unwrap_or("")
                )));
            }
            let domain = canonical_domain(proto.domain.as_deref().unwrap_or("")).to_owned();
            if self.opset_version(&domain).is_none() {
                return Err(Error::Invalid(format!(
                    "node '{}' ({op}) uses domain '{domain}', which the model does not import",
                    proto.name.as_deref().unwrap_or("")
                )));
            }
            let mut outputs = Vec::with_capacity(proto.output.len());
            for (slot, name) in std::mem::take(&mut proto.output).into_iter().enumerate() {
                let v = if name.is_empty() {
                    self.new_omitted_value()
                } else if self.by_name.contains_key(&name) {
                    return Err(Error::Invalid(format!(
                        "value '{name}' has two definitions (node '{}' ({op}) redefines it)",
                        proto.name.as_deref().unwrap_or("")
                    )));
                } else {
                    self.new_named_value(&name)
                };
                self.value_mut(v).producer = Some((id, slot));
                outputs.push(v);
            }
            let sub = subgraph::subgraph_names(&proto.attribute);
            for name in &sub.defined {
                self.names.take_value(name);
            }
            self.names.take_node(proto.name.as_deref().unwrap_or(""));
            pending_inputs.push((std::mem::take(&mut proto.input), sub.outer_refs));
            self.nodes.push(Node {
                proto,
                domain,
                inputs: Vec::new(),
                outputs,
                subgraph_uses: Vec::new(),
                alive: true,
            });
            self.order.push(id);
        }
        for (i, (input_names, outer_refs)) in pending_inputs.into_iter().enumerate() {
            let id = NodeId(i as u32);
            let mut inputs = Vec::with_capacity(input_names.len());
            for (slot, name) in input_names.iter().enumerate() {
                if name.is_empty() {
                    inputs.push(None);
                    continue;
                }
                let v = self.resolve(name, id)?;
                self.value_mut(v).consumers.push((id, slot));
                inputs.push(Some(v));
            }
            let mut uses = Vec::with_capacity(outer_refs.len());
            for name in &outer_refs {
                let v = self.resolve(name, id)?;
                self.value_mut(v)
                    .consumers
                    .push((id, super::SUBGRAPH_USE_SLOT));
                uses.push(v);
            }
            let node = self.node_mut(id);
            node.inputs = inputs;
            node.subgraph_uses = uses;
        }
        Ok(())
    }

    fn resolve(&self, name: &str, reader: NodeId) -> Result<ValueId, Error> {
        self.by_name.get(name).copied().ok_or_else(|| {
            let n = &self.node(reader).proto;
            Error::Invalid(format!(
                "node '{}' ({}) reads '{name}', which no node, graph input or initializer produces",
                n.name.as_deref().unwrap_or(""),
                n.op_type.as_deref().unwrap_or("")
            ))
        })
    }

    /// Registers a value under a name known to be free.
    pub(super) fn new_named_value(&mut self, name: &str) -> ValueId {
        let v = ValueId(self.values.len() as u32);
        self.values.push(Value {
            name: name.to_owned(),
            ..Value::default()
        });
        self.by_name.insert(name.to_owned(), v);
        self.names.take_value(name);
        v
    }

    fn new_omitted_value(&mut self) -> ValueId {
        let v = ValueId(self.values.len() as u32);
        self.values.push(Value {
            omitted: true,
            ..Value::default()
        });
        v
    }

    /// The imported version of a canonical domain.
    pub(super) fn opset_version(&self, domain: &str) -> Option<i64> {
        self.shell
            .opset_import
            .iter()
            .find(|o| canonical_domain(o.domain.as_deref().unwrap_or("")) == domain)
            .map(|o| o.version.unwrap_or(0))
    }
}

fn required_name<'a>(name: Option<&'a str>, what: &str) -> Result<&'a str, Error> {
    match name {
        Some(n) if !n.is_empty() => Ok(n),
        _ => Err(Error::Invalid(format!("a {what} has no name"))),
    }
}

fn check_versions(model: &ModelProto) -> Result<(), Error> {
    let ir = model
        .ir_version
        .ok_or_else(|| Error::Invalid("model has no ir_version".into()))?;
    if !(MIN_IR_VERSION..=MAX_IR_VERSION).contains(&ir) {
        return Err(Error::Unsupported(format!(
            "IR version {ir} (supported: {MIN_IR_VERSION}..={MAX_IR_VERSION})"
        )));
    }
    for o in &model.opset_import {
        let domain = canonical_domain(o.domain.as_deref().unwrap_or(""));
        let version = o.version.unwrap_or(0);
        if domain.is_empty() && !(1..=MAX_ONNX_OPSET).contains(&version) {
            return Err(Error::Unsupported(format!(
                "default-domain opset {version} (supported: 1..={MAX_ONNX_OPSET})"
            )));
        }
        if version < 1 {
            return Err(Error::Invalid(format!(
                "opset import for domain '{domain}' has version {version}"
            )));
        }
    }
    Ok(())
}
