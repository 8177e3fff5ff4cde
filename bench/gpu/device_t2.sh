#!/bin/bash
# Issue 6 follow-up 20: one device call timing the runtime's decode GEMM with and without the
# two-tile `_t2` loop against cuBLAS (ab_t2.py).
# Carry .gpucache (offline_compile.py --pack). Logs under $OUT.
set -u
. "$(dirname "$0")/device_common.sh"
step "ab_t2.py"
timeout ${T_AB:-300} python3 ab_t2.py ${REPS:-3} > "$OUT/ab_t2.log" 2>&1; echo "rc=$?" >> "$OUT/ab_t2.log"
cat "$OUT/ab_t2.log"
step "done"
