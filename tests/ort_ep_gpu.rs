//! The plugin EP's GPU device, end to end through `ort` (ONNX Runtime 1.31, `load-dynamic`).
//!
//! * Without a GPU stack: the factory offers exactly the CPU device and says why in one stderr
//!   line; with `MXFUSE_EP_TEST_DEVICE_MEMORY=host` the CPU device registers host memory posing as
//!   GPU memory, so ORT's device-memory plumbing (our allocator, data transfer and Memcpy kernels,
//!   the copies ORT inserts around our nodes) and the GPU executor (`gpu::program`, its launches
//!   replaced by the CPU kernels; on device tensors and staged) run here and must give the CPU
//!   device's bits.
//! * With a GPU (CUDA driver + NVRTC or HIP + hipRTC): a tiny MiniMax-M3-shaped decoder from
//!   `models` runs with the EP on the GPU device and on the CPU device; outputs agree within the
//!   GEMM accumulation tolerance; ORT's log shows our fused nodes (and the Memcpy nodes of device
//!   memory). Ops without a GPU kernel and `world_size > 1` are session-creation errors.
//!
//! Tests that need a fresh process (the env var above, a captured stderr) re-run this binary
//! with `--exact <test>` and `MXFUSE_EP_GPU_CHILD=1`.
//!
//! Environment (read by `ort_harness`): `ORT_DYLIB_PATH` (else the pip wheel's library, found
//! through python3), `MXFUSE_EP_LIB` (else the newer of target/{release,debug}/libmxfuse_ep.so).
//! Used as they are by bench/gpu/ep_gpu_check.sh on the GPU machine (prebuilt binary, no
//! toolchain there).

use std::process::Command;
use std::sync::{Arc, Mutex};

use mxfuse_tests::ort_harness::{
    create_session, creation_error, env, ep_devices, ep_options, run_decoder_hidden, EP_NAME,
};
use ort::logging::LogLevel;
use ort::memory::DeviceType;
use ort::session::Session;
use prost::Message;

const CHILD: &str = "MXFUSE_EP_GPU_CHILD";
const TEST_MEMORY: &str = "MXFUSE_EP_TEST_DEVICE_MEMORY";
/// Where a child writes its outputs for the parent to compare.
const CHILD_OUT: &str = "MXFUSE_EP_GPU_CHILD_OUT";

/// Whether this machine has a GPU stack the EP can use (the same probe the EP makes); says why
/// not on stderr.
fn gpu_present() -> bool {
    if std::env::var("MXFUSE_GPU").is_ok_and(|v| v == "off" || v == "0") {
        eprintln!("no GPU: MXFUSE_GPU=off");
        return false;
    }
    match kernels::gpu::driver::Driver::load() {
        Ok(Ok(d)) => {
            eprintln!("GPU stack: {:?} on {}", d.backend(), d.info().name);
            true
        }
        Ok(Err(reason)) => {
            eprintln!("no GPU: {reason}");
            false
        }
        Err(e) => {
            eprintln!("no GPU: the GPU stack failed to load: {e}");
            false
        }
    }
}

/// The tiny MiniMax-M3-shaped decoder layer (`models` fixture `dynamo_f32_floor`: f32, hidden
/// 64, fused norm + SwiGLU-OAI + MX GEMMs), built in memory.
fn model() -> Vec<u8> {
    decoder(models::WeightForm::Float)
}

/// [`model`] with its weights in `form` (`StdMx`: E4M3 + E8M0 weights, which the GPU executor
/// prepacks for the tensor-core GEMM).
fn decoder(form: models::WeightForm) -> Vec<u8> {
    let mut cfg = models::catalog::fixtures()
        .into_iter()
        .find(|f| f.name == "dynamo_f32_floor")
        .expect("fixture config")
        .cfg;
    cfg.spelling.weights = form;
    // K = 256 (q / k / v, gate_up) and 128 (down): multiples of 128, so on sm_90 the fragment
    // GEMM serves the constant MX weights (the fixture's 64 / 32 would take the other kernels).
    cfg.hidden = HIDDEN;
    cfg.intermediate = 128;
    cfg.moe_intermediate = 128;
    models::model_proto(&cfg)
        .expect("model builds")
        .encode_to_vec()
}

/// The test decoder's width ([`decoder`]).
const HIDDEN: usize = 256;

/// torch's `nn.Linear` with bias on a rank-2 activation after an MXFP8 quantizer, twice:
/// `x [6, 256] → MX quantize → Gemm(·, W [48, 256], C [48], transB = 1)` and
/// `Gemm(·, MX W [256, 48], C [1, 48], alpha = 0.5, beta = 2)` (a prepacked constant MX weight;
/// x and that output pass through a `Neg`):
/// the `MxMatMul` epilogue on each executor.
fn gemm_bias_model() -> Vec<u8> {
    use models::builder::{attr_f, attr_i, elem_of, Dim, GraphBuilder};
    let dt = models::DType::F32;
    let mut b = GraphBuilder::new(5, false);
    let shape = vec![Dim::Fixed(6), Dim::Fixed(HIDDEN)];
    let x = b.add_input("x", elem_of(dt), shape.clone());
    // A Neg before and after the fused nodes stays on ORT's CPU EP, so ORT inserts the Memcpy
    // nodes the device-memory tests look for.
    let x = b.op("Neg", &[&x.name], "xn", x.elem, shape);
    let a =
        models::mx_quant::quantize_activation(&mut b, dt, models::QuantSpelling::StdFloor, &x, "x");
    let w = b.random_weight("w", dt, &[48, HIDDEN], 0.0, 0.06);
    let c = b.random_weight("c", dt, &[48], 0.5, 1.0);
    let y = b.op_attrs(
        "Gemm",
        &[&a.name, &w.name, &c.name],
        "y",
        a.elem,
        a.with_last(48),
        vec![attr_i("transB", 1)],
    );
    b.add_output(&y);
    let wmx =
        models::mx_quant::matmul_weight(&mut b, dt, models::WeightForm::StdMx, "wmx", HIDDEN, 48);
    let c2 = b.random_weight("c2", dt, &[1, 48], 0.0, 1.0);
    let attrs = vec![attr_f("alpha", 0.5), attr_f("beta", 2.0)];
    let y2 = b.op_attrs(
        "Gemm",
        &[&a.name, &wmx.name, &c2.name],
        "y2",
        a.elem,
        a.with_last(48),
        attrs,
    );
    let y2n = b.op("Neg", &[&y2.name], "y2n", y2.elem, y2.shape.clone());
    b.add_output(&y2n);
    models::external::into_inline(b.finish("gemm_bias", "Gemm with bias after MXFP8"))
        .encode_to_vec()
}

/// torch.export's `nn.Linear` on a `[2, 3, HIDDEN]` activation after MXFP8: `Reshape([-1, K])`
/// → `Gemm(transB = 1, bias)` and `MatMul` (MX weight) → `Reshape([2, 3, 48])`. The rule reads
/// both through the Reshape, and the trailing constant Reshape back to `[2, 3, 48]` cancels with
/// the fusion's output Reshape: each `MxMatMul` writes a graph output.
fn flat_linear_model() -> Vec<u8> {
    use models::builder::{attr_i, elem_of, Dim, GraphBuilder};
    let dt = models::DType::F32;
    let mut b = GraphBuilder::new(9, false);
    let shape = vec![Dim::Fixed(2), Dim::Fixed(3), Dim::Fixed(HIDDEN)];
    let x = b.add_input("x", elem_of(dt), shape.clone());
    let x = b.op("Neg", &[&x.name], "xn", x.elem, shape);
    let a =
        models::mx_quant::quantize_activation(&mut b, dt, models::QuantSpelling::StdFloor, &x, "x");
    let flat = b.const_i64("flat", &[-1, HIDDEN as i64]);
    let af = b.op(
        "Reshape",
        &[&a.name, &flat.name],
        "xf",
        a.elem,
        vec![Dim::Fixed(6), Dim::Fixed(HIDDEN)],
    );
    let w = b.random_weight("w", dt, &[48, HIDDEN], 0.0, 0.06);
    let c = b.random_weight("c", dt, &[48], 0.5, 1.0);
    let yf = b.op_attrs(
        "Gemm",
        &[&af.name, &w.name, &c.name],
        "yf",
        af.elem,
        af.with_last(48),
        vec![attr_i("transB", 1)],
    );
    let wmx =
        models::mx_quant::matmul_weight(&mut b, dt, models::WeightForm::StdMx, "wmx", HIDDEN, 48);
    let y2f = b.op(
        "MatMul",
        &[&af.name, &wmx.name],
        "y2f",
        af.elem,
        af.with_last(48),
    );
    let unflat = b.const_i64("unflat", &[2, 3, 48]);
    let out_shape = vec![Dim::Fixed(2), Dim::Fixed(3), Dim::Fixed(48)];
    for (y, name) in [(&yf, "y"), (&y2f, "y2")] {
        let o = b.op(
            "Reshape",
            &[&y.name, &unflat.name],
            name,
            y.elem,
            out_shape.clone(),
        );
        b.add_output(&o);
    }
    models::external::into_inline(b.finish("flat_linear", "view(-1, K) -> addmm / mm after MXFP8"))
        .encode_to_vec()
}

/// A float16 weight-only MX linear, `Cast(x, f16) @ DequantizeLinear(W [HIDDEN, 48] MXFP8 / MXFP4)`
/// cast back to f32 (rule `mx_weight_matmul`): on sm_90 the tensor-core weight-only kernel
/// (kernels/gpu/mx_matmul_frag_wo.hip; K = HIDDEN is a multiple of 128). Runs with [`run_gemm`].
fn weight_only_f16_model(form: models::WeightForm) -> Vec<u8> {
    use models::builder::{attr_i, elem_of, Dim, GraphBuilder};
    let mut b = GraphBuilder::new(13, false);
    let shape = vec![Dim::Fixed(6), Dim::Fixed(HIDDEN)];
    let x = b.add_input("x", elem_of(models::DType::F32), shape.clone());
    let f16 = elem_of(models::DType::F16);
    let xh = b.op_attrs(
        "Cast",
        &[&x.name],
        "xh",
        f16,
        shape,
        vec![attr_i("to", f16 as i64)],
    );
    let w = models::mx_quant::matmul_weight(&mut b, models::DType::F16, form, "w", HIDDEN, 48);
    let yh = models::mx_quant::matmul(&mut b, &xh, &w, 48, "yh");
    let f32e = elem_of(models::DType::F32);
    let y = b.op_attrs(
        "Cast",
        &[&yh.name],
        "y",
        f32e,
        yh.shape.clone(),
        vec![attr_i("to", f32e as i64)],
    );
    b.add_output(&y);
    models::external::into_inline(b.finish("weight_only_f16", "f16 weight-only MX linear"))
        .encode_to_vec()
}

/// Experts of the MoE block ([`moe_experts_model`]) and its tokens.
const EXPERTS: usize = 8;
const TOKENS: usize = 5;

/// Stacked MoE experts selected per token (transformers' `batched_mm` experts, torch dynamo):
/// `W1[ids] @ x.unsqueeze(-1)` with MXFP8 `W1 [E, 96, HIDDEN]` (weight first), `x.unsqueeze(1)
/// @ W2[ids]` with MXFP4 `W2 [E, HIDDEN, 64]` (weight second), and `W3[ids]` of an MXFP8
/// `[E, 32, 64]` table read as it is: two `MxGatherMatMul` and one `MxGatherDequantize`. In
/// `dt` (float32, or float16 behind Casts of the f32 input and outputs: on sm_90 the tensor-core
/// gathered kernel, K = HIDDEN a multiple of 128).
fn moe_experts_model(dt: models::DType) -> Vec<u8> {
    use models::builder::{attr_i, elem_of, Dim, GraphBuilder};
    use models::experts::stacked_mx_experts;
    use models::WeightForm::{StdMx, StdMxfp4};
    let mut b = GraphBuilder::new(11, false);
    let f32e = elem_of(models::DType::F32);
    let x = b.add_input("x", f32e, vec![Dim::Fixed(TOKENS), Dim::Fixed(HIDDEN)]);
    let ids = b.add_input("ids", 7, vec![Dim::Fixed(TOKENS)]);
    let x = b.op("Neg", &[&x.name], "xn", x.elem, x.shape.clone());
    let x = if dt == models::DType::F32 {
        x
    } else {
        let to = elem_of(dt);
        b.op_attrs(
            "Cast",
            &[&x.name],
            "xc",
            to,
            x.shape.clone(),
            vec![attr_i("to", to as i64)],
        )
    };
    // Outputs as f32 (a Cast back when `dt` is not).
    let output = |b: &mut GraphBuilder, y: &models::builder::Tensor| {
        if y.elem == f32e {
            b.add_output(y);
        } else {
            let name = format!("{}_f32", y.name);
            let c = b.op_attrs(
                "Cast",
                &[&y.name],
                &name,
                f32e,
                y.shape.clone(),
                vec![attr_i("to", f32e as i64)],
            );
            b.add_output(&c);
        }
    };
    let gather = |b: &mut GraphBuilder, w: &models::builder::Tensor, name: &str| {
        let mut shape = vec![Dim::Fixed(TOKENS)];
        shape.extend(w.shape[1..].iter().cloned());
        b.op("Gather", &[&w.name, &ids.name], name, w.elem, shape)
    };
    let w1 = stacked_mx_experts(&mut b, dt, StdMx, "w1", (EXPERTS, HIDDEN, 96), true).unwrap();
    let g1 = gather(&mut b, &w1, "g1");
    let last = b.const_i64("last", &[-1]);
    let xu = b.op(
        "Unsqueeze",
        &[&x.name, &last.name],
        "xu",
        x.elem,
        vec![Dim::Fixed(TOKENS), Dim::Fixed(HIDDEN), Dim::Fixed(1)],
    );
    let y1 = b.op(
        "MatMul",
        &[&g1.name, &xu.name],
        "y1",
        x.elem,
        vec![Dim::Fixed(TOKENS), Dim::Fixed(96), Dim::Fixed(1)],
    );
    output(&mut b, &y1);
    let w2 = stacked_mx_experts(&mut b, dt, StdMxfp4, "w2", (EXPERTS, HIDDEN, 64), false).unwrap();
    let g2 = gather(&mut b, &w2, "g2");
    let one = b.const_i64("one", &[1]);
    let xr = b.op(
        "Unsqueeze",
        &[&x.name, &one.name],
        "xr",
        x.elem,
        vec![Dim::Fixed(TOKENS), Dim::Fixed(1), Dim::Fixed(HIDDEN)],
    );
    let y2 = b.op(
        "MatMul",
        &[&xr.name, &g2.name],
        "y2",
        x.elem,
        vec![Dim::Fixed(TOKENS), Dim::Fixed(1), Dim::Fixed(64)],
    );
    output(&mut b, &y2);
    let w3 = stacked_mx_experts(&mut b, dt, StdMx, "w3", (EXPERTS, 64, 32), true).unwrap();
    let y3 = gather(&mut b, &w3, "y3");
    output(&mut b, &y3);
    models::external::into_inline(b.finish("moe_experts", "stacked MX experts selected per token"))
        .encode_to_vec()
}

/// Runs [`moe_experts_model`] (repeated and negative expert ids); every output as f32.
fn run_moe(session: &mut Session) -> Vec<Vec<f32>> {
    let data: Vec<f32> = (0..TOKENS * HIDDEN)
        .map(|i| ((i * 7919 % 257) as f32 - 128.0) / 37.0)
        .collect();
    let x = ort::value::Tensor::from_array(([TOKENS, HIDDEN], data)).expect("tensor");
    let ids = ort::value::Tensor::from_array(([TOKENS], vec![3i64, 0, 3, 7, -1])).expect("ids");
    let outputs = session
        .run(ort::inputs!["x" => x, "ids" => ids])
        .expect("run");
    outputs
        .iter()
        .map(|(_, v)| v.try_extract_tensor::<f32>().expect("f32").1.to_vec())
        .collect()
}

/// [`run_moe`] for the float16 MoE block (whose outputs ORT's Casts fetch from the device).
fn run_moe_f16(session: &mut Session) -> Vec<Vec<f32>> {
    run_moe(session)
}

/// Runs [`flat_linear_model`]; both outputs as f32.
fn run_flat(session: &mut Session) -> Vec<Vec<f32>> {
    let data: Vec<f32> = (0..6 * HIDDEN)
        .map(|i| ((i * 7919 % 257) as f32 - 128.0) / 37.0)
        .collect();
    let input = ort::value::Tensor::from_array(([2usize, 3, HIDDEN], data)).expect("tensor");
    let outputs = session.run(ort::inputs!["x" => input]).expect("run");
    outputs
        .iter()
        .map(|(_, v)| v.try_extract_tensor::<f32>().expect("f32").1.to_vec())
        .collect()
}

/// Runs [`gemm_bias_model`]; both outputs as f32.
fn run_gemm(session: &mut Session) -> Vec<Vec<f32>> {
    let data: Vec<f32> = (0..6 * HIDDEN)
        .map(|i| ((i * 7919 % 257) as f32 - 128.0) / 37.0)
        .collect();
    let input = ort::value::Tensor::from_array(([6usize, HIDDEN], data)).expect("tensor");
    let outputs = session.run(ort::inputs!["x" => input]).expect("run");
    outputs
        .iter()
        .map(|(_, v)| v.try_extract_tensor::<f32>().expect("f32").1.to_vec())
        .collect()
}

/// Runs a test model; every output as f32.
type Runner = fn(&mut Session) -> Vec<Vec<f32>>;

/// The test models and their runners: the decoder in each weight form, the Gemm-with-bias
/// model, the flattened-linear model, the MoE experts block, and the weight-only decoder in MXFP8
/// and MXFP4 (fused online, and rewritten offline) with an f16 weight-only linear of each.
fn models_and_runners() -> Vec<(Vec<u8>, Runner)> {
    let mut v: Vec<(Vec<u8>, Runner)> =
        FORMS.iter().map(|&f| (decoder(f), run as Runner)).collect();
    v.push((gemm_bias_model(), run_gemm));
    v.push((flat_linear_model(), run_flat));
    v.push((moe_experts_model(models::DType::F32), run_moe));
    v.push((moe_experts_model(models::DType::F16), run_moe_f16));
    for form in [models::WeightForm::StdMx, models::WeightForm::StdMxfp4] {
        let (original, rewritten) = weight_only_models(form);
        v.push((original, run as Runner));
        v.push((rewritten, run as Runner));
        v.push((weight_only_f16_model(form), run_gemm as Runner));
    }
    v
}

/// Runs the test decoder (width [`HIDDEN`]); every output as f32.
fn run(session: &mut Session) -> Vec<Vec<f32>> {
    run_decoder_hidden(session, HIDDEN)
}

/// Float weights (the generic GPU GEMM), MX weights (prepacked, tensor-core GEMM on sm_89+) and
/// MXFP4 weights (widened to E4M3 on the host, then prepacked as the MX ones).
const FORMS: [models::WeightForm; 3] = [
    models::WeightForm::Float,
    models::WeightForm::StdMx,
    models::WeightForm::StdMxfp4,
];

/// ORT's log lines of one session (verbose: node placement lists every node and its EP).
type Log = Arc<Mutex<Vec<String>>>;

fn session(
    ty: DeviceType,
    model: &[u8],
    options: &[(&str, &str)],
    log: Option<Log>,
) -> ort::Result<Session> {
    let devices = ep_devices(ty);
    assert!(!devices.is_empty(), "no {ty:?} device for {EP_NAME}");
    let mut b = Session::builder(env())?.with_devices(devices, Some(&ep_options(options)))?;
    if let Some(log) = log {
        b = b.with_log_level(LogLevel::Verbose)?.with_logger(Arc::new(
            move |_lvl: LogLevel, _cat: &str, _id: &str, _loc: &str, msg: &str| {
                if let Ok(mut l) = log.lock() {
                    l.push(msg.to_string());
                }
            },
        ))?;
    }
    create_session(|| b.commit_from_memory(model))
}

/// Re-runs test `name` of this binary in a child process with `vars`; returns its stderr.
fn run_child(name: &str, vars: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary path"));
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("child runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child {name} failed:\n{stdout}\n{stderr}"
    );
    stderr
}

fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

fn to_bytes(outputs: &[Vec<f32>]) -> Vec<u8> {
    outputs
        .iter()
        .flat_map(|o| {
            let mut v = (o.len() as u64).to_le_bytes().to_vec();
            v.extend(o.iter().flat_map(|x| x.to_bits().to_le_bytes()));
            v
        })
        .collect()
}

/// ORT's node-placement summary (verbose) names our EP.
fn placed_on_ep(log: &Log) -> bool {
    log_mentions(log, &format!("placed on [{EP_NAME}]"))
}

fn log_mentions(log: &Log, what: &str) -> bool {
    log.lock()
        .map(|l| l.iter().any(|m| m.contains(what)))
        .unwrap_or(false)
}

#[test]
fn without_a_gpu_only_the_cpu_device_is_offered_and_a_line_says_why() {
    if gpu_present() {
        eprintln!("skipped: this machine has a GPU stack");
        return;
    }
    let devices: Vec<_> = env()
        .devices()
        .filter(|d| d.ep().map(|n| n == EP_NAME).unwrap_or(false))
        .collect();
    assert_eq!(devices.len(), 1, "exactly one device for {EP_NAME}");
    assert_eq!(devices[0].hardware_device().ty(), DeviceType::CPU);
    if is_child() {
        return;
    }
    // The line is INFO in ORT's log (docs/provider.md, "Log lines"): with the environment's
    // logger at INFO (`ort` reads `ORT_LOG`) it is there once, in ORT's format; at ERROR, not at
    // all (it used to be a bare stderr line whatever the level).
    let name = "without_a_gpu_only_the_cpu_device_is_offered_and_a_line_says_why";
    let stderr = run_child(name, &[("ORT_LOG", "info")]);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("mxfuse: no GPU runtime ("))
        .collect();
    assert_eq!(lines.len(), 1, "one log line expected:\n{stderr}");
    assert!(
        lines[0].ends_with("): using the CPU kernels") && lines[0].contains("[I:onnxruntime:"),
        "{}",
        lines[0]
    );
    let stderr = run_child(name, &[("ORT_LOG", "error")]);
    assert!(
        !stderr.contains("no GPU runtime") && !stderr.contains("using the CPU kernels"),
        "no line at ERROR:\n{stderr}"
    );
    // Asking for the GPU anyway is a clear session-creation error, not a crash.
    let err = creation_error(
        session(DeviceType::CPU, &model(), &[("device", "gpu")], None),
        "device=gpu without a GPU",
    );
    assert!(
        err.contains("device=gpu") && err.contains("no GPU runtime"),
        "{err}"
    );
}

#[test]
fn emulated_device_memory_gives_the_cpu_device_bits() {
    if !is_child() {
        let mut reference = Vec::new();
        for (model, run) in models_and_runners() {
            let cpu = run(&mut session(DeviceType::CPU, &model, &[], None).expect("CPU"));
            // The child runs each model twice: device tensors, then staged (device=gpu).
            reference.extend(cpu.clone());
            reference.extend(cpu);
        }
        let out = std::env::temp_dir().join(format!("mxfuse_ep_gpu_{}.bin", std::process::id()));
        let out_s = out.to_string_lossy().into_owned();
        run_child(
            "emulated_device_memory_gives_the_cpu_device_bits",
            &[(TEST_MEMORY, "host"), (CHILD_OUT, &out_s)],
        );
        let got = std::fs::read(&out).expect("child output");
        let _ = std::fs::remove_file(&out);
        assert_eq!(got, to_bytes(&reference), "device-memory run differs");
        return;
    }
    if std::env::var(TEST_MEMORY).ok().as_deref() != Some("host") {
        return; // run as a child of another test
    }
    let mut outputs = Vec::new();
    for (model, run) in models_and_runners() {
        for options in [&[][..], &[("device", "gpu")][..]] {
            let log: Log = Arc::default();
            let mut s = session(DeviceType::CPU, &model, options, Some(log.clone()))
                .expect("session with device memory");
            let first = run(&mut s);
            // The second run reuses the program's pooled intermediates.
            assert_eq!(run(&mut s), first, "second run differs");
            outputs.extend(first);
            assert!(placed_on_ep(&log), "no node placed on {EP_NAME}");
            // Our nodes live in device memory: ORT copies around them with our Memcpy kernels —
            // into them always; out of them where an ORT CPU node reads their output. The
            // flattened linears' trailing Reshapes go with their fusions, so there the fused node
            // writes the graph outputs, which ORT fetches to the host itself; the MoE block's
            // fused nodes write its outputs too.
            assert!(log_mentions(&log, "MemcpyFromHost"), "no MemcpyFromHost");
            let outputs_ours = std::ptr::fn_addr_eq(run, run_flat as Runner)
                || std::ptr::fn_addr_eq(run, run_moe as Runner);
            assert!(
                outputs_ours || log_mentions(&log, "MemcpyToHost"),
                "no MemcpyToHost"
            );
        }
    }
    if let Ok(path) = std::env::var(CHILD_OUT) {
        std::fs::write(path, to_bytes(&outputs)).expect("write outputs");
    }
}

/// The test decoder with float activations and MX weights in `form` (weight-only MX: rule
/// `mx_weight_matmul`), and the same model rewritten offline (weight-only `MxMatMul`s).
fn weight_only_models(form: models::WeightForm) -> (Vec<u8>, Vec<u8>) {
    let mut cfg = models::catalog::fixtures()
        .into_iter()
        .find(|f| f.name == "dynamo_f32_floor")
        .expect("fixture config")
        .cfg;
    cfg.spelling.weights = form;
    cfg.spelling.quant = models::QuantSpelling::None;
    cfg.hidden = HIDDEN;
    cfg.intermediate = 128;
    cfg.moe_intermediate = 128;
    let proto = models::model_proto(&cfg).expect("model builds");
    let mut g = graph_rewrites::ir::Graph::from_model(proto.clone(), None).expect("loads");
    let report =
        graph_rewrites::pipeline::run_pipeline(&mut g, &Default::default()).expect("rewrite");
    assert!(report.counts["mx_weight_matmul"] > 0, "{report:#?}");
    (proto.encode_to_vec(), g.to_model().encode_to_vec())
}

/// Weight-only MX (rule `mx_weight_matmul`: `MxMatMul` with a float `a`) and stacked experts (rule
/// `mx_gather_dequant`) are claimed on a device placement as on the CPU device: the device program runs it with kernels/gpu/mx_gather.hip's
/// kernels (here, on the emulated device memory, their host stand-in). The outputs are checked
/// against the CPU device's by [`emulated_device_memory_gives_the_cpu_device_bits`] and
/// [`gpu_device_matches_the_cpu_device`] (both models of each form are in [`models_and_runners`]).
#[test]
fn weight_only_mx_is_claimed_on_a_device_placement() {
    let name = "weight_only_mx_is_claimed_on_a_device_placement";
    if !is_child() {
        run_child(name, &[(TEST_MEMORY, "host")]);
        return;
    }
    if std::env::var(TEST_MEMORY).ok().as_deref() != Some("host") {
        return; // run as a child of another test
    }
    for form in [models::WeightForm::StdMx, models::WeightForm::StdMxfp4] {
        let (original, _) = weight_only_models(form);
        for (model, run) in [
            (original, run as Runner),
            (weight_only_f16_model(form), run_gemm as Runner),
        ] {
            let log: Log = Arc::default();
            let mut s = session(DeviceType::CPU, &model, &[], Some(log.clone()))
                .expect("session with device memory");
            assert!(
                log_mentions(&log, "mx_weight_matmul claims"),
                "a device placement fuses weight-only MatMuls ({form:?})"
            );
            run(&mut s);
        }
    }
    // The MoE blocks' stacked experts, float32 and float16, likewise.
    for dt in [models::DType::F32, models::DType::F16] {
        let log: Log = Arc::default();
        let mut s = session(
            DeviceType::CPU,
            &moe_experts_model(dt),
            &[],
            Some(log.clone()),
        )
        .expect("session with device memory");
        assert!(
            log_mentions(&log, "mx_gather_dequant claims"),
            "a device placement fuses the stacked experts ({dt:?})"
        );
        run_moe(&mut s);
    }
}

/// `a` (GPU) against `b` (CPU): GEMM sums run in another order on the GPU, and a quantizer
/// downstream may then round an element to the neighbouring E4M3 value; errors are measured
/// against each output's largest magnitude.
fn assert_close(a: &[Vec<f32>], b: &[Vec<f32>]) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.len(), y.len(), "output {i} size");
        let scale = y.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
        let errs: Vec<f32> = x
            .iter()
            .zip(y)
            .map(|(p, q)| (p - q).abs() / scale)
            .collect();
        let max = errs.iter().cloned().fold(0.0f32, f32::max);
        let mean = errs.iter().sum::<f32>() / errs.len().max(1) as f32;
        eprintln!(
            "output {i}: {} values, max rel err {max:.2e}, mean {mean:.2e}",
            x.len()
        );
        assert!(x.iter().all(|v| v.is_finite()), "output {i} not finite");
        assert!(
            max <= 5e-2 && mean <= 2e-3,
            "output {i}: max {max}, mean {mean}"
        );
    }
}

#[test]
fn gpu_device_matches_the_cpu_device() {
    if !gpu_present() {
        eprintln!("skipped: no GPU stack (CUDA driver + NVRTC or HIP + hipRTC)");
        return;
    }
    let on_gpu_device = !ep_devices(DeviceType::GPU).is_empty();
    // Where the fragment GEMM serves (CUDA sm_90+), the MX decoders' q / k / v run as one launch
    // (provider/src/gpu/matmul_group.rs), which says so in ORT's log.
    let groups = std::env::var("MXFUSE_GPU_MATMUL_GROUP").map_or(true, |v| v != "0" && v != "off")
        && matches!(kernels::gpu::driver::Driver::load(), Ok(Ok(d))
            if d.backend() == kernels::gpu::Backend::Cuda && d.info().compute_capability >= 90);
    let mut grouped = 0;
    for (i, (model, run)) in models_and_runners().into_iter().enumerate() {
        eprintln!(
            "model {i} (decoder in {FORMS:?}, Gemm with bias, view(-1, K) linears, MoE experts, weight-only MXFP8 / MXFP4 online / offline)"
        );
        let cpu = run(&mut session(DeviceType::CPU, &model, &[], None).expect("CPU session"));
        let log: Log = Arc::default();
        let mut s = if on_gpu_device {
            eprintln!("EP on the GPU OrtEpDevice (device memory)");
            session(DeviceType::GPU, &model, &[], Some(log.clone())).expect("GPU-device session")
        } else {
            eprintln!("ONNX Runtime lists no GPU device: EP on the CPU device with device=gpu");
            session(
                DeviceType::CPU,
                &model,
                &[("device", "gpu")],
                Some(log.clone()),
            )
            .expect("device=gpu session")
        };
        let gpu = run(&mut s);
        assert!(placed_on_ep(&log), "no node placed on {EP_NAME}");
        if on_gpu_device {
            assert!(log_mentions(&log, "MemcpyFromHost"), "no MemcpyFromHost");
        }
        assert_close(&gpu, &cpu);
        // Repeated runs reuse the compiled program and the uploaded weights.
        assert_eq!(run(&mut s), gpu, "second run differs");
        grouped += usize::from(log_mentions(&log, "run as one GPU launch"));
    }
    eprintln!("models with MxMatMuls grouped into one launch: {grouped}");
    if groups {
        assert!(
            grouped > 0,
            "no MxMatMuls of one activation grouped into one launch"
        );
    }
}

/// A prompt of 2 × 150 tokens through the MX-weight decoder: 300 rows, past the device's
/// prefill-route threshold (kernels::gpu::PrefillTable; on NVIDIA with cuBLAS the GEMMs then
/// dequantize to bf16 and run cuBLAS, elsewhere the decode kernels): the GPU device against the
/// CPU device, and a repeated run bit for bit.
#[test]
fn gpu_device_prefill_matches_the_cpu_device() {
    if !gpu_present() || ep_devices(DeviceType::GPU).is_empty() {
        eprintln!("skipped: no GPU OrtEpDevice");
        return;
    }
    let model = decoder(models::WeightForm::StdMx);
    let run = |s: &mut Session| -> Vec<Vec<f32>> {
        let data: Vec<f32> = (0..2 * 150 * HIDDEN)
            .map(|i| ((i * 7919 % 257) as f32 - 128.0) / 37.0)
            .collect();
        let input = ort::value::Tensor::from_array(([2usize, 150, HIDDEN], data)).expect("tensor");
        let outputs = s.run(ort::inputs!["hidden_states" => input]).expect("run");
        outputs
            .iter()
            .map(|(_, v)| v.try_extract_tensor::<f32>().expect("f32").1.to_vec())
            .collect()
    };
    let cpu = run(&mut session(DeviceType::CPU, &model, &[], None).expect("CPU session"));
    let mut s = session(DeviceType::GPU, &model, &[], None).expect("GPU-device session");
    let gpu = run(&mut s);
    assert_close(&gpu, &cpu);
    assert_eq!(run(&mut s), gpu, "second run differs");
}

#[test]
fn gpu_session_errors_are_clear() {
    if !gpu_present() {
        eprintln!("skipped: no GPU stack");
        return;
    }
    let ty = if ep_devices(DeviceType::GPU).is_empty() {
        DeviceType::CPU
    } else {
        DeviceType::GPU
    };
    let err = creation_error(
        session(
            ty,
            &model(),
            &[("device", "gpu"), ("world_size", "2")],
            None,
        ),
        "world_size=2",
    );
    assert!(err.contains("world_size=2"), "{err}");
    // Quark's fake quantizer has no GPU kernel: a session-creation error naming it.
    let fx = models::catalog::fixtures()
        .into_iter()
        .find(|f| f.name == "simplified_quickgelu_quark")
        .expect("fixture config");
    let quark = models::model_proto(&fx.cfg)
        .expect("builds")
        .encode_to_vec();
    match session(ty, &quark, &[("device", "gpu")], None) {
        Ok(_) => eprintln!("quark model: every claimed node has a GPU kernel"),
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("has no GPU kernel"), "{e}");
        }
    }
}

#[test]
fn world_size_above_one_is_a_session_error_on_any_device() {
    let err = creation_error(
        session(DeviceType::CPU, &model(), &[("world_size", "4")], None),
        "world_size=4",
    );
    assert!(
        err.contains("world_size=4") && err.contains("AllReduce"),
        "{err}"
    );
}
