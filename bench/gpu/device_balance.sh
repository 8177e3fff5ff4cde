#!/bin/bash
# Issue 6 follow-up 34: one device call for ab_balance.py (the `_t2` grid balanced over the SMs).
# Carry .gpucache: .gpucache/exp/ holds ab_balance.py's cubin, xz-compressed (compiled
# on the development machine with bench/gpu/offline_compile.py's compile_text; without it the
# device compiles, ~2 min).
set -u
. "$(dirname "$0")/device_common.sh"
for f in "$root"/.gpucache/exp/*.cubin.xz; do [ -f "$f" ] && unxz "$f" "$cache/$(basename "${f%.xz}")"; done
step "ab_balance"
timeout ${T_AB:-400} python3 ab_balance.py ${REPS:-5} > "$OUT/ab_balance.log" 2>&1; echo "rc=$?" >> "$OUT/ab_balance.log"
cat "$OUT/ab_balance.log"
step "done"
