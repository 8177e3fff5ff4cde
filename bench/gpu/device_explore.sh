#!/bin/bash
# One exploratory device call (issue 6): the checks of the ops whose code changed (CHECKS), then
# bench.py (BENCH_SECTIONS, under PDL), bench_frag_pdl.py (FRAG_SECTIONS, FRAG_MS rows), and the
# Inductor anchor when BASELINE=1. Logs under $OUT.
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
step "done"
