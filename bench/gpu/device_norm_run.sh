#!/bin/bash
# One short device call for the norm / SwiGLU work (issue #6): correctness of every norm and
# SwiGLU variant first, then their timings, the Rust tests (the runtime's own kernel choice, bit for
# bit), and optionally the plugin EP's GPU check (EP=1) and the Inductor anchor (BASELINE=1).
# Carry .gpucache (python3 bench/gpu/offline_compile.py --pack). Logs under $OUT (at most 8 files).
set -u
. "$(dirname "$0")/device_common.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/check.log" 2>&1
step "check: vectors, quantize, norm, swiglu"
timeout ${T_CHECK:-120} python3 check.py check_vectors check_quantize check_norm check_swiglu ${CHECK_EXTRA:-} >> "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
grep -c "^PASS" "$OUT/check.log"; grep "^FAIL" "$OUT/check.log" | head -20; tail -2 "$OUT/check.log"
[ -n "${BASELINE:-}" ] && run_baseline ${T_BASE:-90} 3
step "bench: norm, swiglu"
OUT=/tmp timeout ${T_BENCH:-150} python3 bench.py norm swiglu > "$OUT/bench_norm.log" 2>&1; echo "rc=$?" >> "$OUT/bench_norm.log"
step "rust gpu_kernels"
run_rust_tests ${T_RUST:-60}
if [ -n "${EP:-}" ] && [ -f "$here/ep_gpu_check.sh" ]; then
  step "ep_gpu_check.sh"
  mkdir -p /tmp/ep_out
  (cd "$root" && OUT=/tmp/ep_out timeout 60 bash "$here/ep_gpu_check.sh") > "$OUT/ep.log" 2>&1; echo "rc=$?" >> "$OUT/ep.log"
  tail -5 "$OUT/ep.log"
fi
step "done"
sed -n '/^norm (us)/,$p' "$OUT/bench_norm.log"
