#!/bin/bash
# One device call for an A/B script of the decode GEMM: AB=<name> runs bench/gpu/<name>.py
# (ab_g1, ab_grid, ab_ws, ab_wg, ab_balance, ...) with REPS repetitions, log $OUT/<name>.log.
# Carry .gpucache: .gpucache/exp/ holds the script's cubin, xz-compressed (compiled on the
# development machine with bench/gpu/offline_compile.py's compile_text; without it the device
# compiles, ~2 min). Scripts whose bench kernels need arch-specific PTX take MXFUSE_BENCH_ARCH
# (ab_wg: 90a), passed through from the caller.
set -u
: "${AB:?set AB to an A/B script name, e.g. AB=ab_g1}"
. "$(dirname "$0")/device_common.sh"
for f in "$root"/.gpucache/exp/*.cubin.xz; do [ -f "$f" ] && unxz "$f" "$cache/$(basename "${f%.xz}")"; done
step "$AB"
timeout ${T_AB:-400} python3 "$AB.py" ${REPS:-5} > "$OUT/$AB.log" 2>&1; echo "rc=$?" >> "$OUT/$AB.log"
cat "$OUT/$AB.log"
step "done"
