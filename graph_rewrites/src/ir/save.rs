//! Writing a [`Graph`] back to a `ModelProto`.

use super::Graph;
use crate::onnx_pb::ModelProto;

impl Graph {
    /// The model with the current graph: nodes in topological order, everything the IR does not
    /// model written back as loaded. Clones the initializers; prefer [`Graph::into_model`] for
    /// large inline weights.
    pub fn to_model(&self) -> ModelProto {
        self.clone().into_model()
    }

    /// Like [`Graph::to_model`], moving the initializer bytes instead of copying them.
    ///
    /// `value_info` keeps its loaded entries (including ones naming no value) in order, minus
    /// entries of values that edits left without a producer; entries for values from
    /// [`Graph::add_value`] follow. Renamed values are written with their current names.
    pub fn into_model(mut self) -> ModelProto {
        if self.order_dirty {
            // Edits keep the graph acyclic unless a caller wired a cycle by hand; then the
            // current order is still the best available.
            if let Ok(order) = self.stable_topo_order() {
                self.order = order;
            }
        }
        let name_of = |g: &Graph, v| g.value(v).name.clone();
        let nodes = self
            .order
            .iter()
            .map(|&n| {
                let node = self.node(n);
                let mut p = node.proto.clone();
                p.input = node
                    .inputs
                    .iter()
                    .map(|v| v.map(|v| name_of(&self, v)).unwrap_or_default())
                    .collect();
                p.output = node.outputs.iter().map(|&v| name_of(&self, v)).collect();
                p
            })
            .collect();
        let inputs = self
            .inputs
            .iter()
            .map(|(vi, v)| {
                let mut vi = vi.clone();
                vi.name = Some(name_of(&self, *v));
                vi
            })
            .collect();
        let outputs = self
            .outputs
            .iter()
            .map(|(vi, v)| {
                let mut vi = vi.clone();
                vi.name = Some(name_of(&self, *v));
                vi
            })
            .collect();
        let value_info = self
            .value_info
            .iter()
            .filter(|(_, v)| v.is_none_or(|v| self.value_info_wanted(v)))
            .map(|(vi, v)| {
                let mut vi = vi.clone();
                if let Some(v) = v {
                    vi.name = Some(name_of(&self, *v));
                }
                vi
            })
            .collect();
        let initializers = std::mem::take(&mut self.initializers)
            .into_iter()
            .filter(|i| i.alive)
            .map(|i| i.tensor)
            .collect();
        let mut model = self.shell;
        if let Some(g) = model.graph.as_mut() {
            g.node = nodes;
            g.input = inputs;
            g.output = outputs;
            g.value_info = value_info;
            g.initializer = initializers;
        }
        model
    }

    /// Whether a value's `value_info` entry is written: loaded entries always, unless edits
    /// removed the value's definition; entries of values from `add_value` once defined.
    fn value_info_wanted(&self, v: crate::view::ValueId) -> bool {
        let value = self.value(v);
        let defined = value.producer.is_some()
            || value.graph_input
            || value.initializer.is_some()
            || value.sparse_initializer;
        defined || !(value.orphaned || value.created)
    }
}
