//! The arena IR: nodes and values in dense arenas with use-def lists, a stable topological
//! order, and dead-code elimination that only touches what rewrites made dead.
//!
//! A [`Graph`] owns the model it was loaded from. Everything the rewriter does not model (opset
//! imports, functions, metadata, doc strings, sparse initializers, subgraphs, unknown
//! `value_info` entries, initializer bytes) is kept as loaded and written back verbatim by
//! [`Graph::to_model`], so a model with nothing to fuse round-trips exactly.
//!
//! Ids: a [`NodeId`] / [`ValueId`] indexes the arenas and stays valid for the graph's lifetime
//! (removed nodes become tombstones). One [`ValueId`] exists per distinct value name, plus one
//! anonymous value per omitted optional output (`""` in ONNX).
//!
//! Subgraphs (`If`/`Loop`/`Scan` bodies) are kept verbatim. Every outer value they reference
//! counts as a use by the control-flow node, at slot [`SUBGRAPH_USE_SLOT`], so nothing a
//! subgraph needs is fused away or removed.

mod edit;
mod infer;
mod info;
mod load;
pub mod merge_quant_chains;
mod names;
mod save;
mod subgraph;
mod tensor;
mod topo;
mod view_impl;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::onnx_pb::{self, ModelProto, NodeProto, TensorProto, ValueInfoProto};
pub use crate::view::{ConstTensor, NodeId, TensorInfo, ValueId};
use crate::Error;
pub use tensor::{elem_size_bits, tensor_to_const};

/// The input slot reported by `consumers()` for a use inside a subgraph attribute of the
/// consuming node (such uses have no input slot of their own).
pub const SUBGRAPH_USE_SLOT: usize = usize::MAX;

/// The largest external tensor [`crate::view::GraphView::const_value`] reads (64 MiB); larger ones
/// report `None` and rules must treat them as "constant, bytes not available".
pub const CONST_VALUE_MAX_BYTES: u64 = 64 << 20;

/// The largest Quark fake-quantized float weight the rules read to quantize it and check it
/// against Quark's kernel (`GraphView::const_bytes`), unless setting `quark_weight_max_mib` says
/// otherwise: 4 GiB, a real MoE layer's stacked experts (`[32, 1536, 6144]` f32 is 1.2 GB). The
/// read is worth it: the stored MXFP8 weight is a quarter of an f32 one, and the check runs at
/// ~1 GB/s of f32 on two cores (BENCHMARKS.md "Rewrite", h-quarkbig), about the speed of
/// reading the bytes. Other constants keep [`CONST_VALUE_MAX_BYTES`].
pub const QUARK_WEIGHT_MAX_BYTES: u64 = 4 << 30;

/// A node to add with [`Graph::add_node`].
#[derive(Clone, Debug, Default)]
pub struct NewNode {
    pub domain: String,
    pub op_type: String,
    /// Must be empty or not yet used by another node (see [`Graph::unique_node_name`]).
    pub name: String,
    /// `None` marks an omitted optional input.
    pub inputs: Vec<Option<ValueId>>,
    /// Fresh values from [`Graph::add_value`] or existing values that have no producer.
    pub outputs: Vec<ValueId>,
    pub attrs: Vec<onnx_pb::AttributeProto>,
}

/// A model's main graph in arena form. See the module docs.
#[derive(Clone, Debug)]
pub struct Graph {
    /// The loaded model with `graph.{node, initializer, input, output, value_info}` moved out
    /// into the arenas below; everything else stays here verbatim.
    shell: ModelProto,
    base_dir: Option<PathBuf>,
    nodes: Vec<Node>,
    /// Live nodes in the current order (topological unless `order_dirty`).
    order: Vec<NodeId>,
    order_dirty: bool,
    values: Vec<Value>,
    by_name: HashMap<String, ValueId>,
    names: names::NameTable,
    inputs: Vec<(ValueInfoProto, ValueId)>,
    outputs: Vec<(ValueInfoProto, ValueId)>,
    /// `value_info` entries in file order; `None` for entries naming no value of the graph
    /// (kept verbatim).
    value_info: Vec<(ValueInfoProto, Option<ValueId>)>,
    initializers: Vec<Initializer>,
    /// Values that lost a use or their producer through an edit: the only places DCE looks.
    dce_candidates: BTreeSet<ValueId>,
}

#[derive(Clone, Debug)]
struct Node {
    /// The node as loaded, with `input` and `output` emptied (they live in the id lists).
    proto: NodeProto,
    /// Canonical domain ("" for ONNX).
    domain: String,
    inputs: Vec<Option<ValueId>>,
    outputs: Vec<ValueId>,
    /// Outer values referenced inside this node's subgraph attributes.
    subgraph_uses: Vec<ValueId>,
    alive: bool,
}

#[derive(Clone, Debug, Default)]
struct Value {
    name: String,
    producer: Option<(NodeId, usize)>,
    consumers: Vec<(NodeId, usize)>,
    /// Index into `Graph::initializers`.
    initializer: Option<usize>,
    sparse_initializer: bool,
    graph_input: bool,
    graph_output: bool,
    /// An omitted optional output: written as "" and never looked up by name.
    omitted: bool,
    /// Lost its producer through `remove_node`: its `value_info` entry is not written.
    orphaned: bool,
    /// Made by `add_value`: its `value_info` entry is written only once something defines it.
    created: bool,
    info: Option<TensorInfo>,
}

#[derive(Clone, Debug)]
struct Initializer {
    tensor: TensorProto,
    alive: bool,
    /// Added by [`Graph::add_initializer`] (not loaded).
    created: bool,
}

impl Graph {
    /// The directory external data locations resolve against.
    pub fn base_dir(&self) -> Option<&Path> {
        self.base_dir.as_deref()
    }

    /// The value with this name, if any.
    pub fn value_by_name(&self, name: &str) -> Option<ValueId> {
        self.by_name.get(name).copied()
    }

    /// The node with this name, if any (first in the current order when names repeat).
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.order
            .iter()
            .copied()
            .find(|&n| self.node(n).proto.name.as_deref() == Some(name))
    }

    /// Number of live nodes.
    pub fn node_count(&self) -> usize {
        self.order.len()
    }

    /// The node's attributes as loaded (or as given to [`Graph::add_node`]).
    pub fn node_attributes(&self, n: NodeId) -> &[onnx_pb::AttributeProto] {
        &self.node(n).proto.attribute
    }

    /// The opset imports of the model, as loaded plus any [`Graph::ensure_opset`] additions.
    pub fn opset_imports(&self) -> &[onnx_pb::OperatorSetIdProto] {
        &self.shell.opset_import
    }

    /// Whether the node is still part of the graph (not removed).
    pub fn is_alive(&self, n: NodeId) -> bool {
        self.nodes.get(n.0 as usize).is_some_and(|x| x.alive)
    }

    /// The live initializers in file order (then the ones rules added).
    pub fn initializers(&self) -> impl Iterator<Item = &TensorProto> {
        self.initializers
            .iter()
            .filter(|i| i.alive)
            .map(|i| &i.tensor)
    }

    /// Names of the live initializers added by [`Graph::add_initializer`], in creation order.
    pub fn created_initializers(&self) -> Vec<String> {
        self.initializers
            .iter()
            .filter(|i| i.alive && i.created)
            .filter_map(|i| i.tensor.name.clone())
            .collect()
    }

    /// The initializer proto as loaded (external data not read), if `v` is an initializer.
    pub fn initializer_tensor(&self, v: ValueId) -> Option<&TensorProto> {
        let i = self.value(v).initializer?;
        Some(&self.initializers[i].tensor)
    }

    /// The initializer's value, reading external data on demand from `base_dir/location`.
    /// `Ok(None)` when `v` is not an initializer or its bytes cannot be represented as raw
    /// little-endian data (strings, 4-bit types in typed fields).
    pub fn read_initializer(&self, v: ValueId) -> Result<Option<ConstTensor>, Error> {
        match self.initializer_tensor(v) {
            Some(t) => tensor_to_const(t, self.base_dir(), u64::MAX),
            None => Ok(None),
        }
    }

    fn node(&self, n: NodeId) -> &Node {
        &self.nodes[n.0 as usize]
    }

    fn value(&self, v: ValueId) -> &Value {
        &self.values[v.0 as usize]
    }

    fn value_mut(&mut self, v: ValueId) -> &mut Value {
        &mut self.values[v.0 as usize]
    }

    fn node_mut(&mut self, n: NodeId) -> &mut Node {
        &mut self.nodes[n.0 as usize]
    }

    /// Checks an id handed in by a caller, so a stale or foreign id becomes an error.
    fn check_value(&self, v: ValueId) -> Result<(), Error> {
        if (v.0 as usize) < self.values.len() {
            Ok(())
        } else {
            Err(Error::Invalid(format!("value id {} does not exist", v.0)))
        }
    }
}
