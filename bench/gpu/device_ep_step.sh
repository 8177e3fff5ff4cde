#!/bin/bash
# One device call timing the plugin EP's decode step on the GPU device through ONNX Runtime
# (tests/examples/ep_gpu_step.rs: a MiniMax-M3-TP4-shaped MXFP8 stack, 1 and 8 tokens) under
# each setting compared: the default, MXFUSE_GPU_RUN_SYNC=1 (wait for the device after every
# fused node, as before session 23), MXFUSE_GPU_ALLOC_CACHE_MIB=0 (every ORT tensor one
# cuMemAlloc / cuMemFree, as before), and both. Before it, on the development machine: the
# ep_artifacts of ep_gpu_check.sh and `cargo build --release -p mxfuse-tests --example
# ep_gpu_step` compressed to .gpucache/ep_gpu_step.xz. LAYERS (default 4) sets the stack depth;
# PROFILE=1 adds a run under ONNX Runtime's profiler, summed by step_profile.py. SETTINGS
# (default: all five) lists the settings to time, "default" for none.
set -u
. "$(dirname "$0")/device_common.sh"
art="$root/bench/gpu/ep_artifacts"
ort="$art/libonnxruntime.so.1.31.1"
# ep_gpu_check.sh's artifacts; the ORT library may travel xz-compressed (the carry's 64 MiB)
if [ ! -f "$ort" ] && [ -f "$ort.xz" ]; then unxz "$ort.xz" /tmp/libonnxruntime.so.1.31.1; ort=/tmp/libonnxruntime.so.1.31.1; fi
export ORT_DYLIB_PATH="$ort" MXFUSE_EP_LIB="$art/libmxfuse_ep.so"
export MXFUSE_NVRTC=$(python3 -c 'import mxgpu; print(mxgpu.NVRTC_PATH)' 2>/dev/null | tail -1)
unxz "$root/.gpucache/ep_gpu_step.xz" /tmp/ep_gpu_step && chmod +x /tmp/ep_gpu_step
IFS=';' read -ra settings <<< "${SETTINGS:-default;MXFUSE_GPU_RUN_SYNC=1;MXFUSE_GPU_ALLOC_CACHE_MIB=0;MXFUSE_GPU_RUN_SYNC=1 MXFUSE_GPU_ALLOC_CACHE_MIB=0;default}"
for setting in "${settings[@]}"; do
  [ "$setting" = default ] && setting=""
  step "ep_gpu_step ${setting:-(default)}"
  env $setting timeout ${T_STEP:-120} /tmp/ep_gpu_step ${LAYERS:-4} 2>&1 | grep -v "^mxfuse: " | tee -a "$OUT/ep_step.log"
done
if [ -n "${PROFILE:-}" ]; then
  # ONNX Runtime's profile of the default setting: where a step's host time goes, by node.
  step "ep_gpu_step profiled"
  (cd /tmp && MXFUSE_STEP_PROFILE=/tmp/ep_step_profile timeout ${T_STEP:-120} /tmp/ep_gpu_step ${LAYERS:-4} 2>&1 | grep -v "^mxfuse: " | tee -a "$OUT/ep_step.log")
  prof=$(ls -t /tmp/ep_step_profile*.json 2>/dev/null | head -1)
  [ -n "$prof" ] && python3 "$here/step_profile.py" "$prof" 10 | tee -a "$OUT/ep_step_profile.log"
fi
step "done"
