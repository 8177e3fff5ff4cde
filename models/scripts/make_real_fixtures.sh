#!/bin/sh
# Regenerates models/fixtures/real/: a tiny MiniMax-M3 exported from transformers' own model code
# (shared/samples/scripts/export_tiny_minimax_m3.py, torch.onnx dynamo, opset 20, random weights), then
# MXFP8-quantized by mx_quantize_onnx.py in standard-ONNX form and in AMD Quark form; plus the ORT GenAI
# model-builder Llama sample (SimplifiedLayerNormalization + SkipSimplifiedLayerNormalization chain,
# GroupQueryAttention, SiLU·up from two MatMuls) in standard form.
# Needs a venv with torch + transformers (>= 5.2x, ships minimax_m3_vl) + onnx + onnxruntime + onnxscript:
#   python3 -m venv /work/venv-export && /work/venv-export/bin/pip install torch transformers onnx onnxruntime onnxscript ml_dtypes
# (the PyPI torch wheel pulls the CUDA libraries: about 6 GB; never in CI).
# Usage: sh models/scripts/make_real_fixtures.sh [VENV_PYTHON]   (run from the repository root)
set -eu
PY=${1:-/work/venv-export/bin/python}
HERE=$(cd "$(dirname "$0")" && pwd)
SAMPLES=${SAMPLES:-$HERE/../../../shared/samples}
OUT=$HERE/../fixtures/real
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT"
(cd "$TMP" && "$PY" "$SAMPLES/scripts/export_tiny_minimax_m3.py" minimax_m3 "$TMP/m3.onnx")
"$PY" "$HERE/mx_quantize_onnx.py" "$TMP/m3.onnx" "$OUT/minimax_m3_tiny_dynamo_mxfp8_std.onnx" --form std --check
"$PY" "$HERE/mx_quantize_onnx.py" "$TMP/m3.onnx" "$OUT/minimax_m3_tiny_dynamo_mxfp8_quark.onnx" --form quark --check
"$PY" "$HERE/mx_quantize_onnx.py" "$SAMPLES/ortgenai_llama_tiny_fp32/model.onnx" \
    "$OUT/ortgenai_llama_tiny_mxfp8_std.onnx" --form std
# Real Quark output of the float baseline fixture (needs amd-quark + onnxruntime<=1.28 in the venv:
#   pip install amd-quark "onnxruntime==1.28.0"; Quark pins onnx<=1.22, so do this after the export).
if "$PY" -c "import quark.onnx" 2>/dev/null; then
    PATH=$(dirname "$PY"):$PATH "$PY" "$HERE/quark_quantize.py" "$HERE/../fixtures/baseline_no_quant.onnx" \
        "$OUT/quark_mxfp8e4m3_decoder_layer.onnx"
else
    echo "amd-quark not installed in $PY's venv: quark_mxfp8e4m3_decoder_layer.onnx not regenerated"
fi
