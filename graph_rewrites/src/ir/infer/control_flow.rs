//! Control flow: `If`, `Loop`, `Scan` (the opset-9+ form). Their outputs' types come from the
//! subgraph attributes, combined with the node's own inputs. What a subgraph declares for an
//! output is used as is when it has an element type and a shape; otherwise the inference runs on
//! the subgraph itself (its
//! inputs typed from the node's inputs where it does not declare them, the main-graph values it
//! reads typed as in the main graph) and fills the gaps. Bodies are never rewritten. A
//! loop-carried value gets the type its initial value and every iteration's update agree on:
//! the body is inferred again with the merged type until nothing changes (a few rounds; a state
//! still changing then has no shape). Invalid nodes (missing bodies, output counts that do not
//! match) leave their outputs unknown.

use super::node::{info, Node};
use super::shape::norm_axis;
use crate::ir::info::{info_from_tensor, info_from_value_info, value_info_from_info};
use crate::ir::subgraph::subgraph_names;
use crate::ir::Graph;
use crate::onnx_pb::{AttributeProto, GraphProto, ModelProto, ValueInfoProto};
use crate::pattern::predicates::dtype;
use crate::view::{AttrValue, Dim, GraphView, TensorInfo};

/// Rounds of re-inference of a loop body with its states' merged types.
const STATE_ROUNDS: usize = 4;

/// `If`: each output has the type both branches agree on (dims where they differ unknown, no
/// shape where their ranks differ: ONNX lets the branches' shapes differ).
pub(super) fn if_op(c: &Node) -> Vec<TensorInfo> {
    let (Some(then), Some(other)) = (
        body_outputs(c, "then_branch", &[]),
        body_outputs(c, "else_branch", &[]),
    ) else {
        return Vec::new();
    };
    if then.len() != other.len() {
        return Vec::new();
    }
    then.iter().zip(&other).map(|(a, b)| union(a, b)).collect()
}

/// `Loop(M, cond, v_initial...)`: the final loop-carried values (the type both the initial value
/// and the body's update have: zero iterations return the initial one), then the scan outputs:
/// the body's per-iteration value stacked along a new first axis, as long as the trip count when
/// the loop has no condition and `M` is known.
pub(super) fn loop_op(c: &Node) -> Vec<TensorInfo> {
    let n_state = c.input_count().saturating_sub(2);
    let scalar = |t| info(t, Some(Vec::new()));
    let fixed = [scalar(dtype::INT64), scalar(super::ops::BOOL)];
    let Some((states, body)) = carried(c, "body", [&fixed, &[]], (2, 1), n_state) else {
        return Vec::new();
    };
    // Body outputs: the condition, the loop-carried values, the scan outputs.
    let Some(scans) = body.get(1 + n_state..) else {
        return Vec::new();
    };
    let trip = match c.int_values(0).as_deref() {
        _ if c.input(1).is_some() => Dim::Unknown, // a condition may end the loop early
        Some([Dim::Known(m)]) if *m >= 0 => Dim::Known(*m),
        Some([d @ Dim::Symbolic(_)]) => d.clone(),
        _ => Dim::Unknown,
    };
    let scans = scans.iter().map(|s| stacked(s, 0, &trip));
    states.into_iter().chain(scans).collect()
}

/// `Scan` (opset 9+; `num_scan_inputs` of the inputs are scanned, the ones before them are the
/// initial states): the final states, then each scan output: the body's per-step value with the
/// sequence length (scan input 0's dim along its `scan_input_axes` entry) inserted at its
/// `scan_output_axes` entry. Opset 8's batched form is left unknown.
pub(super) fn scan(c: &Node) -> Vec<TensorInfo> {
    let scanned = c
        .int("num_scan_inputs", 0)
        .and_then(|m| usize::try_from(m).ok())
        .filter(|&m| m > 0 && m <= c.input_count() && c.opset() >= 9);
    let Some(n_state) = scanned.map(|m| c.input_count() - m) else {
        return Vec::new();
    };
    let axes = |name: &str, n: usize| match c.g.attr(c.n, name) {
        None => Some(vec![0; n]),
        Some(AttrValue::Ints(a)) if a.len() == n => Some(a),
        Some(_) => None,
    };
    // The body's scan inputs: one slice of each scanned input (its scan axis removed).
    let in_axes = axes("scan_input_axes", c.input_count() - n_state);
    let slices: Vec<TensorInfo> = (n_state..c.input_count())
        .map(|i| {
            let at = in_axes.as_ref().map(|a| a[i - n_state]);
            let shape = c.shape(i).zip(at).and_then(|(mut s, a)| {
                s.remove(norm_axis(a, s.len())?);
                Some(s)
            });
            info(c.elem(i), shape)
        })
        .collect();
    let Some((states, body)) = carried(c, "body", [&[], &slices], (0, 0), n_state) else {
        return Vec::new();
    };
    let Some(scans) = body.get(n_state..) else {
        return Vec::new();
    };
    let len = c
        .shape(n_state)
        .zip(in_axes.and_then(|a| a.first().copied()))
        .and_then(|(s, a)| s.get(norm_axis(a, s.len())?).cloned())
        .unwrap_or(Dim::Unknown);
    let mut out = states;
    match axes("scan_output_axes", scans.len()) {
        Some(a) => out.extend(scans.iter().zip(a).map(|(s, a)| stacked(s, a, &len))),
        None => out.extend(scans.iter().map(|s| info(s.elem_type, None))),
    }
    out
}

/// The final types of `n` loop-carried values and the types of body `attr`'s outputs. The
/// states are node inputs from `first.0` and body outputs from `first.1`; the body's inputs are
/// `around[0]`, the states, `around[1]`. `None` when the node has no such body or the body has
/// too few outputs.
fn carried(
    c: &Node,
    attr: &str,
    around: [&[TensorInfo]; 2],
    first: (usize, usize),
    n: usize,
) -> Option<(Vec<TensorInfo>, Vec<TensorInfo>)> {
    let mut merged: Vec<TensorInfo> = (first.0..first.0 + n).map(|i| c.info(i)).collect();
    for _ in 0..STATE_ROUNDS {
        let inputs: Vec<TensorInfo> = around[0]
            .iter()
            .chain(&merged)
            .chain(around[1])
            .cloned()
            .collect();
        let outs = body_outputs(c, attr, &inputs)?;
        let updates = outs.get(first.1..first.1 + n)?;
        let next: Vec<TensorInfo> = merged
            .iter()
            .zip(updates)
            .map(|(a, b)| union(a, b))
            .collect();
        if next == merged {
            return Some((merged, outs));
        }
        merged = next;
    }
    // Still changing: the element types only.
    let inputs: Vec<TensorInfo> = around[0].iter().chain(around[1]).cloned().collect();
    let outs = body_outputs(c, attr, &inputs)?;
    let states = merged
        .into_iter()
        .map(|t| info(t.elem_type, None))
        .collect();
    Some((states, outs))
}

/// The types of subgraph attribute `name`'s outputs, the subgraph's inputs typed `inputs` where
/// it does not declare them; `None` when the node has no such graph.
fn body_outputs(c: &Node, name: &str, inputs: &[TensorInfo]) -> Option<Vec<TensorInfo>> {
    let attr = c.subgraph(name)?;
    let body = attr.g.as_ref()?;
    let mut outs: Vec<TensorInfo> = body
        .output
        .iter()
        .map(|o| output_type(c, body, o))
        .collect();
    if outs.iter().any(|t| t.elem_type == 0 || t.shape.is_none()) {
        if let Some(inferred) = infer_body(c, attr, inputs) {
            for (o, i) in outs.iter_mut().zip(inferred) {
                let mut known = Some(std::mem::take(o));
                super::merge(&mut known, i);
                *o = known.unwrap_or_default();
            }
        }
    }
    Some(outs)
}

/// The output types of subgraph `attr` from the inference run on it as a graph of its own: its
/// inputs typed `inputs` where it does not declare them, the main-graph values it reads as
/// inputs of their main-graph types. `None` when it does not load.
fn infer_body(c: &Node, attr: &AttributeProto, inputs: &[TensorInfo]) -> Option<Vec<TensorInfo>> {
    let body = attr.g.as_ref()?;
    let mut g = body.clone();
    for (vi, t) in g.input.iter_mut().zip(inputs) {
        let mut declared = info_from_value_info(vi);
        super::merge(&mut declared, t.clone());
        if let (Some(d), Some(name)) = (declared, vi.name.clone()) {
            *vi = value_info_from_info(&name, &d);
        }
    }
    for name in subgraph_names(std::slice::from_ref(attr)).outer_refs {
        let t = c.g.value_by_name(&name).and_then(|v| c.g.tensor_info(v));
        g.input
            .push(value_info_from_info(&name, &t.unwrap_or_default()));
    }
    let model = ModelProto {
        ir_version: c.g.shell.ir_version,
        opset_import: c.g.opset_imports().to_vec(),
        graph: Some(g),
        ..Default::default()
    };
    let sub = Graph::from_model(model, None).ok()?;
    let type_of = |o: &ValueInfoProto| {
        let v = sub.value_by_name(o.name.as_deref()?)?;
        sub.tensor_info(v)
    };
    Some(
        body.output
            .iter()
            .map(|o| type_of(o).unwrap_or_default())
            .collect(),
    )
}

/// What `body` declares for output `o`, completed from the value it names when that is a body
/// initializer or a main-graph value (not one the body computes).
fn output_type(c: &Node, body: &GraphProto, o: &ValueInfoProto) -> TensorInfo {
    let declared = info_from_value_info(o).unwrap_or_default();
    if declared.elem_type != 0 && declared.shape.is_some() {
        return declared;
    }
    let name = o.name.as_deref().unwrap_or_default();
    let computed = body.input.iter().any(|i| i.name.as_deref() == Some(name))
        || body.node.iter().any(|n| n.output.iter().any(|x| x == name));
    let named = match body
        .initializer
        .iter()
        .find(|t| t.name.as_deref() == Some(name))
    {
        Some(t) => Some(info_from_tensor(t)),
        None if computed || name.is_empty() => None,
        None => c.g.value_by_name(name).and_then(|v| c.g.tensor_info(v)),
    };
    let mut out = Some(declared);
    if let Some(named) = named {
        super::merge(&mut out, named);
    }
    out.unwrap_or_default()
}

/// The type two values that may each be the output have: the element type when they agree (or
/// one is unknown), the dims on which they agree (others unknown) when their ranks do.
fn union(a: &TensorInfo, b: &TensorInfo) -> TensorInfo {
    let elem = match (a.elem_type, b.elem_type) {
        (0, t) | (t, 0) => t,
        (x, y) if x == y => x,
        _ => 0,
    };
    let shape = match (&a.shape, &b.shape) {
        (Some(x), Some(y)) if x.len() == y.len() => Some(
            x.iter()
                .zip(y)
                .map(|(p, q)| if p == q { p.clone() } else { Dim::Unknown })
                .collect(),
        ),
        _ => None,
    };
    info(elem, shape)
}

/// Per-step values `step` stacked into one tensor: `len` inserted at `axis` (counted in the
/// stacked rank, negative from the end).
fn stacked(step: &TensorInfo, axis: i64, len: &Dim) -> TensorInfo {
    let shape = step.shape.clone().and_then(|mut s| {
        let at = norm_axis(axis, s.len() + 1)?;
        s.insert(at, len.clone());
        Some(s)
    });
    info(step.elem_type, shape)
}
