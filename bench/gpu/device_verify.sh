#!/bin/bash
# One device call that re-verifies everything GPU-side on whatever the runtime selects by default
# (no env switches): check.py (every op against the CPU reference, bit for bit where the op is
# exact), the Rust `gpu_kernels` tests, and the plugin EP's GPU end-to-end test (ep_gpu_check.sh).
# Before it, on the development machine: `python3 bench/gpu/offline_compile.py --pack` (carry
# .gpucache) and the ep_artifacts build that ep_gpu_check.sh's header describes.
set -u
. "$(dirname "$0")/device_common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/check.log" 2>&1
step "check.py (all checks)"
timeout ${T_CHECK:-240} python3 check.py >> "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
echo "PASS $(grep -c '^PASS' "$OUT/check.log")"; grep "^FAIL" "$OUT/check.log" | head -20; tail -2 "$OUT/check.log"
step "rust gpu_kernels"
run_rust_tests ${T_RUST:-90}
step "ep_gpu_check.sh"
(cd "$root" && OUT="$OUT" timeout 60 bash "$here/ep_gpu_check.sh") > "$OUT/ep.log" 2>&1; echo "rc=$?" >> "$OUT/ep.log"
tail -4 "$OUT/ep.log"
step "done"
