//! `mxfuse rewrite`: load, run the pipeline, save, report.

use std::fmt::Write as _;

use super::args::RewriteArgs;
use super::notes::{e8m0_qdq_note, foreign_note, ir_note, nested_mx_note};
use super::paths::check_output_paths;
use super::stats::PhaseTimer;
use super::{parse_settings, report, table, CliError};
use crate::io::{external_locations, graph_from_model, load_model, save_graph};
use crate::pattern::RuleConfig;
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
        // Near misses are always recorded: the text output summarises them.
        explain: true,
        settings: parse_settings(&args.settings)?,
    };
    // A bad setting is a command-line error (exit 2), found before the model is read.
    RuleConfig::from_settings(&opts.settings).map_err(CliError::Usage)?;
    let mut timer = PhaseTimer::start();
    let model = load_model(&args.input)?;
    check_output_paths(
        &args.input,
        &args.output,
        args.report.as_deref(),
        &external_locations(&model)?,
    )?;
    let nested = nested_mx_note(&model) + &ir_note(&model);
    let mut g = graph_from_model(model, &args.input)?;
    timer.lap("load");
    let report = run_pipeline(&mut g, &opts)?;
    timer.lap("rewrite");
    let foreign = foreign_note(&g) + &e8m0_qdq_note(&g);
    // The report first: a report path that cannot be written must fail before the model is
    // (over)written, not after.
    if let Some(path) = &args.report {
        report::write_report(path, &args.input, &args.output, &report)?;
    }
    save_graph(g, &args.output)?;
    timer.lap("save");
    let mut out = table::summary_table(&report);
    let cap = if args.explain {
        out.push_str(&table::explain_lines(&report));
        usize::MAX
    } else {
        table::NEAR_MISS_LINES
    };
    out.push_str(&table::near_miss_lines(&report, cap));
    out.push_str(&foreign);
    out.push_str(&nested);
    let _ = writeln!(out, "wrote {}", args.output.display());
    if args.stats {
        let _ = writeln!(out, "{}", timer.summary());
    }
    Ok(out)
}
