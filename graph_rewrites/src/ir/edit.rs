//! Mutations: adding values, initializers and nodes, removing nodes, rewiring uses, and
//! dead-code elimination.

use super::{info, subgraph, Graph, Initializer, NewNode, Node, SUBGRAPH_USE_SLOT};
use crate::onnx_pb::{NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto};
use crate::view::{canonical_domain, NodeId, TensorInfo, ValueId};
use crate::Error;

impl Graph {
    /// A new value named after `base_name`, made unique against every value name in the graph
    /// (subgraphs included). `info` is written to `value_info` on save.
    pub fn add_value(&mut self, base_name: &str, info: Option<TensorInfo>) -> ValueId {
        let name = self.names.fresh_value(base_name);
        let v = self.new_named_value(&name);
        if let Some(i) = &info {
            self.value_info
                .push((info::value_info_from_info(&name, i), Some(v)));
        }
        let value = self.value_mut(v);
        value.info = info;
        value.created = true;
        v
    }

    /// A new initializer named after `base_name` (made unique; `t.name` is overwritten). It is
    /// kept as given; [`crate::io::save_graph`] moves large ones to a side file.
    pub fn add_initializer(&mut self, base_name: &str, mut t: TensorProto) -> ValueId {
        let name = self.names.fresh_value(base_name);
        t.name = Some(name.clone());
        let v = self.new_named_value(&name);
        let index = self.initializers.len();
        let value = self.value_mut(v);
        value.initializer = Some(index);
        value.info = Some(info::info_from_tensor(&t));
        self.initializers.push(Initializer {
            tensor: t,
            alive: true,
            created: true,
        });
        v
    }

    /// Adds a node. Its outputs must be fresh values or existing values without a producer
    /// (not graph inputs or initializers); its domain must be imported (see
    /// [`Graph::ensure_opset`]); a non-empty name must be unused.
    ///
    /// The node is placed just before the first current reader of its outputs (or last), so a
    /// rewrite that replaces a chain usually keeps the order topological; otherwise the order is
    /// marked dirty and [`Graph::topo_sort`] (or `nodes()`) re-sorts it.
    pub fn add_node(&mut self, n: NewNode) -> Result<NodeId, Error> {
        let id = NodeId(self.nodes.len() as u32);
        let domain = canonical_domain(&n.domain).to_owned();
        let what = format!("new node '{}' ({})", n.name, n.op_type);
        if n.op_type.is_empty() {
            return Err(Error::Invalid(format!("{what} has no op_type")));
        }
        if self.names.node_taken(&n.name) {
            return Err(Error::Invalid(format!("{what}: the name is already used")));
        }
        if self.opset_version(&domain).is_none() {
            return Err(Error::Invalid(format!(
                "{what}: domain '{domain}' is not imported (call ensure_opset first)"
            )));
        }
        for &v in n.inputs.iter().flatten() {
            self.check_value(v)?;
        }
        for (i, &v) in n.outputs.iter().enumerate() {
            self.check_value(v)?;
            let value = self.value(v);
            let defined = value.producer.is_some()
                || value.graph_input
                || value.initializer.is_some()
                || value.sparse_initializer
                || value.omitted;
            if defined || n.outputs[..i].contains(&v) {
                return Err(Error::Invalid(format!(
                    "{what}: output '{}' is already defined",
                    value.name
                )));
            }
        }
        let sub = subgraph::subgraph_names(&n.attrs);
        let mut uses = Vec::with_capacity(sub.outer_refs.len());
        for name in &sub.outer_refs {
            let v = self.value_by_name(name).ok_or_else(|| {
                Error::Invalid(format!("{what}: a subgraph reads unknown value '{name}'"))
            })?;
            uses.push(v);
        }
        for name in &sub.defined {
            self.names.take_value(name);
        }

        for (slot, &v) in n.inputs.iter().enumerate() {
            if let Some(v) = v {
                self.value_mut(v).consumers.push((id, slot));
            }
        }
        for &v in &uses {
            self.value_mut(v).consumers.push((id, SUBGRAPH_USE_SLOT));
        }
        for (slot, &v) in n.outputs.iter().enumerate() {
            let value = self.value_mut(v);
            value.producer = Some((id, slot));
            value.orphaned = false;
        }
        self.names.take_node(&n.name);
        let proto = NodeProto {
            name: (!n.name.is_empty()).then(|| n.name.clone()),
            op_type: Some(n.op_type),
            domain: (!n.domain.is_empty()).then_some(n.domain),
            attribute: n.attrs,
            ..NodeProto::default()
        };
        self.nodes.push(Node {
            proto,
            domain,
            inputs: n.inputs,
            outputs: n.outputs,
            subgraph_uses: uses,
            alive: true,
        });
        self.place_new_node(id);
        Ok(id)
    }

    /// Inserts `id` into the order before the first reader of its outputs and checks that its
    /// producers come earlier; marks the order dirty when they do not.
    fn place_new_node(&mut self, id: NodeId) {
        let node = self.node(id);
        let at = self
            .order
            .iter()
            .position(|&m| {
                node.outputs
                    .iter()
                    .any(|&v| self.value(v).consumers.iter().any(|&(c, _)| c == m))
            })
            .unwrap_or(self.order.len());
        let producers_before = node
            .inputs
            .iter()
            .flatten()
            .chain(&node.subgraph_uses)
            .filter_map(|&v| self.value(v).producer)
            .all(|(p, _)| self.order[..at].contains(&p));
        self.order.insert(at, id);
        self.order_dirty |= !producers_before;
    }

    /// Removes a node: its outputs lose their producer (the values stay and may become dead),
    /// its inputs lose these uses. Removing a removed node does nothing.
    pub fn remove_node(&mut self, n: NodeId) {
        if !self.is_alive(n) {
            return;
        }
        let node = self.node(n);
        let reads: Vec<ValueId> = node
            .inputs
            .iter()
            .flatten()
            .chain(&node.subgraph_uses)
            .copied()
            .collect();
        let outputs = node.outputs.clone();
        for v in reads {
            self.value_mut(v).consumers.retain(|&(c, _)| c != n);
            self.dce_candidates.insert(v);
        }
        for v in outputs {
            let value = self.value_mut(v);
            value.producer = None;
            value.orphaned = true;
        }
        self.node_mut(n).alive = false;
        self.order.retain(|&m| m != n);
    }

    /// Makes every reader of `old` read `new` instead: node input slots and graph-output slots.
    ///
    /// * A graph output keeps its name: `new` takes over `old`'s name (and `old` gets a fresh
    ///   one). When `new` cannot be renamed (it is a graph input, initializer, another graph
    ///   output, or read by name inside a subgraph), an `Identity` from `new` to a value
    ///   carrying the output's name is added instead.
    /// * Uses inside subgraphs are bound by name and stay on `old` (which therefore stays
    ///   alive), unless `old` is renamed as above, in which case they follow the name.
    pub fn replace_all_uses(&mut self, old: ValueId, new: ValueId) {
        if old == new || self.check_value(old).is_err() || self.check_value(new).is_err() {
            return;
        }
        let moved: Vec<(NodeId, usize)> = self
            .value(old)
            .consumers
            .iter()
            .copied()
            .filter(|&(_, slot)| slot != SUBGRAPH_USE_SLOT)
            .collect();
        for &(c, slot) in &moved {
            self.node_mut(c).inputs[slot] = Some(new);
        }
        self.value_mut(old)
            .consumers
            .retain(|&(_, slot)| slot == SUBGRAPH_USE_SLOT);
        self.value_mut(new).consumers.extend(moved.iter().copied());
        // A graph input that is also a graph output cannot be renamed: its output slot stays.
        if self.value(old).graph_output && !self.value(old).graph_input {
            self.move_graph_output(old, new);
        }
        self.dce_candidates.insert(old);
        if let Some((p, _)) = self.value(new).producer {
            let p_at = self.order.iter().position(|&m| m == p);
            let first_reader = self
                .order
                .iter()
                .position(|&m| moved.iter().any(|&(c, _)| c == m));
            if let (Some(p_at), Some(r)) = (p_at, first_reader) {
                self.order_dirty |= p_at > r;
            }
        }
    }

    fn move_graph_output(&mut self, old: ValueId, new: ValueId) {
        let n = self.value(new);
        // Fresh values (even ones whose producer is added later) and node outputs can take
        // the output's name; inputs, initializers, other outputs and values that subgraphs
        // read by name keep theirs.
        let read_by_subgraph = n.consumers.iter().any(|&(_, s)| s == SUBGRAPH_USE_SLOT);
        let keeps_name = n.graph_input
            || n.graph_output
            || n.initializer.is_some()
            || n.sparse_initializer
            || n.omitted
            || read_by_subgraph;
        let target = if !keeps_name {
            new
        } else {
            // `old`'s name goes to a fresh alias that an Identity fills from `new`.
            let alias = self.add_value("alias", self.value(old).info.clone());
            self.ensure_opset("", 1);
            let name = self.unique_node_name("mxfuse/output_alias");
            let node = NewNode {
                op_type: "Identity".into(),
                name,
                inputs: vec![Some(new)],
                ..NewNode::default()
            };
            // The alias is fresh and the domain imported, so add_node cannot fail here.
            let added = self.add_node(NewNode {
                outputs: vec![alias],
                ..node
            });
            if added.is_err() {
                return;
            }
            alias
        };
        self.swap_names(old, target);
        for slot in self.outputs.iter_mut().filter(|(_, v)| *v == old) {
            slot.1 = target;
        }
        self.value_mut(old).graph_output = false;
        self.value_mut(target).graph_output = true;
        // Subgraphs read by name: their uses follow the name to `target`.
        let sub: Vec<(NodeId, usize)> = self.value(old).consumers.clone();
        self.value_mut(old).consumers.clear();
        for &(c, _) in &sub {
            for u in self
                .node_mut(c)
                .subgraph_uses
                .iter_mut()
                .filter(|u| **u == old)
            {
                *u = target;
            }
        }
        self.value_mut(target).consumers.extend(sub);
    }

    /// Gives `b` the name of `a` and `a` a fresh name derived from it.
    fn swap_names(&mut self, a: ValueId, b: ValueId) {
        let a_name = self.value(a).name.clone();
        let fresh = self.names.fresh_value(&a_name);
        let b_name = std::mem::replace(&mut self.value_mut(b).name, a_name.clone());
        self.by_name.remove(&b_name);
        self.value_mut(a).name = fresh.clone();
        self.by_name.insert(a_name, b);
        self.by_name.insert(fresh, a);
        if let Some(i) = self.value(a).initializer {
            self.initializers[i].tensor.name = Some(self.value(a).name.clone());
        }
    }

    /// Removes what edits made dead: nodes whose outputs are all unread and not graph outputs,
    /// and initializers (not graph inputs) nobody reads — but only starting from values that
    /// lost a use through [`Graph::remove_node`] / [`Graph::replace_all_uses`], transitively.
    /// Dead code already present in the loaded model is left alone, so round-trips stay exact.
    /// Returns the number of nodes removed.
    pub fn dce(&mut self) -> usize {
        let mut removed = 0;
        let mut work: Vec<ValueId> = std::mem::take(&mut self.dce_candidates)
            .into_iter()
            .collect();
        while let Some(v) = work.pop() {
            let value = self.value(v);
            if !value.consumers.is_empty() || value.graph_output {
                continue;
            }
            if let Some((p, _)) = value.producer {
                let all_dead = self.node(p).outputs.iter().all(|&o| {
                    let o = self.value(o);
                    o.consumers.is_empty() && !o.graph_output
                });
                if all_dead {
                    self.remove_node(p);
                    removed += 1;
                    work.extend(std::mem::take(&mut self.dce_candidates));
                }
            } else if let (Some(i), false) = (value.initializer, value.graph_input) {
                self.initializers[i].alive = false;
                let value = self.value_mut(v);
                value.initializer = None;
                value.orphaned = true;
            }
        }
        removed
    }

    /// `base` if no node has that name, else `base_1`, `base_2`, ...
    pub fn unique_node_name(&self, base: &str) -> String {
        self.names.unique_node(base)
    }

    /// Sets `NodeProto.metadata_props[key] = value` (replacing an existing entry).
    pub fn set_node_metadata(&mut self, n: NodeId, key: &str, value: &str) {
        let Some(node) = self.nodes.get_mut(n.0 as usize) else {
            return;
        };
        let props = &mut node.proto.metadata_props;
        match props.iter_mut().find(|e| e.key.as_deref() == Some(key)) {
            Some(e) => e.value = Some(value.to_owned()),
            None => props.push(StringStringEntryProto {
                key: Some(key.to_owned()),
                value: Some(value.to_owned()),
            }),
        }
    }

    /// Imports `domain` at `version` if the model does not import it yet. An existing custom
    /// domain import is raised to `version` if lower; the default domain is never changed,
    /// because that would change the meaning of every existing ONNX node.
    pub fn ensure_opset(&mut self, domain: &str, version: i64) {
        let canonical = canonical_domain(domain);
        let imports = &mut self.shell.opset_import;
        match imports
            .iter_mut()
            .find(|o| canonical_domain(o.domain.as_deref().unwrap_or("")) == canonical)
        {
            Some(o) if !canonical.is_empty() && o.version.unwrap_or(0) < version => {
                o.version = Some(version);
            }
            Some(_) => {}
            None => imports.push(OperatorSetIdProto {
                domain: Some(canonical.to_owned()),
                version: Some(version),
            }),
        }
    }
}
