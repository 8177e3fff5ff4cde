//! Candidate sites for `mxfuse inspect`: what each rule would fuse, and why it refuses the rest.
//!
//! Sites come from a dry run of the pipeline with `explain` on a copy of the graph: each fusion
//! is an accepted site (with the nodes it replaced and created), each rejection a refused one.

use crate::ir::Graph;
use crate::pipeline::{display_name, run_pipeline, PipelineOptions};
use crate::view::NodeId;
use crate::Error;

/// One candidate site a rule looked at.
#[derive(Clone, Debug, PartialEq)]
pub struct Site {
    pub rule: String,
    /// The node the site is anchored at (input model).
    pub anchor: String,
    /// Nodes of the input model the site covers (for refusals: the anchor).
    pub nodes: Vec<String>,
    /// Nodes the fusion created, in the rewritten graph (empty for refusals).
    pub created: Vec<String>,
    /// `nodes` by id in the input graph, and `created` in the rewritten one: what the views
    /// draw (ONNX lets node names repeat, or be empty).
    pub node_ids: Vec<NodeId>,
    pub created_ids: Vec<NodeId>,
    /// `Err(reason)` for a refused site.
    pub verdict: Result<(), String>,
}

/// All sites, accepted ones first (pipeline order), then refusals; plus the rewritten graph the
/// `created` names refer to.
pub fn candidate_sites(g: &Graph, opts: &PipelineOptions) -> Result<(Vec<Site>, Graph), Error> {
    let mut rewritten = g.clone();
    let opts = PipelineOptions {
        explain: true,
        ..opts.clone()
    };
    let report = run_pipeline(&mut rewritten, &opts)?;
    // The anchor of a fusion is the node the rule was tried at (what its refusals and the EP's
    // log name it by), not the first node it removed (often a weight's DequantizeLinear).
    let accepted = report.fusions.into_iter().map(|f| Site {
        rule: f.rule,
        anchor: display_name(g, f.anchor),
        nodes: f.replaced,
        created: f.created,
        node_ids: f.replaced_ids,
        created_ids: f.created_ids,
        verdict: Ok(()),
    });
    let refused = report.rejections.into_iter().map(|r| Site {
        rule: r.rule,
        anchor: r.at.clone(),
        nodes: vec![r.at],
        created: vec![],
        node_ids: r.anchor.into_iter().collect(),
        created_ids: vec![],
        verdict: Err(r.reason),
    });
    Ok((accepted.chain(refused).collect(), rewritten))
}
