//! The rewrite pipeline: rules to a fixed point, then dead-code elimination, with a report.
//!
//! Order: the registry order (`rules::registry`) is the priority order; at most one rule fires
//! per root value per iteration, and sites never overlap (a node is removed by one fusion at
//! most). Fallback rules (`DynRule::fallback`: `mx_quant_linear`, `mx_dequant`) run only once the others fire no
//! more, so they never take a node a fusion could still absorb. Iterations repeat until nothing fires (capped at [`MAX_ITERATIONS`]), so a rule whose
//! input is another rule's output still gets its chance.
//!
//! Every scan of one run shares a [`WeightChecks`]: a Quark weight the check refuses is not
//! checked again in later iterations ([`weight_checks`] says why and how it is keyed); the
//! plugin EP passes its session's, so `Compile` reuses what `GetCapability` checked.

pub mod weight_checks;

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use serde::Serialize;

use crate::ir::Graph;
use crate::pattern::{Attempt, DynRule, Emit, RuleConfig, Site};
use crate::summary::{count_quantize_ops, per_layer, LayerSummary, QuantizeOps};
use crate::view::{GraphView, Memoized, NodeId};
use crate::Error;
use weight_checks::WeightChecks;

/// Cap on fixed-point iterations (MIGraphX uses 8 too).
pub const MAX_ITERATIONS: usize = 8;

/// Which rules run and how.
#[derive(Clone, Debug, Default)]
pub struct PipelineOptions {
    /// If non-empty, only these rules run.
    pub only: Vec<String>,
    /// Rules that do not run.
    pub disable: Vec<String>,
    /// Also record why each candidate's structure did not match (near misses).
    pub explain: bool,
    /// Rule settings: `scale_rule` (floor|rceil override), `swiglu_fp32_activation` (0|1),
    /// `nan_policy` (propagate|ignore), `quark_weight_max_mib` (MiB).
    pub settings: BTreeMap<String, String>,
}

/// One applied fusion.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Fusion {
    pub rule: String,
    /// The node the rule was tried at (the site is named after it), by id as `replaced_ids`.
    #[serde(skip)]
    pub anchor: NodeId,
    /// Names of the nodes the fusion removed.
    pub replaced: Vec<String>,
    /// Names of the nodes it created.
    pub created: Vec<String>,
    /// What the fusion left out and why (e.g. a reader it could not absorb).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The removed nodes' ids in the graph the pipeline ran on (ids stay valid in a clone of the
    /// graph from before the run): names need not be unique, or given at all.
    #[serde(skip)]
    pub replaced_ids: Vec<NodeId>,
    /// The created nodes' ids in the rewritten graph (a later fusion may have removed some).
    #[serde(skip)]
    pub created_ids: Vec<NodeId>,
}

/// One refused candidate site.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rejection {
    pub rule: String,
    /// Name of the node the candidate was anchored at.
    pub at: String,
    pub reason: String,
    /// That node's id (see [`Fusion::replaced_ids`]): refusals at two nodes of the same name are
    /// two refusals.
    #[serde(skip)]
    pub anchor: Option<NodeId>,
    /// For a near miss: the nodes its most complete attempt matched (every scan's, merged),
    /// which tell a near miss that saw more than a fusion at the same node took from one that
    /// did not (`cli::table::shown_near_misses`). Empty for a refusal.
    #[serde(skip)]
    pub matched: Vec<NodeId>,
}

/// What a pipeline run did. Serialised (with input/output paths added by the CLI) as REPORT.json.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RewriteReport {
    /// Fusions per rule name; every enabled rule appears, with 0 if it never fired.
    pub counts: BTreeMap<String, usize>,
    pub fusions: Vec<Fusion>,
    /// Candidates a rule refused (structure matched, a check failed), deduplicated.
    pub rejections: Vec<Rejection>,
    /// With `explain`: candidates whose structure did not match, and the deepest mismatch.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub near_misses: Vec<Rejection>,
    /// Separate activation-quantize ops before and after the rewrite.
    pub quantize_ops: QuantizeOps,
    /// Duplicate quantize-chain nodes merged before the rules ran
    /// ([`crate::ir::merge_quant_chains`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub merged_duplicates: usize,
    /// Fusions and refusals per decoder layer.
    pub layers: Vec<LayerSummary>,
}

/// For `#[serde(skip_serializing_if)]`: a count left out of the JSON when zero.
pub(crate) fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A candidate site as `inspect` and the provider see it.
#[derive(Clone, Debug)]
pub struct SiteInfo {
    pub rule: &'static str,
    /// The node producing the root value the rule was tried at.
    pub anchor: NodeId,
    /// Nodes the fusion would remove (empty unless accepted).
    pub nodes: Vec<NodeId>,
    /// `Ok` if accepted, else why not.
    pub verdict: Result<(), String>,
    /// Whether the structure matched (false = a near miss).
    pub structural: bool,
    /// For a near miss: the graph nodes its most complete attempt matched.
    pub matched: Vec<NodeId>,
    /// What an accepted fusion leaves out and why.
    pub notes: Vec<String>,
}

/// Names of all registered rules, in pipeline order.
pub fn rule_names() -> Vec<&'static str> {
    crate::rules::registry().iter().map(|r| r.name()).collect()
}

fn enabled_rules(opts: &PipelineOptions) -> Result<Vec<&'static dyn DynRule>, Error> {
    let all = crate::rules::registry();
    for name in opts.only.iter().chain(&opts.disable) {
        if !all.iter().any(|r| r.name() == name) {
            return Err(Error::Invalid(format!(
                "unknown rule '{name}' (known: {})",
                rule_names().join(", ")
            )));
        }
    }
    Ok(all
        .iter()
        .copied()
        .filter(|r| opts.only.is_empty() || opts.only.iter().any(|o| o == r.name()))
        .filter(|r| !opts.disable.iter().any(|d| d == r.name()))
        .collect())
}

struct Scan {
    accepted: Vec<(&'static dyn DynRule, Site, Box<dyn Any>)>,
    sites: Vec<SiteInfo>,
}

/// Tries every enabled rule at every candidate root, in topological order, claiming
/// non-overlapping accepted sites.
fn scan(
    g: &dyn GraphView,
    rules: &[&'static dyn DynRule],
    cfg: &RuleConfig,
    keep_near: bool,
    checks: &Arc<WeightChecks>,
) -> Scan {
    // The checks of this one scan share their work on constants (a Quark weight's quantization),
    // and it is dropped before the fusions are applied; `checks` outlives it.
    let memoized = Memoized::with_checks(g, checks.clone(), cfg.quark_weight_max_bytes);
    let g: &dyn GraphView = &memoized;
    let mut out = Scan {
        accepted: Vec::new(),
        sites: Vec::new(),
    };
    scan_pass(g, rules, cfg, keep_near, &mut HashSet::new(), &mut out);
    out
}

/// The rules that are not [`DynRule::fallback`] (`false`), or those that are (`true`).
fn tier(rules: &[&'static dyn DynRule], fallback: bool) -> Vec<&'static dyn DynRule> {
    rules
        .iter()
        .copied()
        .filter(|r| r.fallback() == fallback)
        .collect()
}

/// One pass of `rules` over the graph, skipping nodes in `claimed` and claiming what it accepts.
fn scan_pass(
    g: &dyn GraphView,
    rules: &[&'static dyn DynRule],
    cfg: &RuleConfig,
    keep_near: bool,
    claimed: &mut HashSet<NodeId>,
    out: &mut Scan,
) {
    let roots: Vec<Vec<(&str, &str)>> = rules.iter().map(|r| r.root_ops()).collect();
    for &n in g.nodes().iter() {
        if claimed.contains(&n) {
            continue;
        }
        let key = (g.domain(n), g.op_type(n));
        for &root in g.outputs(n) {
            for (rule, ops) in rules.iter().zip(&roots) {
                if !ops.contains(&key) {
                    continue;
                }
                match rule.try_at(g, root, cfg) {
                    Attempt::Accepted(site, params) => {
                        let (site, params) = if site.nodes.iter().any(|x| claimed.contains(x)) {
                            // Overlaps a fusion of this iteration. A weight-only site is still
                            // listed (not accepted): the provider, which sees the graph once,
                            // joins another float reader of a shared Quark weight fake-quant to
                            // the claim that took it.
                            if rule.name() == "mx_weight_matmul" {
                                out.sites.push(SiteInfo {
                                    rule: rule.name(),
                                    anchor: site.anchor,
                                    nodes: site.nodes.clone(),
                                    verdict: Ok(()),
                                    structural: true,
                                    matched: Vec::new(),
                                    notes: site.notes.clone(),
                                });
                                continue;
                            }
                            // Another spelling of the site that leaves the taken nodes alone: a
                            // second RMSNorm of a residual sum another norm's fusion absorbed
                            // (two norms of one sum: parallel attention / MLP blocks) reads
                            // that sum (`s = x`). Without it the next rule (`mxquant`) took
                            // the second norm's quantizer in this very scan and the norm never
                            // fused (new-user probe 12), online or offline. Otherwise the site
                            // is retried in the next iteration (offline).
                            match rule.try_at_avoiding(g, root, cfg, claimed) {
                                Attempt::Accepted(s, p)
                                    if !s.nodes.iter().any(|x| claimed.contains(x)) =>
                                {
                                    (s, p)
                                }
                                _ => continue,
                            }
                        } else {
                            (site, params)
                        };
                        claimed.extend(site.nodes.iter().copied());
                        out.sites.push(SiteInfo {
                            rule: rule.name(),
                            anchor: site.anchor,
                            nodes: site.nodes.clone(),
                            verdict: Ok(()),
                            structural: true,
                            matched: Vec::new(),
                            notes: site.notes.clone(),
                        });
                        out.accepted.push((*rule, site, params));
                        break;
                    }
                    Attempt::Refused { anchor, reason } => out.sites.push(SiteInfo {
                        rule: rule.name(),
                        anchor,
                        nodes: Vec::new(),
                        verdict: Err(reason),
                        structural: true,
                        matched: Vec::new(),
                        notes: Vec::new(),
                    }),
                    Attempt::NoMatch(why, matched) if keep_near => out.sites.push(SiteInfo {
                        rule: rule.name(),
                        anchor: n,
                        nodes: Vec::new(),
                        verdict: Err(why),
                        structural: false,
                        matched,
                        notes: Vec::new(),
                    }),
                    Attempt::NoMatch(..) => {}
                }
            }
        }
    }
}

/// Every candidate site each enabled rule sees on `g` (accepted, refused, and near misses),
/// without changing anything. Used by `mxfuse inspect` and the provider's `GetCapability`
/// (which claims the accepted ones).
pub fn find_sites(g: &dyn GraphView, opts: &PipelineOptions) -> Result<Vec<SiteInfo>, Error> {
    find_sites_with_checks(g, opts, &Arc::new(WeightChecks::refusals()))
}

/// [`find_sites`], its Quark weight checks shared through `checks` (the EP's session keeps
/// them for `Compile`).
pub fn find_sites_with_checks(
    g: &dyn GraphView,
    opts: &PipelineOptions,
    checks: &Arc<WeightChecks>,
) -> Result<Vec<SiteInfo>, Error> {
    let rules = enabled_rules(opts)?;
    let cfg = rule_config(opts, &rules)?;
    let memoized = Memoized::with_checks(g, checks.clone(), cfg.quark_weight_max_bytes);
    let g: &dyn GraphView = &memoized;
    // The fallback rules see what the others left in this one pass (the provider cannot
    // iterate: ORT hands it the graph once).
    let mut out = Scan {
        accepted: Vec::new(),
        sites: Vec::new(),
    };
    let mut claimed = HashSet::new();
    for fallback in [false, true] {
        let tier = tier(&rules, fallback);
        scan_pass(g, &tier, &cfg, opts.explain, &mut claimed, &mut out);
    }
    Ok(out.sites)
}

/// Runs the enabled rules to a fixed point on `g`, then removes the nodes made dead.
pub fn run_pipeline(g: &mut Graph, opts: &PipelineOptions) -> Result<RewriteReport, Error> {
    run_pipeline_with_checks(g, opts, &Arc::new(WeightChecks::refusals()))
}

/// [`run_pipeline`], its Quark weight checks shared through `checks` (the EP's `Compile` passes
/// the session's, which `GetCapability` filled).
pub fn run_pipeline_with_checks(
    g: &mut Graph,
    opts: &PipelineOptions,
    checks: &Arc<WeightChecks>,
) -> Result<RewriteReport, Error> {
    let rules = enabled_rules(opts)?;
    run_rules_with_checks(g, &rules, opts, checks)
}

/// The settings of `opts` and which of the rules that read another's presence run.
fn rule_config(
    opts: &PipelineOptions,
    rules: &[&'static dyn DynRule],
) -> Result<RuleConfig, Error> {
    let mut cfg = RuleConfig::from_settings(&opts.settings).map_err(Error::Invalid)?;
    cfg.gather_rule_runs = rules.iter().any(|r| r.name() == "mx_gather_dequant");
    Ok(cfg)
}

/// [`run_pipeline`] with an explicit rule list (tests use rules outside the registry);
/// `opts.only` / `opts.disable` are not consulted.
pub fn run_rules(
    g: &mut Graph,
    rules: &[&'static dyn DynRule],
    opts: &PipelineOptions,
) -> Result<RewriteReport, Error> {
    run_rules_with_checks(g, rules, opts, &Arc::new(WeightChecks::refusals()))
}

fn run_rules_with_checks(
    g: &mut Graph,
    rules: &[&'static dyn DynRule],
    opts: &PipelineOptions,
    checks: &Arc<WeightChecks>,
) -> Result<RewriteReport, Error> {
    let cfg = rule_config(opts, rules)?;
    let mut report = RewriteReport::default();
    for r in rules {
        report.counts.insert(r.name().to_string(), 0);
    }
    let mut rejections = BTreeSet::new();
    // Near misses as refusals are deduplicated, each with the nodes its attempts matched.
    let mut near: BTreeMap<Rejection, BTreeSet<NodeId>> = BTreeMap::new();
    report.quantize_ops.before = count_quantize_ops(&*g);
    report.merged_duplicates = crate::ir::merge_quant_chains::merge_duplicate_quant_chains(g);
    if report.merged_duplicates > 0 {
        g.topo_sort()?;
    }
    let (main, fallback) = (tier(rules, false), tier(rules, true));
    for _ in 0..MAX_ITERATIONS {
        let mut found = scan(&*g, &main, &cfg, opts.explain, checks);
        if found.accepted.is_empty() && !fallback.is_empty() {
            // The others are at their fixed point: the fallback rules take what is left.
            let more = scan(&*g, &fallback, &cfg, opts.explain, checks);
            found.sites.extend(more.sites);
            found.accepted = more.accepted;
        }
        for s in &found.sites {
            if let Err(reason) = &s.verdict {
                let rej = Rejection {
                    rule: s.rule.into(),
                    at: display_name(&*g, s.anchor),
                    reason: reason.clone(),
                    anchor: Some(s.anchor),
                    matched: Vec::new(),
                };
                if s.structural {
                    rejections.insert(rej);
                } else {
                    near.entry(rej).or_default().extend(&s.matched);
                }
            }
        }
        if found.accepted.is_empty() {
            break;
        }
        for (rule, site, params) in found.accepted {
            report.fusions.push(apply(g, rule, &site, params)?);
            *report.counts.entry(rule.name().to_string()).or_default() += 1;
        }
        g.topo_sort()?;
        g.dce();
    }
    report.rejections = rejections.into_iter().collect();
    report.near_misses = near
        .into_iter()
        .map(|(r, matched)| Rejection {
            matched: matched.into_iter().collect(),
            ..r
        })
        .collect();
    report.quantize_ops.after = count_quantize_ops(&*g);
    report.layers = per_layer(&report.fusions, &report.rejections);
    Ok(report)
}

fn apply(
    g: &mut Graph,
    rule: &dyn DynRule,
    site: &Site,
    params: Box<dyn Any>,
) -> Result<Fusion, Error> {
    let anchor_name = display_name(&*g, site.anchor);
    let replaced: Vec<String> = site.nodes.iter().map(|n| display_name(&*g, *n)).collect();
    for &n in &site.nodes {
        g.remove_node(n);
    }
    let mut e = Emit::new(g, rule.name(), anchor_name.clone());
    rule.apply(site, params, &mut e).map_err(|why| {
        Error::Invalid(format!(
            "rule {} failed to rewrite at '{anchor_name}': {why}",
            rule.name()
        ))
    })?;
    let created = std::mem::take(&mut e.created);
    let created_ids = std::mem::take(&mut e.created_ids);
    for &v in &site.produces {
        if g.producer(v).is_none() {
            return Err(Error::Invalid(format!(
                "internal: rule {} did not re-produce '{}' at '{anchor_name}'",
                rule.name(),
                g.value_name(v)
            )));
        }
    }
    Ok(Fusion {
        rule: rule.name().to_string(),
        anchor: site.anchor,
        replaced,
        created,
        notes: site.notes.clone(),
        replaced_ids: site.nodes.clone(),
        created_ids,
    })
}

/// A node's name for reports, or — for an unnamed node (ONNX allows them) — the name of its
/// first output, which is unique in the graph.
pub fn display_name(g: &dyn GraphView, n: NodeId) -> String {
    match g.node_name(n) {
        "" => g
            .outputs(n)
            .first()
            .map(|v| g.value_name(*v).to_string())
            .unwrap_or_default(),
        name => name.to_string(),
    }
}
