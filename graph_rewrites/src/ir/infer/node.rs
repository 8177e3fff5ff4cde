//! Read access to one node for the inference rules: input types, attributes, and the values of
//! small integer inputs (constants, or shape computations tracked by [`super::values`]).

use std::collections::HashMap;

use crate::ir::Graph;
use crate::onnx_pb::AttributeProto;
use crate::pattern::predicates::{values_f64, values_i64};
use crate::view::{AttrValue, ConstTensor, Dim, GraphView, NodeId, TensorInfo, ValueId};

/// Constant inputs read for shapes, axes, splits and slice bounds have at most this many
/// elements; checking the declared size first keeps inference from reading a large (possibly
/// external) weight that happens to sit in such a slot of a malformed model.
const MAX_SHAPE_CONST_ELEMS: i64 = 1024;

/// Element values of small integer tensors computed from shapes (`Shape → Gather → Concat`),
/// one [`Dim`] per element: `Known` for a number (negative ones included), `Symbolic` for a
/// named dim, `Unknown` otherwise.
pub(super) type ShapeValues = HashMap<ValueId, Vec<Dim>>;

/// One node of the graph being inferred.
pub(super) struct Node<'a> {
    pub g: &'a Graph,
    pub n: NodeId,
    pub values: &'a ShapeValues,
}

/// Axes, split sizes or similar lists that an op takes as an attribute (older opsets) or as an
/// input (newer ones).
pub(super) enum IntList {
    Absent,
    Given(Vec<i64>),
    /// Given as an input whose value is not known.
    NotConstant,
}

impl<'a> Node<'a> {
    pub fn input(&self, slot: usize) -> Option<ValueId> {
        self.g.inputs(self.n).get(slot).copied().flatten()
    }

    pub fn input_count(&self) -> usize {
        self.g.inputs(self.n).len()
    }

    pub fn output_count(&self) -> usize {
        self.g.outputs(self.n).len()
    }

    pub fn info(&self, slot: usize) -> TensorInfo {
        self.input(slot)
            .and_then(|v| self.g.tensor_info(v))
            .unwrap_or_default()
    }

    pub fn elem(&self, slot: usize) -> i32 {
        self.info(slot).elem_type
    }

    pub fn shape(&self, slot: usize) -> Option<Vec<Dim>> {
        self.info(slot).shape
    }

    /// The first known element type among `slots` (inputs that must share one type).
    pub fn first_elem(&self, slots: impl IntoIterator<Item = usize>) -> i32 {
        slots
            .into_iter()
            .map(|s| self.elem(s))
            .find(|&t| t != 0)
            .unwrap_or(0)
    }

    /// The version of the node's domain the model imports.
    pub fn opset(&self) -> i64 {
        self.g.opset(self.g.domain(self.n)).unwrap_or(0)
    }

    /// An int attribute, `default` when absent; `None` when present with another type.
    pub fn int(&self, name: &str, default: i64) -> Option<i64> {
        match self.g.attr(self.n, name) {
            None => Some(default),
            Some(AttrValue::Int(v)) => Some(v),
            Some(_) => None,
        }
    }

    pub fn string(&self, name: &str, default: &str) -> Option<String> {
        match self.g.attr(self.n, name) {
            None => Some(default.to_owned()),
            Some(AttrValue::String(s)) => Some(s),
            Some(_) => None,
        }
    }

    pub fn ints(&self, name: &str) -> Option<Vec<i64>> {
        match self.g.attr(self.n, name) {
            Some(AttrValue::Ints(v)) => Some(v),
            _ => None,
        }
    }

    /// The element values of a small integer input: a tracked shape computation, else a
    /// constant.
    pub fn int_values(&self, slot: usize) -> Option<Vec<Dim>> {
        let v = self.input(slot)?;
        if let Some(vals) = self.values.get(&v) {
            return Some(vals.clone());
        }
        let ints = values_i64(&self.small_const(slot)?)?;
        Some(ints.into_iter().map(Dim::Known).collect())
    }

    /// The element values of a small numeric constant input as `f64` (Resize scales, a float
    /// OneHot depth).
    pub fn const_f64s(&self, slot: usize) -> Option<Vec<f64>> {
        values_f64(&self.small_const(slot)?)
    }

    /// Input `slot`'s value when it is a constant of at most [`MAX_SHAPE_CONST_ELEMS`] elements.
    fn small_const(&self, slot: usize) -> Option<ConstTensor> {
        let v = self.input(slot)?;
        let elems = super::shape::product(&self.g.tensor_info(v)?.shape?)?;
        if elems > MAX_SHAPE_CONST_ELEMS {
            return None;
        }
        self.g.const_value(v)
    }

    /// Whether input `slot` is given and not an empty tensor (Resize's `scales` / `sizes`: an
    /// empty one stands for an absent one in opsets 11-12).
    pub fn given(&self, slot: usize) -> bool {
        self.input(slot).is_some()
            && self.shape(slot).and_then(|s| super::shape::product(&s)) != Some(0)
    }

    /// The graph attribute `name` (an `If` branch, a `Loop` / `Scan` body).
    pub fn subgraph(&self, name: &str) -> Option<&'a AttributeProto> {
        self.g
            .node(self.n)
            .proto
            .attribute
            .iter()
            .find(|a| a.name.as_deref() == Some(name) && a.g.is_some())
    }

    /// [`Node::int_values`] when every element is a known number.
    pub fn known_ints(&self, slot: usize) -> Option<Vec<i64>> {
        self.int_values(slot)?
            .iter()
            .map(super::shape::known)
            .collect()
    }

    /// A list given by input `slot` when that input is present, else by attribute `attr`.
    pub fn int_list(&self, attr: &str, slot: usize) -> IntList {
        if self.input(slot).is_some() {
            return self
                .known_ints(slot)
                .map_or(IntList::NotConstant, IntList::Given);
        }
        self.ints(attr).map_or(IntList::Absent, IntList::Given)
    }

    /// Output 0 has input `slot`'s type and shape.
    pub fn same(&self, slot: usize) -> Vec<TensorInfo> {
        vec![self.info(slot)]
    }
}

/// A (possibly partial) type: element type 0 and `shape: None` mean unknown.
pub(super) fn info(elem_type: i32, shape: Option<Vec<Dim>>) -> TensorInfo {
    TensorInfo { elem_type, shape }
}
