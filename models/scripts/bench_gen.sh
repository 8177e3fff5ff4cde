#!/bin/sh
# Times mxfuse-gen-model on the m3-tp4 preset (60 layers, hidden 6144, bf16, external data):
# sparse fake weights against real random weights (float and standard-MX), 3 runs each.
# Usage: sh models/scripts/bench_gen.sh [BIN] [OUTDIR]   (BIN defaults to the release build)
set -eu
BIN=${1:-target/release/mxfuse-gen-model}
OUT=${2:-$(mktemp -d)}
run() {
    name=$1; shift
    for i in 1 2 3; do
        /usr/bin/time -f "$name run $i: %e s wall, %M KB max RSS" "$BIN" --preset m3-tp4 "$@" -o "$OUT/$name.onnx" 2>&1 | grep run
    done
    du -h --apparent-size "$OUT/$name.onnx.data" | sed "s|^|$name logical data: |"
    du -h "$OUT/$name.onnx.data" | sed "s|^|$name on disk: |"
    rm -f "$OUT/$name.onnx" "$OUT/$name.onnx.data"
}
run sparse --sparse-weights
run random_bf16 --external
run random_mxw --external --weights std-mx
