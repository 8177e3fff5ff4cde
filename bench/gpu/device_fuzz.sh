#!/bin/bash
# The op-level fuzzer (tests/fuzz/random_ops.py) through the plugin EP's GPU device on the device
# machine: random com.mxfuse nodes (dtypes, shapes, attributes) must end in outputs or an ORT
# error, never a crash, hang or panic. Needs in bench/gpu/ep_artifacts/ (untracked, travels with
# the tree): libmxfuse_ep.so (cargo build --release -p provider) and the onnxruntime 1.31.1 wheel
# for the device's Python (`pip download onnxruntime==1.31.1 --python-version 3.12
# --only-binary=:all: --no-deps --platform manylinux_2_28_x86_64 -d bench/gpu/ep_artifacts`),
# installed here into /tmp (the image's own onnxruntime is older than the EP's minimum, 1.31).
# Usage: CASES=200 SEED=1 bash bench/gpu/device_fuzz.sh   (logs and findings under $OUT)
set -u
. "$(dirname "$0")/ort_wheel_env.sh"
out="${OUT:-/tmp/fuzz_out}"; mkdir -p "$out"
export MXFUSE_KERNEL_CACHE=/tmp/mxfuse-kernel-cache
timeout "${T_FUZZ:-400}" python3 "$root/tests/fuzz/random_ops.py" --cases "${CASES:-150}" \
  --seed "${SEED:-1}" --gpu --timeout 120 --lib "$art/libmxfuse_ep.so" --keep "$out/keep" \
  --report "$out/gpu_fuzz.json" --verbose > "$out/gpu_fuzz.log" 2>&1
echo "rc=$?"
echo "GPU runs that reached outputs: $(grep -c 'ep-gpu: ok RAN' "$out/gpu_fuzz.log")"
grep -v '^case ' "$out/gpu_fuzz.log" | tail -60
