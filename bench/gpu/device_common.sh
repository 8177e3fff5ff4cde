# Sourced by the device_*.sh scripts (one device call each): paths, the kernel cache carried in
# .gpucache (python3 bench/gpu/offline_compile.py --pack on the development machine), a step
# timer, and the prebuilt Rust GPU test binary. Leaves the caller in bench/gpu.
here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
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

# run_rust_tests TIMEOUT: the `cargo test -p kernels --test gpu_kernels` binary from .gpucache,
# with NVRTC found by the Python harness; log in $OUT/rust.log. No-op without the binary.
run_rust_tests() {
  [ -f "$root/.gpucache/gpu_kernels.xz" ] || return 0
  unxz "$root/.gpucache/gpu_kernels.xz" /tmp/gpu_kernels && chmod +x /tmp/gpu_kernels
  local nvrtc
  nvrtc=$(# run_baseline TIMEOUT TAIL: torch_baseline.py (Inductor) at the issue's row counts, log and
# gpu_anchor.json in $OUT; prints the log's last TAIL lines.
run_baseline() {
  step "inductor anchor"
  OUT=/tmp timeout "$1" python3 torch_baseline.py 8 16 32 64 128 192 8192 > "$OUT/baseline.log" 2>&1; echo "rc=$?" >> "$OUT/baseline.log"
  cp /tmp/gpu_anchor.json "$OUT/" 2>/dev/null
  tail -"$2" "$OUT/baseline.log"
}
cd "$here" && python3 -c 'import mxgpu; print(mxgpu.NVRTC_PATH)' 2>/dev/null | tail -1)
  MXFUSE_NVRTC=$nvrtc timeout "$1" /tmp/gpu_kernels > "$OUT/rust.log" 2>&1; echo "rc=$? nvrtc=$nvrtc" >> "$OUT/rust.log"
  tail -3 "$OUT/rust.log"
}
# run_baseline TIMEOUT TAIL: torch_baseline.py (Inductor) at the issue's row counts, log and
# gpu_anchor.json in $OUT; prints the log's last TAIL lines.
run_baseline() {
  step "inductor anchor"
  OUT=/tmp timeout "$1" python3 torch_baseline.py 8 16 32 64 128 192 8192 > "$OUT/baseline.log" 2>&1; echo "rc=$?" >> "$OUT/baseline.log"
  cp /tmp/gpu_anchor.json "$OUT/" 2>/dev/null
  tail -"$2" "$OUT/baseline.log"
}
cd "$here"
