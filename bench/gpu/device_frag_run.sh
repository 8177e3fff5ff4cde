#!/bin/bash
# One device call for the fragment-packed decode GEMM and PDL (issue #6): correctness of the new
# kernel at every (W, S), of PDL launches (back-to-back chains, bit-identical), of the pipeline
# GEMM (its per-group math is shared with the new kernel), then bench_frag_pdl.py, then the Rust
# tests. Carry .gpucache (python3 bench/gpu/offline_compile.py --pack). Logs under $OUT.
# T_CHECK / T_BENCH / T_RUST: per-step timeouts (s); SECTIONS: bench_frag_pdl.py sections.
set -u
. "$(dirname "$0")/device_common.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/check.log" 2>&1
step "check: frag GEMM, PDL, pipeline GEMM"
timeout ${T_CHECK:-150} python3 check.py check_matmul_frag check_pdl check_matmul_pipe ${CHECK_EXTRA:-} >> "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
echo "PASS $(grep -c '^PASS' "$OUT/check.log")"; grep "^FAIL" "$OUT/check.log" | head -20; tail -2 "$OUT/check.log"
step "bench: frag GEMM + PDL"
OUT=/tmp timeout ${T_BENCH:-240} python3 bench_frag_pdl.py ${SECTIONS:-} > "$OUT/bench_frag_pdl.log" 2>&1; echo "rc=$?" >> "$OUT/bench_frag_pdl.log"
cp /tmp/bench_frag_pdl.json "$OUT/" 2>/dev/null
grep -v "^    " "$OUT/bench_frag_pdl.log" | tail -30
step "rust gpu_kernels"
run_rust_tests ${T_RUST:-60}
step "done"
