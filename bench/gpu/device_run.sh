#!/bin/bash
# One device call, ordered so that a failing new kernel cannot lose the rest: each step is its own
# process under its own timeout (a CUDA error poisons only that process), correctness of the new
# kernels first, then the timings (old and new variants side by side), the remaining checks, the
# Rust tests on whatever the runtime selects, the EP engineer's check, and the Inductor anchor.
#
# Precompiled kernels (optional; `python3 bench/gpu/offline_compile.py --pack` on the development
# machine, carry .gpucache): kernels.tar.xz holds the NVRTC 13.0 sm_90 cubin of the program under
# the Python harness's and the Rust runtime's cache names, gpu_kernels.xz the
# `cargo test -p kernels --test gpu_kernels` binary. Without them the Python harness compiles once
# on the device (~40 s) and the Rust tests are skipped. At most 8 files come back from $OUT: the
# logs below. DEVICE_RUN_SHORT=1 (+ T_* timeouts, BENCH_THR=) fits a short lease.
set -u
. "$(dirname "$0")/device_common.sh"
# MXFUSE_GPU_V2=1: the runtime's GEMM is the split-K cluster kernel (launch.rs), so the Rust tests
# run it too (the norm's split-row kernels are the default without it).
export MXFUSE_GPU_V2=1
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  ls -la "$cache"
} > "$OUT/check_sk.log" 2>&1
step "check: split-K GEMM"
timeout ${T_CHECK_SK:-50} python3 check.py check_matmul_splitk >> "$OUT/check_sk.log" 2>&1; rc=$?; echo "rc=$rc" >> "$OUT/check_sk.log"
tail -2 "$OUT/check_sk.log"
# A hang (a cluster barrier never met) would repeat in every later step: run them without clusters.
if [ $rc -eq 124 ]; then
  export MXFUSE_GPU_CLUSTERS=off; unset MXFUSE_GPU_V2; echo "cluster kernels hung: MXFUSE_GPU_CLUSTERS=off"
fi
step "bench: GEMM"
OUT=/tmp timeout ${T_BENCH_GEMM:-60} python3 bench.py gemm ${BENCH_THR-thr} > "$OUT/bench_gemm.log" 2>&1; echo "rc=$?" >> "$OUT/bench_gemm.log"
step "bench: norm, swiglu"
OUT=/tmp timeout ${T_BENCH_NORM:-35} python3 bench.py norm swiglu > "$OUT/bench_norm.log" 2>&1; echo "rc=$?" >> "$OUT/bench_norm.log"
if [ -n "${DEVICE_RUN_SHORT:-}" ]; then
  # Short lease: the Rust tests (every op, bit for bit) instead of the remaining Python checks.
  run_rust_tests 25
  grep -h -A40 "^gemm (us)" "$OUT/bench_gemm.log" | head -40
  grep -h -A20 "^norm (us)" "$OUT/bench_norm.log" | head -20
  exit 0
fi
step "check: the rest"
timeout 45 python3 check.py check_vectors check_quantize check_norm check_swiglu check_matmul > "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
tail -1 "$OUT/check.log"
step "rust gpu_kernels"
run_rust_tests 40
if [ -f "$here/ep_gpu_check.sh" ]; then
  step "ep_gpu_check.sh"
  mkdir -p /tmp/ep_out
  (cd "$root" && OUT=/tmp/ep_out timeout 45 bash "$here/ep_gpu_check.sh") > "$OUT/ep.log" 2>&1; echo "rc=$?" >> "$OUT/ep.log"
  tar -czf "$OUT/ep_out.tgz" -C /tmp/ep_out . 2>/dev/null
  tail -5 "$OUT/ep.log"
fi
step "inductor anchor"
OUT=/tmp timeout 60 python3 torch_baseline.py 8 8192 > "$OUT/baseline.log" 2>&1; echo "rc=$?" >> "$OUT/baseline.log"
step "done"
grep -h -A40 "^gemm (us)" "$OUT/bench_gemm.log" | head -40
grep -h -A20 "^norm (us)" "$OUT/bench_norm.log" | head -20
