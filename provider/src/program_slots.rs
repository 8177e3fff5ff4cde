//! What the CPU [`Program`](crate::program::Program) and the
//! [`GpuProgram`](crate::gpu::program::GpuProgram) share when they are built from a rewritten
//! graph: reading a `com.mxfuse` node's attributes, and binding values by name to slots.
//!
//! A slot is one value of the fused node (a fused input, a captured constant or a step's
//! output); each program keeps its own `Source` per slot, so the table is generic over it.

use std::collections::{BTreeMap, HashMap};

use graph_rewrites::view::{GraphView, NodeId, MXFUSE_DOMAIN};

use crate::error::{Error, Result};
use crate::ops::{schema, Attrs};
use crate::tensor::Meta;

/// The attributes of node `n`, checked against its `com.mxfuse` schema; a node of another
/// domain (left after rewriting) or an unknown op is `Unsupported`.
pub(crate) fn mxfuse_attrs(g: &dyn GraphView, n: NodeId) -> Result<Attrs> {
    let op_type = g.op_type(n);
    if g.domain(n) != MXFUSE_DOMAIN {
        return Err(Error::Unsupported(format!(
            "node {} ({}::{op_type}) is left after rewriting; the EP runs only com.mxfuse ops",
            g.node_label(n),
            g.domain(n)
        )));
    }
    let op = schema::find(op_type)
        .ok_or_else(|| Error::Unsupported(format!("com.mxfuse op {op_type:?}")))?;
    let mut values = BTreeMap::new();
    for a in g.attr_names(n) {
        if let Some(v) = g.attr(n, &a) {
            values.insert(a, v);
        }
    }
    Attrs::new(op, values)
}

/// Value name → slot, and the source of each slot.
pub(crate) struct Slots<S> {
    by_name: HashMap<String, usize>,
    sources: Vec<S>,
}

impl<S> Slots<S> {
    /// One slot per distinct, non-empty fused input name; `input(i)` is the source of input `i`.
    pub fn for_inputs(input_names: &[String], input: impl Fn(usize) -> S) -> Self {
        let mut slots = Slots {
            by_name: HashMap::new(),
            sources: Vec::new(),
        };
        for (i, name) in input_names.iter().enumerate() {
            if !name.is_empty() && !slots.by_name.contains_key(name) {
                slots.push(name, input(i));
            }
        }
        slots
    }

    fn push(&mut self, name: &str, source: S) -> usize {
        self.sources.push(source);
        self.by_name
            .insert(name.to_string(), self.sources.len() - 1);
        self.sources.len() - 1
    }

    /// The slots of node `n`'s inputs (`None`: omitted). A value not bound yet must be a
    /// constant of `g`: its size is checked against its shape and `constant(i, meta, raw)`
    /// (`i` the input index) makes its source.
    pub fn bind_inputs(
        &mut self,
        g: &dyn GraphView,
        n: NodeId,
        mut constant: impl FnMut(usize, Meta, Vec<u8>) -> Result<S>,
    ) -> Result<Vec<Option<usize>>> {
        let mut inputs = Vec::new();
        for (i, input) in g.inputs(n).iter().enumerate() {
            let Some(v) = input else {
                inputs.push(None);
                continue;
            };
            let vname = g.value_name(*v);
            if let Some(&s) = self.by_name.get(vname) {
                inputs.push(Some(s));
                continue;
            }
            let t = g.const_value(*v).ok_or_else(|| {
                Error::invalid(format!(
                    "node {}: input {vname} is neither a fused-node input nor a constant",
                    g.node_label(n)
                ))
            })?;
            let meta = Meta::new(t.elem_type, t.dims);
            // A constant's bytes are read as `meta` on every run: a mismatch is refused here.
            if meta.byte_len()? != t.raw.len() {
                return Err(Error::invalid(format!(
                    "constant {vname}: byte size does not match its shape"
                )));
            }
            let source = constant(i, meta, t.raw)?;
            inputs.push(Some(self.push(vname, source)));
        }
        Ok(inputs)
    }

    /// New slots for node `n`'s outputs, each with source `step()`; `None` for an omitted
    /// (empty-named) output.
    pub fn bind_outputs(
        &mut self,
        g: &dyn GraphView,
        n: NodeId,
        step: impl Fn() -> S,
    ) -> Vec<Option<usize>> {
        let mut outputs = Vec::new();
        for &v in g.outputs(n) {
            let vname = g.value_name(v);
            if vname.is_empty() {
                outputs.push(None);
                continue;
            }
            outputs.push(Some(self.push(vname, step())));
        }
        outputs
    }

    /// The slot of each fused output, in `output_names` order, and the sources of all slots.
    pub fn finish(self, output_names: &[String]) -> Result<(Vec<usize>, Vec<S>)> {
        let outputs = output_names
            .iter()
            .map(|o| {
                self.by_name
                    .get(o)
                    .copied()
                    .ok_or_else(|| Error::invalid(format!("fused output {o} is not produced")))
            })
            .collect::<Result<_>>()?;
        Ok((outputs, self.sources))
    }
}
