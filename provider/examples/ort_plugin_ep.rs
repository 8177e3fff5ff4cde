//! Serving a model with `libmxfuse_ep.so` from Rust through the `ort` crate (2.0.0-rc.15 with
//! `load-dynamic`): the plugin EP fusing an MXFP8 model online, one session shared by worker
//! threads, and an offline rewrite (`mxfuse rewrite`) run with the custom-op library instead.
//!
//! ```sh
//! cargo build --release -p provider -p graph_rewrites -p models
//! target/release/mxfuse-gen-model --preset tiny --quant std-floor -o /tmp/decoder.onnx
//! target/release/mxfuse rewrite /tmp/decoder.onnx -o /tmp/decoder.mxfuse.onnx
//! ORT_DYLIB_PATH=$(python3 scripts/ort_dylib_path.py) cargo run --release -p provider \
//!     --example ort_plugin_ep -- target/release/libmxfuse_ep.so /tmp/decoder.onnx /tmp/decoder.mxfuse.onnx
//! ```
//!
//! Your own crate needs `ort = { version = "=2.0.0-rc.15", default-features = false, features =
//! ["std", "api-31", "load-dynamic"] }` (its default features download an ONNX Runtime of their
//! own) and an ONNX Runtime >= 1.31 `libonnxruntime.so` (the pip wheel's `onnxruntime/capi/`,
//! what `scripts/ort_dylib_path.py` prints). What `ort` asks of the caller:
//! * one [`Environment`] per process, created before any session; the EP library is registered
//!   on it once, with an **absolute** path (ONNX Runtime resolves a relative one against its own
//!   folder);
//! * provider options are keyed `MxFuseExecutionProvider.<key>` (`ort` passes keys through
//!   unchanged and ONNX Runtime only files prefixed ones under the EP);
//! * pick the EP's devices of one type (with a GPU runtime the EP offers a CPU and a GPU device,
//!   and a session given both is an ONNX Runtime error);
//! * `Session::run` takes `&mut self`: ONNX Runtime runs one session from many threads, `ort`
//!   does not, so worker threads share it behind a `Mutex` (one run at a time; each run is
//!   parallel inside on the intra-op threads) or hold a session each (each session prepacks its
//!   own copy of the MX weights).
//!
//! `tests/ort_rust_example.rs` runs these functions on a generated decoder.

use std::error::Error;
use std::path::Path;
use std::sync::Mutex;

use ort::environment::Environment;
use ort::memory::DeviceType;
use ort::session::Session;
use ort::value::Tensor;

/// The name the plugin EP registers under (`onnxruntime_ep_mxfuse.get_ep_name()` in Python).
pub const EP_NAME: &str = "MxFuseExecutionProvider";

/// Each output of one run: name, shape and values.
pub type Outputs = Vec<(String, Vec<i64>, Vec<f32>)>;

/// The process's `ort` environment on the ONNX Runtime library `ort_lib`, with the plugin EP
/// `ep_lib` registered.
pub fn environment(ort_lib: &Path, ep_lib: &Path) -> Result<Environment, Box<dyn Error>> {
    // `init_from`'s error is not `ort::Error`, hence the boxed error.
    let env = ort::init_from(ort_lib)?
        .with_name("mxfuse-example")
        .build()?;
    // ONNX Runtime resolves a relative library path against its own folder, not ours.
    let ep_lib = std::fs::canonicalize(ep_lib)
        .map_err(|e| format!("the EP library {}: {e}", ep_lib.display()))?;
    env.register_ep_library(EP_NAME, ep_lib)?;
    Ok(env)
}

/// A session of `model` with the plugin EP on its CPU device, provider options `options` (bare
/// keys, e.g. `("threads", "0")`) and `intra_threads` ONNX Runtime intra-op threads (0: ORT's
/// default), which the EP's kernels use (provider option `threads = 0`).
pub fn ep_session(
    env: &Environment,
    model: &Path,
    options: &[(&str, &str)],
    intra_threads: usize,
) -> ort::Result<Session> {
    let devices = env
        .devices()
        .filter(|d| d.ep().map(|n| n == EP_NAME).unwrap_or(false))
        .filter(|d| d.hardware_device().ty() == DeviceType::CPU);
    let options: Vec<(String, String)> = options
        .iter()
        .map(|(k, v)| (format!("{EP_NAME}.{k}"), v.to_string()))
        .collect();
    Session::builder(env)?
        .with_intra_threads(intra_threads)?
        .with_devices(devices, Some(&options))?
        .commit_from_file(model)
}

/// A session of a model rewritten offline (`mxfuse rewrite`), its `com.mxfuse` ops from the
/// same library registered as a custom-op library, on ONNX Runtime's CPU EP.
pub fn custom_op_session(env: &Environment, rewritten: &Path, lib: &Path) -> ort::Result<Session> {
    Session::builder(env)?
        .with_operator_library(lib)?
        .commit_from_file(rewritten)
}

/// Runs `session` on a deterministic f32 activation whose symbolic dims are 1 but the
/// second-to-last (the tokens), which is `tokens`; the model's first input must be f32 with a
/// fixed last dim (a decoder's `hidden_states [batch, seq, hidden]`). Every output as f32.
pub fn run_tokens(session: &mut Session, tokens: usize) -> Result<Outputs, Box<dyn Error>> {
    let input = &session.inputs()[0];
    let dims: Vec<i64> = input
        .dtype()
        .tensor_shape()
        .ok_or("the first input is not a tensor")?
        .to_vec();
    let rank = dims.len();
    let shape: Vec<usize> = dims
        .iter()
        .enumerate()
        .map(|(i, &d)| match d {
            d if d > 0 => d as usize,
            _ if i + 2 == rank => tokens,
            _ => 1,
        })
        .collect();
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|i| ((i * 7919 % 257) as f32 - 128.0) / 37.0)
        .collect();
    let name = input.name().to_string();
    let outputs = session.run(ort::inputs![name => Tensor::from_array((shape, data))?])?;
    let mut all = Vec::new();
    for (name, value) in outputs.iter() {
        let (shape, values) = value.try_extract_tensor::<f32>()?;
        all.push((name.to_string(), shape.to_vec(), values.to_vec()));
    }
    Ok(all)
}

/// A serving loop in miniature: `workers` threads share `session`, each running the token
/// counts `tokens` in turn (thread `i` starts at `tokens[i % len]`). Returns each thread's
/// outputs in the order it ran them, with the token count.
pub fn serve(
    session: &Mutex<Session>,
    workers: usize,
    tokens: &[usize],
) -> Result<Vec<Vec<(usize, Outputs)>>, String> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                scope.spawn(move || -> Result<Vec<(usize, Outputs)>, String> {
                    let mut done = Vec::new();
                    for r in 0..tokens.len() {
                        let t = tokens[(w + r) % tokens.len()];
                        // A poisoned lock only means another worker panicked mid-run; the
                        // session itself is still usable.
                        let mut s = session.lock().unwrap_or_else(|e| e.into_inner());
                        done.push((t, run_tokens(&mut s, t).map_err(|e| e.to_string())?));
                    }
                    Ok(done)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a worker panicked".to_string())?)
            .collect()
    })
}

/// Prints an error as one `error:` line (its `Display`): returning it from `main` printed its
/// `Debug` form, e.g. `Error: BadVersion { version_str: "1.22.1", path: ... }` for an old ONNX
/// Runtime where `ort` says which version it needs.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (ep_lib, model) = match args.as_slice() {
        [lib, model, ..] => (Path::new(lib), Path::new(model)),
        _ => {
            return Err(
                "usage: ort_plugin_ep libmxfuse_ep.so MODEL.onnx [REWRITTEN.onnx] \
                 (ORT_DYLIB_PATH: libonnxruntime.so)"
                    .into(),
            )
        }
    };
    let ort_lib =
        std::env::var_os("ORT_DYLIB_PATH").ok_or("set ORT_DYLIB_PATH to libonnxruntime.so")?;
    let env = environment(Path::new(&ort_lib), ep_lib)?;

    let session = Mutex::new(ep_session(&env, model, &[("threads", "0")], 0)?);
    for worker in serve(&session, 4, &[1, 3, 16, 37])? {
        for (tokens, outputs) in worker {
            for (name, shape, values) in outputs {
                let finite = values.iter().all(|v| v.is_finite());
                println!("EP, {tokens} tokens: {name} {shape:?}, all finite: {finite}");
            }
        }
    }

    if let Some(rewritten) = args.get(2) {
        let mut offline = custom_op_session(&env, Path::new(rewritten), ep_lib)?;
        let mut online = session.into_inner().unwrap_or_else(|e| e.into_inner());
        let same = run_tokens(&mut offline, 16)? == run_tokens(&mut online, 16)?;
        println!("offline rewrite + custom-op library == plugin EP (16 tokens): {same}");
    }
    Ok(())
}
