//! Graphviz views of a set of nodes: the nodes as boxes, the values they read and write as
//! ellipses (constants dashed), so a site can be looked at before and after a rewrite.

use std::collections::BTreeSet;
use std::fmt::Write;

use crate::view::{GraphView, NodeId, ValueId};

/// A `digraph` of `nodes` and every value they touch.
pub fn site_dot(g: &dyn GraphView, nodes: &[NodeId], title: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph site {{");
    let _ = writeln!(out, "  label={};", quote(title));
    let _ = writeln!(out, "  rankdir=TB; node [fontsize=10];");
    let mut values = BTreeSet::new();
    for &n in nodes {
        let label = format!(
            "{}\n{}{}",
            g.node_name(n),
            domain_prefix(g.domain(n)),
            g.op_type(n)
        );
        let _ = writeln!(out, "  n{} [shape=box, label={}];", n.0, quote(&label));
        values.extend(g.inputs(n).iter().flatten().copied());
        values.extend(g.outputs(n).iter().copied());
    }
    for &v in &values {
        let style = if g.is_constant(v) {
            ", style=dashed"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  v{} [shape=ellipse{style}, label={}];",
            v.0,
            quote(&value_label(g, v))
        );
    }
    for &n in nodes {
        for &v in g.inputs(n).iter().flatten() {
            let _ = writeln!(out, "  v{} -> n{};", v.0, n.0);
        }
        for &v in g.outputs(n) {
            let _ = writeln!(out, "  n{} -> v{};", n.0, v.0);
        }
    }
    out.push_str("}\n");
    out
}

fn domain_prefix(domain: &str) -> String {
    if domain.is_empty() {
        String::new()
    } else {
        format!("{domain}::")
    }
}

fn value_label(g: &dyn GraphView, v: ValueId) -> String {
    let name = g.value_name(v);
    match g.tensor_info(v) {
        Some(info) => format!("{name}\n{}", crate::cli::inspect::type_text(&info)),
        None => name.to_owned(),
    }
}

/// A Graphviz string literal.
fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}
