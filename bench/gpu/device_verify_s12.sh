#!/bin/bash
# One short verification call (2026-12-01): the GEMM epilogue (bias / alpha / beta) in every GEMM
# family, MxDequantize's GPU kernel, the norm's variance shortcut; then the norm and the
# epilogue timings. Carry .gpucache and bench/gpu/ep_artifacts. Logs under $OUT.
set -u
. "$(dirname "$0")/device_common.sh"
step "check.py"
timeout ${T_CHECK:-110} python3 check.py check_norm check_matmul check_matmul_frag check_matmul_pipe check_matmul_epilogue > "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
echo "PASS $(grep -c '^PASS' "$OUT/check.log")"; grep "^FAIL" "$OUT/check.log" | head -10; tail -2 "$OUT/check.log"
step "rust gpu_kernels"
run_rust_tests ${T_RUST:-60}
step "ep_gpu_check.sh"
(cd "$root" && OUT=/tmp timeout 45 bash "$here/ep_gpu_check.sh") > "$OUT/ep.log" 2>&1; echo "rc=$?" >> "$OUT/ep.log"
tail -4 "$OUT/ep.log"
step "bench norm (PDL)"
MXFUSE_BENCH_PDL=1 OUT=/tmp timeout ${T_NORM:-30} python3 bench.py norm > "$OUT/bench_norm.log" 2>&1; echo "rc=$?" >> "$OUT/bench_norm.log"
grep -v "^norm {" "$OUT/bench_norm.log" | sed -n 3,6p
step "bench_epilogue (PDL)"
MXFUSE_BENCH_PDL=1 timeout ${T_EPI:-45} python3 bench_epilogue.py > "$OUT/bench_epilogue.log" 2>&1; echo "rc=$?" >> "$OUT/bench_epilogue.log"
cat "$OUT/bench_epilogue.log"
step "done"
