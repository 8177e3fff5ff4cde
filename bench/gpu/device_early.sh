#!/bin/bash
# Issue 6 follow-up 28: one device call for ab_early.py (the early-refill decode GEMM loop).
# Carry .gpucache: .gpucache/exp/ holds ab_early.py's cubin, xz-compressed (compiled
# on the development machine with bench/gpu/offline_compile.py's compile_text; without it the
# device compiles, ~2 min).
set -u
. "$(dirname "$0")/device_common.sh"
for f in "$root"/.gpucache/exp/*.cubin.xz; do [ -f "$f" ] && unxz "$f" "$cache/$(basename "${f%.xz}")"; done
step "ab_early"
timeout ${T_AB:-400} python3 ab_early.py ${REPS:-5} > "$OUT/ab_early.log" 2>&1; echo "rc=$?" >> "$OUT/ab_early.log"
cat "$OUT/ab_early.log"
step "done"
