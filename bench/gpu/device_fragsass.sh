#!/bin/bash
# One device call for issue 6 follow-up 11 (BENCHMARKS.md): the m16 fragment GEMM's SASS-walk
# variant (mx_matmul_frag_m16_bf16_w<W>_s<S>_fs). check.py check_matmul_frag_fs (the variant
# bit-identical to the current m16 kernel at every W, S, plain and PDL, and within gemm_verdict's
# bound of the f64 reference; edge blocks: scales 0 / 1 / 254 / 255, 2^-27 / 2^23, NaN / 448 /
# subnormal weights, one-group and odd-group K; CHECKS="check_matmul_frag_fs check_matmul_frag"
# adds the current kernels' own check, T_CHECK=120), then ab_fragsass.py: current vs variant vs
# cuBLAS bf16 under CUDA-graph replay with PDL, (1536, 6144), (6144, 768), (6144, 6144) at M = 12,
# 16, 8, alternating, medians. Under 90 s with the kernel cache: before it, on the development
# machine, `python3 bench/gpu/offline_compile.py --pack` (carry .gpucache). Logs under $OUT.
set -u
. "$(dirname "$0")/device_common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/check.log" 2>&1
step "check.py ${CHECKS:=check_matmul_frag_fs}"
timeout ${T_CHECK:-50} python3 check.py $CHECKS >> "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
echo "PASS $(grep -c '^PASS' "$OUT/check.log") FAIL $(grep -c '^FAIL' "$OUT/check.log") (fs: PASS $(grep -c '^PASS.*frag_fs' "$OUT/check.log"))"
grep "^FAIL" "$OUT/check.log" | head -12
tail -2 "$OUT/check.log"
step "ab_fragsass.py (PDL)"
timeout ${T_AB:-35} python3 ab_fragsass.py ${REPS:-5} > "$OUT/ab_fragsass.log" 2>&1; echo "rc=$?" >> "$OUT/ab_fragsass.log"
tail -12 "$OUT/ab_fragsass.log"
step "done"
