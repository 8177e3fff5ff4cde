#!/bin/bash
# Issue 6 follow-up 27: one device call for ab_sk.py (the decode GEMM split into its parts by
# taking them out). Carry .gpucache: .gpucache/exp/ holds ab_sk.py's cubin, xz-compressed
# (compiled on the development machine with bench/gpu/offline_compile.py's compile_text; without
# it the device compiles, ~2 min).
set -u
. "$(dirname "$0")/device_common.sh"
for f in "$root"/.gpucache/exp/*.cubin.xz; do [ -f "$f" ] && unxz "$f" "$cache/$(basename "${f%.xz}")"; done
step "ab_sk"
timeout ${T_AB:-400} python3 ab_sk.py ${REPS:-5} > "$OUT/ab_sk.log" 2>&1; echo "rc=$?" >> "$OUT/ab_sk.log"
cat "$OUT/ab_sk.log"
step "done"
