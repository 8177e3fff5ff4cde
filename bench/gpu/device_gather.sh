#!/bin/bash
# One device call for the gathered kernels (kernels/gpu/mx_gather.hip): bench_gather.py (the MoE
# experts step and the weight-only MxMatMul against cuBLAS bf16 and the EP's earlier device path).
# Carry .gpucache (offline_compile.py --pack). Logs under $OUT.
set -u
. "$(dirname "$0")/device_common.sh"
step "bench_gather.py"
MXFUSE_BENCH_PDL=1 timeout ${T_GATHER:-300} python3 bench_gather.py > "$OUT/bench_gather.log" 2>&1; echo "rc=$?" >> "$OUT/bench_gather.log"
cp bench_gather.json "$OUT/" 2>/dev/null
cat "$OUT/bench_gather.log"
step "done"
