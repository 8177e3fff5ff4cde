#!/bin/bash
# One device call for MxMatMul's prefill route (kernels/src/gpu/prefill.rs): where cuBLAS lives on
# the machine, the Rust gpu_kernels tests (incl. the route's, against the CPU reference), then
# kernels/examples/prefill_bench.rs (decode kernels vs the route vs cuBLAS bf16 alone, same run).
# Before it, on the development machine: the gpu_kernels test binary packed into .gpucache (see
# device_common.sh) and `cargo build --release -p kernels --example prefill_bench` compressed to
# .gpucache/prefill_bench.xz. PREFILL_MS / PREFILL_SHAPES pass the bench's M list and N x K list (PREFILL_OUT=f16 / f32 its output type);
# MOE_T its MoE token counts; MOE_F32=T,T,... also runs the MoE section with f32 activations
# (MOE_F16=T,T,... with f16 ones); WO_DTS="f16 f32" runs the weight-only section of each type
# (WO_MS rows, on PREFILL_SHAPES) once more, alone.
set -u
. "$(dirname "$0")/device_common.sh"
step "where cuBLAS is"
{ ldconfig -p | grep -i cublas; ls /usr/local/cuda/lib64/libcublas* 2>&1;
  python3 - <<'PY'
import glob, site, sys
for r in set(site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if "-packages" in p]):
    for f in sorted(glob.glob(r + "/nvidia/**/libcublas*.so*", recursive=True)):
        print(f)
PY
} > "$OUT/cublas_where.log" 2>&1
cat "$OUT/cublas_where.log" | head -12
if [ -f "$root/.gpucache/prefill_bench.xz" ]; then
  unxz "$root/.gpucache/prefill_bench.xz" /tmp/prefill_bench && chmod +x /tmp/prefill_bench
  nvrtc=$(python3 -c 'import mxgpu; print(mxgpu.NVRTC_PATH)' 2>/dev/null | tail -1)
  # Does the runtime's own search find cuBLAS? If not, name the first library found above.
  MXFUSE_NVRTC=$nvrtc /tmp/prefill_bench 64 256x256 > "$OUT/prefill_probe.log" 2>&1
  cat "$OUT/prefill_probe.log" | grep -v "^|" | head -5
  if ! grep -q "through cuBLAS" "$OUT/prefill_probe.log"; then
    export MXFUSE_CUBLAS=$(grep -m1 "libcublas.so" "$OUT/cublas_where.log" | grep -o "/[^ ]*libcublas\.so[^ ]*" | head -1)
    echo "runtime search found none; MXFUSE_CUBLAS=$MXFUSE_CUBLAS"
  fi
fi
step "rust gpu_kernels"
run_rust_tests ${T_RUST:-120}
grep -E "prefill|test result|FAIL|panicked" "$OUT/rust.log" | head -20
if [ -f "$root/.gpucache/prefill_bench.xz" ]; then
  step "prefill_bench"
  MXFUSE_NVRTC=$nvrtc timeout ${T_PREFILL:-300} /tmp/prefill_bench ${PREFILL_MS:-} ${PREFILL_SHAPES:-} > "$OUT/prefill_bench.log" 2>&1
  echo "rc=$?" >> "$OUT/prefill_bench.log"
  cat "$OUT/prefill_bench.log"
  for dt in f32 f16; do
    ts=$(eval echo "\${MOE_$(echo $dt | tr a-z A-Z):-}")
    [ -n "$ts" ] || continue
    MOE_DT=$dt MOE_T=$ts MXFUSE_NVRTC=$nvrtc timeout ${T_PREFILL:-300} /tmp/prefill_bench 16 256x256 2>&1 | grep -v "^mxfuse" | sed -n '/^MoE/,$p' | tee -a "$OUT/prefill_moe_float.log"
  done
  for dt in ${WO_DTS:-}; do
    WO_DT=$dt MOE_T=none MXFUSE_NVRTC=$nvrtc timeout ${T_PREFILL:-300} /tmp/prefill_bench 16 ${PREFILL_SHAPES:-6144x6144,1536x6144,6144x768} 2>&1 | grep -v "^mxfuse" | sed -n '/^weight-only/,/^$/p' | tee -a "$OUT/prefill_weight_only.log"
  done
fi
step "done"
