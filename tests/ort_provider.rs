//! libmxfuse_ep.so through the `ort` crate (the Rust side of the provider's end-to-end tests):
//! the plugin EP fusing a decoder fixture online must give the same bits as the offline rewrite
//! run with the custom-op library, and malformed com.mxfuse attributes must be ORT errors.
//!
//! ONNX Runtime is the pip wheel's `libonnxruntime` (ORT_DYLIB_PATH, else found through
//! `python3 -c "import onnxruntime"`); the library is MXFUSE_EP_LIB, else the newer of
//! target/{release,debug}/libmxfuse_ep.so (`cargo build -p provider` builds it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use graph_rewrites::io::load_graph;
use graph_rewrites::onnx_pb::attribute_proto::AttributeType;
use graph_rewrites::onnx_pb::{AttributeProto, ModelProto};
use graph_rewrites::pipeline::{run_pipeline, PipelineOptions};
use ort::environment::Environment;
use ort::session::Session;
use ort::value::Tensor;
use prost::Message;

const EP_NAME: &str = "MxFuseExecutionProvider";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn ort_dylib() -> PathBuf {
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH") {
        return p.into();
    }
    let out = Command::new("python3")
        .args(["-c", "import onnxruntime, os, glob; d = os.path.dirname(onnxruntime.__file__) + '/capi/'; print(sorted(glob.glob(d + 'libonnxruntime.so*'))[0])"])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "pip onnxruntime not found: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn provider_lib() -> PathBuf {
    if let Some(p) = std::env::var_os("MXFUSE_EP_LIB") {
        return p.into();
    }
    ["release", "debug"]
        .iter()
        .map(|p| workspace().join("target").join(p).join("libmxfuse_ep.so"))
        .filter(|p| p.is_file())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .expect("libmxfuse_ep.so not built: run `cargo build -p provider`")
}

/// One environment per process (an `ort` rule), with the plugin EP registered.
fn env() -> &'static Environment {
    static ENV: OnceLock<Environment> = OnceLock::new();
    ENV.get_or_init(|| {
        let env = ort::init_from(ort_dylib())
            .expect("load libonnxruntime")
            .with_name("mxfuse-tests")
            .build()
            .expect("environment");
        env.register_ep_library(EP_NAME, provider_lib())
            .expect("register the plugin EP");
        env
    })
}

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

/// An EP session with provider options (`ort` wants them prefixed with the EP name).
fn ep_session_with(model: &[u8], options: &[(&str, &str)]) -> ort::Result<Session> {
    let devices = env()
        .devices()
        // One device type per session: with a GPU the EP also offers a GPU device.
        .filter(|d| d.ep().map(|n| n == EP_NAME).unwrap_or(false))
        .filter(|d| d.hardware_device().ty() == ort::memory::DeviceType::CPU);
    let options: Vec<(String, String)> = options
        .iter()
        .map(|(k, v)| (format!("{EP_NAME}.{k}"), v.to_string()))
        .collect();
    Session::builder(env())?
        .with_devices(devices, Some(&options))?
        .commit_from_memory(model)
}

fn custom_op_session(model: &[u8]) -> ort::Result<Session> {
    Session::builder(env())?
        .with_operator_library(provider_lib())?
        .commit_from_memory(model)
}

/// Runs `session` on a deterministic `hidden_states [2, 3, 64]` and returns every output's bits.
fn run(session: &mut Session) -> Vec<Vec<u32>> {
    let data: Vec<f32> = (0..2 * 3 * 64)
        .map(|i| ((i * 7919 % 257) as f32 - 128.0) / 37.0)
        .collect();
    let input = Tensor::from_array(([2usize, 3, 64], data)).expect("tensor");
    let outputs = session
        .run(ort::inputs!["hidden_states" => input])
        .expect("run");
    outputs
        .iter()
        .map(|(_, v)| {
            v.try_extract_tensor::<f32>()
                .expect("f32 output")
                .1
                .iter()
                .map(|x| x.to_bits())
                .collect()
        })
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
    let err = match ep_session_with(&original, &[("scale_rule", "ceil")]) {
        Ok(_) => panic!("scale_rule=ceil must be refused"),
        Err(e) => e.to_string(),
    };
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
        let err = match result {
            Ok(_) => panic!("{path}: a block_size of 16 must be refused"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("block_size"), "{path}: {err}");
    }
}
