//! `mxfuse`: offline MXFP8 fusion of ONNX models. See `mxfuse --help` and `graph_rewrites::cli`.

fn main() -> std::process::ExitCode {
    graph_rewrites::cli::main_with_args(std::env::args_os())
}
