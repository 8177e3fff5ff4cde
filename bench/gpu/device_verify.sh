#!/bin/bash
# One device call that re-verifies everything GPU-side on whatever the runtime selects by default
# (no env switches): check.py (every op against the CPU reference, bit for bit where the op is
# exact), the Rust `gpu_kernels` tests, and the plugin EP's GPU end-to-end test (ep_gpu_check.sh).
# Before it, on the development machine: `python3 bench/gpu/offline_compile.py --pack` (carry
# .gpucache) and the ep_artifacts build that ep_gpu_check.sh's header describes.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
OUT=${OUT:-/tmp/mxfuse_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cache=/tmp/mxfuse_kernel_cache
mkdir -p "$cache"
export MXFUSE_PY_CUBIN_CACHE=$cache MXFUSE_KERNEL_CACHE=$cache
unxz() { python3 -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.open(sys.argv[1]).read())' "$1" "$2"; }
if [ -f "$root/.gpucache/kernels.tar.xz" ]; then
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$root/.gpucache/kernels.tar.xz" "$cache"
fi
t0=$(date +%s)
step() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
cd "$here"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/check.log" 2>&1
step "check.py (all checks)"
timeout ${T_CHECK:-240} python3 check.py >> "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
echo "PASS $(grep -c '^PASS' "$OUT/check.log")"; grep "^FAIL" "$OUT/check.log" | head -20; tail -2 "$OUT/check.log"
step "rust gpu_kernels"
if [ -f "$root/.gpucache/gpu_kernels.xz" ]; then
  unxz "$root/.gpucache/gpu_kernels.xz" /tmp/gpu_kernels && chmod +x /tmp/gpu_kernels
  nvrtc=$(python3 -c 'import sys; sys.path.insert(0, "."); import mxgpu; print(mxgpu.NVRTC_PATH)' 2>/dev/null | tail -1)
  MXFUSE_NVRTC=$nvrtc timeout ${T_RUST:-90} /tmp/gpu_kernels > "$OUT/rust.log" 2>&1; echo "rc=$? nvrtc=$nvrtc" >> "$OUT/rust.log"
  tail -3 "$OUT/rust.log"
fi
step "ep_gpu_check.sh"
(cd "$root" && OUT="$OUT" timeout 60 bash "$here/ep_gpu_check.sh") > "$OUT/ep.log" 2>&1; echo "rc=$?" >> "$OUT/ep.log"
tail -4 "$OUT/ep.log"
step "done"
