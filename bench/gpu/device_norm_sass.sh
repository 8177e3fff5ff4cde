#!/bin/bash
# Norm latency at M = 8 (issue 6): the SASS of the split-row kernel, ncu's per-instruction stall
# samples of it, and with BENCH=1 bench.py's norm section. Logs under $OUT.
set -u
. "$(dirname "$0")/device_common.sh"
step "cubin + sass"
python3 prof_norm.py /tmp/norm.cubin > "$OUT/prof.log" 2>&1
K=${NORM_KERNEL:-mx_add_rmsnorm_quant_bf16_c1_s8}
cuobjdump -sass -fun "$K" /tmp/norm.cubin > "$OUT/norm_sass.txt" 2>&1 || nvdisasm -fun "$K" /tmp/norm.cubin > "$OUT/norm_sass.txt" 2>&1
wc -l "$OUT/norm_sass.txt"
step "ncu source counters"
timeout ${T_NCU:-150} ncu --clock-control none -k "regex:$K\$" --launch-skip 2 --launch-count 1 --section SourceCounters \
  --section WarpStateStats --section LaunchStats -o /tmp/ncu_norm python3 prof_norm.py > "$OUT/ncu.log" 2>&1; echo "rc=$?" >> "$OUT/ncu.log"
ncu -i /tmp/ncu_norm.ncu-rep --page source --csv --print-source sass > "$OUT/norm_src.csv" 2>&1
ncu -i /tmp/ncu_norm.ncu-rep --page details --print-units base > "$OUT/norm_details.txt" 2>&1
tail -3 "$OUT/ncu.log"; wc -c "$OUT/norm_src.csv"
if [ -n "${BENCH:-}" ]; then
  step "bench norm (PDL)"
  MXFUSE_BENCH_PDL=1 OUT=/tmp timeout 150 python3 bench.py norm > "$OUT/bench_norm.log" 2>&1; echo "rc=$?" >> "$OUT/bench_norm.log"
  grep -v "^norm {" "$OUT/bench_norm.log" | tail -14
fi
step "done"
