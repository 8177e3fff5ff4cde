#!/bin/bash
# First use of the plugin EP's GPU device on a fresh machine, from Python (onnxruntime 1.31.1 wheel
# in bench/gpu/ep_artifacts, as device_fuzz.sh): times each step of the first process (EP library
# registration, device listing, session creation = GPU runtime load + NVRTC compile, first run),
# then more processes, each with the kernel cache directory named in CACHES (default "a b a": a
# second empty cache, then the first one again). If a step hangs, dumps the process's threads.
set -u
. "$(dirname "$0")/ort_wheel_env.sh"
out="${OUT:-/tmp/cold_out}"; mkdir -p "$out"
cat > /tmp/cold_child.py <<'PY'
import sys, time, faulthandler
faulthandler.dump_traceback_later(150, exit=False)
t0 = time.time()
def stamp(what): print(f"{time.time() - t0:7.2f} s  {what}", flush=True)
import numpy as np, onnxruntime as ort
from onnx import helper, TensorProto as TP
stamp(f"imported onnxruntime {ort.__version__}")
n = helper.make_node("MxQuantize", ["x"], ["q", "s"], domain="com.mxfuse")
g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 128])],
                      [helper.make_empty_tensor_value_info("q"), helper.make_empty_tensor_value_info("s")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 24), helper.make_opsetid("com.mxfuse", 1)])
m.ir_version = 11
ort.register_execution_provider_library("MxFuseExecutionProvider", sys.argv[1])
stamp("EP library registered")
devs = [d for d in ort.get_ep_devices() if d.ep_name == "MxFuseExecutionProvider"]
stamp(f"devices: {[str(d.device.type) for d in devs]}")
so = ort.SessionOptions()
so.add_provider_for_devices([d for d in devs if d.device.type == ort.OrtHardwareDeviceType.GPU], {})
s = ort.InferenceSession(m.SerializeToString(), so)
stamp("session created")
s.run(["q"], {"x": np.ones((1, 128), np.float32)}) if False else None
try:
    s.run(None, {"x": np.ones((1, 128), np.float32)})
except Exception as e:
    stamp(f"run: {str(e)[:80]}")
stamp("first run done")
PY
i=0
for c in ${CACHES:-a b a}; do
  i=$((i + 1))
  echo "== process $i, kernel cache /tmp/cold-cache-$c ($(ls /tmp/cold-cache-$c 2>/dev/null | wc -l) files)"
  MXFUSE_KERNEL_CACHE=/tmp/cold-cache-$c python3 /tmp/cold_child.py "$art/libmxfuse_ep.so" > "$out/cold_$i.log" 2>&1 &
  pid=$!
  for t in $(seq 1 200); do kill -0 $pid 2>/dev/null || break; sleep 1; done
  if kill -0 $pid 2>/dev/null; then
    echo "still running after 200 s: threads"
    for tid in /proc/$pid/task/*; do echo "$tid $(cat $tid/comm) $(cat $tid/wchan 2>/dev/null)"; done | head -40
    command -v gdb >/dev/null && timeout 60 gdb -p $pid -batch -ex "thread apply all bt 12" 2>&1 | grep -E "^#|^Thread" | head -120
    kill -9 $pid
  fi
  wait $pid 2>/dev/null; echo "rc=$?"
  cat "$out/cold_$i.log" | tail -30
done
