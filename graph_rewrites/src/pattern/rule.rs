//! The rule trait: a declarative pattern, a `check` that returns typed parameters or a reason,
//! and a `rewrite` that emits the replacement.

use std::any::Any;
use std::collections::{BTreeMap, HashSet};

use super::builder::{Pattern, VKind};
use super::emit::Emit;
use super::matched::{safety_check, Fuse, Match, Reject, Site};
use super::matcher::Matcher;
use crate::view::{GraphView, NodeId, ValueId};

/// Session / CLI settings the rules read. Every rank of a tensor-parallel job must see the
/// same settings, so fusion decisions never depend on rank-local state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleConfig {
    /// Force a scale rule ("floor" or "rceil") instead of the one the graph spells.
    pub scale_rule_override: Option<String>,
    /// SwiGLU: quantize the fp32 activation instead of reproducing the graph's roundings.
    pub swiglu_fp32_activation: bool,
    /// NaN policy of the emitted quantizers ("propagate" unless set).
    pub nan_policy: Option<String>,
    /// The largest Quark fake-quantized weight the rules read, quantize and check (setting
    /// `quark_weight_max_mib`, in MiB; `None`: [`crate::ir::QUARK_WEIGHT_MAX_BYTES`]).
    pub quark_weight_max_bytes: Option<u64>,
    /// Rule `mx_gather_dequant` runs (set by the pipeline, not a setting): `mxquant` leaves it
    /// the Quark fake quants of gathered constant experts it takes.
    pub gather_rule_runs: bool,
}

impl RuleConfig {
    /// Reads [`SETTINGS`] from key/value settings; any other key is an error (a mistyped key
    /// would otherwise leave its default in force without a word).
    pub fn from_settings(s: &BTreeMap<String, String>) -> Result<Self, String> {
        if let Some(k) = s.keys().find(|k| !SETTINGS.contains(&k.as_str())) {
            return Err(format!(
                "unknown setting '{k}' (known: {})",
                SETTINGS.join(", ")
            ));
        }
        let mut c = RuleConfig::default();
        if let Some(r) = s.get("scale_rule") {
            if r != "floor" && r != "rceil" {
                return Err(format!("scale_rule must be 'floor' or 'rceil', got '{r}'"));
            }
            c.scale_rule_override = Some(r.clone());
        }
        if let Some(v) = s.get("swiglu_fp32_activation") {
            c.swiglu_fp32_activation = parse_flag(v).ok_or_else(|| {
                format!(
                    "swiglu_fp32_activation must be 0 or 1 (or true / false, on / off, yes / no), \
                     got '{v}'"
                )
            })?;
        }
        if let Some(p) = s.get("nan_policy") {
            if p != "propagate" && p != "ignore" {
                return Err(format!(
                    "nan_policy must be 'propagate' or 'ignore', got '{p}'"
                ));
            }
            c.nan_policy = Some(p.clone());
        }
        if let Some(m) = s.get("quark_weight_max_mib") {
            let mib = m.trim().parse::<u64>().ok().filter(|&m| m <= 1 << 30);
            let Some(mib) = mib else {
                return Err(format!(
                    "quark_weight_max_mib must be a whole number of MiB (0 reads no Quark weight), \
                     got '{m}'"
                ));
            };
            c.quark_weight_max_bytes = Some(mib << 20);
        }
        Ok(c)
    }
}

/// The rule settings (`mxfuse rewrite --set KEY=VALUE`, provider options of the same names).
pub const SETTINGS: &[&str] = &[
    "scale_rule",
    "swiglu_fp32_activation",
    "nan_policy",
    "quark_weight_max_mib",
];

/// An on/off setting as the CLI and the provider options spell it: `1` / `true` / `on` / `yes`
/// or `0` / `false` / `off` / `no` (any case, surrounding blanks ignored).
pub fn parse_flag(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

/// A fusion rule. Implement this; the registry stores it as `&dyn DynRule`.
pub trait Rule: Sync + Send + 'static {
    /// Stable id: CLI flags, report keys, node metadata.
    const NAME: &'static str;
    /// What `check` learned and `rewrite` needs (no state is carried through `self`).
    type Params: 'static;
    /// Whether the rule only takes what every other rule left ([`DynRule::fallback`]).
    const FALLBACK: bool = false;
    /// The pattern, built once.
    fn pattern(&self) -> &Pattern;
    /// Semantic checks on a structural match: dtypes, shapes, constants, consumers.
    fn check(&self, m: &Match<'_>, cfg: &RuleConfig) -> Result<Fuse<Self::Params>, Reject>;
    /// Emits the replacement. The site's nodes are already removed; the replacement must
    /// produce every value in `site.produces`.
    fn rewrite(&self, site: &Site, params: Self::Params, e: &mut Emit<'_>) -> Result<(), String>;
    /// Whether a structural non-match rooted at `anchor` is worth a refusal in the report (with
    /// the most complete failed attempt as the reason), not silence: for roots that are plainly
    /// this rule's business, such as a run-time MXFP8 quantize spelled in a way the pattern
    /// does not know. Default: no.
    fn report_no_match(&self, _g: &dyn GraphView, _anchor: NodeId) -> Option<&'static str> {
        None
    }
}

/// Outcome of trying a rule at one root value.
pub enum Attempt {
    /// The structure does not match: why (the most complete failed attempt), and the graph
    /// nodes that attempt had matched.
    NoMatch(String, Vec<crate::view::NodeId>),
    /// The structure matches but the rule or the safety check refused it.
    Refused {
        anchor: crate::view::NodeId,
        reason: String,
    },
    /// Accepted: apply with [`DynRule::apply`].
    Accepted(Site, Box<dyn Any>),
}

/// Object-safe view of a [`Rule`].
pub trait DynRule: Sync + Send {
    fn name(&self) -> &'static str;
    /// (domain, op_type) pairs that can produce the root value: only their outputs are tried.
    fn root_ops(&self) -> Vec<(&'static str, &'static str)>;
    fn try_at(&self, g: &dyn GraphView, root: ValueId, cfg: &RuleConfig) -> Attempt {
        self.try_at_avoiding(g, root, cfg, &HashSet::new())
    }
    /// [`DynRule::try_at`] binding none of the nodes in `avoid` (those another fusion of the
    /// same scan took): the pattern's other spellings of the site are tried instead, e.g. a
    /// second RMSNorm of a residual sum the first norm's fusion absorbed reads that sum as its
    /// input (`s = x`) instead of absorbing the Add again.
    fn try_at_avoiding(
        &self,
        g: &dyn GraphView,
        root: ValueId,
        cfg: &RuleConfig,
        avoid: &HashSet<NodeId>,
    ) -> Attempt;
    fn apply(&self, site: &Site, params: Box<dyn Any>, e: &mut Emit<'_>) -> Result<(), String>;
    /// A fallback rule runs only on what every other rule left: the pipeline tries it once the
    /// others reach their fixed point, and `find_sites` after their pass over the whole graph.
    fn fallback(&self) -> bool;
}

impl<R: Rule> DynRule for R {
    fn name(&self) -> &'static str {
        R::NAME
    }

    fn root_ops(&self) -> Vec<(&'static str, &'static str)> {
        let p = self.pattern();
        let mut out = Vec::new();
        let mut stack = vec![p.root];
        while let Some(v) = stack.pop() {
            match &p.values[v.0 as usize].kind {
                VKind::Out { node, .. } => {
                    out.extend(p.nodes[node.0 as usize].op.spellings());
                }
                VKind::Alt(alts) => stack.extend(alts.iter().copied()),
                VKind::Input | VKind::Const(_) => {}
            }
        }
        out.sort();
        out.dedup();
        out
    }

    fn try_at_avoiding(
        &self,
        g: &dyn GraphView,
        root: ValueId,
        cfg: &RuleConfig,
        avoid: &HashSet<NodeId>,
    ) -> Attempt {
        let pat = self.pattern();
        let Some((anchor, _)) = g.producer(root) else {
            return Attempt::NoMatch("root has no producer".into(), Vec::new());
        };
        let matcher = Matcher::avoiding(g, pat, avoid);
        let bindings = match matcher.run(root) {
            Ok(b) => b,
            Err(why) => {
                return match self.report_no_match(g, anchor) {
                    Some(what) => Attempt::Refused {
                        anchor,
                        reason: format!("{what}: {why}"),
                    },
                    None => Attempt::NoMatch(why, matcher.near_miss_nodes()),
                }
            }
        };
        let m = Match::new(g, pat, bindings, root);
        let fuse = match self.check(&m, cfg) {
            Ok(f) => f,
            Err(Reject(reason)) => return Attempt::Refused { anchor, reason },
        };
        match safety_check(&m, &fuse) {
            Ok((nodes, produces)) => {
                let site = Site {
                    rule: R::NAME,
                    anchor,
                    nodes,
                    produces,
                    notes: fuse.notes,
                };
                Attempt::Accepted(site, Box::new(fuse.params))
            }
            Err(reason) => Attempt::Refused { anchor, reason },
        }
    }

    fn fallback(&self) -> bool {
        R::FALLBACK
    }

    fn apply(&self, site: &Site, params: Box<dyn Any>, e: &mut Emit<'_>) -> Result<(), String> {
        let params = params
            .downcast::<R::Params>()
            .map_err(|_| format!("{}: parameter type mismatch", R::NAME))?;
        self.rewrite(site, *params, e)
    }
}
