#!/usr/bin/env bash
# Runs every test of mxfuse: Rust unit/integration tests of all crates, then the Python
# end-to-end tests against the pinned ONNX Runtime wheel. Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -r scripts/requirements-test.txt

# libonnxruntime from the pinned wheel, for the Rust end-to-end tests (ort load-dynamic).
ORT_DYLIB_PATH="$(python3 scripts/ort_dylib_path.py)"
export ORT_DYLIB_PATH

# The provider library the Python tests load.
cargo build --release -p provider -p graph_rewrites
cargo test --workspace --quiet 2>&1 | tee target/cargo-test.log
# Python suites that exist in this checkout (pytest exits non-zero on a missing path).
suites=()
for d in tests/python models/tests/python python/tests; do
  [ -d "$d" ] && suites+=("$d")
done
if [ ${#suites[@]} -gt 0 ]; then
  python3 -m pytest -q "${suites[@]}" 2>&1 | tee target/pytest.log
fi
