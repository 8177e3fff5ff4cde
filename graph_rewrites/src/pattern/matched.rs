//! A successful structural match, what a rule's `check` returns, and the engine's safety check.

use std::collections::BTreeSet;
use std::ops::Index;

use super::builder::{Pattern, N, V};
use super::matcher::Bindings;
use crate::view::{GraphView, NodeId, TensorInfo, ValueId};

/// A structural match: pattern handles bound to graph ids.
pub struct Match<'g> {
    g: &'g dyn GraphView,
    pat: &'g Pattern,
    b: Bindings,
    root: ValueId,
}

impl<'g> Match<'g> {
    pub(crate) fn new(g: &'g dyn GraphView, pat: &'g Pattern, b: Bindings, root: ValueId) -> Self {
        Match { g, pat, b, root }
    }

    pub fn graph(&self) -> &'g dyn GraphView {
        self.g
    }

    /// The graph value the pattern root matched.
    pub fn root(&self) -> ValueId {
        self.root
    }

    /// The value bound to `v`, if the alternative that matched binds it.
    pub fn get(&self, v: V) -> Option<ValueId> {
        self.b.values[v.0 as usize]
    }

    /// The node bound to `n`, if the alternative that matched binds it.
    pub fn node(&self, n: N) -> Option<NodeId> {
        self.b.nodes[n.0 as usize]
    }

    /// Every graph node the pattern bound.
    pub fn nodes(&self) -> Vec<NodeId> {
        let set: BTreeSet<NodeId> = self.b.nodes.iter().flatten().copied().collect();
        set.into_iter().collect()
    }

    /// Whether graph value `v` is produced by a node this match binds (and so disappears with
    /// the fusion): a replacement must not read such a value.
    pub fn produces_inside(&self, v: ValueId) -> bool {
        self.g
            .producer(v)
            .is_some_and(|(n, _)| self.b.nodes.contains(&Some(n)))
    }

    /// Element type and shape of the value bound to `v`.
    pub fn info(&self, v: V) -> Option<TensorInfo> {
        self.get(v).and_then(|x| self.g.tensor_info(x))
    }

    pub(crate) fn pattern(&self) -> &'g Pattern {
        self.pat
    }

    pub(crate) fn collectives(&self) -> Vec<NodeId> {
        self.pat
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.collective)
            .filter_map(|(i, _)| self.b.nodes[i])
            .collect()
    }
}

impl Index<V> for Match<'_> {
    type Output = ValueId;
    /// The value bound to `v`. Only for handles every alternative binds; use [`Match::get`]
    /// for handles inside alternatives.
    fn index(&self, v: V) -> &ValueId {
        match &self.b.values[v.0 as usize] {
            Some(x) => x,
            None => panic!(
                "pattern value '{}' is not bound in this match",
                self.pat.values[v.0 as usize].name
            ),
        }
    }
}

/// Why a rule refused a candidate. Reasons are data: they reach the report and `--explain`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reject(pub String);

impl Reject {
    pub fn new(reason: impl Into<String>) -> Self {
        Reject(reason.into())
    }
}

/// `return Err(reject!("..."))` shorthand.
#[macro_export]
macro_rules! reject {
    ($($t:tt)*) => { $crate::pattern::Reject::new(format!($($t)*)) };
}

/// What `check` accepted: typed parameters for `rewrite`, plus nodes and produced values beyond
/// the pattern (e.g. the consumer MatMuls the check found by walking forward).
pub struct Fuse<P> {
    pub params: P,
    pub extra_nodes: Vec<NodeId>,
    pub extra_produces: Vec<ValueId>,
    /// What the fusion left out and why (a reader it could not absorb, say): reported with
    /// the fusion, since an accepted site has no rejection to carry the reason.
    pub notes: Vec<String>,
}

impl<P> Fuse<P> {
    pub fn new(params: P) -> Self {
        Fuse {
            params,
            extra_nodes: Vec::new(),
            extra_produces: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Records what the fusion left out and why.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// Also removes `node`; its outputs listed in `produces` are re-produced by the replacement.
    pub fn also(mut self, node: NodeId, produces: impl IntoIterator<Item = ValueId>) -> Self {
        self.extra_nodes.push(node);
        self.extra_produces.extend(produces);
        self
    }
}

/// An accepted fusion site: everything the engine needs to apply (or, in the provider, to
/// claim) it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    pub rule: &'static str,
    /// The node the pattern root's value is produced by.
    pub anchor: NodeId,
    /// Every node the fusion removes, sorted.
    pub nodes: Vec<NodeId>,
    /// Values the replacement must produce (they keep their names), sorted.
    pub produces: Vec<ValueId>,
    /// What the fusion left out and why ([`Fuse::note`]).
    pub notes: Vec<String>,
}

impl Site {
    pub fn produces(&self, v: ValueId) -> bool {
        self.produces.binary_search(&v).is_ok()
    }
}

/// The engine's safety check, applied to every match a rule accepted:
/// * every value produced by a removed node is either re-produced by the replacement, or used
///   only by removed nodes and not a graph output (nothing the rest of the graph reads
///   disappears);
/// * a collective is removed and its outputs are not re-produced: absorbing it is only sound
///   when the fused op is the collective's only reader, otherwise it would be run twice or not
///   at all.
pub(crate) fn safety_check<P>(
    m: &Match<'_>,
    fuse: &Fuse<P>,
) -> Result<(Vec<NodeId>, Vec<ValueId>), String> {
    let g = m.graph();
    let pat = m.pattern();
    let mut nodes: BTreeSet<NodeId> = m.nodes().into_iter().collect();
    nodes.extend(fuse.extra_nodes.iter().copied());
    let mut produces: BTreeSet<ValueId> = pat.produces.iter().filter_map(|v| m.get(*v)).collect();
    produces.extend(fuse.extra_produces.iter().copied());
    let used_outside =
        |x: ValueId| g.is_graph_output(x) || g.consumers(x).iter().any(|(c, _)| !nodes.contains(c));
    for v in &pat.escaping {
        if let Some(x) = m.get(*v) {
            if used_outside(x) {
                produces.insert(x);
            }
        }
    }
    let collectives = m.collectives();
    for &n in &nodes {
        let is_collective = collectives.contains(&n);
        for &out in g.outputs(n) {
            if is_collective && (produces.contains(&out) || used_outside(out)) {
                return Err(format!(
                    "collective {} '{}' has a reader outside the fusion: absorbing it would run it twice or drop it",
                    g.op_type(n),
                    g.node_name(n)
                ));
            }
            if produces.contains(&out) {
                continue;
            }
            if g.is_graph_output(out) {
                return Err(format!(
                    "interior value '{}' is a graph output",
                    g.value_name(out)
                ));
            }
            if let Some((c, _)) = g.consumers(out).iter().find(|(c, _)| !nodes.contains(c)) {
                return Err(format!(
                    "interior value '{}' is also read by {} '{}' outside the fusion",
                    g.value_name(out),
                    g.op_type(*c),
                    g.node_name(*c)
                ));
            }
        }
    }
    Ok((nodes.into_iter().collect(), produces.into_iter().collect()))
}
