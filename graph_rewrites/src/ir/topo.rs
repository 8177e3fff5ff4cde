//! Stable topological ordering.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Graph;
use crate::view::NodeId;
use crate::Error;

impl Graph {
    /// Re-sorts the nodes topologically. STABLE: among the legal orders it picks the one closest
    /// to the current order (Kahn's algorithm taking the earliest ready node first), so a legal
    /// order is left unchanged and output stays deterministic.
    ///
    /// Errors with [`Error::Cycle`] (naming a few nodes on or behind the cycle) and leaves the
    /// order untouched.
    pub fn topo_sort(&mut self) -> Result<(), Error> {
        self.order = self.stable_topo_order()?;
        self.order_dirty = false;
        Ok(())
    }

    pub(super) fn stable_topo_order(&self) -> Result<Vec<NodeId>, Error> {
        let mut pos = vec![u32::MAX; self.nodes.len()];
        for (i, n) in self.order.iter().enumerate() {
            pos[n.0 as usize] = i as u32;
        }
        // One edge per (input slot or subgraph use) whose value a live node produces; the
        // consumer lists hold exactly these entries, so decrements below match.
        let mut indegree = vec![0u32; self.nodes.len()];
        for &c in &self.order {
            let node = self.node(c);
            let reads = node.inputs.iter().flatten().chain(&node.subgraph_uses);
            for &v in reads {
                if self.value(v).producer.is_some() {
                    indegree[c.0 as usize] += 1;
                }
            }
        }
        let mut ready: BinaryHeap<Reverse<(u32, NodeId)>> = self
            .order
            .iter()
            .filter(|n| indegree[n.0 as usize] == 0)
            .map(|&n| Reverse((pos[n.0 as usize], n)))
            .collect();
        let mut sorted = Vec::with_capacity(self.order.len());
        while let Some(Reverse((_, n))) = ready.pop() {
            sorted.push(n);
            for &v in &self.node(n).outputs {
                for &(c, _) in &self.value(v).consumers {
                    let d = &mut indegree[c.0 as usize];
                    if *d > 0 {
                        *d -= 1;
                        if *d == 0 {
                            ready.push(Reverse((pos[c.0 as usize], c)));
                        }
                    }
                }
            }
        }
        if sorted.len() == self.order.len() {
            return Ok(sorted);
        }
        let stuck: Vec<String> = self
            .order
            .iter()
            .filter(|n| indegree[n.0 as usize] > 0)
            .take(4)
            .map(|&n| self.describe_node(n))
            .collect();
        Err(Error::Cycle(stuck.join(", ")))
    }

    /// `'name' (OpType)` for messages.
    pub(crate) fn describe_node(&self, n: NodeId) -> String {
        let p = &self.node(n).proto;
        format!(
            "'{}' ({})",
            p.name.as_deref().unwrap_or(""),
            p.op_type.as_deref().unwrap_or("")
        )
    }
}
