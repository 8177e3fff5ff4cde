//! [`GraphView`] over ONNX Runtime's `OrtGraph`, so the plugin EP runs the very matcher the
//! offline CLI runs.
//!
//! The structure (nodes, value names, edges, opsets, tensor infos) is snapshotted at construction;
//! attributes and constant bytes are read through the ORT API on demand. The view borrows the
//! `OrtGraph`: it must not outlive the `GetCapability` / `Compile` call that handed out the graph.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ptr;

use ort_sys::{OrtGraph, OrtNode, OrtValue, OrtValueInfo};

use crate::error::Result;
use crate::ffi::api::{api, check, owned_str};
use crate::ort_attrs::{borrow_tensor, copy_tensor, node_attr, node_attr_names, MAX_CONST_BYTES};
use crate::ort_types::tensor_info_of_type;
use graph_rewrites::ir::SUBGRAPH_USE_SLOT;
use graph_rewrites::view::{
    canonical_domain, AttrValue, ConstBytes, ConstTensor, GraphView, NodeId, TensorInfo, ValueId,
};

struct NodeRec {
    ptr: *const OrtNode,
    op_type: String,
    domain: String,
    name: String,
    inputs: Vec<Option<ValueId>>,
    outputs: Vec<ValueId>,
    /// Graph-valued attributes (`If` branches, `Loop` / `Scan` bodies): their names and ORT's
    /// graphs, which `Node_GetSubgraphs` hands out (`attr` cannot read them).
    subgraphs: Vec<(String, *const OrtGraph)>,
    /// The values those subgraphs read from this graph's scope.
    implicit: Vec<ValueId>,
}

struct ValueRec {
    ptr: *const OrtValueInfo,
    name: String,
    producer: Option<(NodeId, usize)>,
    consumers: Vec<(NodeId, usize)>,
    graph_input: bool,
    graph_output: bool,
    constant: bool,
    info: Option<TensorInfo>,
}

/// A snapshot of an `OrtGraph`'s structure.
pub struct OrtGraphView {
    nodes: Vec<NodeRec>,
    order: Vec<NodeId>,
    values: Vec<ValueRec>,
    by_name: HashMap<String, ValueId>,
    opsets: HashMap<String, i64>,
    /// The graph's (non-constant) inputs and its outputs, in ORT's order: a subgraph's formal
    /// parameters are positional.
    input_order: Vec<ValueId>,
    output_order: Vec<ValueId>,
}

/// Calls a "count, then fill an array" pair of ORT getters.
macro_rules! ort_array {
    ($count:expr, $fill:expr, $ty:ty) => {{
        let mut n = 0usize;
        check($count(&mut n))?;
        let mut items: Vec<$ty> = vec![ptr::null(); n];
        check($fill(items.as_mut_ptr(), n))?;
        items
    }};
}

impl OrtGraphView {
    /// Snapshots `graph`.
    ///
    /// # Safety
    /// `graph` must be a valid `OrtGraph*` for as long as the view is used.
    pub unsafe fn new(graph: *const OrtGraph) -> Result<Self> {
        let ort = api()?.ort;
        let mut view = OrtGraphView {
            nodes: Vec::new(),
            order: Vec::new(),
            values: Vec::new(),
            by_name: HashMap::new(),
            opsets: HashMap::new(),
            input_order: Vec::new(),
            output_order: Vec::new(),
        };

        let mut n_opsets = 0usize;
        check((ort.Graph_GetNumOperatorSets)(graph, &mut n_opsets))?;
        let mut domains = vec![ptr::null(); n_opsets];
        let mut versions = vec![0i64; n_opsets];
        check((ort.Graph_GetOperatorSets)(
            graph,
            domains.as_mut_ptr(),
            versions.as_mut_ptr(),
            n_opsets,
        ))?;
        for (d, v) in domains.iter().zip(versions) {
            view.opsets
                .insert(canonical_domain(&owned_str(*d)).to_string(), v);
        }

        let graph_inputs = ort_array!(
            |n| (ort.Graph_GetNumInputs)(graph, n),
            |p, n| (ort.Graph_GetInputs)(graph, p, n),
            *const OrtValueInfo
        );
        for vi in graph_inputs {
            let v = view.intern(vi)?;
            let input = !view.values[v.0 as usize].constant;
            view.values[v.0 as usize].graph_input = input;
            if input {
                view.input_order.push(v);
            }
        }
        let graph_outputs = ort_array!(
            |n| (ort.Graph_GetNumOutputs)(graph, n),
            |p, n| (ort.Graph_GetOutputs)(graph, p, n),
            *const OrtValueInfo
        );
        for vi in graph_outputs {
            let v = view.intern(vi)?;
            view.values[v.0 as usize].graph_output = true;
            view.output_order.push(v);
        }

        // Graph_GetNodes returns a stable topological order, which is what GraphView promises.
        let nodes = ort_array!(
            |n| (ort.Graph_GetNumNodes)(graph, n),
            |p, n| (ort.Graph_GetNodes)(graph, p, n),
            *const OrtNode
        );
        for node in nodes {
            view.add_node(node)?;
        }
        Ok(view)
    }

    unsafe fn add_node(&mut self, node: *const OrtNode) -> Result<()> {
        let ort = api()?.ort;
        let id = NodeId(self.nodes.len() as u32);
        let mut s = ptr::null();
        check((ort.Node_GetOperatorType)(node, &mut s))?;
        let op_type = owned_str(s);
        check((ort.Node_GetDomain)(node, &mut s))?;
        let domain = canonical_domain(&owned_str(s)).to_string();
        check((ort.Node_GetName)(node, &mut s))?;
        let name = owned_str(s);

        let raw_inputs = ort_array!(
            |n| (ort.Node_GetNumInputs)(node, n),
            |p, n| (ort.Node_GetInputs)(node, p, n),
            *const OrtValueInfo
        );
        let mut inputs = Vec::with_capacity(raw_inputs.len());
        for (slot, vi) in raw_inputs.into_iter().enumerate() {
            // A NULL value info marks an omitted optional input.
            if vi.is_null() {
                inputs.push(None);
                continue;
            }
            let v = self.intern(vi)?;
            self.values[v.0 as usize].consumers.push((id, slot));
            inputs.push(Some(v));
        }
        // Values a control-flow node's subgraphs read count as uses by the node itself, at the
        // IR's subgraph-use slot.
        let implicit = ort_array!(
            |n| (ort.Node_GetNumImplicitInputs)(node, n),
            |p, n| (ort.Node_GetImplicitInputs)(node, p, n),
            *const OrtValueInfo
        );
        let mut implicit_values = Vec::with_capacity(implicit.len());
        for vi in implicit {
            if !vi.is_null() {
                let v = self.intern(vi)?;
                self.values[v.0 as usize]
                    .consumers
                    .push((id, SUBGRAPH_USE_SLOT));
                implicit_values.push(v);
            }
        }

        let raw_outputs = ort_array!(
            |n| (ort.Node_GetNumOutputs)(node, n),
            |p, n| (ort.Node_GetOutputs)(node, p, n),
            *const OrtValueInfo
        );
        let mut outputs = Vec::with_capacity(raw_outputs.len());
        for (slot, vi) in raw_outputs.into_iter().enumerate() {
            // An omitted optional output keeps its position as a nameless value, as in the IR.
            let v = if vi.is_null() {
                self.omitted_value()
            } else {
                self.intern(vi)?
            };
            self.values[v.0 as usize].producer = Some((id, slot));
            outputs.push(v);
        }
        let mut n_sub = 0usize;
        check((ort.Node_GetNumSubgraphs)(node, &mut n_sub))?;
        let mut subgraphs = Vec::with_capacity(n_sub);
        if n_sub > 0 {
            let mut graphs = vec![ptr::null(); n_sub];
            let mut names = vec![ptr::null(); n_sub];
            check((ort.Node_GetSubgraphs)(
                node,
                graphs.as_mut_ptr(),
                n_sub,
                names.as_mut_ptr(),
            ))?;
            for (g, a) in graphs.into_iter().zip(names) {
                if !g.is_null() {
                    subgraphs.push((owned_str(a), g));
                }
            }
        }
        self.nodes.push(NodeRec {
            ptr: node,
            op_type,
            domain,
            name,
            inputs,
            outputs,
            subgraphs,
            implicit: implicit_values,
        });
        self.order.push(id);
        Ok(())
    }

    /// The id of the value `vi` names, recording it on first sight.
    unsafe fn intern(&mut self, vi: *const OrtValueInfo) -> Result<ValueId> {
        let ort = api()?.ort;
        let mut s = ptr::null();
        check((ort.GetValueInfoName)(vi, &mut s))?;
        let name = owned_str(s);
        if let Some(&v) = self.by_name.get(&name) {
            return Ok(v);
        }
        let mut constant = false;
        check((ort.ValueInfo_IsConstantInitializer)(vi, &mut constant))?;
        let mut type_info = ptr::null();
        check((ort.GetValueInfoTypeInfo)(vi, &mut type_info))?;
        let info = tensor_info_of_type(type_info)?;
        let v = ValueId(self.values.len() as u32);
        self.values.push(ValueRec {
            ptr: vi,
            name: name.clone(),
            producer: None,
            consumers: Vec::new(),
            graph_input: false,
            graph_output: false,
            constant,
            info,
        });
        self.by_name.insert(name, v);
        Ok(v)
    }

    /// A fresh nameless value standing for an omitted optional output.
    fn omitted_value(&mut self) -> ValueId {
        let v = ValueId(self.values.len() as u32);
        self.values.push(ValueRec {
            ptr: ptr::null(),
            name: String::new(),
            producer: None,
            consumers: Vec::new(),
            graph_input: false,
            graph_output: false,
            constant: false,
            info: None,
        });
        v
    }

    /// Node `n`'s graph-valued attributes: (attribute name, ORT's graph), valid as long as
    /// this view's graph.
    pub fn subgraphs(&self, n: NodeId) -> &[(String, *const OrtGraph)] {
        &self.nodes[n.0 as usize].subgraphs
    }

    /// The values node `n`'s subgraphs read from this graph's scope (ORT's implicit inputs).
    pub fn implicit_inputs(&self, n: NodeId) -> &[ValueId] {
        &self.nodes[n.0 as usize].implicit
    }

    /// The graph's non-constant inputs in ORT's order.
    pub fn graph_inputs(&self) -> &[ValueId] {
        &self.input_order
    }

    /// The graph's outputs in ORT's order.
    pub fn graph_outputs(&self) -> &[ValueId] {
        &self.output_order
    }

    /// The `OrtNode*` behind `n`, for `EpGraphSupportInfo_AddNodesToFuse`.
    pub fn ort_node(&self, n: NodeId) -> *const OrtNode {
        self.nodes[n.0 as usize].ptr
    }

    /// Replaces the types of the values named in `infos` (`crate::shapes`: dims ORT's inference
    /// left unknown, filled in); other names are ignored.
    pub fn refine(&mut self, infos: &HashMap<String, TensorInfo>) {
        for (name, info) in infos {
            if let Some(&v) = self.by_name.get(name) {
                self.values[v.0 as usize].info = Some(info.clone());
            }
        }
    }

    /// The id of the value named `name`, if the graph has one.
    pub fn value_by_name(&self, name: &str) -> Option<ValueId> {
        self.by_name.get(name).copied()
    }

    /// Bytes of constant `v` regardless of size (for kernels that need their weights).
    pub fn const_value_unbounded(&self, v: ValueId) -> Result<Option<ConstTensor>> {
        self.read_const(v, usize::MAX)
    }

    fn read_const(&self, v: ValueId, max_bytes: usize) -> Result<Option<ConstTensor>> {
        match self.initializer_value(v)? {
            // SAFETY: ORT owns the value while the graph (which this view borrows) lives.
            Some(value) => unsafe { copy_tensor(value, max_bytes) },
            None => Ok(None),
        }
    }

    /// ORT's initializer value of constant `v` (`None` if it is not one).
    fn initializer_value(&self, v: ValueId) -> Result<Option<*const OrtValue>> {
        let rec = &self.values[v.0 as usize];
        if !rec.constant {
            return Ok(None);
        }
        let ort = api()?.ort;
        let mut value: *const OrtValue = ptr::null();
        // SAFETY: `rec.ptr` comes from the graph this view borrows; ORT owns the returned value.
        unsafe { check((ort.ValueInfo_GetInitializerValue)(rec.ptr, &mut value))? };
        Ok((!value.is_null()).then_some(value))
    }
}

impl GraphView for OrtGraphView {
    fn nodes(&self) -> Cow<'_, [NodeId]> {
        Cow::Borrowed(&self.order)
    }
    fn op_type(&self, n: NodeId) -> &str {
        &self.nodes[n.0 as usize].op_type
    }
    fn domain(&self, n: NodeId) -> &str {
        &self.nodes[n.0 as usize].domain
    }
    fn node_name(&self, n: NodeId) -> &str {
        &self.nodes[n.0 as usize].name
    }
    fn inputs(&self, n: NodeId) -> &[Option<ValueId>] {
        &self.nodes[n.0 as usize].inputs
    }
    fn outputs(&self, n: NodeId) -> &[ValueId] {
        &self.nodes[n.0 as usize].outputs
    }
    fn attr(&self, n: NodeId, name: &str) -> Option<AttrValue> {
        // SAFETY: the node pointer is valid while the view is (see module docs). A read error
        // reads as "absent": the rule then refuses the site with a reason.
        unsafe { node_attr(self.nodes[n.0 as usize].ptr, name).ok().flatten() }
    }
    fn attr_names(&self, n: NodeId) -> Vec<String> {
        // SAFETY: as in `attr`.
        unsafe { node_attr_names(self.nodes[n.0 as usize].ptr).unwrap_or_default() }
    }
    fn opset(&self, domain: &str) -> Option<i64> {
        self.opsets.get(canonical_domain(domain)).copied()
    }
    fn value_name(&self, v: ValueId) -> &str {
        &self.values[v.0 as usize].name
    }
    fn producer(&self, v: ValueId) -> Option<(NodeId, usize)> {
        self.values[v.0 as usize].producer
    }
    fn consumers(&self, v: ValueId) -> Cow<'_, [(NodeId, usize)]> {
        Cow::Borrowed(&self.values[v.0 as usize].consumers)
    }
    fn is_graph_output(&self, v: ValueId) -> bool {
        self.values[v.0 as usize].graph_output
    }
    fn is_graph_input(&self, v: ValueId) -> bool {
        self.values[v.0 as usize].graph_input
    }
    fn tensor_info(&self, v: ValueId) -> Option<TensorInfo> {
        self.values[v.0 as usize].info.clone()
    }
    fn const_value(&self, v: ValueId) -> Option<ConstTensor> {
        self.read_const(v, MAX_CONST_BYTES).ok().flatten()
    }
    /// ORT's own bytes of the initializer, not copied (a Quark weight of a gigabyte is checked
    /// in place).
    fn const_bytes(&self, v: ValueId, max_bytes: u64) -> Option<ConstBytes<'_>> {
        // SAFETY: the value belongs to the graph this view borrows; ORT keeps it (and its
        // buffer) alive as long as the graph, so as long as `&self`.
        let value = self.initializer_value(v).ok().flatten()?;
        let max_bytes = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        unsafe { borrow_tensor(value, max_bytes) }.ok().flatten()
    }
    fn is_constant(&self, v: ValueId) -> bool {
        self.values[v.0 as usize].constant
    }
}
