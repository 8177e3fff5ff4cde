#!/bin/sh
# Compile-check the GPU program (the same text the Rust runtime hands to hipRTC) for AMD targets
# with no ROCm and no GPU: see ../shared/guides/hip-compile-check.md.
#   apt-get install -y clang-19 lld-19 libamdhip64-dev rocm-device-libs   # gfx942; HIP headers
#   pip install ziglang==0.15.1                                             # clang 20.1 for gfx950
# Device-only, to AMDGPU assembly: proves the source compiles for the target and shows its ISA;
# linking a code object needs the target's device libraries, which Debian's ROCm 5.2 lacks.
# gfx950 (MI355X) needs LLVM >= 20, which Debian 12 does not package: the clang inside the ziglang
# wheel (`zig clang`, 20.1.2, all LLVM targets) is used, with clang-19's resource directory for
# the HIP wrapper headers (__clang_hip_runtime_wrapper.h; zig ships none). CLANG20="..." overrides.
set -e
here=$(dirname "$0")
out=${OUT:-/tmp}
python3 "$here/program.py" > "$out/mxfuse_program.hip"
clang19="env PATH=/usr/lib/llvm-19/bin:$PATH clang++-19"
clang20=${CLANG20:-}
if [ -z "$clang20" ]; then
  zig=$(python3 -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))' 2>/dev/null || true)
  [ -n "$zig" ] && [ -f "$zig" ] && chmod +x "$zig" 2>/dev/null || true
  [ -n "$zig" ] && [ -x "$zig" ] && clang20="$zig clang -resource-dir /usr/lib/llvm-19/lib/clang/19"
fi
for arch in gfx942 gfx950; do
  cc=$clang19
  if [ "$arch" = gfx950 ]; then
    if [ -z "$clang20" ]; then
      echo "$arch: SKIPPED: needs clang >= 20 (pip install ziglang==0.15.1, or CLANG20=...)"
      continue
    fi
    cc=$clang20
  fi
  if $cc -x hip --offload-arch=$arch --offload-device-only -nogpulib -O3 -S \
      -include hip/hip_runtime.h --rocm-path=/usr \
      "$out/mxfuse_program.hip" -o "$out/mxfuse_$arch.s" 2> "$out/mxfuse_$arch.log"; then
    echo "$arch: OK ($($cc --version | head -1 | sed 's/ (.*//')), $(grep -c '^mx_[a-z0-9_]*:' "$out/mxfuse_$arch.s") kernels, $(grep -m1 -o 'wavefront_size: *[0-9]*' "$out/mxfuse_$arch.s" || echo 'wavefront ?'), $(grep -c warning "$out/mxfuse_$arch.log") warnings"
  else
    echo "$arch: FAILED: $(head -c 300 "$out/mxfuse_$arch.log")"
  fi
done
