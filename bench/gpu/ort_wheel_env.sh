# Sourced by device_fuzz.sh and device_cold_start.sh: sets root / art, installs the
# onnxruntime 1.31.1 wheel carried in bench/gpu/ep_artifacts into /tmp/ort131 for the device's
# Python (its image ships an older onnxruntime, which the EP refuses: it needs API 31), and
# points MXFUSE_NVRTC at the NVRTC the Python harness finds.
root="$(cd "$(dirname "${BASH_SOURCE[1]}")/../.." && pwd)"
art="$root/bench/gpu/ep_artifacts"
python3 -m pip install -q --no-deps --target /tmp/ort131 "$art"/onnxruntime-1.31.1-*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/ort131
python3 -c 'import onnxruntime as o; print("onnxruntime", o.__version__)'
export MXFUSE_NVRTC="${MXFUSE_NVRTC:-$(cd "$root/bench/gpu" && python3 -c 'import mxgpu; print(mxgpu.NVRTC_PATH)' 2>/dev/null | tail -1)}"
