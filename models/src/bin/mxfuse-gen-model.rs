//! `mxfuse-gen-model`: writes one MiniMax-M3-shaped decoder model in the chosen spellings.
//! See models/README.md for usage.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use models::{
    AddOrder, DType, DecoderConfig, GammaForm, GateUpForm, NormSpelling, Preset, QuantSpelling,
    SwigluSpelling, WeightForm, WeightStorage,
};

/// Generate a MiniMax-M3-shaped decoder ONNX model (random or fake weights).
#[derive(Parser, Debug)]
#[command(name = "mxfuse-gen-model", version)]
struct Args {
    /// Starting shapes: tiny (hidden 128, intermediate 64, 2 layers) or m3-tp4 (hidden 6144,
    /// intermediate 768, 60 layers, bf16, external sparse weights).
    #[arg(long, value_enum, default_value = "tiny")]
    preset: Preset,
    /// Number of decoder layers.
    #[arg(long)]
    layers: Option<usize>,
    /// Hidden size (a multiple of 32).
    #[arg(long)]
    hidden: Option<usize>,
    /// Dense-MLP intermediate size (per rank).
    #[arg(long)]
    intermediate: Option<usize>,
    /// Routed experts per MoE layer (0: all layers dense).
    #[arg(long)]
    experts: Option<usize>,
    /// Expert intermediate size.
    #[arg(long)]
    moe_intermediate: Option<usize>,
    /// Number of leading dense layers before the MoE layers.
    #[arg(long)]
    first_dense: Option<usize>,
    /// Add a shared expert to MoE layers.
    #[arg(long)]
    shared_expert: bool,
    /// Activation / weight float type.
    #[arg(long, value_enum)]
    dtype: Option<DType>,
    /// How the RMSNorm is spelled (default: the preset's).
    #[arg(long, value_enum)]
    norm: Option<NormSpelling>,
    /// How the norm weight is applied: plain `n·w` or Gemma `n·(1+w)` (default: the preset's).
    #[arg(long, value_enum)]
    gamma: Option<GammaForm>,
    /// Decomposed norms in f16/bf16: no Casts to float around the norm math.
    #[arg(long)]
    no_norm_casts: bool,
    /// How the SwiGLU activation is spelled (default: the preset's).
    #[arg(long, value_enum)]
    swiglu: Option<SwigluSpelling>,
    /// How gate and up come from the MLP input (default: the preset's).
    #[arg(long, value_enum)]
    gate_up: Option<GateUpForm>,
    /// How the MXFP8 activation quantization in front of each MatMul is spelled (default: the
    /// preset's).
    #[arg(long, value_enum)]
    quant: Option<QuantSpelling>,
    /// Consumer MatMul weight form.
    #[arg(long, value_enum)]
    weights: Option<WeightForm>,
    /// Operand order of the residual Adds (default: the preset's).
    #[arg(long, value_enum)]
    add_order: Option<AddOrder>,
    /// Give the first layer a residual input too (a pipeline stage, not a first layer).
    #[arg(long)]
    first_layer_residual: bool,
    /// Insert com.microsoft::AllReduce on the embedding input and after o_proj / down_proj.
    #[arg(long)]
    allreduce: bool,
    /// Write weights to `<output>.data` (external data).
    #[arg(long)]
    external: bool,
    /// Fake weights: external data file sized with set_len (zeros, no disk); implies --external.
    #[arg(long)]
    sparse_weights: bool,
    /// Inline weights even for a preset that defaults to external.
    #[arg(long, conflicts_with_all = ["external", "sparse_weights"])]
    inline: bool,
    /// Fixed batch size (default: symbolic `batch`).
    #[arg(long)]
    batch: Option<usize>,
    /// Fixed sequence length (default: symbolic `seq`).
    #[arg(long)]
    seq: Option<usize>,
    /// Seed of the random weights (default: the preset's; the same seed gives the same model).
    #[arg(long)]
    seed: Option<u64>,
    /// Print the expected fusion counts as JSON on stdout.
    #[arg(long)]
    print_expected: bool,
    /// Output .onnx path (missing directories are created).
    #[arg(short = 'o', long, required_unless_present = "fixtures")]
    output: Option<PathBuf>,
    /// Instead of one model: write the whole fixture set and its manifest.json into DIR.
    #[arg(long, value_name = "DIR", conflicts_with = "output")]
    fixtures: Option<PathBuf>,
}

fn config(a: &Args) -> DecoderConfig {
    let mut c = DecoderConfig::from_preset(a.preset);
    let set = |dst: &mut usize, v: Option<usize>| {
        if let Some(v) = v {
            *dst = v;
        }
    };
    set(&mut c.n_layers, a.layers);
    set(&mut c.hidden, a.hidden);
    set(&mut c.intermediate, a.intermediate);
    set(&mut c.n_experts, a.experts);
    set(&mut c.moe_intermediate, a.moe_intermediate);
    set(&mut c.first_dense_layers, a.first_dense);
    c.shared_expert |= a.shared_expert;
    c.dtype = a.dtype.unwrap_or(c.dtype);
    c.seed = a.seed.unwrap_or(c.seed);
    c.batch = a.batch.or(c.batch);
    c.seq = a.seq.or(c.seq);
    let s = &mut c.spelling;
    s.norm = a.norm.unwrap_or(s.norm);
    s.gamma = a.gamma.unwrap_or(s.gamma);
    s.norm_f32_casts &= !a.no_norm_casts;
    s.swiglu = a.swiglu.unwrap_or(s.swiglu);
    s.gate_up = a.gate_up.unwrap_or(s.gate_up);
    s.quant = a.quant.unwrap_or(s.quant);
    s.weights = a.weights.unwrap_or(s.weights);
    s.add_order = a.add_order.unwrap_or(s.add_order);
    s.first_layer_without_residual &= !a.first_layer_residual;
    s.allreduce |= a.allreduce;
    if a.sparse_weights {
        c.storage = WeightStorage::External { sparse: true };
    } else if a.external {
        c.storage = WeightStorage::External { sparse: false };
    } else if a.inline {
        c.storage = WeightStorage::Inline;
    }
    c
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(dir) = &args.fixtures {
        return match models::catalog::write_fixtures(dir) {
            Ok(m) => {
                eprintln!(
                    "wrote {} fixtures and manifest.json to {}",
                    m.len(),
                    dir.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("mxfuse-gen-model: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let Some(output) = &args.output else {
        eprintln!("mxfuse-gen-model: -o/--output is required");
        return ExitCode::FAILURE;
    };
    let cfg = config(&args);
    match models::write(&cfg, output) {
        Ok(stats) => {
            if args.print_expected {
                match serde_json::to_string(&models::expected_fusions(&cfg)) {
                    Ok(j) => println!("{j}"),
                    Err(e) => eprintln!("warning: cannot print expected fusions: {e}"),
                }
            }
            eprintln!(
                "wrote {} ({} bytes){}",
                output.display(),
                stats.model_bytes,
                stats.data_file.map_or(String::new(), |(p, n)| format!(
                    ", {} external tensors in {} ({n} bytes)",
                    stats.external_tensors,
                    p.display()
                ))
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mxfuse-gen-model: {e}");
            ExitCode::FAILURE
        }
    }
}
