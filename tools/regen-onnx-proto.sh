#!/usr/bin/env bash
# Regenerates graph_rewrites/src/onnx_pb/onnx.rs from graph_rewrites/proto/onnx.proto.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet --release --manifest-path tools/gen-onnx-proto/Cargo.toml --target-dir target/gen-onnx-proto -- "$PWD"
echo "regenerated graph_rewrites/src/onnx_pb/onnx.rs"
