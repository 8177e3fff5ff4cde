#!/bin/bash
# Issue 6 follow-up 33: one device call for ab_wg.py (register-A fp8 wgmma, sm_90a).
# Carry .gpucache: .gpucache/exp/ holds ab_wg.py's cubin, xz-compressed (compiled
# on the development machine with bench/gpu/offline_compile.py's compile_text; without it the
# device compiles, ~2 min).
set -u
. "$(dirname "$0")/device_common.sh"
for f in "$root"/.gpucache/exp/*.cubin.xz; do [ -f "$f" ] && unxz "$f" "$cache/$(basename "${f%.xz}")"; done
step "ab_wg"
MXFUSE_BENCH_ARCH=90a timeout ${T_AB:-400} python3 ab_wg.py ${REPS:-5} > "$OUT/ab_wg.log" 2>&1; echo "rc=$?" >> "$OUT/ab_wg.log"
cat "$OUT/ab_wg.log"
step "done"
