#!/bin/bash
# ncu on `_fs` and `_fsa` at 6144 x 768 (prof_fsa.py): duration, stall reasons, memory. Carry
# .gpucache. Log: $OUT/ncu_fsa.log.
set -u
. "$(dirname "$0")/device_common.sh"
step "ncu _fs / _fsa"
timeout ${T_NCU:-240} ncu --clock-control none -k regex:mx_matmul_frag_m16 \
  --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
  --section Occupancy --metrics smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_membar,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__cycles_active.avg,sm__cycles_elapsed.max \
  python3 prof_fsa.py > "$OUT/ncu_fsa.log" 2>&1; echo "rc=$?" >> "$OUT/ncu_fsa.log"
step "done"
grep -E "mx_matmul_frag|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Block Limit|Stall|stalled|bank_conflicts|cycles_active|cycles_elapsed|Shared Memory Configuration|Dynamic Shared|Static Shared|Driver Shared|rc=" "$OUT/ncu_fsa.log" | head -120
