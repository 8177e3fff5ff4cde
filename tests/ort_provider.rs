//! libmxfuse_ep.so through the `ort` crate (the Rust side of the provider's end-to-end tests):
//! the plugin EP fusing a decoder fixture online must give the same bits as the offline rewrite
//! run with the custom-op library, and malformed com.mxfuse attributes must be ORT errors.
//!
//! ONNX Runtime is the pip wheel's `libonnxruntime` (ORT_DYLIB_PATH, else found through
//! `python3 -c "import onnxruntime"`); the library is MXFUSE_EP_LIB, else the newer of
//! target/{release,debug}/libmxfuse_ep.so (`cargo build -p provider` builds it); see
//! `ort_harness`.

use std::path::{Path, PathBuf};

use graph_rewrites::io::load_graph;
use graph_rewrites::onnx_pb::attribute_proto::AttributeType;
use graph_rewrites::onnx_pb::{AttributeProto, ModelProto};
use graph_rewrites::pipeline::{run_pipeline, PipelineOptions};
use mxfuse_tests::ort_harness::{
    create_session, creation_error, env, ep_devices, ep_options, provider_lib, run_decoder,
    workspace,
};
use ort::memory::DeviceType;
use ort::session::Session;
use prost::Message;

fn fixture(name: &str) -> PathBuf {
    workspace()
        .join("models")
        .join("fixtures")
        .join(format!("{name}.onnx"))
}

/// The offline rewrite of `path`, as the `mxfuse` CLI would write it.
fn rewritten(path: &Path) -> ModelProto {
    let mut g = load_graph(path).expect("fixture loads");
    let report = run_pipeline(&mut g, &PipelineOptions::default()).expect("pipeline runs");
    assert!(
        report.counts.values().sum::<usize>() > 0,
        "nothing fused: {report:?}"
    );
    g.to_model()
}

fn ep_session(model: &[u8]) -> ort::Result<Session> {
    ep_session_with(model, &[])
}

/// An EP session on the CPU device with provider options.
fn ep_session_with(model: &[u8], options: &[(&str, &str)]) -> ort::Result<Session> {
    // One device type per session: with a GPU the EP also offers a GPU device.
    create_session(|| {
        Session::builder(env())?
            .with_devices(ep_devices(DeviceType::CPU), Some(&ep_options(options)))?
            .commit_from_memory(model)
    })
}

fn custom_op_session(model: &[u8]) -> ort::Result<Session> {
    create_session(|| {
        Session::builder(env())?
            .with_operator_library(provider_lib())?
            .commit_from_memory(model)
    })
}

/// Every output's bits of [`run_decoder`].
fn run(session: &mut Session) -> Vec<Vec<u32>> {
    run_decoder(session)
        .iter()
        .map(|o| o.iter().map(|x| x.to_bits()).collect())
        .collect()
}

#[test]
fn ep_online_fusion_matches_offline_rewrite_with_custom_op_library() {
    let path = fixture("dynamo_f32_floor");
    let original = std::fs::read(&path).expect("fixture");
    let offline = rewritten(&path).encode_to_vec();
    let online_bits = run(&mut ep_session(&original).expect("EP session"));
    let offline_bits = run(&mut custom_op_session(&offline).expect("custom-op session"));
    assert_eq!(online_bits, offline_bits);
    // The same offline model with the EP (com.mxfuse nodes claimed one by one) agrees too.
    assert_eq!(
        online_bits,
        run(&mut ep_session(&offline).expect("EP session on the rewrite"))
    );
    // Single-threaded kernels (provider option) give the same bits as ORT's thread pool.
    let mut serial =
        ep_session_with(&original, &[("threads", "1")]).expect("EP session, threads=1");
    assert_eq!(online_bits, run(&mut serial));
}

#[test]
fn bad_provider_option_is_an_ort_error() {
    let original = std::fs::read(fixture("dynamo_f32_floor")).expect("fixture");
    let err = creation_error(
        ep_session_with(&original, &[("scale_rule", "ceil")]),
        "scale_rule=ceil",
    );
    assert!(err.contains("scale_rule"), "{err}");
}

#[test]
fn malformed_com_mxfuse_attribute_is_an_ort_error() {
    let mut model = rewritten(&fixture("dynamo_f32_floor"));
    let graph = model.graph.as_mut().expect("graph");
    let node = graph
        .node
        .iter_mut()
        .find(|n| {
            n.domain.as_deref() == Some("com.mxfuse") && n.op_type.as_deref() == Some("MxQuantize")
        })
        .expect("a standalone MxQuantize");
    node.attribute
        .retain(|a| a.name.as_deref() != Some("block_size"));
    node.attribute.push(AttributeProto {
        name: Some("block_size".into()),
        i: Some(16),
        r#type: Some(AttributeType::Int as i32),
        ..Default::default()
    });
    let bytes = model.encode_to_vec();
    for (path, result) in [
        ("custom-op library", custom_op_session(&bytes)),
        ("plugin EP", ep_session(&bytes)),
    ] {
        let err = creation_error(result, &format!("{path}: a block_size of 16"));
        assert!(err.contains("block_size"), "{path}: {err}");
    }
}
