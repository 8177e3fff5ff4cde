#!/bin/bash
# One short device call for the lean split-8 norm kernel (issue 6 follow-up 10, BENCHMARKS.md):
# check.py check_norm_lean (_c1_s8_lean at M = 1, 8, 16 with edge rows, every byte equal to the
# generic _c1_s8 kernel's, and the reference comparison), then ab_normsass.py (base _c1_s8 vs
# _lean, CUDA-graph replay under PDL, M = 1, 8, 16, 32, alternating, median of ROUNDS). Before it,
# on the development machine: `python3 bench/gpu/offline_compile.py --pack` (carry .gpucache).
# Under 90 s. Logs under $OUT.
set -u
. "$(dirname "$0")/device_common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/check.log" 2>&1
step "check.py ${CHECKS:=check_norm_lean}"
timeout ${T_CHECK:-40} python3 check.py $CHECKS >> "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
echo "PASS $(grep -c '^PASS' "$OUT/check.log") FAIL $(grep -c '^FAIL' "$OUT/check.log")"; grep "^FAIL" "$OUT/check.log" | head -12
tail -2 "$OUT/check.log"
step "ab_normsass.py (PDL)"
ROUNDS=${ROUNDS:-5} MXFUSE_BENCH_PDL=1 timeout ${T_AB:-45} python3 ab_normsass.py ${AB_MS:-1 8 16 32} > "$OUT/ab_normsass.log" 2>&1
echo "rc=$?" >> "$OUT/ab_normsass.log"
tail -20 "$OUT/ab_normsass.log"
step "done"
