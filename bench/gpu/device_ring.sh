#!/bin/bash
# Issue 6 follow-up 22: one device call (<= 150 s) for the bench-only ring kernels
# (mx_matmul_frag_ring.hip): check.py check_matmul_frag_ring (bits == `_fs` / `_t2` at every
# compiled (W, S, D, cap), plain and under PDL, edge blocks), then ab_ring.py (the runtime's choice
# against each ring variant at its plausible (W, S, D) and cuBLAS bf16, PDL, CUDA-graph replay).
# RACECHECK=1: then compute-sanitizer racecheck on a few ring launches. Carry .gpucache
# (python3 bench/gpu/offline_compile.py --pack). Logs under $OUT.
set -u
. "$(dirname "$0")/device_common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/ring_check.log" 2>&1
step "check.py check_matmul_frag_ring"
timeout ${T_CHECK:-45} python3 check.py check_matmul_frag_ring >> "$OUT/ring_check.log" 2>&1; echo "rc=$?" >> "$OUT/ring_check.log"
echo "PASS $(grep -c '^PASS' "$OUT/ring_check.log")"; grep "^FAIL" "$OUT/ring_check.log" | head -20; tail -2 "$OUT/ring_check.log"
step "ab_ring.py"
AB_BUDGET=${AB_BUDGET:-75} timeout ${T_AB:-100} python3 ab_ring.py ${REPS:-3} > "$OUT/ab_ring.log" 2>&1; echo "rc=$?" >> "$OUT/ab_ring.log"
cat "$OUT/ab_ring.log"
if [ -n "${RACECHECK:-}" ]; then
  # compute-sanitizer racecheck on a few ring launches (the ring's __syncwarp / cp.async.wait_group
  # discipline): one fsc and one t2c kernel, odd group count, S = 1 and 2.
  step "racecheck"
  timeout ${T_SAN:-60} compute-sanitizer --tool racecheck python3 -c '
import torch, check
from mxgpu import Module, Ops
ops = Ops(Module())
wf, wsf = check.rand_frag_weights(96, 640)
aq, as_ = ops.quantize(torch.randn(16, 640, device="cuda").bfloat16(), 0)
for W, S, sfx in ((4, 1, "fsc4"), (2, 2, "fsc2"), (4, 1, "t2c2"), (2, 2, "t2c4")):
    ops.matmul_ring(wf, wsf, 96, 640, 16, aq, as_, W, S, sfx)
torch.cuda.synchronize(); print("racecheck launches done")' > "$OUT/ring_racecheck.log" 2>&1
  echo "rc=$?" >> "$OUT/ring_racecheck.log"; grep -E "RACECHECK SUMMARY|launches done|rc=|Error" "$OUT/ring_racecheck.log" | head -5
fi
step "done"
