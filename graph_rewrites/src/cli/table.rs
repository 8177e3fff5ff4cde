//! The summary table `mxfuse rewrite` prints: per rule, fusions, refusals and the commonest
//! refusal reasons.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;

use crate::pipeline::{Fusion, Rejection, RewriteReport};
use crate::view::NodeId;

/// How many distinct reasons the table shows per rule.
const TOP_REASONS: usize = 2;

/// The table as text, one line per rule in pipeline order (`mxfuse rules`; rules that only
/// refused are listed too).
pub fn summary_table(report: &RewriteReport) -> String {
    let mut rules: Vec<&str> = report.counts.keys().map(String::as_str).collect();
    for r in &report.rejections {
        if !rules.contains(&r.rule.as_str()) {
            rules.push(&r.rule);
        }
    }
    let order = crate::pipeline::rule_names();
    rules.sort_by_key(|r| order.iter().position(|o| o == r).unwrap_or(usize::MAX));
    let width = rules.iter().map(|r| r.len()).max().unwrap_or(0).max(4);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:width$}  {:>5}  {:>7}  commonest refusals",
        "rule", "fused", "refused"
    );
    for rule in rules {
        let fused = report.counts.get(rule).copied().unwrap_or(0);
        let refusals: Vec<&Rejection> = report
            .rejections
            .iter()
            .filter(|r| r.rule == rule)
            .collect();
        let reasons = commonest_reasons(&refusals)
            .into_iter()
            .map(|(reason, n)| format!("{reason} ({n})"))
            .collect::<Vec<_>>()
            .join("; ");
        let _ = writeln!(
            out,
            "{rule:width$}  {fused:>5}  {:>7}  {reasons}",
            refusals.len()
        );
    }
    let q = &report.quantize_ops;
    let saved = q.before.saturating_sub(q.after);
    let _ = writeln!(
        out,
        "separate MXFP8 quantize ops: {} before, {} after ({saved} launch{} saved)",
        q.before,
        q.after,
        if saved == 1 { "" } else { "es" }
    );
    if report.merged_duplicates > 0 {
        let _ = writeln!(
            out,
            "merged {} duplicate quantize-chain node(s) first (one activation quantized the same way \
             for several readers; ONNX Runtime's common-subexpression pass does the same online)",
            report.merged_duplicates
        );
    }
    out.push_str(&layer_lines(report));
    out
}

/// One line per decoder layer: what fused there and how many candidates were refused.
fn layer_lines(report: &RewriteReport) -> String {
    let mut out = String::new();
    if report.layers.len() < 2 {
        return out; // no layer structure in the node names: the rule table says it all
    }
    for l in &report.layers {
        let fused: Vec<String> = l.fused.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let fused = if fused.is_empty() {
            "nothing".to_string()
        } else {
            fused.join(", ")
        };
        let refused: Vec<&Rejection> = l.refused.iter().collect();
        let why = match commonest_reasons(&refused).first() {
            Some((reason, _)) => {
                let rule = refused
                    .iter()
                    .find(|r| r.reason == *reason)
                    .map_or("", |r| &r.rule);
                format!(" (commonest: {rule} — {reason})")
            }
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "  layer {:>5}: fused {fused}; refused {}{why}",
            l.layer,
            l.refused.len()
        );
    }
    out
}

/// The most frequent reasons, most frequent first, ties by reason text (deterministic).
fn commonest_reasons<'a>(refusals: &[&'a Rejection]) -> Vec<(&'a str, usize)> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in refusals {
        *counts.entry(r.reason.as_str()).or_default() += 1;
    }
    let mut v: Vec<(&str, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.truncate(TOP_REASONS);
    v
}

/// How many near misses the rewrite's text output lists (all of them with `--explain`).
pub const NEAR_MISS_LINES: usize = 8;

/// The near misses worth showing: candidates whose structure did not match a rule, one per
/// rule and node, except where the report already explains the node:
/// * a rule refused it (the table gives the refusal's reason);
/// * a (non-fallback) fusion took it and the near miss says nothing that fusion left: the fusion
///   is the same rule's, or it took every node the near miss's attempt had matched. E.g. the
///   norm rule's mismatch at a standalone quantizer `mxquant` fused (nothing in front of it is
///   a norm), or `mx_weight_matmul`'s at a MatMul an activation fusion absorbed;
/// * at a fused node, another rule's attempt matched more of what the fusion left (only the
///   closest larger fusion is named).
///
/// Shown: near misses where nothing or only a fallback (`mx_quant_linear`, which runs it
/// unfused) took the node, and at a fused node the one whose attempt matched the most nodes
/// beyond the fusion: a norm the norm rule almost knows (`ReduceSum` for `ReduceMean`), whose
/// quantizer `mxquant` fused alone. (Until h-left every near miss at a fused node was hidden,
/// that one too.) Pipeline order: by rule, then node name.
pub fn shown_near_misses(report: &RewriteReport) -> Vec<&Rejection> {
    let registry = crate::rules::registry();
    let fallback = |rule: &str| registry.iter().any(|r| r.name() == rule && r.fallback());
    // A node is removed by one fusion at most.
    let fused_by: HashMap<NodeId, &Fusion> = report
        .fusions
        .iter()
        .filter(|f| !fallback(&f.rule))
        .flat_map(|f| f.replaced_ids.iter().map(move |&n| (n, f)))
        .collect();
    let refused: HashSet<NodeId> = report.rejections.iter().filter_map(|r| r.anchor).collect();
    // At a fused node: how many of the nodes the near miss's attempt matched the fusion did not
    // take (`None`: not at a fused node).
    let beyond = |r: &Rejection| {
        let f = fused_by.get(&r.anchor?)?;
        Some(if f.rule == r.rule {
            0
        } else {
            r.matched
                .iter()
                .filter(|n| !f.replaced_ids.contains(n))
                .count()
        })
    };
    // Of the near misses at one fused node, only the rule(s) that came closest: the norm rule
    // that matched the whole norm but its ReduceSum, not the SwiGLU rule that matched the
    // norm's last two Muls as a SiLU·up.
    let mut closest: HashMap<NodeId, usize> = HashMap::new();
    for r in &report.near_misses {
        if let (Some(a), Some(b)) = (r.anchor, beyond(r)) {
            let c = closest.entry(a).or_default();
            *c = (*c).max(b);
        }
    }
    let explained = |r: &Rejection| {
        let Some(a) = r.anchor else {
            return false;
        };
        refused.contains(&a)
            || beyond(r).is_some_and(|b| b == 0 || closest.get(&a).is_some_and(|&c| b < c))
    };
    let order = crate::pipeline::rule_names();
    let mut seen = HashSet::new();
    let mut shown: Vec<&Rejection> = report
        .near_misses
        .iter()
        .filter(|r| !explained(r))
        // The same candidate in several iterations (its neighbours rewritten in between).
        .filter(|r| seen.insert((r.rule.as_str(), r.anchor, r.at.as_str())))
        .collect();
    shown.sort_by_key(|r| {
        order
            .iter()
            .position(|o| *o == r.rule)
            .unwrap_or(usize::MAX)
    });
    shown
}

/// A summary of [`shown_near_misses`]: the rule, the node it was tried at and the mismatch, at
/// most `cap` lines, then "and N more". Empty when there are none.
pub fn near_miss_lines(report: &RewriteReport, cap: usize) -> String {
    let shown = shown_near_misses(report);
    if shown.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "near misses ({}: a rule's pattern almost matched where no fusion or refusal covers it):",
        shown.len()
    );
    for r in shown.iter().take(cap) {
        let _ = writeln!(out, "  {} at '{}': {}", r.rule, r.at, r.reason);
    }
    if shown.len() > cap {
        let _ = writeln!(
            out,
            "  and {} more (--explain lists them all; --report writes them to the JSON)",
            shown.len() - cap
        );
    }
    out
}

/// Every refusal, then every note of an applied fusion (a reader it left out), one per line
/// (`--explain`).
pub fn explain_lines(report: &RewriteReport) -> String {
    let mut out = String::new();
    for r in &report.rejections {
        let _ = writeln!(out, "{}: refused at '{}': {}", r.rule, r.at, r.reason);
    }
    for f in &report.fusions {
        for n in &f.notes {
            let _ = writeln!(out, "{}: fused, but {n}", f.rule);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rej(rule: &str, reason: &str) -> Rejection {
        Rejection {
            rule: rule.into(),
            at: "n".into(),
            reason: reason.into(),
            anchor: None,
            matched: Vec::new(),
        }
    }

    #[test]
    fn table_lists_counts_and_commonest_reasons_first() {
        let mut report = RewriteReport::default();
        report.counts.insert("a_rule".into(), 3);
        report.rejections = vec![
            rej("a_rule", "x"),
            rej("a_rule", "y"),
            rej("a_rule", "y"),
            rej("b", "z"),
        ];
        let t = summary_table(&report);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert_eq!(
            lines[3],
            "separate MXFP8 quantize ops: 0 before, 0 after (0 launches saved)"
        );
        assert!(
            lines[1].starts_with("a_rule") && lines[1].contains("    3        3  y (2); x (1)"),
            "{t}"
        );
        assert!(
            lines[2].starts_with("b ") && lines[2].ends_with("z (1)"),
            "{t}"
        );
    }

    /// Which near misses the rewrite prints (`shown_near_misses`), node by node: nodes 1..=3
    /// are `mxquant`'s fusion of a quantizer at node 1, node 9 is `mx_quant_linear`'s.
    #[test]
    fn near_misses_at_fused_nodes_are_shown_when_they_saw_more_than_the_fusion_took() {
        let fusion = |rule: &str, ids: &[u32]| Fusion {
            rule: rule.into(),
            anchor: NodeId(ids[0]),
            replaced: Vec::new(),
            created: Vec::new(),
            notes: Vec::new(),
            replaced_ids: ids.iter().map(|&i| NodeId(i)).collect(),
            created_ids: Vec::new(),
        };
        let near = |rule: &str, at: u32, matched: &[u32]| Rejection {
            rule: rule.into(),
            at: format!("n{at}"),
            reason: "expected X".into(),
            anchor: Some(NodeId(at)),
            matched: matched.iter().map(|&i| NodeId(i)).collect(),
        };
        let mut report = RewriteReport {
            fusions: vec![
                fusion("mxquant", &[1, 2, 3]),
                fusion("mx_quant_linear", &[9]),
            ],
            ..RewriteReport::default()
        };
        report.near_misses = vec![
            // The norm rule matched a norm (5, 6, 7) in front of the quantizer: shown.
            near("add_rmsnorm_mxquant", 1, &[1, 2, 5, 6, 7]),
            // The SwiGLU rule matched less of it: the norm rule's is the one named.
            near("swiglu_mxquant_matmul", 1, &[1, 2, 5]),
            // Only what mxquant took: nothing in front of the quantizer to fuse with.
            near("add_rmsnorm_mxquant", 2, &[2, 3]),
            // The same rule fused the node.
            near("mxquant", 3, &[3, 8]),
            // A node only the fallback took, and one nothing took: shown.
            near("mxquant", 9, &[9]),
            near("mx_weight_matmul", 11, &[11]),
            // A node some rule refused: the table has the reason.
            near("mx_weight_matmul", 12, &[12]),
        ];
        report.rejections = vec![Rejection {
            anchor: Some(NodeId(12)),
            ..rej("mx_dequant", "no")
        }];
        let shown: Vec<(&str, &str)> = shown_near_misses(&report)
            .iter()
            .map(|r| (r.rule.as_str(), r.at.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                ("add_rmsnorm_mxquant", "n1"),
                ("mxquant", "n9"),
                ("mx_weight_matmul", "n11")
            ]
        );
    }
}
