//! `mxfuse inspect`: op histogram, opsets, candidate sites, optional Graphviz views.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::args::InspectArgs;
use super::sites::{candidate_sites, Site};
use super::{dot, parse_settings, CliError};
use crate::io::{external, load_graph};
use crate::ir::Graph;
use crate::onnx_pb::tensor_proto::DataType;
use crate::pattern::RuleConfig;
use crate::pipeline::PipelineOptions;
use crate::view::{Dim, GraphView, TensorInfo};
use crate::Error;

pub fn run_inspect(args: &InspectArgs) -> Result<String, CliError> {
    let opts = PipelineOptions {
        settings: parse_settings(&args.settings)?,
        ..PipelineOptions::default()
    };
    // A bad setting is a command-line error (exit 2), as for `rewrite`, found before the model
    // is read.
    RuleConfig::from_settings(&opts.settings).map_err(CliError::Usage)?;
    let g = load_graph(&args.input)?;
    let mut out = model_summary(&g, &args.input);
    let (sites, rewritten) = candidate_sites(&g, &opts)?;
    out.push_str(&sites_text(&sites));
    if let Some(dir) = &args.dot {
        write_dot_files(dir, &g, &rewritten, &sites)?;
        let fused = sites.iter().filter(|s| s.verdict.is_ok()).count();
        let _ = writeln!(
            out,
            "wrote {} site views to {} (a before view per site, an after view per fused one: {} files)",
            sites.len(),
            dir.display(),
            sites.len() + fused
        );
    }
    Ok(out)
}

/// Header, opsets, counts and the op histogram (most frequent first).
pub fn model_summary(g: &Graph, path: &Path) -> String {
    let mut out = String::new();
    let m = g.opset_imports();
    let _ = writeln!(out, "model: {}", path.display());
    let opsets: Vec<String> = m
        .iter()
        .map(|o| {
            format!(
                "{}={}",
                display_domain(o.domain.as_deref().unwrap_or("")),
                o.version.unwrap_or(0)
            )
        })
        .collect();
    let _ = writeln!(out, "opsets: {}", opsets.join(", "));
    let inits: Vec<_> = g.initializers().collect();
    let ext = inits.iter().filter(|t| external::is_external(t)).count();
    let _ = writeln!(
        out,
        "nodes: {}, initializers: {} ({} external)",
        g.node_count(),
        inits.len(),
        ext
    );
    let mut hist: BTreeMap<String, usize> = BTreeMap::new();
    for &n in g.nodes().iter() {
        let key = match g.domain(n) {
            "" => g.op_type(n).to_owned(),
            d => format!("{d}::{}", g.op_type(n)),
        };
        *hist.entry(key).or_default() += 1;
    }
    let mut hist: Vec<(String, usize)> = hist.into_iter().collect();
    hist.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let _ = writeln!(out, "op histogram:");
    for (op, n) in hist {
        let _ = writeln!(out, "  {n:>6}  {op}");
    }
    out
}

fn sites_text(sites: &[Site]) -> String {
    let mut out = format!("candidate sites: {}\n", sites.len());
    for s in sites {
        let _ = match &s.verdict {
            Ok(()) => writeln!(
                out,
                "  {}  fuse    at '{}' ({} node{} -> {})",
                s.rule,
                s.anchor,
                s.nodes.len(),
                if s.nodes.len() == 1 { "" } else { "s" },
                s.created.join(", ")
            ),
            Err(reason) => writeln!(out, "  {}  refuse  at '{}': {reason}", s.rule, s.anchor),
        };
    }
    out
}

/// `NNN_rule_before.dot` for every site and `NNN_rule_after.dot` for fused ones. Nodes are drawn
/// by id: names may repeat or be empty (a name would draw whichever node has it first).
fn write_dot_files(dir: &Path, before: &Graph, after: &Graph, sites: &[Site]) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    for (i, s) in sites.iter().enumerate() {
        let ids: Vec<_> = s
            .node_ids
            .iter()
            .copied()
            .filter(|&n| before.is_alive(n))
            .collect();
        let verdict = match &s.verdict {
            Ok(()) => "fused".to_owned(),
            Err(r) => format!("refused: {r}"),
        };
        let title = format!("{} at {} (before; {verdict})", s.rule, s.anchor);
        write_file(
            &dir.join(format!("{i:03}_{}_before.dot", s.rule)),
            &dot::site_dot(before, &ids, &title),
        )?;
        if s.verdict.is_ok() {
            // A later fusion may have taken a created node: it is not drawn.
            let ids: Vec<_> = s
                .created_ids
                .iter()
                .copied()
                .filter(|&n| after.is_alive(n))
                .collect();
            let title = format!("{} at {} (after)", s.rule, s.anchor);
            write_file(
                &dir.join(format!("{i:03}_{}_after.dot", s.rule)),
                &dot::site_dot(after, &ids, &title),
            )?;
        }
    }
    Ok(())
}

fn write_file(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

fn display_domain(d: &str) -> &str {
    if d.is_empty() {
        "ai.onnx"
    } else {
        d
    }
}

/// `float[batch,64]`-style text for a tensor type.
pub fn type_text(info: &TensorInfo) -> String {
    let elem = DataType::try_from(info.elem_type)
        .map(|t| t.as_str_name().to_lowercase())
        .unwrap_or_else(|_| format!("type{}", info.elem_type));
    match &info.shape {
        None => format!("{elem}[?]"),
        Some(dims) => {
            let dims: Vec<String> = dims.iter().map(Dim::to_string).collect();
            format!("{elem}[{}]", dims.join(","))
        }
    }
}
