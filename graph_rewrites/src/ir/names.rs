//! Fresh, deterministic names for values and nodes.

use std::collections::{HashMap, HashSet};

/// Names in use, for uniquifying. Value names include those defined inside subgraphs, because
/// ONNX forbids an outer name that a subgraph also defines.
#[derive(Clone, Debug, Default)]
pub(super) struct NameTable {
    values: HashSet<String>,
    nodes: HashSet<String>,
    /// Next suffix to try per base name, so repeated requests stay linear.
    next_suffix: HashMap<String, u64>,
}

impl NameTable {
    pub(super) fn take_value(&mut self, name: &str) {
        self.values.insert(name.to_owned());
    }

    pub(super) fn take_node(&mut self, name: &str) {
        if !name.is_empty() {
            self.nodes.insert(name.to_owned());
        }
    }

    pub(super) fn node_taken(&self, name: &str) -> bool {
        self.nodes.contains(name)
    }

    /// `base` if free, else `base_1`, `base_2`, ... (first free one); not reserved.
    pub(super) fn unique_node(&self, base: &str) -> String {
        fresh(base, &self.nodes, None)
    }

    /// A fresh value name derived from `base`, reserved.
    pub(super) fn fresh_value(&mut self, base: &str) -> String {
        let name = fresh(base, &self.values, self.next_suffix.get(base).copied());
        if name != base {
            if let Some(n) = name.rsplit('_').next().and_then(|s| s.parse::<u64>().ok()) {
                self.next_suffix.insert(base.to_owned(), n + 1);
            }
        }
        self.values.insert(name.clone());
        name
    }
}

fn fresh(base: &str, taken: &HashSet<String>, start: Option<u64>) -> String {
    let base = if base.is_empty() { "v" } else { base };
    if !taken.contains(base) {
        return base.to_owned();
    }
    (start.unwrap_or(1)..)
        .map(|i| format!("{base}_{i}"))
        .find(|n| !taken.contains(n))
        .unwrap_or_else(|| base.to_owned()) // unreachable: the range is unbounded
}
