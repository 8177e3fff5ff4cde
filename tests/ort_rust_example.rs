//! Runs `provider/examples/ort_plugin_ep.rs` (the Rust `ort` usage docs/provider.md shows) on
//! the `dynamo_f32_floor` fixture: one session shared by worker threads through the example's
//! `serve` gives each token count (1, 3, 16, 37) the bits of a single-threaded run, the offline
//! rewrite run with the custom-op library gives the same bits, and once one session exists more
//! are created from several threads at once.
//!
//! Its own test binary: the example creates the process's `ort` environment itself (`ort` allows
//! one), where the other end-to-end tests share `ort_harness::env`.

#[allow(dead_code)] // the example's `main` and `run`
#[path = "../provider/examples/ort_plugin_ep.rs"]
mod example;

use std::sync::Mutex;

use graph_rewrites::io::{load_graph, save_model};
use graph_rewrites::pipeline::{run_pipeline, PipelineOptions};
use mxfuse_tests::ort_harness::{ort_dylib, provider_lib, workspace};

const TOKENS: [usize; 4] = [1, 3, 16, 37];

/// Each output's name, shape and value bits.
fn bits(outputs: example::Outputs) -> Vec<(String, Vec<i64>, Vec<u32>)> {
    outputs
        .into_iter()
        .map(|(n, s, v)| (n, s, v.iter().map(|x| x.to_bits()).collect()))
        .collect()
}

#[test]
fn the_rust_example_serves_from_threads_with_single_threaded_bits() {
    let model = workspace().join("models/fixtures/dynamo_f32_floor.onnx");
    let dir = std::env::temp_dir().join(format!("mxfuse_ort_example_{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let rewritten = dir.join("rewritten.onnx");
    let mut g = load_graph(&model).expect("fixture loads");
    run_pipeline(&mut g, &PipelineOptions::default()).expect("pipeline runs");
    save_model(&g.to_model(), &rewritten, None).expect("rewrite written");

    let lib = provider_lib();
    let env = example::environment(&ort_dylib(), &lib).expect("environment with the EP");
    let mut single = example::ep_session(&env, &model, &[], 0).expect("EP session");
    let want: Vec<_> = TOKENS
        .iter()
        .map(|&t| bits(example::run_tokens(&mut single, t).expect("run")))
        .collect();
    assert!(want.iter().all(|w| !w.is_empty()));

    // Sessions are created concurrently once one exists (docs/provider.md, "Creating sessions
    // from several threads at once").
    let sessions: Vec<_> = std::thread::scope(|s| {
        let creating: Vec<_> = (0..3)
            .map(|_| s.spawn(|| example::ep_session(&env, &model, &[("threads", "1")], 1)))
            .collect();
        creating
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    for session in sessions {
        let mut session = session.expect("a session created beside others");
        assert_eq!(
            bits(example::run_tokens(&mut session, 3).expect("run")),
            want[1]
        );
    }

    let shared = Mutex::new(example::ep_session(&env, &model, &[], 2).expect("EP session"));
    let served = example::serve(&shared, 4, &TOKENS).expect("workers run");
    assert_eq!(served.len(), 4);
    for (tokens, outputs) in served.into_iter().flatten() {
        let i = TOKENS
            .iter()
            .position(|&t| t == tokens)
            .expect("a token count asked for");
        assert_eq!(
            bits(outputs),
            want[i],
            "{tokens} tokens from a worker thread"
        );
    }

    let mut offline =
        example::custom_op_session(&env, &rewritten, &lib).expect("custom-op session");
    for (i, &t) in TOKENS.iter().enumerate() {
        let got = bits(example::run_tokens(&mut offline, t).expect("run the rewrite"));
        assert_eq!(got, want[i], "offline rewrite, {t} tokens");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
