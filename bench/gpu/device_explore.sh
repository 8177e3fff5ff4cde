#!/bin/bash
# One exploratory device call (issue 6): the checks of the ops whose code changed (CHECKS), then
# bench.py (BENCH_SECTIONS, under PDL), bench_frag_pdl.py (FRAG_SECTIONS, FRAG_MS rows), the
# Inductor anchor when BASELINE=1, an old-vs-new SwiGLU A/B with AB_SWIGLU=<old cubin>, and with NCU_SWIGLU=1 ncu's executed-instruction count and
# throughputs of the SwiGLU kernels at M = 8192 (prof_swiglu.py). Logs under $OUT.
set -u
. "$(dirname "$0")/device_common.sh"
step "check.py ${CHECKS:-}"
timeout ${T_CHECK:-200} python3 check.py ${CHECKS:-} > "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
echo "PASS $(grep -c '^PASS' "$OUT/check.log")"; grep "^FAIL" "$OUT/check.log" | head -20; tail -1 "$OUT/check.log"
[ -n "${BASELINE:-}" ] && run_baseline ${T_BASE:-120} 14
if [ -n "${BENCH_SECTIONS:-}" ]; then
  step "bench.py $BENCH_SECTIONS (PDL)"
  MXFUSE_BENCH_PDL=1 OUT=/tmp timeout ${T_BENCH:-150} python3 bench.py $BENCH_SECTIONS > "$OUT/bench.log" 2>&1; echo "rc=$?" >> "$OUT/bench.log"
  grep -v "^norm {\|^swiglu {" "$OUT/bench.log" | tail -25
fi
if [ -n "${FRAG_SECTIONS:-}" ]; then
  step "bench_frag_pdl.py $FRAG_SECTIONS"
  OUT=/tmp timeout ${T_FRAG:-200} python3 bench_frag_pdl.py $FRAG_SECTIONS > "$OUT/bench_frag_pdl.log" 2>&1; echo "rc=$?" >> "$OUT/bench_frag_pdl.log"
  cat "$OUT/bench_frag_pdl.log" | tail -30
fi
if [ -n "${AB_SWIGLU:-}" ]; then  # AB_SWIGLU=<old cubin, relative to bench/gpu>
  step "ab_swiglu.py $AB_SWIGLU (PDL)"
  MXFUSE_BENCH_PDL=1 timeout ${T_AB:-200} python3 ab_swiglu.py "$AB_SWIGLU" > "$OUT/ab_swiglu.log" 2>&1; echo "rc=$?" >> "$OUT/ab_swiglu.log"
  cat "$OUT/ab_swiglu.log" | tail -24
fi
if [ -n "${NCU_SWIGLU:-}" ]; then  # with AB_SWIGLU set, the old cubin's kernels are profiled first
  step "ncu swiglu"
  timeout ${T_NCU:-150} ncu --clock-control none -k regex:mx_swiglu --section SourceCounters --metrics \
    smsp__inst_executed.sum,smsp__thread_inst_executed.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active \
    -o "$OUT/ncu_swiglu" python3 prof_swiglu.py ${AB_SWIGLU:-} > "$OUT/ncu_swiglu.log" 2>&1; echo "rc=$?" >> "$OUT/ncu_swiglu.log"
  ncu -i "$OUT/ncu_swiglu.ncu-rep" --page details --print-units base > "$OUT/ncu_swiglu_details.log" 2>&1
  ncu -i "$OUT/ncu_swiglu.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_swiglu_sass.csv" 2>&1
  grep -E "mx_swiglu|inst_executed.sum|duration|dram__throughput|issue_active" "$OUT/ncu_swiglu_details.log" | head -40
  tail -3 "$OUT/ncu_swiglu.log"; wc -c "$OUT/ncu_swiglu_sass.csv"
fi
step "done"
