//! Corrupted models never panic: random truncations and byte flips of a valid model either
//! load or fail with an error.

use graph_rewrites::ir::Graph;
use graph_rewrites::onnx_pb::ModelProto;
use graph_rewrites::testing::{Attr, ModelBuilder};
use graph_rewrites::view::GraphView;
use proptest::prelude::*;
use prost::Message;

fn valid_model() -> Vec<u8> {
    let mut b = ModelBuilder::new(24);
    b.input("x", 1, &[-2, 64]);
    b.init_f32("w", &[64], &[0.5; 64]);
    b.init_i64("shape", &[3], &[0, 2, 32]);
    b.node("Add", &["x", "w"], &["a"]);
    b.node("Reshape", &["a", "shape"], &["r"]);
    b.node_in("", "ReduceMax", &["r"], &["m"], &[("keepdims", Attr::I(0))]);
    b.node("Relu", &["a"], &["y"]);
    b.value_info("a", 1, &[-2, 64]);
    b.output("y", 1, &[-2, 64]);
    b.output("m", 1, &[-2, 2]);
    b.model().encode_to_vec()
}

/// Decodes and builds the graph, touching every view accessor on success.
fn load(bytes: &[u8]) {
    let Ok(model) = ModelProto::decode(bytes) else {
        return;
    };
    let Ok(g) = Graph::from_model(model, None) else {
        return;
    };
    for &n in g.nodes().iter() {
        for name in g.attr_names(n) {
            let _ = g.attr(n, &name);
        }
        for &v in g.inputs(n).iter().flatten().chain(g.outputs(n)) {
            let _ = (g.const_value(v), g.tensor_info(v), g.consumers(v).len());
        }
    }
    let _ = g.to_model();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn truncated_models_do_not_panic(cut in 0usize..2000) {
        let bytes = valid_model();
        load(&bytes[..cut.min(bytes.len())]);
    }

    #[test]
    fn byte_flipped_models_do_not_panic(flips in proptest::collection::vec((0usize..2000, any::<u8>()), 1..8)) {
        let mut bytes = valid_model();
        let len = bytes.len();
        for (at, v) in flips {
            bytes[at % len] = v;
        }
        load(&bytes);
    }
}
