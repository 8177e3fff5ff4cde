#!/bin/bash
# Issue 6 follow-ups 20-21: one device call running an A/B timing script of the fragment GEMM
# (AB=ab_t2.py by default: the runtime's decode GEMM with and without the two-tile `_t2` loop
# against cuBLAS; AB=ab_rows16.py: every 9-16-row shape). Carry .gpucache (offline_compile.py
# --pack). Logs under $OUT.
set -u
. "$(dirname "$0")/device_common.sh"
ab=${AB:-ab_t2.py}
step "$ab"
timeout ${T_AB:-300} python3 "$ab" ${REPS:-3} > "$OUT/${ab%.py}.log" 2>&1; echo "rc=$?" >> "$OUT/${ab%.py}.log"
cat "$OUT/${ab%.py}.log"
step "done"
