#!/bin/bash
# One device call for the SwiGLU table kernel as the default (BENCHMARKS.md, issue 6 follow-up 8):
# check.py check_sigma_table (the kernels' lookup == bf16(pinned sigma) for every bf16 z),
# check_swiglu_all_bf16 ("host" = the launch table's choice: the table kernel with the
# occupancy-capped grid, on every bf16 gate value at M = 192 and on N(0, 64) data at M = 2048) and
# check_swiglu (every layout / dtype / flag set at M = 19: the default kernels, and the lean ones
# with grids of 3); the Rust gpu_kernels tests (incl. gpu_swiglu_table_kernel_is_the_default_and_
# bit_exact: the runtime's table launches against kernels::reference); then ab_sigtab.py with
# SIGWIRE=1 (host = new default vs prev = the default before it, the table kernel on the full grid
# and capped at 6 blocks per SM) at M = 8 ... 8192, OAI and SiLU, rounded activation, PDL.
# Before it, on the development machine: `python3 bench/gpu/offline_compile.py --pack` (carry
# .gpucache). Logs under $OUT.
set -u
. "$(dirname "$0")/device_common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/check.log" 2>&1
step "check.py ${CHECKS:=check_sigma_table check_swiglu_all_bf16 check_swiglu}"
timeout ${T_CHECK:-150} python3 check.py $CHECKS >> "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
echo "PASS $(grep -c '^PASS' "$OUT/check.log")"; grep "^FAIL" "$OUT/check.log" | head -20
grep -E "regs/shared/local|sigma table|every gate value host|N\(0, 64\).*host" "$OUT/check.log" | grep -E "swiglu|sigma" | head -24; tail -2 "$OUT/check.log"
step "rust gpu_kernels"
run_rust_tests ${T_RUST:-90}
grep -E "^test .*(swiglu|FAILED|panicked)|test result" "$OUT/rust.log" | head -12
step "ab_sigtab.py SIGWIRE=1 (PDL)"
SIGWIRE=1 MXFUSE_BENCH_PDL=1 timeout ${T_AB:-150} python3 ab_sigtab.py ${AB_MS:-8 16 64 128 192 384 1024 2048 4096 8192} \
  > "$OUT/ab_sigwire.log" 2>&1; echo "rc=$?" >> "$OUT/ab_sigwire.log"
cat "$OUT/ab_sigwire.log" | tail -28
step "done"
