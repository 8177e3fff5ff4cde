//! `mxfuse rewrite`: load, run the pipeline, save, report.

use std::fmt::Write as _;

use super::args::RewriteArgs;
use super::stats::PhaseTimer;
use super::{parse_settings, report, table, CliError};
use crate::io::{load_graph, save_graph};
use crate::pipeline::{rule_names, run_pipeline, PipelineOptions};
use crate::view::{GraphView, QUARK_DOMAIN};

/// Runs the command; returns what to print on stdout.
pub fn run_rewrite(args: &RewriteArgs) -> Result<String, CliError> {
    let known = rule_names();
    for rule in args.only.iter().chain(&args.disable) {
        if !known.contains(&rule.as_str()) {
            return Err(CliError::Usage(format!(
                "unknown rule '{rule}' (known: {})",
                known.join(", ")
            )));
        }
    }
    let opts = PipelineOptions {
        only: args.only.clone(),
        disable: args.disable.clone(),
        explain: args.explain,
        settings: parse_settings(&args.settings)?,
    };
    let mut timer = PhaseTimer::start();
    let mut g = load_graph(&args.input)?;
    timer.lap("load");
    let report = run_pipeline(&mut g, &opts)?;
    timer.lap("rewrite");
    let foreign = foreign_note(&g);
    save_graph(g, &args.output)?;
    timer.lap("save");
    if let Some(path) = &args.report {
        report::write_report(path, &args.input, &args.output, &report)?;
    }
    let mut out = table::summary_table(&report);
    if args.explain {
        out.push_str(&table::explain_lines(&report));
    }
    out.push_str(&foreign);
    let _ = writeln!(out, "wrote {}", args.output.display());
    if args.stats {
        let _ = writeln!(out, "{}", timer.summary());
    }
    Ok(out)
}

/// A line when the rewritten graph keeps AMD Quark nodes (those the rules refused): the custom-op
/// library does not register Quark's domain (ORT fails a session that registers a domain twice,
/// and Quark's own library registers it), so the offline model needs the plugin EP, or Quark's
/// library beside ours, to run. Empty otherwise.
fn foreign_note(g: &impl GraphView) -> String {
    let n = g
        .nodes()
        .iter()
        .filter(|&&n| g.domain(n) == QUARK_DOMAIN)
        .count();
    if n == 0 {
        return String::new();
    }
    format!(
        "note: {n} {QUARK_DOMAIN} node(s) stay unfused (refusals above): ONNX Runtime runs the \
         rewritten model with the mxfuse plugin EP, or with AMD Quark's custom-op library \
         registered beside libmxfuse_ep.so, not with the mxfuse custom-op library alone\n"
    )
}
