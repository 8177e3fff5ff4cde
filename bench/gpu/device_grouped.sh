#!/bin/bash
# One device call timing the grouped decode GEMM against a launch per weight
# (kernels/examples/grouped_bench.rs). Before it, on the development machine:
# `cargo build --release -p kernels --example grouped_bench`, stripped and xz-compressed to
# .gpucache/grouped_bench.xz, and `python3 bench/gpu/offline_compile.py --pack` (carry .gpucache).
set -u
. "$(dirname "$0")/device_common.sh"
export MXFUSE_NVRTC=$(python3 -c 'import mxgpu; print(mxgpu.NVRTC_PATH)' 2>/dev/null | tail -1)
unxz "$root/.gpucache/grouped_bench.xz" /tmp/grouped_bench && chmod +x /tmp/grouped_bench
step "grouped_bench ${GROUP_MS:-1,8,16}"
timeout ${T_GB:-240} /tmp/grouped_bench ${GROUP_MS:-1,8,16} ${GROUP_SHAPES:-} 2>&1 | grep -v "^mxfuse: " | tee "$OUT/grouped_bench.log"
step "done"
