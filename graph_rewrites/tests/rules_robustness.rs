//! The fusion rules never panic on odd graphs: every committed fixture, structurally mutated at
//! random (value_info dropped, attributes retyped or changed, inputs rewired or dropped,
//! constants reshaped), either fails to load, or rewrites / refuses with an error or a reason.

use graph_rewrites::io::load_model;
use graph_rewrites::ir::Graph;
use graph_rewrites::onnx_pb::{attribute_proto::AttributeType, ModelProto};
use graph_rewrites::pipeline::{run_pipeline, PipelineOptions};
use graph_rewrites::testing::fixture_files;
use proptest::prelude::*;

fn fixtures() -> &'static [ModelProto] {
    static ALL: std::sync::OnceLock<Vec<ModelProto>> = std::sync::OnceLock::new();
    ALL.get_or_init(load_fixtures)
}

fn load_fixtures() -> Vec<ModelProto> {
    fixture_files(&[""])
        .iter()
        .map(|p| load_model(p).expect("fixture loads"))
        .collect()
}

/// One structural mutation, chosen and placed by the two random numbers.
fn mutate(m: &mut ModelProto, kind: u8, r: usize) {
    let Some(g) = m.graph.as_mut() else { return };
    let names: Vec<String> = g.node.iter().flat_map(|n| n.output.clone()).collect();
    let nodes = g.node.len().max(1);
    match kind % 6 {
        0 if !g.value_info.is_empty() => {
            let i = r % g.value_info.len();
            g.value_info.remove(i);
        }
        1 => {
            if let Some(a) = g.node[r % nodes].attribute.first_mut() {
                // Retype: an int attribute becomes a string and vice versa.
                if a.r#type == Some(AttributeType::Int as i32) {
                    (a.r#type, a.s, a.i) = (
                        Some(AttributeType::String as i32),
                        Some(b"odd".to_vec()),
                        None,
                    );
                } else {
                    (a.r#type, a.i) = (Some(AttributeType::Int as i32), Some(r as i64 % 7 - 3));
                }
            }
        }
        2 => {
            if let Some(a) = g.node[r % nodes].attribute.first_mut() {
                a.i = a.i.map(|v| v + 1 + (r as i64 % 3));
                a.f = a.f.map(|v| v * 2.0 + 0.5);
            }
        }
        3 if !names.is_empty() => {
            // Rewire an input to an earlier node's output (may create a cycle: load refuses).
            let n = &mut g.node[r % nodes];
            if let Some(slot) = n.input.first_mut() {
                *slot = names[r % names.len()].clone();
            }
        }
        4 => {
            let n = &mut g.node[r % nodes];
            if n.input.len() > 1 {
                n.input.pop();
            }
        }
        5 if !g.initializer.is_empty() => {
            let i = r % g.initializer.len();
            g.initializer[i].dims.push(1 + (r as i64 % 2));
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn mutated_fixtures_never_panic(muts in prop::collection::vec((any::<u8>(), any::<usize>()), 1..4), pick in any::<usize>()) {
        let all = fixtures();
        let mut m = all[pick % all.len()].clone();
        for (kind, r) in muts {
            mutate(&mut m, kind, r);
        }
        if let Ok(mut g) = Graph::from_model(m, None) {
            let opts = PipelineOptions { explain: true, ..Default::default() };
            let _ = run_pipeline(&mut g, &opts);
        }
    }
}
