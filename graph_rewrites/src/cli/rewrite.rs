//! `mxfuse rewrite`: load, run the pipeline, save, report.

use std::fmt::Write as _;

use super::args::RewriteArgs;
use super::stats::PhaseTimer;
use super::{parse_settings, report, table, CliError};
use crate::io::{load_graph, save_graph};
use crate::pipeline::{rule_names, run_pipeline, PipelineOptions};

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
    save_graph(g, &args.output)?;
    timer.lap("save");
    if let Some(path) = &args.report {
        report::write_report(path, &args.input, &args.output, &report)?;
    }
    let mut out = table::summary_table(&report);
    if args.explain {
        out.push_str(&table::explain_lines(&report));
    }
    let _ = writeln!(out, "wrote {}", args.output.display());
    if args.stats {
        let _ = writeln!(out, "{}", timer.summary());
    }
    Ok(out)
}
