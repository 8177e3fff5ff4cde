//! Control flow: `If`, `Loop`, `Scan` (the opset-9+ form). Their outputs' types come from what
//! the subgraph attributes declare for their outputs, combined with the node's own inputs; the
//! bodies themselves are neither inferred nor rewritten. A body output the subgraph leaves
//! untyped is typed when it is an initializer of the body or a value of the main graph passed
//! through; otherwise (and for invalid nodes: missing bodies, output counts that do not match)
//! the outputs stay unknown.

use super::node::{info, Node};
use super::shape::norm_axis;
use crate::ir::info::{info_from_tensor, info_from_value_info};
use crate::onnx_pb::{GraphProto, ValueInfoProto};
use crate::view::{AttrValue, Dim, GraphView, TensorInfo};

/// `If`: each output has the type both branches agree on (dims where they differ unknown, no
/// shape where their ranks differ: ONNX lets the branches' shapes differ).
pub(super) fn if_op(c: &Node) -> Vec<TensorInfo> {
    let (Some(then), Some(other)) = (
        body_outputs(c, "then_branch"),
        body_outputs(c, "else_branch"),
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
    let Some(body) = body_outputs(c, "body") else {
        return Vec::new();
    };
    let n_state = c.input_count().saturating_sub(2);
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
    let states = (0..n_state).map(|i| union(&c.info(2 + i), &body[1 + i]));
    let scans = scans.iter().map(|s| stacked(s, 0, &trip));
    states.chain(scans).collect()
}

/// `Scan` (opset 9+; `num_scan_inputs` of the inputs are scanned, the ones before them are the
/// initial states): the final states, then each scan output: the body's per-step value with the
/// sequence length (scan input 0's dim along its `scan_input_axes` entry) inserted at its
/// `scan_output_axes` entry. Opset 8's batched form is left unknown.
pub(super) fn scan(c: &Node) -> Vec<TensorInfo> {
    let Some(body) = body_outputs(c, "body").filter(|_| c.opset() >= 9) else {
        return Vec::new();
    };
    let scanned = c
        .int("num_scan_inputs", 0)
        .and_then(|m| usize::try_from(m).ok())
        .filter(|&m| m > 0 && m <= c.input_count());
    let Some(n_state) = scanned.map(|m| c.input_count() - m) else {
        return Vec::new();
    };
    let Some(scans) = body.get(n_state..) else {
        return Vec::new();
    };
    let mut out: Vec<TensorInfo> = (0..n_state).map(|i| union(&c.info(i), &body[i])).collect();
    let axes = |name: &str, n: usize| match c.g.attr(c.n, name) {
        None => Some(vec![0; n]),
        Some(AttrValue::Ints(a)) if a.len() == n => Some(a),
        Some(_) => None,
    };
    let first_axis =
        axes("scan_input_axes", c.input_count() - n_state).and_then(|a| a.first().copied());
    let len = c
        .shape(n_state)
        .zip(first_axis)
        .and_then(|(s, a)| s.get(norm_axis(a, s.len())?).cloned())
        .unwrap_or(Dim::Unknown);
    match axes("scan_output_axes", scans.len()) {
        Some(a) => out.extend(scans.iter().zip(a).map(|(s, a)| stacked(s, a, &len))),
        None => out.extend(scans.iter().map(|s| info(s.elem_type, None))),
    }
    out
}

/// The types of subgraph attribute `name`'s outputs; `None` when the node has no such graph.
fn body_outputs(c: &Node, name: &str) -> Option<Vec<TensorInfo>> {
    let body = c.subgraph(name)?;
    Some(
        body.output
            .iter()
            .map(|o| output_type(c, body, o))
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
