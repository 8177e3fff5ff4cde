//! What the EP claims in `GetCapability`: the sites the rewrite rules accept on ORT's graph
//! (the same `find_sites` the offline CLI's pipeline runs; a site includes the MX weight
//! `DequantizeLinear`s only it reads; the fallback rule `mx_dequant` claims the E8M0
//! `DequantizeLinear`s the others left), plus com.mxfuse nodes of offline-rewritten models.
//!
//! On a device placement (the GPU, or its host stand-in) the device program has no kernel for
//! a weight-only `MxMatMul` (float `a`, no `a_scale`): the EP then runs without rule
//! `mx_weight_matmul` ([`CPU_ONLY_RULES`], removed from its options at `CreateEp`), so those
//! MatMuls stay with ORT's CPU EP as before (the weight's DequantizeLinear claimed as
//! `MxDequantize`), and an offline-rewritten weight-only `MxMatMul` is not claimed
//! ([`device_can_run`]): ORT's CPU EP runs it with the kernel the EP publishes (com.mxfuse).

use std::collections::HashSet;

use graph_rewrites::pipeline::{find_sites, PipelineOptions, SiteInfo};
use graph_rewrites::view::{GraphView, NodeId, MXFUSE_DOMAIN, QUARK_DOMAIN};

use crate::error::{Error, Result};
use crate::ops::schema;

/// Rules whose output only the CPU kernels run: off on a device placement.
pub const CPU_ONLY_RULES: &[&str] = &["mx_weight_matmul", "mx_gather_dequant"];

/// Whether the device program runs com.mxfuse node `n`: everything but a weight-only
/// `MxMatMul` (no `a_scale`, input 1) and `MxGatherDequantize`.
pub fn device_can_run(view: &dyn GraphView, n: NodeId) -> bool {
    let op = view.op_type(n);
    !(op == "MxGatherDequantize"
        || op == "MxMatMul" && view.inputs(n).get(1).copied().flatten().is_none())
}

/// Groups of nodes to claim, one fused node each. Each candidate site is described to
/// `explain` (verbose diagnostics), when given. `on_device`: the placement runs the device
/// program (see the module docs).
pub fn claim_groups(
    view: &dyn GraphView,
    options: &PipelineOptions,
    on_device: bool,
    explain: Option<&dyn Fn(&str)>,
) -> Result<Vec<Vec<NodeId>>> {
    let sites = find_sites(view, options).map_err(|e| Error::invalid(e.to_string()))?;
    if let Some(log) = explain {
        describe(view, &sites, log);
    }
    let mut claimed = HashSet::new();
    let mut groups: Vec<Vec<NodeId>> = Vec::new();
    for site in sites {
        if site.verdict.is_err() || site.nodes.is_empty() {
            continue;
        }
        if site.nodes.iter().any(|n| claimed.contains(n)) {
            // Another float reader of a Quark weight fake-quant an earlier weight-only site
            // claimed: one fused node takes both (Compile's rewrite reads the weight in place for
            // each, as the offline rewrite does), unless that would make a cycle.
            if let Some(g) = joins_shared_quark_weight(view, &groups, &site) {
                let nodes: Vec<NodeId> = site
                    .nodes
                    .iter()
                    .copied()
                    .filter(|n| !groups[g].contains(n))
                    .collect();
                claimed.extend(nodes.iter().copied());
                groups[g].extend(nodes);
            }
            continue;
        }
        let group = site.nodes;
        claimed.extend(group.iter().copied());
        groups.push(group);
    }
    for &n in view.nodes().iter() {
        if view.domain(n) == MXFUSE_DOMAIN
            && schema::find(view.op_type(n)).is_some()
            && (!on_device || device_can_run(view, n))
            && claimed.insert(n)
        {
            groups.push(vec![n]);
        }
    }
    Ok(groups)
}

/// The group a weight-only site joins: the one group it overlaps, where the overlap is Quark
/// weight fake-quants of constants (ONNX Runtime duplicates a shared DequantizeLinear per reader
/// before the EP sees the graph, not a custom op: without this, a second float reader of a shared
/// Quark weight stayed unfused on the EP while the offline rewrite fused it), and the union is
/// still a valid fused node (no path leaves it and comes back).
fn joins_shared_quark_weight(
    view: &dyn GraphView,
    groups: &[Vec<NodeId>],
    site: &SiteInfo,
) -> Option<usize> {
    if site.rule != "mx_weight_matmul" {
        return None;
    }
    let mut hit = groups
        .iter()
        .enumerate()
        .filter(|(_, g)| site.nodes.iter().any(|n| g.contains(n)));
    let (i, g) = hit.next()?;
    if hit.next().is_some() {
        return None;
    }
    let shared_weights_only = site.nodes.iter().filter(|n| g.contains(n)).all(|&n| {
        view.domain(n) == QUARK_DOMAIN
            && view.op_type(n) == "MXQuantizeDequantize"
            && view
                .inputs(n)
                .iter()
                .flatten()
                .all(|&v| view.is_constant(v))
    });
    let mut union: HashSet<NodeId> = g.iter().copied().collect();
    union.extend(site.nodes.iter().copied());
    (shared_weights_only && !leaves_and_returns(view, &union)).then_some(i)
}

/// Whether a path from a node of `set` runs through a node outside it back into `set` (one fused
/// node for `set` would then feed its own input).
fn leaves_and_returns(view: &dyn GraphView, set: &HashSet<NodeId>) -> bool {
    let next = |n: NodeId| -> Vec<NodeId> {
        view.outputs(n)
            .iter()
            .flat_map(|&v| {
                view.consumers(v)
                    .iter()
                    .map(|(c, _)| *c)
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let mut todo: Vec<NodeId> = set
        .iter()
        .flat_map(|&n| next(n))
        .filter(|c| !set.contains(c))
        .collect();
    let mut seen: HashSet<NodeId> = todo.iter().copied().collect();
    while let Some(n) = todo.pop() {
        for c in next(n) {
            if set.contains(&c) {
                return true;
            }
            if seen.insert(c) {
                todo.push(c);
            }
        }
    }
    false
}

/// Why each candidate was or was not claimed, one line per site.
fn describe(view: &dyn GraphView, sites: &[SiteInfo], log: &dyn Fn(&str)) {
    for s in sites {
        // node_label: exporters may leave names empty; the label is then op type -> output.
        let at = format!("'{}'", view.node_label(s.anchor));
        match &s.verdict {
            Ok(()) => {
                let names: Vec<String> = s.nodes.iter().map(|&n| view.node_label(n)).collect();
                log(&format!(
                    "mxfuse: {} claims {} nodes at {at}: {names:?}",
                    s.rule,
                    s.nodes.len()
                ));
                for note in &s.notes {
                    log(&format!("mxfuse: {} at {at} leaves out: {note}", s.rule));
                }
            }
            Err(why) => log(&format!("mxfuse: {} refused at {at}: {why}", s.rule)),
        }
    }
}
