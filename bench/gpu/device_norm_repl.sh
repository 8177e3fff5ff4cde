cd bench/gpu && . ./device_common.sh
step check_norm
timeout 200 python3 check.py check_norm > $OUT/check_norm.log 2>&1; echo rc=$?
grep -c "^PASS" $OUT/check_norm.log; grep "^FAIL" $OUT/check_norm.log | head; grep "repl" $OUT/check_norm.log | head -5
step bench
MXFUSE_BENCH_PDL=1 OUT=/tmp timeout 200 python3 bench.py norm > $OUT/bench_norm_pdl.log 2>&1; echo rc=$?
python3 - <<'PY'
import json
for l in open('/tmp/mxfuse_out/bench_norm_pdl.log'):
    if l.startswith('norm '):
        r=json.loads(l[5:])
        print(r['M'], 'fused %.2f'%r['fused'], r['choice'], 'split', {k:round(v,2) for k,v in r['by_split'].items()}, 'repl', {k:round(v,2) for k,v in r['by_repl'].items()}, 'c1', round(r['by_nch'].get('1',r['by_nch'].get(1,0)),2), 'stages', {k:(round(v['us'],2), v['cycles']) for k,v in r['stages'].items()})
PY
step done
