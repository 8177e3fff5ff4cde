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
use graph_rewrites::view::{GraphView, NodeId, MXFUSE_DOMAIN};

use crate::error::{Error, Result};
use crate::ops::schema;

/// Rules whose output only the CPU kernels run: off on a device placement.
pub const CPU_ONLY_RULES: &[&str] = &["mx_weight_matmul"];

/// Whether the device program runs com.mxfuse node `n`: everything but a weight-only
/// `MxMatMul` (no `a_scale`, input 1).
pub fn device_can_run(view: &dyn GraphView, n: NodeId) -> bool {
    !(view.op_type(n) == "MxMatMul" && view.inputs(n).get(1).copied().flatten().is_none())
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
    let mut groups = Vec::new();
    for site in sites {
        if site.verdict.is_err()
            || site.nodes.is_empty()
            || site.nodes.iter().any(|n| claimed.contains(n))
        {
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
