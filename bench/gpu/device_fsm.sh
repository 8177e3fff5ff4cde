#!/bin/bash
# One device call for issue 6 follow-up 16 (BENCHMARKS.md): check.py's `_fsm` checks (and any
# CHECKS="..."), then ab_fsm.py (the cluster-staged m16 GEMM against `_fs`, the runtime's choice
# and cuBLAS bf16). Before it, on the development machine, `python3 bench/gpu/offline_compile.py
# --pack` (carry .gpucache). Logs under $OUT.
set -u
. "$(dirname "$0")/device_common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/check.log" 2>&1
step "check.py ${CHECKS:-check_matmul_frag_fsm}"
timeout ${T_CHECK:-150} python3 check.py ${CHECKS:-check_matmul_frag_fsm} >> "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
echo "PASS $(grep -c '^PASS' "$OUT/check.log") FAIL $(grep -c '^FAIL' "$OUT/check.log")"
grep "^FAIL" "$OUT/check.log" | head -12
step "ab_fsm.py"
timeout ${T_AB:-300} python3 ab_fsm.py ${REPS:-3} > "$OUT/ab_fsm.log" 2>&1; echo "rc=$?" >> "$OUT/ab_fsm.log"
cat "$OUT/ab_fsm.log"
step "done"
