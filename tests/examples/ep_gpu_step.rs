//! The plugin EP's decode step on the GPU device, through ONNX Runtime as a user runs it: a
//! MiniMax-M3-TP4-shaped stack (hidden 6144, intermediate 768, 16 / 2 heads of 128; MXFP8
//! weights; f32 graph, symbolic batch / seq) of `LAYERS` layers, `session.run` at 1 and 8 tokens,
//! host time per step, median of 30 after 5 warm-up runs. The environment picks what is compared
//! (bench/gpu/device_ep_step.sh runs it under each setting in one device call;
//! `MXFUSE_STEP_PROFILE=<prefix>` also writes ONNX Runtime's profile of every run).
//!
//!     cargo build --release -p mxfuse-tests --example ep_gpu_step
//!     ORT_DYLIB_PATH=... MXFUSE_EP_LIB=... target/release/examples/ep_gpu_step [LAYERS]

use std::time::Instant;

use mxfuse_tests::ort_harness::{create_session, env, ep_devices, ep_options};
use ort::memory::DeviceType;
use ort::session::Session;
use prost::Message;

fn main() {
    let layers: usize = std::env::args()
        .nth(1)
        .map_or(2, |v| v.parse().expect("LAYERS"));
    let devices = ep_devices(DeviceType::GPU);
    if devices.is_empty() {
        eprintln!("no GPU OrtEpDevice of the plugin EP here");
        return;
    }
    let mut cfg = models::DecoderConfig::m3_tp4();
    cfg.n_layers = layers;
    cfg.dtype = models::DType::F32;
    cfg.storage = models::WeightStorage::Inline;
    cfg.spelling.weights = models::WeightForm::StdMx;
    let model = models::model_proto(&cfg).expect("model").encode_to_vec();
    // MXFUSE_STEP_PROFILE=<prefix>: ONNX Runtime's profiler records every node of every run
    // (bench/gpu/step_profile.py sums it by provider and op).
    let profile = std::env::var("MXFUSE_STEP_PROFILE").ok();
    let mut session: Session = create_session(|| {
        let builder = Session::builder(env())?;
        let builder = match &profile {
            Some(prefix) => builder.with_profiling(prefix)?,
            None => builder,
        };
        builder
            .with_devices(devices, Some(&ep_options(&[])))?
            .commit_from_memory(&model)
    })
    .expect("GPU-device session");
    let hidden = cfg.hidden;
    for tokens in [1usize, 8] {
        let data: Vec<f32> = (0..tokens * hidden)
            .map(|i| ((i * 7919 % 257) as f32 - 128.0) / 37.0)
            .collect();
        let mut step = || {
            let input = ort::value::Tensor::from_array(([1usize, tokens, hidden], data.clone()))
                .expect("tensor");
            let t = Instant::now();
            let out = session
                .run(ort::inputs!["hidden_states" => input])
                .expect("run");
            let us = t.elapsed().as_secs_f64() * 1e6;
            drop(out);
            us
        };
        for _ in 0..5 {
            step();
        }
        let mut times: Vec<f64> = (0..30).map(|_| step()).collect();
        times.sort_by(|a, b| a.total_cmp(b));
        println!(
            "layers {layers} tokens {tokens}: step {:.1} us (median of 30; min {:.1}, max {:.1}) run_sync={} alloc_cache_mib={}",
            times[15],
            times[0],
            times[29],
            std::env::var("MXFUSE_GPU_RUN_SYNC").unwrap_or_else(|_| "default".into()),
            std::env::var("MXFUSE_GPU_ALLOC_CACHE_MIB").unwrap_or_else(|_| "default".into()),
        );
    }
    if profile.is_some() {
        let path = session.end_profiling().expect("end_profiling");
        println!("profile {path}");
    }
}
