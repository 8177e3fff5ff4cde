#!/bin/bash
# Issue 6 follow-up 26: one device call for ab_lv.py (the decode GEMM's weight loads under other
# cache policies). Carry .gpucache: .gpucache/exp/ holds ab_lv.py's cubin, xz-compressed (compiled
# on the development machine with bench/gpu/offline_compile.py's compile_text; without it the
# device compiles, ~2 min).
set -u
. "$(dirname "$0")/device_common.sh"
for f in "$root"/.gpucache/exp/*.cubin.xz; do [ -f "$f" ] && unxz "$f" "$cache/$(basename "${f%.xz}")"; done
step "ab_lv"
timeout ${T_AB:-400} python3 ab_lv.py ${REPS:-5} > "$OUT/ab_lv.log" 2>&1; echo "rc=$?" >> "$OUT/ab_lv.log"
cat "$OUT/ab_lv.log"
step "done"
