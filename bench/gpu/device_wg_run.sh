#!/bin/bash
# One device call for the wgmma decode GEMM (mx_matmul_wgmma.hip, sm_90a, experimental): its
# correctness at every (S, R) plus the descriptor-convention probe, then bench_frag_pdl.py wg (beside
# the frag GEMM and cuBLAS). Carry .gpucache. Logs under $OUT. CHECK_EXTRA: more check.py checks;
# SECTIONS: bench_frag_pdl.py sections (default wg).
set -u
. "$(dirname "$0")/device_common.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/check.log" 2>&1
step "check: wgmma GEMM"
timeout ${T_CHECK:-200} python3 check.py check_matmul_wg ${CHECK_EXTRA:-} >> "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
echo "PASS $(grep -c '^PASS' "$OUT/check.log")"; grep "^FAIL\|convention" "$OUT/check.log" | head -30; tail -2 "$OUT/check.log"
step "bench"
OUT=/tmp timeout ${T_BENCH:-240} python3 bench_frag_pdl.py ${SECTIONS:-wg} > "$OUT/bench_wg.log" 2>&1; echo "rc=$?" >> "$OUT/bench_wg.log"
cp /tmp/bench_frag_pdl.json "$OUT/bench_wg.json" 2>/dev/null
tail -40 "$OUT/bench_wg.log"
step "done"
