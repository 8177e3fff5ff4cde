#!/bin/bash
# Issue 6 follow-up 29: one device call for ab_grid.py (the `_t2` loop on other grids).
# Carry .gpucache: .gpucache/exp/ holds ab_grid.py's cubin, xz-compressed (compiled
# on the development machine with bench/gpu/offline_compile.py's compile_text; without it the
# device compiles, ~2 min).
set -u
. "$(dirname "$0")/device_common.sh"
for f in "$root"/.gpucache/exp/*.cubin.xz; do [ -f "$f" ] && unxz "$f" "$cache/$(basename "${f%.xz}")"; done
step "ab_grid"
timeout ${T_AB:-400} python3 ab_grid.py ${REPS:-5} > "$OUT/ab_grid.log" 2>&1; echo "rc=$?" >> "$OUT/ab_grid.log"
cat "$OUT/ab_grid.log"
step "done"
