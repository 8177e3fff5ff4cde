//! What the EP claims in `GetCapability`: the sites the rewrite rules accept on ORT's graph
//! (the same `find_sites` the offline CLI's pipeline runs; a site includes the MX weight
//! `DequantizeLinear`s only it reads; the fallback rule `mx_dequant` claims the E8M0
//! `DequantizeLinear`s the others left), plus com.mxfuse nodes of offline-rewritten models.

use std::collections::HashSet;

use graph_rewrites::pipeline::{find_sites, PipelineOptions, SiteInfo};
use graph_rewrites::view::{GraphView, NodeId, MXFUSE_DOMAIN};

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
        let group = site.nodes;
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
