#!/bin/bash
# Issue 6 follow-up 24: one device call for ab_t2p.py (the `_t2` decode GEMM with an L2 prefetch
# PFD groups ahead). Carry .gpucache: .gpucache/exp/ holds ab_t2p.py's cubin, xz-compressed
# (compiled on the development machine with bench/gpu/offline_compile.py's compile_text; without
# it the device compiles, ~2 min).
set -u
. "$(dirname "$0")/device_common.sh"
for f in "$root"/.gpucache/exp/*.cubin.xz; do [ -f "$f" ] && unxz "$f" "$cache/$(basename "${f%.xz}")"; done
ls "$cache" | head
step "ab_t2p"
timeout ${T_AB:-300} python3 ab_t2p.py ${REPS:-5} > "$OUT/ab_t2p.log" 2>&1; echo "rc=$?" >> "$OUT/ab_t2p.log"
cat "$OUT/ab_t2p.log"
step "done"
