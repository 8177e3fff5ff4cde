//! Backtracking matcher: unifies a [`Pattern`] with a graph, starting at a root value.
//!
//! Matching is a search over goals `(pattern value, graph value)`. Alternatives and commutative
//! argument orders are choice points; a failed choice restores the bindings it made, so an
//! early alternative that matches locally but breaks a later constraint does not hide a later
//! alternative that fits. Patterns are tens of nodes, so cloning the small state at choice
//! points is cheaper than undo logs and obviously correct.

use std::cell::RefCell;
use std::collections::HashSet;

use super::builder::{Pattern, VKind, N, V};
use crate::view::{GraphView, NodeId, ValueId};

/// Bindings of pattern handles to graph ids.
#[derive(Clone, Debug)]
pub(crate) struct Bindings {
    pub(crate) values: Vec<Option<ValueId>>,
    pub(crate) nodes: Vec<Option<NodeId>>,
}

/// The most complete failed attempt, reported as the reason a candidate did not match.
#[derive(Default)]
pub(crate) struct NearMiss {
    bound: usize,
    pub(crate) reason: Option<String>,
    /// The graph nodes that attempt had matched (the report's near-miss filter: what the
    /// attempt saw beyond a fusion at the same node).
    nodes: Vec<NodeId>,
}

pub(crate) struct Matcher<'a> {
    g: &'a dyn GraphView,
    p: &'a Pattern,
    near: RefCell<NearMiss>,
    /// Graph nodes no pattern node may bind (taken by another fusion of the same scan).
    avoid: Option<&'a HashSet<NodeId>>,
}

type Goals = Vec<(V, ValueId)>;

impl<'a> Matcher<'a> {
    pub(crate) fn new(g: &'a dyn GraphView, p: &'a Pattern) -> Self {
        Matcher {
            g,
            p,
            near: RefCell::new(NearMiss::default()),
            avoid: None,
        }
    }

    /// A matcher that binds none of the nodes in `avoid`: alternatives and commutative orders
    /// that would use one are skipped like any other failed choice.
    pub(crate) fn avoiding(
        g: &'a dyn GraphView,
        p: &'a Pattern,
        avoid: &'a HashSet<NodeId>,
    ) -> Self {
        Matcher {
            avoid: Some(avoid),
            ..Matcher::new(g, p)
        }
    }

    /// Matches the pattern's root against `root`.
    pub(crate) fn run(&self, root: ValueId) -> Result<Bindings, String> {
        let b = Bindings {
            values: vec![None; self.p.values.len()],
            nodes: vec![None; self.p.nodes.len()],
        };
        match self.solve(vec![(self.p.root, root)], b) {
            Some(b) => Ok(b),
            None => Err(self
                .near
                .borrow_mut()
                .reason
                .take()
                .unwrap_or_else(|| "no match".into())),
        }
    }

    /// The graph nodes the most complete failed attempt of [`Matcher::run`] had matched.
    pub(crate) fn near_miss_nodes(&self) -> Vec<NodeId> {
        self.near.borrow().nodes.clone()
    }

    fn fail(&self, b: &Bindings, reason: impl FnOnce() -> String) -> Option<Bindings> {
        let bound = b.nodes.iter().filter(|n| n.is_some()).count();
        let mut near = self.near.borrow_mut();
        if near.reason.is_none() || bound > near.bound {
            near.bound = bound;
            near.reason = Some(reason());
            near.nodes = b.nodes.iter().flatten().copied().collect();
        }
        None
    }

    fn solve(&self, mut goals: Goals, mut b: Bindings) -> Option<Bindings> {
        let Some((v, val)) = goals.pop() else {
            return Some(b);
        };
        if let Some(bound) = b.values[v.0 as usize] {
            if bound == val {
                return self.solve(goals, b);
            }
            let name = &self.p.values[v.0 as usize].name;
            return self.fail(&b, || {
                format!(
                    "'{name}' must be one value but is both '{}' and '{}'",
                    self.g.value_name(bound),
                    self.g.value_name(val)
                )
            });
        }
        let pv = &self.p.values[v.0 as usize];
        match &pv.kind {
            VKind::Input => {
                b.values[v.0 as usize] = Some(val);
                self.solve(goals, b)
            }
            VKind::Const(pred) => {
                if !self.g.is_constant(val) {
                    return self.fail(&b, || {
                        format!(
                            "'{}' must be a constant{}",
                            self.g.value_name(val),
                            crate::view::not_constant_note(self.g, val)
                        )
                    });
                }
                if let Some((pred, desc)) = pred {
                    match self.g.const_value(val) {
                        Some(t) if pred(&t) => {}
                        Some(_) => {
                            return self
                                .fail(&b, || format!("'{}' is not {desc}", self.g.value_name(val)))
                        }
                        None => {
                            return self.fail(&b, || {
                                format!(
                                    "constant '{}' could not be read to check it is {desc}",
                                    self.g.value_name(val)
                                )
                            })
                        }
                    }
                }
                b.values[v.0 as usize] = Some(val);
                self.solve(goals, b)
            }
            VKind::Alt(alts) => {
                for alt in alts {
                    let mut g2 = goals.clone();
                    g2.push((*alt, val));
                    let mut b2 = b.clone();
                    b2.values[v.0 as usize] = Some(val);
                    if let Some(done) = self.solve(g2, b2) {
                        return Some(done);
                    }
                }
                None
            }
            VKind::Out { node, index } => self.solve_out(goals, b, v, val, *node, *index),
        }
    }

    fn solve_out(
        &self,
        goals: Goals,
        mut b: Bindings,
        v: V,
        val: ValueId,
        pn: N,
        index: usize,
    ) -> Option<Bindings> {
        let pnode = &self.p.nodes[pn.0 as usize];
        let Some((gn, slot)) = self.g.producer(val) else {
            return self.fail(&b, || {
                format!(
                    "expected {} to produce '{}', but it has no producer",
                    pnode.op.op_type,
                    self.g.value_name(val)
                )
            });
        };
        if slot != index {
            return self.fail(&b, || {
                format!(
                    "'{}' is output {slot} of '{}', expected output {index}",
                    self.g.value_name(val),
                    self.g.node_name(gn)
                )
            });
        }
        if self.avoid.is_some_and(|a| a.contains(&gn)) {
            return self.fail(&b, || {
                format!(
                    "'{}' is taken by another fusion of this scan",
                    self.g.node_name(gn)
                )
            });
        }
        b.values[v.0 as usize] = Some(val);
        if let Some(bound) = b.nodes[pn.0 as usize] {
            // Reached the same pattern node through another of its outputs (e.g. Split).
            return if bound == gn {
                self.solve(goals, b)
            } else {
                self.fail(&b, || "pattern node bound twice".into())
            };
        }
        if !pnode.op.accepts(self.g, gn) {
            return self.fail(&b, || {
                let found = format!("{}::{}", self.g.domain(gn), self.g.op_type(gn));
                format!(
                    "expected {} producing '{}', found {} '{}'",
                    pnode.op.op_type,
                    self.g.value_name(val),
                    found.trim_start_matches("::"),
                    self.g.node_name(gn)
                )
            });
        }
        if pnode.single_use && (self.g.is_graph_output(val) || self.g.consumers(val).len() != 1) {
            return self.fail(&b, || {
                format!("'{}' has more than one reader", self.g.value_name(val))
            });
        }
        for a in &pnode.attrs {
            if !(a.f)(self.g.attr(gn, a.name).as_ref()) {
                return self.fail(&b, || {
                    format!(
                        "{} '{}' needs {}",
                        pnode.op.op_type,
                        self.g.node_name(gn),
                        a.desc
                    )
                });
            }
        }
        for (desc, f) in &pnode.node_preds {
            if !f(self.g, gn) {
                let name = self.g.node_name(gn);
                return self.fail(&b, || format!("{} '{name}' needs {desc}", pnode.op.op_type));
            }
        }
        let inputs = self.g.inputs(gn);
        let present = inputs
            .iter()
            .rposition(|i| i.is_some())
            .map_or(0, |p| p + 1);
        if present < pnode.args.len() || (!pnode.extra_inputs && present > pnode.args.len()) {
            return self.fail(&b, || {
                format!(
                    "{} '{}' has {present} inputs, the pattern expects {}",
                    pnode.op.op_type,
                    self.g.node_name(gn),
                    pnode.args.len()
                )
            });
        }
        let mut args: Vec<ValueId> = Vec::with_capacity(pnode.args.len());
        for (i, _) in pnode.args.iter().enumerate() {
            match inputs[i] {
                Some(x) => args.push(x),
                None => {
                    return self.fail(&b, || {
                        format!("input {i} of '{}' is missing", self.g.node_name(gn))
                    });
                }
            }
        }
        b.nodes[pn.0 as usize] = Some(gn);
        let orders: &[&[usize]] = if pnode.commutative && args.len() == 2 {
            &[&[0, 1], &[1, 0]]
        } else {
            &[&[]]
        };
        for order in orders {
            let mut g2 = goals.clone();
            for (k, pv) in pnode.args.iter().enumerate().rev() {
                let src = if order.is_empty() { k } else { order[k] };
                g2.push((*pv, args[src]));
            }
            if let Some(done) = self.solve(g2, b.clone()) {
                return Some(done);
            }
        }
        None
    }
}
