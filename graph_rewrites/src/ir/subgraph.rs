//! Outer-scope references of subgraph attributes (`If` branches, `Loop`/`Scan` bodies).
//!
//! Subgraphs are never rewritten; the IR only needs to know which outer values they read, so
//! those count as uses of the control-flow node, and which names they define, so fresh names
//! never collide with them.

use std::collections::HashSet;

use crate::onnx_pb::{AttributeProto, GraphProto};

/// What the subgraph attributes of one node read from and define.
#[derive(Default)]
pub(super) struct SubgraphNames {
    /// Names read from enclosing scopes, in first-use order, without duplicates.
    pub outer_refs: Vec<String>,
    /// Every name defined inside the subgraphs (inputs, initializers, node outputs).
    pub defined: Vec<String>,
}

pub(super) fn subgraph_names(attrs: &[AttributeProto]) -> SubgraphNames {
    let mut out = SubgraphNames::default();
    let mut seen = HashSet::new();
    for g in attrs.iter().flat_map(|a| a.g.iter().chain(&a.graphs)) {
        for r in graph_refs(g, &mut out.defined) {
            if seen.insert(r.clone()) {
                out.outer_refs.push(r);
            }
        }
    }
    out
}

/// Names `g` (and its nested subgraphs) reads from outside `g`; adds names `g` defines.
fn graph_refs(g: &GraphProto, defined: &mut Vec<String>) -> Vec<String> {
    let mut local: HashSet<&str> = HashSet::new();
    let names = g
        .input
        .iter()
        .filter_map(|v| v.name.as_deref())
        .chain(g.initializer.iter().filter_map(|t| t.name.as_deref()))
        .chain(
            g.sparse_initializer
                .iter()
                .filter_map(|s| s.values.as_ref()?.name.as_deref()),
        )
        .chain(
            g.node
                .iter()
                .flat_map(|n| n.output.iter().map(String::as_str)),
        );
    for name in names.filter(|n| !n.is_empty()) {
        if local.insert(name) {
            defined.push(name.to_owned());
        }
    }
    let mut refs = Vec::new();
    let mut seen = HashSet::new();
    let mut note = |name: &str, refs: &mut Vec<String>| {
        if !name.is_empty() && !local.contains(name) && seen.insert(name.to_owned()) {
            refs.push(name.to_owned());
        }
    };
    for n in &g.node {
        for i in &n.input {
            note(i, &mut refs);
        }
        let nested = subgraph_names(&n.attribute);
        defined.extend(nested.defined);
        for r in &nested.outer_refs {
            note(r, &mut refs);
        }
    }
    for o in g.output.iter().filter_map(|v| v.name.as_deref()) {
        note(o, &mut refs);
    }
    refs
}
