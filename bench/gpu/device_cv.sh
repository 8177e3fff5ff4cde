#!/bin/bash
# Issue 6 follow-up 23: one device call for ab_cv.py (integer e4m3 conversion in the fragment
# GEMM). Carry .gpucache: .gpucache/cv/ holds the cubin of ab_cv.py's text (compiled here by
# bench/gpu/offline_compile.py's compile_text; without it the device compiles, ~2 min).
set -u
. "$(dirname "$0")/device_common.sh"
for f in "$root"/.gpucache/cv/*.cubin.xz; do [ -f "$f" ] && unxz "$f" "$cache/$(basename "${f%.xz}")"; done
step "ab_cv"
timeout ${T_AB:-400} python3 ab_cv.py ${REPS:-5} > "$OUT/ab_cv.log" 2>&1; echo "rc=$?" >> "$OUT/ab_cv.log"
cat "$OUT/ab_cv.log"
step "done"
