#!/bin/bash
# One device call that re-verifies everything GPU-side on whatever the runtime selects by default
# (no env switches): check.py (every op against the CPU reference, bit for bit where the op is
# exact), the Rust `gpu_kernels` tests, and the plugin EP's GPU end-to-end test (ep_gpu_check.sh).
# Before it, on the development machine: `python3 bench/gpu/offline_compile.py --pack` (carry
# .gpucache) and the ep_artifacts build that ep_gpu_check.sh's header describes. Options:
# SANITIZE=1 compute-sanitizer memcheck / racecheck / synccheck on the Rust GPU tests; BENCH=1
# bench_frag_pdl.py (GEMM + PDL timings); BASELINE=1 torch_baseline.py (Inductor) in the same call;
# CHECKS="check_norm check_matmul ..." runs only those checks of check.py; NORM=1 bench.py's norm
# section (PDL); EPILOGUE=1 bench_epilogue.py (the GEMM with and without a bias, PDL; with
# EPILOGUE=<old cubin> also that cubin's kernels, A/B).
set -u
. "$(dirname "$0")/device_common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/check.log" 2>&1
step "check.py ${CHECKS:-(all checks)}"
timeout ${T_CHECK:-240} python3 check.py ${CHECKS:-} >> "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
echo "PASS $(grep -c '^PASS' "$OUT/check.log")"; grep "^FAIL" "$OUT/check.log" | head -20; tail -2 "$OUT/check.log"
step "rust gpu_kernels"
run_rust_tests ${T_RUST:-90}
step "ep_gpu_check.sh"
(cd "$root" && OUT="$OUT" timeout 60 bash "$here/ep_gpu_check.sh") > "$OUT/ep.log" 2>&1; echo "rc=$?" >> "$OUT/ep.log"
tail -4 "$OUT/ep.log"
if [ -n "${SANITIZE:-}" ] && [ -x /tmp/gpu_kernels ]; then
  # compute-sanitizer on the Rust GPU tests (every kernel family, incl. the PDL launches and the
  # fragment GEMM's cluster reduction); NVRTC as run_rust_tests found it.
  nvrtc=$(grep -o 'nvrtc=.*' "$OUT/rust.log" | tail -1 | cut -d= -f2)
  for tool in memcheck racecheck synccheck; do
    step "compute-sanitizer $tool"
    # MXFUSE_GPU_ARITY_CHECK=0: the launchers' argument-count check probes the driver until it
    # answers "invalid value", which the sanitizer would list as API errors.
    MXFUSE_GPU_ARITY_CHECK=0 MXFUSE_NVRTC=$nvrtc timeout ${T_SAN:-120} compute-sanitizer --tool $tool /tmp/gpu_kernels --test-threads=1 > "$OUT/sanitizer_$tool.log" 2>&1
    echo "rc=$?" >> "$OUT/sanitizer_$tool.log"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result|rc=" "$OUT/sanitizer_$tool.log" | tail -3
  done
fi
if [ -n "${BENCH:-}" ]; then
  step "bench_frag_pdl.py"
  OUT=/tmp timeout ${T_BENCH:-240} python3 bench_frag_pdl.py > "$OUT/bench_frag_pdl.log" 2>&1; echo "rc=$?" >> "$OUT/bench_frag_pdl.log"
  cp /tmp/bench_frag_pdl.json "$OUT/" 2>/dev/null
  grep -v "^    " "$OUT/bench_frag_pdl.log" | tail -26
fi
if [ -n "${NORM:-}" ]; then
  step "bench.py norm (PDL)"
  MXFUSE_BENCH_PDL=1 OUT=/tmp timeout ${T_NORM:-60} python3 bench.py norm > "$OUT/bench_norm.log" 2>&1; echo "rc=$?" >> "$OUT/bench_norm.log"
  grep -v "^norm {" "$OUT/bench_norm.log" | sed -n 3,6p
fi
if [ -n "${EPILOGUE:-}" ]; then
  step "bench_epilogue.py (PDL)"
  old=$([ "$EPILOGUE" != 1 ] && echo "$EPILOGUE")
  MXFUSE_BENCH_PDL=1 timeout ${T_EPI:-90} python3 bench_epilogue.py $old > "$OUT/bench_epilogue.log" 2>&1; echo "rc=$?" >> "$OUT/bench_epilogue.log"
  cat "$OUT/bench_epilogue.log"
fi
[ -n "${BASELINE:-}" ] && run_baseline ${T_BASE:-120} 12
step "done"
