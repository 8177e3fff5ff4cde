#!/bin/bash
# ncu's per-instruction warp stall sampling of the runtime's decode GEMM at one shape (prof_t2.py;
# PROF_SHAPE="N K M", default 6144 6144 1): the report, the SASS source page as CSV, and the
# instructions with the most stall samples (sass_stalls.py). Carry .gpucache. Needs a runtime
# where ncu reads the counters (Firecracker).
set -u
. "$(dirname "$0")/device_common.sh"
shape=${PROF_SHAPE:-6144 6144 1}
step "ncu $shape"
timeout ${T_NCU:-240} ncu --clock-control none -k regex:mx_matmul_frag --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
  --section MemoryWorkloadAnalysis -f -o "$OUT/prof_t2" python3 prof_t2.py $shape > "$OUT/ncu_t2.log" 2>&1
echo "rc=$?" >> "$OUT/ncu_t2.log"
ncu --import "$OUT/prof_t2.ncu-rep" --page details >> "$OUT/ncu_t2.log" 2>&1
ncu --import "$OUT/prof_t2.ncu-rep" --page source --csv --print-source sass > "$OUT/t2_sass.csv" 2>"$OUT/t2_sass.err"
python3 sass_stalls.py "$OUT/t2_sass.csv" | tee "$OUT/t2_stalls.log"
grep -E "Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Stall|rc=" "$OUT/ncu_t2.log" | head -40
step "done"
