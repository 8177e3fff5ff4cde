#!/bin/bash
# Issue 6 follow-up 32: one device call for ab_g1.py (one group of 4 k-blocks a warp).
# Carry .gpucache: .gpucache/exp/ holds ab_g1.py's cubin, xz-compressed (compiled
# on the development machine with bench/gpu/offline_compile.py's compile_text; without it the
# device compiles, ~2 min).
set -u
. "$(dirname "$0")/device_common.sh"
for f in "$root"/.gpucache/exp/*.cubin.xz; do [ -f "$f" ] && unxz "$f" "$cache/$(basename "${f%.xz}")"; done
step "ab_g1"
timeout ${T_AB:-400} python3 ab_g1.py ${REPS:-5} > "$OUT/ab_g1.log" 2>&1; echo "rc=$?" >> "$OUT/ab_g1.log"
cat "$OUT/ab_g1.log"
step "done"
