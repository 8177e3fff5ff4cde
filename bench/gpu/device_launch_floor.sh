#!/bin/bash
# One device call: the driver's own launch cost (launch_floor.cu, built here with nvcc) beside
# mxfuse's launchers' host enqueue time in the same call (prefill_bench's "host enqueue" column,
# decode GEMM at M = 1; .gpucache/prefill_bench.xz as for device_prefill.sh). Logs under $OUT.
set -u
. "$(dirname "$0")/device_common.sh"
step "launch floor"
nvcc -O2 -o /tmp/launch_floor launch_floor.cu -lcuda > "$OUT/launch_floor.log" 2>&1 && /tmp/launch_floor >> "$OUT/launch_floor.log" 2>&1
cat "$OUT/launch_floor.log"
if [ -f "$root/.gpucache/prefill_bench.xz" ]; then
  unxz "$root/.gpucache/prefill_bench.xz" /tmp/prefill_bench && chmod +x /tmp/prefill_bench
  nvrtc=$(python3 -c 'import mxgpu; print(mxgpu.NVRTC_PATH)' 2>/dev/null | tail -1)
  step "prefill_bench M = 1"
  MOE_T=none MXFUSE_NVRTC=$nvrtc timeout 120 /tmp/prefill_bench 1,16 6144x768,6144x6144 > "$OUT/launch_enqueue.log" 2>&1
  grep -E "^\| [0-9]|N x K" "$OUT/launch_enqueue.log"
fi
step "done"
