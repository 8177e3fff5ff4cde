//! Command-line syntax of `mxfuse` (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Offline MXFP8 fusion of ONNX decoder models.
#[derive(Debug, Parser)]
#[command(
    name = "mxfuse",
    version,
    about = "Fuse MXFP8 activation quantization into the kernels around it in ONNX decoder models \
             (the offline rewriter of the mxfuse ONNX Runtime execution provider)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Rewrite a model: fuse MXFP8 quantization into the kernels around it.
    #[command(long_about = REWRITE_HELP)]
    Rewrite(RewriteArgs),
    /// Show a model's ops, opsets and the candidate sites each rule sees.
    #[command(long_about = INSPECT_HELP)]
    Inspect(InspectArgs),
    /// List the rules, in pipeline order.
    Rules,
}

const REWRITE_HELP: &str = "\
Rewrite a model: fuse MXFP8 quantization into the kernels around it, print a table of what each \
rule fused and refused, then the near misses (a rule's pattern almost matched where no fusion or \
refusal covers it: the rule, the node, what did not match; at most 8, then \"and N more\"), and \
optionally write a JSON report.

External data: tensors stored outside the .onnx file are never read unless a rule needs their \
values, and their `location`s are written unchanged. When OUT is in another directory than IN, \
each external data file is copied next to OUT under the same relative path (a reflink where the \
file system shares extents; never a hard link, which ONNX Runtime refuses to load from), so OUT \
resolves its weights wherever it is written (ONNX Runtime rejects absolute and `..` locations); \
a sparse file is copied with its holes. An existing different file at that path is an error, never \
overwritten. OUT may be IN (rewriting in place); it may not be one of IN's external data files, \
and --report may not name IN, OUT or a data file: such a command fails before writing anything. Initializers created by rules (e.g. pre-quantized weights) are stored inline in \
OUT when small and in `OUT.mxfuse.data` (next to OUT, 4 KiB-aligned) from 1 MiB up.

Exit status: 0 on success, 1 on bad input (one `error:` line on stderr), 2 on usage errors.";

#[derive(Debug, Args)]
pub struct RewriteArgs {
    /// The model to rewrite.
    pub input: PathBuf,
    /// Where to write the rewritten model.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Write a JSON report of fusions and refusals here.
    #[arg(long, value_name = "REPORT.json")]
    pub report: Option<PathBuf>,
    /// Run only this rule (repeatable).
    #[arg(long, value_name = "RULE")]
    pub only: Vec<String>,
    /// Do not run this rule (repeatable).
    #[arg(long, value_name = "RULE")]
    pub disable: Vec<String>,
    /// Print every refused site with its reason, every note of a fusion, and every near miss
    /// (without it the near misses are capped at 8 lines).
    #[arg(long)]
    pub explain: bool,
    /// A rule setting (repeatable): scale_rule=floor|rceil (override every fused quantizer's
    /// E8M0 rule), nan_policy=propagate|ignore, swiglu_fp32_activation=0|1 (also
    /// true|false, on|off, yes|no; vLLM's unrounded SwiGLU activation), quark_weight_max_mib=N
    /// (the largest Quark fake-quantized weight read, quantized and checked; default 4096, larger
    /// ones are refused with their size); an unknown key is an error.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
    /// Print wall time per phase (load, rewrite, save) and peak resident memory.
    #[arg(long)]
    pub stats: bool,
}

const INSPECT_HELP: &str = "\
Show a model's ops, opsets and the candidate sites each rule sees: for each site the rule, whether \
it would fuse (and into which nodes) or be refused, and why. Writes nothing but the --dot views.

Exit status: 0 on success, 1 on bad input (one `error:` line on stderr), 2 on usage errors (a bad \
--set included).";

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The model to inspect.
    pub input: PathBuf,
    /// Write Graphviz views of each candidate site (before, and after for fused sites) here.
    #[arg(long, value_name = "DIR")]
    pub dot: Option<PathBuf>,
    /// Rule settings, as for `rewrite`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
}
