#!/bin/bash
# ncu on the fragment-packed GEMM (prof.py): speed of light, warp stall reasons, issue and pipe
# utilisation, memory throughput, occupancy. Carry .gpucache. Log: $OUT/ncu_frag.log.
set -u
. "$(dirname "$0")/device_common.sh"
step "ncu frag GEMM"
timeout ${T_NCU:-300} ncu --clock-control none -k regex:mx_matmul_frag --launch-count ${NCU_COUNT:-4} \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  python3 prof.py > "$OUT/ncu_frag.log" 2>&1; echo "rc=$?" >> "$OUT/ncu_frag.log"
step "done"
grep -E "mx_matmul_frag|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Issue Slots Busy|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Registers Per|Block Limit|L2 Hit|Mem Busy|Max Bandwidth|Executed Ipc|rc=" "$OUT/ncu_frag.log" | head -80
