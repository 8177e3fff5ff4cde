//! REPORT.json: the pipeline report plus the input and output paths.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::pipeline::{Fusion, Rejection, RewriteReport};
use crate::summary::{LayerSummary, QuantizeOps};
use crate::Error;

/// `{"input", "output", "counts": {RULE: n}, "fusions": [...], "rejections": [...],
/// "quantize_ops": {"before", "after"}, "layers": [{"layer", "fused", "refused"}]}`.
#[derive(Debug, Serialize)]
pub struct ReportJson<'a> {
    pub input: String,
    pub output: String,
    pub counts: &'a BTreeMap<String, usize>,
    pub fusions: &'a [Fusion],
    pub rejections: &'a [Rejection],
    /// Candidates whose structure did not match, and the deepest mismatch (`mxfuse rewrite`
    /// always records them; a library caller with `PipelineOptions::explain`).
    #[serde(skip_serializing_if = "<[Rejection]>::is_empty")]
    pub near_misses: &'a [Rejection],
    /// Separate activation-quantize ops (launches) before and after the rewrite.
    pub quantize_ops: &'a QuantizeOps,
    /// Fused and refused per decoder layer.
    pub layers: &'a [LayerSummary],
    /// Duplicate quantize-chain nodes merged before the rules ran.
    #[serde(skip_serializing_if = "crate::pipeline::is_zero")]
    pub merged_duplicates: usize,
}

/// Writes the report as pretty-printed JSON (deterministic: counts are sorted by rule name,
/// fusions and rejections keep pipeline order).
pub fn write_report(
    path: &Path,
    input: &Path,
    output: &Path,
    report: &RewriteReport,
) -> Result<(), Error> {
    let json = ReportJson {
        input: input.display().to_string(),
        output: output.display().to_string(),
        counts: &report.counts,
        fusions: &report.fusions,
        rejections: &report.rejections,
        near_misses: &report.near_misses,
        quantize_ops: &report.quantize_ops,
        layers: &report.layers,
        merged_duplicates: report.merged_duplicates,
    };
    let mut text = serde_json::to_string_pretty(&json)
        .map_err(|e| Error::Invalid(format!("cannot serialise the report: {e}")))?;
    text.push('\n');
    crate::io::write_atomically(path, text.as_bytes())
}
