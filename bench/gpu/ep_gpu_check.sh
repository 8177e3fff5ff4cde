#!/usr/bin/env bash
# GPU end-to-end check of the plugin EP's GPU device: runs tests/ort_ep_gpu.rs on a GPU machine
# without a Rust toolchain, from prebuilt artifacts in bench/gpu/ep_artifacts/ (untracked, not
# git-ignored, so they travel with the working tree; never commit them):
#
#   ort_ep_gpu                 cargo test -p mxfuse-tests --release --no-run  (the ort_ep_gpu binary)
#   libmxfuse_ep.so            cargo build -p provider --release
#   libonnxruntime.so.1.31.1   the pip wheel's (python3 scripts/ort_dylib_path.py), or that file
#                              xz-compressed (.xz, 7 MB against 29: the device call's carry is
#                              64 MiB in all), unpacked here into /tmp
#
# Usage (from anywhere): bash bench/gpu/ep_gpu_check.sh   — about 5-35 s, most of it NVRTC
# compiling the kernels once (MXFUSE_KERNEL_CACHE keeps the code object for the next run).
# The log goes to stdout and, when $OUT is set, to $OUT/ep_gpu_check.log. Exit status: the
# test binary's (124: the guard fired: 38 s, or T_EP seconds).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
art="$here/ep_artifacts"
ort="$art/libonnxruntime.so.1.31.1"
if [ ! -f "$ort" ] && [ -f "$ort.xz" ]; then
    python3 -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.open(sys.argv[1]).read())' "$ort.xz" /tmp/libonnxruntime.so.1.31.1
    ort=/tmp/libonnxruntime.so.1.31.1
fi
for f in "$art/ort_ep_gpu" "$art/libmxfuse_ep.so" "$ort"; do
    if [ ! -f "$f" ]; then
        echo "ep_gpu_check: missing $f (see this script's header)"
        exit 2
    fi
done
export ORT_DYLIB_PATH="$ort"
export MXFUSE_EP_LIB="$art/libmxfuse_ep.so"
export MXFUSE_KERNEL_CACHE="${MXFUSE_KERNEL_CACHE:-/tmp/mxfuse-kernel-cache}"
# NVRTC may live only in a pip package (torch's nvidia-* wheels) or /usr/local/cuda: point the
# runtime at it when the loader cannot find it (kernels::gpu reads MXFUSE_NVRTC).
if [ -z "${MXFUSE_NVRTC:-}" ]; then
    # The Python harness's finder first (it knows this machine's torch / CUDA layout).
    nvrtc=$(cd "$here" && python3 -c 'import mxgpu; print(mxgpu.NVRTC_PATH)' 2>/dev/null | tail -1)
    if [ -n "$nvrtc" ] && [ -f "$nvrtc" ]; then
        export MXFUSE_NVRTC="$nvrtc"
        echo "ep_gpu_check: MXFUSE_NVRTC=$nvrtc (mxgpu)"
    fi
fi
if [ -z "${MXFUSE_NVRTC:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
    roots=$(ls -d /usr/local/cuda*/lib64 2>/dev/null)
    roots="$roots $(python3 -c 'import sys; print(" ".join(p + "/nvidia" for p in sys.path if p.endswith("site-packages")))' 2>/dev/null)"
    for r in $roots; do
        [ -d "$r" ] || continue
        hit=$(find "$r" -name 'libnvrtc.so*' ! -name '*builtins*' 2>/dev/null | sort -r | head -1)
        if [ -n "$hit" ]; then
            export MXFUSE_NVRTC="$hit"
            export LD_LIBRARY_PATH="$(dirname "$hit")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            echo "ep_gpu_check: MXFUSE_NVRTC=$hit"
            break
        fi
    done
fi
log="${OUT:-/tmp}/ep_gpu_check.log"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
start=$(date +%s.%N)
# One process for the GPU cases (the kernels compile once per process); children of the
# emulated-memory and no-GPU tests do not compile kernels.
timeout "${T_EP:-38}" "$art/ort_ep_gpu" --test-threads=1 --nocapture 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
end=$(date +%s.%N)
echo "ep_gpu_check: rc=$rc, $(echo "$end - $start" | bc 2>/dev/null || echo '?') s" | tee -a "$log"
exit "$rc"
