#!/usr/bin/env bash
# Sets up mxfuse on a fresh machine and runs its main job on a small example:
# generate a tiny MiniMax-M3-shaped decoder with standard MXFP8 quantization, rewrite it
# offline, and run it in ONNX Runtime (plugin EP online vs rewritten model + custom ops).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check onnxruntime==1.31.1 onnx==1.23.2 numpy
cargo build --release --quiet
mkdir -p out
target/release/mxfuse-gen-model --preset tiny --quant std-floor --swiglu oai-clip --batch 1 --seq 8 -o out/tiny_mx.onnx
target/release/mxfuse rewrite out/tiny_mx.onnx -o out/tiny_mx.fused.onnx --report out/tiny_mx.report.json
python3 scripts/run_in_ort.py out/tiny_mx.onnx out/tiny_mx.fused.onnx target/release/libmxfuse_ep.so
echo "report: out/tiny_mx.report.json"
