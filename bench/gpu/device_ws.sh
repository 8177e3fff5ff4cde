#!/bin/bash
# Issue 6 follow-up 31: one device call for ab_ws.py (the persistent warp-specialised GEMM).
# Carry .gpucache: .gpucache/exp/ holds ab_ws.py's cubin, xz-compressed (compiled
# on the development machine with bench/gpu/offline_compile.py's compile_text; without it the
# device compiles, ~2 min).
set -u
. "$(dirname "$0")/device_common.sh"
for f in "$root"/.gpucache/exp/*.cubin.xz; do [ -f "$f" ] && unxz "$f" "$cache/$(basename "${f%.xz}")"; done
step "ab_ws"
timeout ${T_AB:-400} python3 ab_ws.py ${REPS:-5} > "$OUT/ab_ws.log" 2>&1; echo "rc=$?" >> "$OUT/ab_ws.log"
cat "$OUT/ab_ws.log"
step "done"
