#!/bin/bash
# Issue 6 follow-up 25: one device call for ab_fsx.py (the decode GEMM with activations by
# 16-byte loads and a neighbour exchange). Carry .gpucache: .gpucache/exp/ holds ab_fsx.py's cubin,
# xz-compressed (compiled on the development machine with bench/gpu/offline_compile.py's
# compile_text; without it the device compiles, ~2 min).
set -u
. "$(dirname "$0")/device_common.sh"
for f in "$root"/.gpucache/exp/*.cubin.xz; do [ -f "$f" ] && unxz "$f" "$cache/$(basename "${f%.xz}")"; done
ls "$cache" | head
step "ab_fsx"
timeout ${T_AB:-300} python3 ab_fsx.py ${REPS:-5} > "$OUT/ab_fsx.log" 2>&1; echo "rc=$?" >> "$OUT/ab_fsx.log"
cat "$OUT/ab_fsx.log"
step "done"
