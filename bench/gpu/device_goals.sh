#!/bin/bash
# One device call for issue 6's goal table on the current tree (session 35): the Inductor anchor
# (torch_baseline.py at the issue's row counts), the fused norm / SwiGLU tables (bench.py, whose
# Inductor columns come from that anchor), the decode GEMM's goal rows (ab_g1.py AB_RULE: the
# runtime's kernel against cuBLAS bf16 alternating, M = 1-16 on the three MiniMax shapes) and
# torch_gemm_baseline.py (cuBLAS bf16 and FP8 _scaled_mm). Carry .gpucache (offline_compile.py
# --pack). Logs under $OUT; GOAL_MS sets the GEMM rows' M list, REPS their repetitions; GOAL_STEPS
# a subset of "anchor norm gemm cublas" (default all); GOAL_ANCHOR=<gpu_anchor.json of an earlier
# call> instead of the anchor step. Every kernel is launched under PDL, as the runtime launches.
set -u
. "$(dirname "$0")/device_common.sh"
steps=" ${GOAL_STEPS:-anchor norm gemm cublas} "
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/goals_env.log" 2>&1
if [ -n "${GOAL_ANCHOR:-}" ]; then cp "$root/$GOAL_ANCHOR" /tmp/gpu_anchor.json; fi
[[ $steps == *" anchor "* ]] && run_baseline ${T_BASE:-200} 30
if [[ $steps == *" norm "* ]]; then
  step "bench: norm, swiglu"
  MXFUSE_BENCH_PDL=1 OUT=/tmp timeout ${T_BENCH_NORM:-60} python3 bench.py norm swiglu > "$OUT/bench_norm.log" 2>&1; echo "rc=$?" >> "$OUT/bench_norm.log"
  grep -A30 "^norm (us)" "$OUT/bench_norm.log"
fi
if [[ $steps == *" gemm "* ]]; then
  step "goal rows: decode GEMM"
  ms=${GOAL_MS:-1,2,4,8,9,12,13,16}
  AB_RULE_OFF=g1c AB_RULE="6144x768:$ms;1536x6144:$ms;6144x6144:$ms" timeout ${T_AB:-240} python3 ab_g1.py ${REPS:-7} > "$OUT/goal_rows.log" 2>&1
  echo "rc=$?" >> "$OUT/goal_rows.log"
  cat "$OUT/goal_rows.log"
fi
if [[ $steps == *" cublas "* ]]; then
  step "cuBLAS / scaled_mm anchor"
  timeout ${T_GEMM_BASE:-120} python3 torch_gemm_baseline.py > "$OUT/gemm_baseline.log" 2>&1; echo "rc=$?" >> "$OUT/gemm_baseline.log"
  tail -20 "$OUT/gemm_baseline.log"
fi
step "done"
