#!/bin/bash
# One short device call for the decode GEMM work (issue #6): correctness of the cp.async pipeline
# GEMM (every warps x cluster-split shape) and of the first tensor-core kernel, then the GEMM
# timings (old default, new default, the new kernel's whole (W, S) sweep, quantize + new, the old
# in-GEMM path, cuBLAS bf16), then the Rust tests on whatever the runtime selects.
# Carry .gpucache (python3 bench/gpu/offline_compile.py --pack). Logs under $OUT (at most 8 files).
# T_CHECK / T_BENCH / T_RUST: per-step timeouts (s); SKIP_CHECK_OLD=1 drops check_matmul.
set -u
. "$(dirname "$0")/device_common.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/check.log" 2>&1
step "check: pipeline GEMM${SKIP_CHECK_OLD:+ (old GEMM check skipped)}"
checks="check_matmul_pipe"; [ -z "${SKIP_CHECK_OLD:-}" ] && checks="$checks check_matmul"
timeout ${T_CHECK:-110} python3 check.py $checks >> "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
echo "PASS $(grep -c '^PASS' "$OUT/check.log")"; grep "^FAIL" "$OUT/check.log" | head -20; tail -2 "$OUT/check.log"
step "bench: GEMM"
OUT=/tmp timeout ${T_BENCH:-150} python3 bench.py gemm > "$OUT/bench_gemm.log" 2>&1; echo "rc=$?" >> "$OUT/bench_gemm.log"
cp /tmp/bench_gemm.json "$OUT/" 2>/dev/null
step "rust gpu_kernels"
run_rust_tests ${T_RUST:-60}
step "done"
sed -n '/^read-only/p;/^gemm (us)/,$p' "$OUT/bench_gemm.log"
