//! ONNX Runtime set-up shared by the end-to-end tests (`ort_provider.rs`, `ort_ep_gpu.rs`): where
//! `libonnxruntime` and `libmxfuse_ep.so` are, the one `ort` environment of the process with the
//! plugin EP registered, session options and the deterministic decoder input.
//!
//! Environment: `ORT_DYLIB_PATH` (else the pip wheel's library, found through `python3`),
//! `MXFUSE_EP_LIB` (else the newer of target/{release,debug}/libmxfuse_ep.so).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use ort::environment::Environment;
use ort::memory::DeviceType;
use ort::session::Session;
use ort::value::Tensor;

/// The name the plugin EP registers under.
pub const EP_NAME: &str = "MxFuseExecutionProvider";

/// The workspace root (the parent of this crate's folder).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `libonnxruntime`: `ORT_DYLIB_PATH`, else the pip wheel's.
pub fn ort_dylib() -> PathBuf {
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH") {
        return p.into();
    }
    let out = Command::new("python3")
        .args(["-c", "import onnxruntime, os, glob; d = os.path.dirname(onnxruntime.__file__) + '/capi/'; print(sorted(glob.glob(d + 'libonnxruntime.so*'))[0])"])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "set ORT_DYLIB_PATH or install onnxruntime (pip): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// `libmxfuse_ep.so`: `MXFUSE_EP_LIB`, else the newer of target/{release,debug}.
pub fn provider_lib() -> PathBuf {
    if let Some(p) = std::env::var_os("MXFUSE_EP_LIB") {
        return p.into();
    }
    ["release", "debug"]
        .iter()
        .map(|p| workspace().join("target").join(p).join("libmxfuse_ep.so"))
        .filter(|p| p.is_file())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .expect("libmxfuse_ep.so not built: set MXFUSE_EP_LIB or run `cargo build -p provider`")
}

/// One environment per process (an `ort` rule), with the plugin EP registered.
pub fn env() -> &'static Environment {
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

/// Our EP's devices of type `ty`.
pub fn ep_devices(ty: DeviceType) -> Vec<ort::device::Device<'static>> {
    env()
        .devices()
        .filter(|d| d.ep().map(|n| n == EP_NAME).unwrap_or(false))
        .filter(|d| d.hardware_device().ty() == ty)
        .collect()
}

/// Provider options as `ort` wants them: prefixed with the EP name.
pub fn ep_options(options: &[(&str, &str)]) -> Vec<(String, String)> {
    options
        .iter()
        .map(|(k, v)| (format!("{EP_NAME}.{k}"), v.to_string()))
        .collect()
}

/// Runs `session` on a deterministic `hidden_states [2, 3, 64]`; every output as f32.
pub fn run_decoder(session: &mut Session) -> Vec<Vec<f32>> {
    run_decoder_hidden(session, 64)
}

/// [`run_decoder`] for a model of width `hidden`.
pub fn run_decoder_hidden(session: &mut Session, hidden: usize) -> Vec<Vec<f32>> {
    let data: Vec<f32> = (0..2 * 3 * hidden)
        .map(|i| ((i * 7919 % 257) as f32 - 128.0) / 37.0)
        .collect();
    let input = Tensor::from_array(([2usize, 3, hidden], data)).expect("tensor");
    let outputs = session
        .run(ort::inputs!["hidden_states" => input])
        .expect("run");
    outputs
        .iter()
        .map(|(_, v)| {
            v.try_extract_tensor::<f32>()
                .expect("f32 output")
                .1
                .to_vec()
        })
        .collect()
}

/// The error text of a session creation that must fail; panics with `refused` (what should have
/// been refused) when it succeeds.
#[track_caller]
pub fn creation_error(result: ort::Result<Session>, refused: &str) -> String {
    match result {
        Ok(_) => panic!("{refused} must be refused"),
        Err(e) => e.to_string(),
    }
}

/// Creates a session while holding a process-wide lock. ONNX Runtime 1.31 registers a custom-op
/// domain (`com.mxfuse`, published by both the custom-op library and the EP) in a shared schema
/// registry; two sessions doing so at the same moment can fail with "Trying to add a domain to
/// DomainToVersion map, but the domain is already exist". Tests run in parallel threads, so they
/// create sessions one at a time (running them stays concurrent).
pub fn create_session<T>(build: impl FnOnce() -> ort::Result<T>) -> ort::Result<T> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _one_at_a_time = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    build()
}
