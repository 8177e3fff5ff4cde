#!/bin/bash
# One device call for the SwiGLU logistic table (BENCHMARKS.md, issue 6 follow-ups 7 and 8): the
# checks that cover it (check.py check_sigma_table: the kernels' lookup == bf16(pinned sigma) for
# every bf16 z; check_swiglu_all_bf16 and check_swiglu: the default ("host": the launch table's
# choice, the table kernel with the occupancy-capped grid from 2^12 outputs) and the table kernel
# (_table, its split-halves loop and its generic loop, looping grids, partial last chunks)
# bit-exact against the reference), then ab_sigtab.py (certified vs table at M = 8 ... 8192, OAI
# and SiLU, rounded activation, PDL) and with NCU=1 ncu's executed instructions of
# prof_sigtab.py's launches at M = 8192. SIGWIRE=1 (follow-up 8, the table kernel as the default):
# also the Rust gpu_kernels tests (gpu_swiglu_table_kernel_is_the_default_and_bit_exact: the
# runtime's own table launches), and ab_sigtab.py's quick A/B (host = new default, prev = the
# default before it, the table kernel on the full grid and capped at 6 blocks per SM) at M = 8,
# 16, 64, 128, 192, 384, 1024, 2048, 4096, 8192. Before it, on the development machine:
# `python3 bench/gpu/offline_compile.py --pack` (carry .gpucache). Logs under $OUT.
set -u
. "$(dirname "$0")/device_common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/check.log" 2>&1
step "check.py ${CHECKS:=check_sigma_table check_swiglu_all_bf16 check_swiglu}"
timeout ${T_CHECK:-150} python3 check.py $CHECKS >> "$OUT/check.log" 2>&1; echo "rc=$?" >> "$OUT/check.log"
echo "PASS $(grep -c '^PASS' "$OUT/check.log")"; grep "^FAIL" "$OUT/check.log" | head -20
grep -E "_table: regs|sigma table|every gate value (e=8_table|host)|N\(0, 64\).*(_table|host)" "$OUT/check.log" | head -30
tail -2 "$OUT/check.log"
if [ -n "${SIGWIRE:-}" ]; then
  step "rust gpu_kernels"
  run_rust_tests ${T_RUST:-90}
  grep -E "^test .*(swiglu|FAILED)|panicked" "$OUT/rust.log" | head -12
  AB_MS=${AB_MS:-8 16 64 128 192 384 1024 2048 4096 8192}
fi
step "ab_sigtab.py (PDL${SIGWIRE:+, SIGWIRE})"
SIGWIRE=${SIGWIRE:-} MXFUSE_BENCH_PDL=1 timeout ${T_AB:-200} python3 ab_sigtab.py ${AB_MS:-} > "$OUT/ab_sigtab.log" 2>&1
echo "rc=$?" >> "$OUT/ab_sigtab.log"
cat "$OUT/ab_sigtab.log" | tail -60
if [ -n "${NCU:-}" ]; then
  step "ncu (M = 8192)"
  timeout ${T_NCU:-120} ncu --clock-control none -k regex:mx_swiglu --metrics \
    smsp__inst_executed.sum,smsp__thread_inst_executed.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,lts__t_bytes.sum \
    --csv --print-units base python3 prof_sigtab.py > "$OUT/ncu_sigtab.csv" 2>&1; echo "rc=$?" >> "$OUT/ncu_sigtab.csv"
  # per launch: kernel, grid, thread instructions per output (M * I = 6291456 outputs), the rest
  python3 - "$OUT/ncu_sigtab.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    sys.exit("no ncu rows")
h = rows[0]; ix = {k: h.index(k) for k in ("ID", "Kernel Name", "Grid Size", "Metric Name", "Metric Value")}
per = collections.OrderedDict()
for r in rows[1:]:
    per.setdefault((r[ix["ID"]], r[ix["Kernel Name"]], r[ix["Grid Size"]]), {})[r[ix["Metric Name"]]] = r[ix["Metric Value"]]
n = 8192 * 768
for (i, k, g), m in per.items():
    f = lambda key: float(m.get(key, "nan").replace(",", ""))
    print(f"{i:>3s} {k[:36]:36s} grid {g:>16s} thr_inst/out {f('smsp__thread_inst_executed.sum') / n:6.1f} "
          f"warp_inst/out*32 {f('smsp__inst_executed.sum') * 32 / n:6.1f} issue {f('smsp__issue_active.avg.pct_of_peak_sustained_active'):5.1f}% "
          f"dram {f('dram__throughput.avg.pct_of_peak_sustained_elapsed'):5.1f}% t {f('gpu__time_duration.sum') / 1e3:6.2f} us "
          f"lds_conf {f('l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum'):9.0f} L2 {f('lts__t_bytes.sum') / 1e6:6.1f} MB")
PY
fi
step "done"
