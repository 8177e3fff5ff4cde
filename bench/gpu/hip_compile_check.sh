#!/bin/sh
# Compile-check the GPU program (the same text the Rust runtime hands to hipRTC) for AMD targets
# with Debian's clang + HIP headers (no ROCm, no GPU): see ../shared/guides/hip-compile-check.md.
#   apt-get install -y clang-19 lld-19 libamdhip64-dev rocm-device-libs
# Device-only, to AMDGPU assembly: proves the source compiles for the target and shows its ISA;
# linking a code object needs the target's device libraries, which Debian's ROCm 5.2 lacks.
set -e
here=$(dirname "$0")
out=${OUT:-/tmp}
python3 "$here/program.py" > "$out/mxfuse_program.hip"
for arch in gfx942 gfx950; do
  if PATH=/usr/lib/llvm-19/bin:$PATH clang++-19 -x hip --offload-arch=$arch --offload-device-only \
      -nogpulib -O3 -S -include hip/hip_runtime.h --rocm-path=/usr \
      "$out/mxfuse_program.hip" -o "$out/mxfuse_$arch.s" 2> "$out/mxfuse_$arch.log"; then
    echo "$arch: OK, $(grep -c '^mx_[a-z0-9_]*:' "$out/mxfuse_$arch.s") kernels, wavefront $(grep -m1 -o 'wavefront_size: *[0-9]*' "$out/mxfuse_$arch.s" || echo '?')"
  else
    echo "$arch: FAILED: $(head -c 300 "$out/mxfuse_$arch.log")"
  fi
done
