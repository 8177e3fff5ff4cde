//! What the EP claims in `GetCapability`: the sites the rewrite rules accept on ORT's graph
//! (the same `find_sites` the offline CLI's pipeline runs; a site includes the MX weight
//! `DequantizeLinear`s only it reads; the fallback rule `mx_dequant` claims the E8M0
//! `DequantizeLinear`s the others left), plus com.mxfuse nodes of offline-rewritten models.
//!
//! Every placement claims the same sites: the device program (the GPU, or its host stand-in)
//! has a kernel for every `com.mxfuse` op the rules emit.

use std::collections::HashSet;
use std::sync::Arc;

use graph_rewrites::pipeline::weight_checks::WeightChecks;
use graph_rewrites::pipeline::{find_sites_with_checks, PipelineOptions, SiteInfo};
use graph_rewrites::view::{is_quark_mx, GraphView, NodeId, MXFUSE_DOMAIN};

use crate::error::{Error, Result};
use crate::ops::schema;

/// What became of an accepted site: claimed as a fused node of its own, joined to an earlier
/// claim (a shared Quark weight fake-quant), or not claimed because it overlaps earlier claims.
#[derive(Clone, Debug, PartialEq)]
enum Decision {
    Claimed,
    /// Joined to the claim of the site anchored at this node.
    Joined(NodeId),
    /// Not claimed: why.
    Overlaps(String),
}

/// Groups of nodes to claim, one fused node each. Each candidate site, and what became of it,
/// is described to `explain` (verbose diagnostics), when given; each standard E8M0
/// `QuantizeLinear` / `DequantizeLinear` left unclaimed, with why, to `unrunnable`
/// ([`unclaimed_e8m0_nodes`]). The rules' Quark weight checks go to `checks` (the session's:
/// `Compile` reuses them).
pub fn claim_groups(
    view: &dyn GraphView,
    options: &PipelineOptions,
    checks: &Arc<WeightChecks>,
    explain: Option<&dyn Fn(&str)>,
    unrunnable: &dyn Fn(&str),
) -> Result<Vec<Vec<NodeId>>> {
    let sites =
        find_sites_with_checks(view, options, checks).map_err(|e| Error::invalid(e.to_string()))?;
    let mut claimed = HashSet::new();
    // Each group with the anchor of the site that opened it.
    let mut groups: Vec<(NodeId, Vec<NodeId>)> = Vec::new();
    let mut decisions = Vec::with_capacity(sites.len());
    for site in &sites {
        if site.verdict.is_err() || site.nodes.is_empty() {
            decisions.push(None);
            continue;
        }
        if site.nodes.iter().any(|n| claimed.contains(n)) {
            // Another float reader of a Quark weight fake-quant an earlier weight-only site
            // claimed: one fused node takes both (Compile's rewrite reads the weight in place for
            // each, as the offline rewrite does), unless that would make a cycle.
            let decision = match joins_shared_quark_weight(view, &groups, site) {
                Ok(g) => {
                    let nodes: Vec<NodeId> = site
                        .nodes
                        .iter()
                        .copied()
                        .filter(|n| !groups[g].1.contains(n))
                        .collect();
                    claimed.extend(nodes.iter().copied());
                    groups[g].1.extend(nodes);
                    Decision::Joined(groups[g].0)
                }
                Err(why) => Decision::Overlaps(why),
            };
            decisions.push(Some(decision));
            continue;
        }
        claimed.extend(site.nodes.iter().copied());
        groups.push((site.anchor, site.nodes.clone()));
        decisions.push(Some(Decision::Claimed));
    }
    if let Some(log) = explain {
        describe(view, &sites, &decisions, log);
    }
    for line in unclaimed_e8m0_nodes(view, &sites, &claimed) {
        unrunnable(&line);
    }
    let mut groups: Vec<Vec<NodeId>> = groups.into_iter().map(|(_, g)| g).collect();
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

/// One line per standard `QuantizeLinear` / `DequantizeLinear` with a FLOAT8E8M0 scale that no
/// claim took, with the reason a rule gave at it (or that none was tried: rules turned off).
/// ORT's CPU EP has no kernel for these, so the session then fails with ORT's bare
/// "Could not find an implementation for DequantizeLinear(24) node with name ''" (new-user probe
/// 7: an invalid scale shape, a refusal only VERBOSE said).
fn unclaimed_e8m0_nodes(
    view: &dyn GraphView,
    sites: &[SiteInfo],
    claimed: &HashSet<NodeId>,
) -> Vec<String> {
    use graph_rewrites::pattern::predicates::dtype::FLOAT8E8M0;
    view.nodes()
        .iter()
        .copied()
        .filter(|n| {
            view.domain(*n).is_empty()
                && matches!(view.op_type(*n), "QuantizeLinear" | "DequantizeLinear")
                && !claimed.contains(n)
                && view.inputs(*n).get(1).copied().flatten().is_some_and(|s| {
                    view.tensor_info(s)
                        .is_some_and(|t| t.elem_type == FLOAT8E8M0)
                })
        })
        .map(|n| {
            let why = sites
                .iter()
                .rev()
                .find_map(|s| match &s.verdict {
                    Err(why) if s.anchor == n => Some(format!("{}: {why}", s.rule)),
                    _ => None,
                })
                .unwrap_or_else(|| "no enabled rule takes it".into());
            format!(
                "mxfuse: {} '{}' (FLOAT8E8M0 scale) is not claimed and ORT's CPU EP has no \
                 kernel for it ({why})",
                view.op_type(n),
                view.node_label(n)
            )
        })
        .collect()
}

/// The group a weight-only site joins: the one group it overlaps, where the overlap is Quark
/// weight fake-quants of constants (ONNX Runtime duplicates a shared DequantizeLinear per reader
/// before the EP sees the graph, not a custom op: without this, a second float reader of a shared
/// Quark weight stayed unfused on the EP while the offline rewrite fused it), and the union is
/// still a valid fused node (no path leaves it and comes back). Otherwise why not.
fn joins_shared_quark_weight(
    view: &dyn GraphView,
    groups: &[(NodeId, Vec<NodeId>)],
    site: &SiteInfo,
) -> std::result::Result<usize, String> {
    let mut hit = groups
        .iter()
        .enumerate()
        .filter(|(_, (_, g))| site.nodes.iter().any(|n| g.contains(n)));
    let Some((i, (anchor, g))) = hit.next() else {
        return Err("internal: overlaps no claim".into());
    };
    let taken: Vec<String> = site
        .nodes
        .iter()
        .filter(|n| g.contains(n))
        .map(|&n| format!("'{}'", view.node_label(n)))
        .collect();
    let overlap = format!(
        "its nodes {} are taken by the claim at '{}'",
        taken.join(", "),
        view.node_label(*anchor)
    );
    if site.rule != "mx_weight_matmul" {
        return Err(overlap);
    }
    if hit.next().is_some() {
        return Err(format!(
            "{overlap} and another claim (only a site overlapping one claim joins it)"
        ));
    }
    let shared_weights_only = site.nodes.iter().filter(|n| g.contains(n)).all(|&n| {
        is_quark_mx(view, n)
            && view
                .inputs(n)
                .iter()
                .flatten()
                .all(|&v| view.is_constant(v))
    });
    if !shared_weights_only {
        return Err(format!(
            "{overlap}, not only Quark weight fake-quants of constants (what a weight-only site may share)"
        ));
    }
    let mut union: HashSet<NodeId> = g.iter().copied().collect();
    union.extend(site.nodes.iter().copied());
    if leaves_and_returns(view, &union) {
        return Err(format!(
            "{overlap}, and joining it would make a cycle (a path leaves that fused node and comes back into it)"
        ));
    }
    Ok(i)
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

/// Why each candidate was or was not claimed, one line per site: the rule's verdict, and for an
/// accepted site what `claim_groups` decided (`decisions`, one per site).
fn describe(
    view: &dyn GraphView,
    sites: &[SiteInfo],
    decisions: &[Option<Decision>],
    log: &dyn Fn(&str),
) {
    for (s, decision) in sites.iter().zip(decisions) {
        // node_label: exporters may leave names empty; the label is then op type -> output.
        let at = format!("'{}'", view.node_label(s.anchor));
        match (&s.verdict, decision) {
            (Err(why), _) => log(&format!("mxfuse: {} refused at {at}: {why}", s.rule)),
            (Ok(()), Some(Decision::Overlaps(why))) => log(&format!(
                "mxfuse: {} accepted at {at} but not claimed: {why}",
                s.rule
            )),
            (Ok(()), decision) => {
                let names: Vec<String> = s.nodes.iter().map(|&n| view.node_label(n)).collect();
                let joined = match decision {
                    Some(Decision::Joined(a)) => format!(
                        " (joined to the claim at '{}': they share a Quark weight fake-quant)",
                        view.node_label(*a)
                    ),
                    _ => String::new(),
                };
                log(&format!(
                    "mxfuse: {} claims {} nodes at {at}: {names:?}{joined}",
                    s.rule,
                    s.nodes.len()
                ));
                for note in &s.notes {
                    log(&format!("mxfuse: {} at {at} leaves out: {note}", s.rule));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use graph_rewrites::pattern::predicates::dtype::FLOAT;
    use graph_rewrites::testing::ModelBuilder;
    use std::cell::RefCell;

    /// `x [4, 64]`; `wf = MXQuantizeDequantize(w [64, 64])` (a weight exactly MXFP8) read by two
    /// MatMuls: `MatMul(x, wf) = y1` and `MatMul(x2, wf) = y2`, `x2 = Relu(x)` or, with `chain`,
    /// `Relu(y1)` (the second MatMul then reads the first's output).
    fn shared_quark_weight(chain: bool) -> graph_rewrites::ir::Graph {
        shared_quark_weight_model(chain).graph().unwrap()
    }

    fn shared_quark_weight_model(chain: bool) -> ModelBuilder {
        let mut b = ModelBuilder::new(24);
        b.opset("com.amd.quark", 1);
        b.input("x", FLOAT, &[4, 64]);
        let raw: Vec<u8> = (0..64 * 64)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013 * (1.0 + (i % 7) as f32))
            .flat_map(|v| v.to_le_bytes())
            .collect();
        b.init_raw("w", FLOAT, &[64, 64], raw);
        b.quark_fake_quant("w", "wf", 32, 0);
        b.node("MatMul", &["x", "wf"], &["y1"])
            .node("Relu", &[if chain { "y1" } else { "x" }], &["x2"])
            .node("MatMul", &["x2", "wf"], &["y2"])
            .output("y1", FLOAT, &[4, 64])
            .output("y2", FLOAT, &[4, 64]);
        b
    }

    fn claim_with_log(g: &graph_rewrites::ir::Graph) -> (Vec<Vec<NodeId>>, Vec<String>) {
        let lines = RefCell::new(Vec::new());
        let log = |l: &str| lines.borrow_mut().push(l.to_string());
        let checks = Arc::new(WeightChecks::for_session());
        let groups =
            claim_groups(g, &PipelineOptions::default(), &checks, Some(&log), &|_| {}).unwrap();
        (groups, lines.into_inner())
    }

    /// The second reader of a shared Quark weight whose join would make a cycle is not claimed,
    /// and the verbose log says so with the reason (it said "claims" for it).
    #[test]
    fn an_overlapping_site_not_claimed_is_logged_as_not_claimed() {
        let g = shared_quark_weight(true);
        let (groups, lines) = claim_with_log(&g);
        assert_eq!(groups.len(), 1, "{lines:#?}");
        assert_eq!(groups[0].len(), 2, "{lines:#?}"); // the fake-quant and the first MatMul
        let claims: Vec<_> = lines.iter().filter(|l| l.contains(" claims ")).collect();
        assert_eq!(claims.len(), 1, "{lines:#?}");
        let not: Vec<_> = lines
            .iter()
            .filter(|l| l.contains("mx_weight_matmul accepted at") && l.contains("not claimed"))
            .collect();
        assert_eq!(not.len(), 1, "{lines:#?}");
        assert!(
            not[0].contains("are taken by the claim at") && not[0].contains("make a cycle"),
            "{lines:#?}"
        );
    }

    /// `Compile` reuses `GetCapability`'s Quark weight check: the session's [`WeightChecks`]
    /// ran it once, for the claim, and the rewrite of the claimed subgraph (a fresh IR graph,
    /// with a cache taking from the session's, as `compile_one` runs it) checks nothing, takes
    /// the bytes out of the session's cache and stores the same bytes as a rewrite on its own.
    #[test]
    fn compile_reuses_the_quark_weight_check_of_get_capability() {
        use graph_rewrites::pipeline::run_pipeline_with_checks;
        use graph_rewrites::pipeline::weight_checks::CheckCounts;
        let g = shared_quark_weight(false);
        let session = Arc::new(WeightChecks::for_session());
        let groups =
            claim_groups(&g, &PipelineOptions::default(), &session, None, &|_| {}).unwrap();
        assert_eq!(groups.len(), 1);
        assert_eq!(session.counts(), CheckCounts { run: 1, reused: 0 });
        assert_eq!(session.len(), 1);
        let mut compiled = shared_quark_weight(false);
        let rewrite = Arc::new(WeightChecks::taking_from(session.clone()));
        run_pipeline_with_checks(&mut compiled, &PipelineOptions::default(), &rewrite).unwrap();
        assert_eq!(rewrite.counts().run, 0, "{:?}", rewrite.counts());
        assert!(rewrite.counts().reused >= 1, "{:?}", rewrite.counts());
        assert!(session.is_empty(), "the rewrite took the bytes");
        let mut alone = shared_quark_weight(false);
        graph_rewrites::pipeline::run_pipeline(&mut alone, &PipelineOptions::default()).unwrap();
        let consts = |g: &graph_rewrites::ir::Graph| -> Vec<Vec<u8>> {
            g.initializers()
                .map(|t| t.raw_data.clone().unwrap_or_default())
                .collect()
        };
        assert_eq!(consts(&compiled), consts(&alone));
    }

    /// Without the cycle it joins the first claim, and the log says that too; the same with
    /// the weight's fake quant under Quark's deprecated name `com.vai.quantize::MXFixNeuron`.
    #[test]
    fn a_joined_site_is_logged_as_joined() {
        let b = shared_quark_weight_model(false);
        for g in [b.graph().unwrap(), b.fix_neuron().graph().unwrap()] {
            let (groups, lines) = claim_with_log(&g);
            assert_eq!(groups.len(), 1, "{lines:#?}");
            assert_eq!(groups[0].len(), 3, "{lines:#?}");
            let claims: Vec<_> = lines.iter().filter(|l| l.contains(" claims ")).collect();
            assert_eq!(claims.len(), 2, "{lines:#?}");
            assert!(
                claims[1].contains("(joined to the claim at '") && !claims[0].contains("joined"),
                "{lines:#?}"
            );
        }
    }
}
