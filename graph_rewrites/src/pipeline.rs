//! The rewrite pipeline: rules to a fixed point, then dead-code elimination, with a report.
//!
//! (Stub signatures: the engine is being written; the CLI codes against these types.)

use std::collections::BTreeMap;

use serde::Serialize;

use crate::ir::Graph;

/// Which rules run and how.
#[derive(Clone, Debug, Default)]
pub struct PipelineOptions {
    /// If non-empty, only these rules run.
    pub only: Vec<String>,
    /// Rules that do not run.
    pub disable: Vec<String>,
    /// Record every rejection (not only the first few per rule) for `--explain`.
    pub explain: bool,
    /// Rule-specific settings, e.g. `scale_rule=rceil` (override), `swiglu_fp32_activation=1`.
    pub settings: BTreeMap<String, String>,
}

/// One applied fusion.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Fusion {
    pub rule: String,
    /// Names of the nodes the fusion removed.
    pub replaced: Vec<String>,
    /// Names of the nodes it created.
    pub created: Vec<String>,
}

/// One refused candidate site.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Rejection {
    pub rule: String,
    /// Name of the node the candidate was anchored at.
    pub at: String,
    pub reason: String,
}

/// What a pipeline run did. Serialised (with input/output paths added by the CLI) as REPORT.json.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RewriteReport {
    /// Fusions per rule name; every enabled rule appears, with 0 if it never fired.
    pub counts: BTreeMap<String, usize>,
    pub fusions: Vec<Fusion>,
    pub rejections: Vec<Rejection>,
}

/// Names of all registered rules, in pipeline order.
pub fn rule_names() -> Vec<&'static str> {
    crate::rules::registry().iter().map(|r| r.name()).collect()
}

/// Runs the enabled rules to a fixed point on `g`, then removes dead nodes.
pub fn run_pipeline(g: &mut Graph, opts: &PipelineOptions) -> Result<RewriteReport, crate::Error> {
    let _ = (g, opts);
    Ok(RewriteReport::default())
}
