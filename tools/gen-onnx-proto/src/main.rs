//! Regenerate the checked-in prost code for ONNX.
//!
//! `graph_rewrites/proto/onnx.proto` is copied verbatim from the onnx 1.23.2 wheel (it defines
//! `FLOAT8E8M0 = 24`). `protox` parses it in pure Rust, so neither this tool nor the build needs
//! `protoc`. Run `tools/regen-onnx-proto.sh` from the repository root.
use std::path::PathBuf;

fn main() {
    let root = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| ".".into()));
    let proto_dir = root.join("graph_rewrites/proto");
    let out_dir = root.join("graph_rewrites/src/onnx_pb");
    let fds = protox::compile([proto_dir.join("onnx.proto")], [&proto_dir]).expect("parse onnx.proto");
    let mut cfg = prost_build::Config::new();
    cfg.out_dir(&out_dir);
    // Raw tensor payloads stay `bytes::Bytes`-free Vec<u8>; nothing else is customised so the
    // generated file is plain prost output.
    cfg.compile_fds(fds).expect("generate");
}
