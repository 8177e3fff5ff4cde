#!/bin/bash
# One device call for issue 6 follow-up 12 (BENCHMARKS.md): the decode GEMM with the L2 bulk
# prefetch of each warp's weight share (mx_matmul_frag.hip, pre & 2) against without and cuBLAS
# bf16, PDL, CUDA-graph replay; outputs compared bit for bit (ab_l2pf.py). CHECKS="..." runs
# check.py first. Before it, on the development machine, `python3 bench/gpu/offline_compile.py
# --pack` (carry .gpucache). Logs under $OUT.
set -u
. "$(dirname "$0")/device_common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/check.log" 2>&1
if [ -n "${CHECKS:-}" ]; then
  step "check.py $CHECKS"
  timeout ${T_CHECK:-120} python3 check.py $CHECKS >> "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
  echo "PASS $(grep -c '^PASS' "$OUT/check.log") FAIL $(grep -c '^FAIL' "$OUT/check.log")"
  grep "^FAIL" "$OUT/check.log" | head -12
fi
step "ab_l2pf.py"
timeout ${T_AB:-300} python3 ab_l2pf.py ${REPS:-3} > "$OUT/ab_l2pf.log" 2>&1; echo "rc=$?" >> "$OUT/ab_l2pf.log"
cat "$OUT/ab_l2pf.log"
step "done"
