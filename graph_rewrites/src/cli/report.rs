//! REPORT.json: the pipeline report plus the input and output paths.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::pipeline::{Fusion, Rejection, RewriteReport};
use crate::Error;

/// `{"input", "output", "counts": {RULE: n}, "fusions": [...], "rejections": [...]}`.
#[derive(Debug, Serialize)]
pub struct ReportJson<'a> {
    pub input: String,
    pub output: String,
    pub counts: &'a BTreeMap<String, usize>,
    pub fusions: &'a [Fusion],
    pub rejections: &'a [Rejection],
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
    };
    let mut text = serde_json::to_string_pretty(&json)
        .map_err(|e| Error::Invalid(format!("cannot serialise the report: {e}")))?;
    text.push('\n');
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}
