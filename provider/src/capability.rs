//! What the EP claims in `GetCapability`: the sites the rewrite rules accept on ORT's graph
//! (the same `find_sites` the offline CLI's pipeline runs), widened by the weight
//! `DequantizeLinear` nodes the fusion leaves dead, plus com.mxfuse nodes of offline-rewritten
//! models.

use std::collections::HashSet;

use graph_rewrites::pipeline::{find_sites, PipelineOptions, SiteInfo};
use graph_rewrites::view::{GraphView, NodeId, MXFUSE_DOMAIN, ONNX_DOMAIN};

use crate::error::{Error, Result};
use crate::ops::schema;

/// Groups of nodes to claim, one fused node each. Each candidate site is described to
/// `explain` (verbose diagnostics), when given.
pub fn claim_groups(
    view: &dyn GraphView,
    options: &PipelineOptions,
    explain: Option<&dyn Fn(&str)>,
) -> Result<Vec<Vec<NodeId>>> {
    let sites = find_sites(view, options).map_err(|e| Error::invalid(e.to_string()))?;
    if let Some(log) = explain {
        describe(view, &sites, log);
    }
    let mut claimed = HashSet::new();
    let mut groups = Vec::new();
    for site in sites {
        if site.verdict.is_err()
            || site.nodes.is_empty()
            || site.nodes.iter().any(|n| claimed.contains(n))
        {
            continue;
        }
        let mut group = site.nodes;
        absorb_dead_weight_dequantizers(view, &mut group, &claimed);
        claimed.extend(group.iter().copied());
        groups.push(group);
    }
    for &n in view.nodes().iter() {
        if view.domain(n) == MXFUSE_DOMAIN
            && schema::find(view.op_type(n)).is_some()
            && claimed.insert(n)
        {
            groups.push(vec![n]);
        }
    }
    Ok(groups)
}

/// Why each candidate was or was not claimed, one line per site.
fn describe(view: &dyn GraphView, sites: &[SiteInfo], log: &dyn Fn(&str)) {
    for s in sites {
        let at = view.node_name(s.anchor);
        match &s.verdict {
            Ok(()) => {
                let names: Vec<&str> = s.nodes.iter().map(|&n| view.node_name(n)).collect();
                log(&format!(
                    "mxfuse: {} claims {} nodes at {at}: {names:?}",
                    s.rule,
                    s.nodes.len()
                ));
            }
            Err(why) => log(&format!("mxfuse: {} refused at {at}: {why}", s.rule)),
        }
    }
}

/// Adds to `group` each `DequantizeLinear` of constants whose outputs only the group reads.
///
/// A site lists the nodes its rewrite replaces; an MX weight's `DequantizeLinear` is not among
/// them because `MxMatMul` reads the quantized weight and its scale directly, and the offline
/// pipeline's dead-code elimination removes the DQ afterwards. Left outside the claim, the DQ
/// would stay with ORT's CPU EP, which has no kernel for E8M0-scaled DequantizeLinear.
fn absorb_dead_weight_dequantizers(
    view: &dyn GraphView,
    group: &mut Vec<NodeId>,
    claimed: &HashSet<NodeId>,
) {
    let members: HashSet<NodeId> = group.iter().copied().collect();
    let mut extra = Vec::new();
    for &n in group.iter() {
        for v in view.inputs(n).iter().flatten() {
            let Some((p, _)) = view.producer(*v) else {
                continue;
            };
            if members.contains(&p) || claimed.contains(&p) || extra.contains(&p) {
                continue;
            }
            let is_weight_dq = view.domain(p) == ONNX_DOMAIN
                && view.op_type(p) == "DequantizeLinear"
                && view
                    .inputs(p)
                    .iter()
                    .flatten()
                    .all(|&i| view.is_constant(i));
            let only_group_reads = view.outputs(p).iter().all(|&o| {
                !view.is_graph_output(o)
                    && view.consumers(o).iter().all(|(c, _)| members.contains(c))
            });
            if is_weight_dq && only_group_reads {
                extra.push(p);
            }
        }
    }
    group.extend(extra);
}
