"""Checks generated models against onnx itself.

Usage: python check_models.py DIR          (generated models, see below)
       python check_models.py --real DIR   (models/fixtures/real: the MXFP8-quantized MiniMax-M3 exports)
DIR holds manifest.json (rows as models::catalog::ManifestEntry writes them) and optionally equiv.json
(a list of {"files": [...], "rtol": r, "atol": a}: models that must compute the same function).

For every model:
  * structure: op counts implied by its spelling and expected fusion counts (quantize sites, AllReduce,
    norm / SwiGLU ops, custom domains), every MatMul's K a multiple of 32;
  * standard-ONNX models: onnx.checker.check_model(full_check=True), and our value_info shapes equal
    onnx shape inference's;
  * every model runs in onnx.reference.ReferenceEvaluator with finite outputs. The non-standard ops are
    given Python kernels written from their specs (ORT contrib docs, Quark's OCP MX rule):
    SimplifiedLayerNormalization, com.microsoft::{SkipSimplifiedLayerNormalization, QuickGelu,
    AllReduce (world size 1 = identity)}, com.amd.quark::MXQuantizeDequantize.
When onnxruntime is importable, every f32 model it can load (no E8M0 QuantizeLinear, AllReduce or
Quark op) also runs in ORT's CPU EP and must match onnx.reference: this checks the numpy kernels of the
contrib ops above against ORT's own. Then every equivalence group must agree within its tolerance.
Needs onnx >= 1.23 (opset 28 SwiGLU), numpy, ml_dtypes. Exits non-zero on any failure.
"""
import collections
import json
import os
import sys

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from mx_quantize_onnx import quark_qdq_numpy  # noqa: E402  (the numpy OCP-MX oracle)

MS = "com.microsoft"
QUARK = "com.amd.quark"
# The Vitis AI domain: Quark's deprecated op names (older releases, quark.onnx.tools.convert_custom_ops).
VAI = "com.vai.quantize"
# Every (domain, op type) spelling of Quark's MX fake quant; graph_rewrites::view::QUARK_MX_OPS.
QUARK_MX_OPS = [(QUARK, "MXQuantizeDequantize"), (VAI, "MXFixNeuron")]


def _rms_f32(x, scale, epsilon):
    x32 = x.astype(np.float32)
    inv = 1.0 / np.sqrt(np.mean(x32 * x32, axis=-1, keepdims=True) + np.float32(epsilon))
    return (x32 * inv * scale.astype(np.float32)).astype(x.dtype), inv


# Attribute defaults are ONNX Runtime's (contrib_defs.cc / bert_defs.cc), checked against its CPU
# kernels in tests/python/test_reference_kernels.py: a model that leaves an attribute out must be
# evaluated as ORT runs it (1e-5 and 1.0 here made run_in_ort.py report a correct rewrite of a
# SkipSimplifiedLayerNormalization without `epsilon` as 0.59 off).


class SimplifiedLayerNormalization(OpRun):
    op_domain = ""

    def _run(self, x, scale, axis=-1, epsilon=1e-5, stash_type=1):
        y, inv = _rms_f32(x, scale, epsilon)
        # Output 1 (inv_std_var, float) is optional: give it when the node names it.
        return (y, inv) if len(self.output) > 1 else (y,)


class SkipSimplifiedLayerNormalization(OpRun):
    op_domain = MS

    def _run(self, x, skip, gamma, bias=None, epsilon=1e-12):
        # ORT's kernel sums in f32 and normalises the unrounded sum; output 3 is that sum in T.
        s = x.astype(np.float32) + skip.astype(np.float32)
        if bias is not None:
            s = s + bias.astype(np.float32)
        y, inv = _rms_f32(s, gamma, epsilon)
        return y.astype(x.dtype), np.zeros_like(inv), inv, s.astype(x.dtype)


class QuickGelu(OpRun):
    op_domain = MS

    def _run(self, x, alpha=1.702):
        x32 = x.astype(np.float32)
        return ((x32 / (1.0 + np.exp(-np.float32(alpha) * x32))).astype(x.dtype),)


class AllReduce(OpRun):
    op_domain = MS

    def _run(self, x):
        return (x.copy(),)


class MXQuantizeDequantize(OpRun):
    op_domain = QUARK

    # Quark's schema defaults (docs/provider.md, "Foreign ops"): an exporter may leave any of them
    # out; `axis = None` here made a node without `axis` fail in onnx.reference.
    def _run(self, x, axis=1, block_size=32, element_dtype="int8", rounding_mode=0):
        assert block_size == 32 and element_dtype == "fp8_e4m3", (block_size, element_dtype)
        if x.ndim == 1:  # Quark quantizes a rank-1 tensor along its only axis
            axis = 0
        return (quark_qdq_numpy(x, axis).astype(x.dtype),)


class MXFixNeuron(MXQuantizeDequantize):
    """`MXQuantizeDequantize` under its deprecated Vitis AI name: the same op."""
    op_domain = VAI


CUSTOM = [SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization, QuickGelu, AllReduce, MXQuantizeDequantize,
          MXFixNeuron]
NP_DTYPE = {"f32": np.float32, "f16": np.float16}


def np_dtype(name):
    if name == "bf16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return NP_DTYPE[name]


def shapes(vis):
    out = {}
    for vi in vis:
        t = vi.type.tensor_type
        out[vi.name] = (t.elem_type, [d.dim_value if d.HasField("dim_value") else d.dim_param for d in t.shape.dim])
    return out


def check_structure(m, e):
    g = m.graph
    ops = collections.Counter((n.domain or "", n.op_type) for n in g.node)
    sp, exp = e["spelling"], e["expected"]
    sites = exp["add_rmsnorm_mxquant"] + exp["swiglu_mxquant_matmul"] + exp["standalone_mxquant"]
    errs = []

    def want(key, n, what):
        if ops[key] != n:
            errs.append(f"{what}: {ops[key]} {key[1]} nodes, expected {n}")

    want((MS, "AllReduce"), exp["allreduce"], "allreduce")
    if sp["quant"].startswith("std"):
        want(("", "QuantizeLinear"), sites, "quant sites")
        mode = "down" if sp["quant"] == "std-floor" else "up"
        casts = [n for n in g.node if n.op_type == "Cast" and onnx.helper.get_attribute_value(n.attribute[0]) == 24]
        modes = {a.s.decode() for n in casts for a in n.attribute if a.name == "round_mode"}
        if len(casts) != sites or modes != {mode}:
            errs.append(f"E8M0 casts: {len(casts)} with round_mode {modes}, expected {sites} {mode}")
    elif sp["quant"] == "quark":
        acts = [n for n in g.node if n.op_type == "MXQuantizeDequantize"
                and onnx.helper.get_attribute_value(next(a for a in n.attribute if a.name == "axis")) == -1]
        if len(acts) != sites:
            errs.append(f"quark activation qdq: {len(acts)}, expected {sites}")
    else:
        if any(n.op_type in ("QuantizeLinear", "MXQuantizeDequantize") for n in g.node if sp["weights"] == "float"):
            errs.append("float baseline has quantize nodes")
    norm_op = {"rms-normalization": ("", "RMSNormalization"), "simplified": ("", "SimplifiedLayerNormalization"),
               "skip-simplified": (MS, "SkipSimplifiedLayerNormalization")}.get(sp["norm"])
    n_norms = 2 * e["n_layers"] + 1
    if norm_op is None:
        want(("", "Sqrt"), n_norms, "decomposed norms")
    elif sp["norm"] == "skip-simplified":
        first = 1 if sp["first_layer_without_residual"] else 0
        want(norm_op, n_norms - first, "skip norms")
        want(("", "SimplifiedLayerNormalization"), first, "first-layer norm")
    else:
        want(norm_op, n_norms, "norms")
    act_op = {"quick-gelu": (MS, "QuickGelu"), "oai-quick-gelu": (MS, "QuickGelu"), "swish": ("", "Swish"),
              "swiglu": ("", "SwiGLU")}.get(sp["swiglu"])
    if act_op is not None:
        mlps = exp["swiglu_mxquant_matmul"] or None
        if mlps is not None:
            want(act_op, mlps, "activation ops")
    vis = shapes(list(g.value_info) + list(g.input) + list(g.output))
    inits = {t.name: list(t.dims) for t in g.initializer}
    for n in g.node:
        if n.op_type == "MatMul":
            k = vis.get(n.input[0], (0, [None]))[1][-1]
            if not isinstance(k, int) or k % 32:
                errs.append(f"{n.name}: K = {k} not a multiple of 32")
    if sp["weights"] == "std-mx":
        for t in g.initializer:
            if t.data_type == 17 and inits.get(t.name.replace(".e4m3", ".e8m0")) != [t.dims[0] // 32, t.dims[1]]:
                errs.append(f"{t.name}: scale shape mismatch")
    return errs


def check_shapes(m):
    """Our value_info must equal onnx shape inference's (run on the model stripped of it)."""
    bare = onnx.ModelProto()
    bare.CopyFrom(m)
    del bare.graph.value_info[:]
    inferred = shapes(onnx.shape_inference.infer_shapes(bare, strict_mode=True).graph.value_info)
    ours = shapes(m.graph.value_info)
    return [f"{k}: ours {v} inferred {inferred.get(k)}" for k, v in ours.items() if inferred.get(k) != v]


def name_absent_outputs(m):
    """A copy whose absent ("") node outputs have unique names: onnx.reference stores results under ""
    too, and a later absent *input* "" (the gate Clip's min) would then read them."""
    c = onnx.ModelProto()
    c.CopyFrom(m)
    k = 0
    for n in c.graph.node:
        for i, o in enumerate(n.output):
            if not o:
                n.output[i] = f"__absent_{k}"
                k += 1
    return c


def run(m, e, dtype):
    m = name_absent_outputs(m)
    rng = np.random.default_rng(1)
    feeds = {}
    for vi in m.graph.input:
        feeds[vi.name] = rng.standard_normal((2, 5, e["hidden"])).astype(np.float32).astype(dtype)
    return ReferenceEvaluator(m, new_ops=CUSTOM).run(None, feeds)[0]


def ort_session(path, e):
    """An ORT CPU session for f32 models ORT can run, else None."""
    if e["dtype"] != "f32" or e["spelling"]["quant"] != "none" or e["spelling"]["weights"] != "float" \
            or e["expected"]["allreduce"]:
        return None
    try:
        import onnxruntime as ort
        return ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - ORT lacks some opset-24/28 kernels (Swish, SwiGLU): not ours to test
        return None


def ort_agrees(sess, m, e, y):
    rng = np.random.default_rng(1)
    feeds = {vi.name: rng.standard_normal((2, 5, e["hidden"])).astype(np.float32) for vi in m.graph.input}
    got = sess.run(None, feeds)[0]
    return float(np.abs(got - y).max()), bool(np.allclose(got, y, rtol=1e-4, atol=1e-5))


def main(d):
    manifest = json.load(open(os.path.join(d, "manifest.json")))
    failures, outputs = [], {}
    ort_checked = 0
    for e in manifest:
        path = os.path.join(d, e["file"])
        m = onnx.load(path)
        errs = check_structure(m, e)
        if e["standard_onnx"]:
            try:
                onnx.checker.check_model(path, full_check=True)
                errs += check_shapes(m)
            except Exception as ex:  # noqa: BLE001 - report every model, then fail
                errs.append(f"checker: {ex}")
        try:
            y = run(m, e, np_dtype(e["dtype"]))
            if not np.isfinite(y.astype(np.float32)).all():
                errs.append("non-finite output")
            outputs[e["file"]] = y.astype(np.float32)
            sess = ort_session(path, e)
            if sess is not None:
                diff, ok = ort_agrees(sess, m, e, y)
                ort_checked += 1
                if not ok:
                    errs.append(f"ORT differs from onnx.reference by {diff:.3e}")
        except Exception as ex:  # noqa: BLE001
            errs.append(f"reference run: {type(ex).__name__}: {ex}")
        status = "ok" if not errs else "FAIL"
        print(f"{status:4} {e['file']}" + "".join(f"\n     {x}" for x in errs[:8]))
        if errs:
            failures.append(e["file"])
    equiv_path = os.path.join(d, "equiv.json")
    groups = json.load(open(equiv_path)) if os.path.exists(equiv_path) else []
    for grp in groups:
        files = [f for f in grp["files"] if f in outputs]
        base = outputs[files[0]]
        for f in files[1:]:
            diff = float(np.abs(outputs[f] - base).max())
            ok = np.allclose(outputs[f], base, rtol=grp["rtol"], atol=grp["atol"])
            print(f"{'ok' if ok else 'FAIL':4} equiv {files[0]} ~ {f}: max |diff| {diff:.3e}")
            if not ok:
                failures.append(f"{files[0]} ~ {f}")
    print(f"{ort_checked} models also matched onnxruntime")
    try:
        import onnxruntime  # noqa: F401
        if ort_checked == 0 and any(e["dtype"] == "f32" and e["spelling"]["quant"] == "none" for e in manifest):
            failures.append("onnxruntime is installed but could load none of the eligible models")
    except ImportError:
        pass
    checked = len(manifest) + sum(len(g["files"]) - 1 for g in groups)
    print(f"{checked - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


def check_real(d):
    """The std and Quark quantizations of the real export: 7 activation quant sites each, the std one
    passes full_check, and both compute identical logits (same OCP floor rule, same weights); the
    ORT GenAI Llama's structure; real Quark output reproduced bit-exactly by our Quark op kernel."""
    std = onnx.load(os.path.join(d, "minimax_m3_tiny_dynamo_mxfp8_std.onnx"))
    quark = onnx.load(os.path.join(d, "minimax_m3_tiny_dynamo_mxfp8_quark.onnx"))
    errs = []
    onnx.checker.check_model(std, full_check=True)
    n_q = sum(n.op_type == "QuantizeLinear" for n in std.graph.node)
    n_k = sum(n.op_type == "MXQuantizeDequantize" and any(a.name == "axis" and a.i == -1 for a in n.attribute)
              for n in quark.graph.node)
    if (n_q, n_k) != (7, 7):
        errs.append(f"activation quant sites: std {n_q}, quark {n_k}, expected 7 each")
    ids = np.random.default_rng(0).integers(0, 250, (1, 8)).astype(np.int64)
    ys = [ReferenceEvaluator(m, new_ops=CUSTOM).run(None, {"input_ids": ids})[0] for m in (std, quark)]
    if not (np.isfinite(ys[0]).all() and np.array_equal(ys[0], ys[1])):
        errs.append(f"std vs quark logits differ: {float(np.abs(ys[0] - ys[1]).max())}")
    # ORT GenAI Llama (contrib ops: GroupQueryAttention has no onnx.reference kernel): structure only.
    genai = onnx.load(os.path.join(d, "ortgenai_llama_tiny_mxfp8_std.onnx"))
    ops = collections.Counter(n.op_type for n in genai.graph.node)
    want = {"QuantizeLinear": 9, "DequantizeLinear": 9 + 11, "SkipSimplifiedLayerNormalization": 4,
            "SimplifiedLayerNormalization": 1, "MatMul": 11}
    bad = {k: ops[k] for k, v in want.items() if ops[k] != v}
    if bad:
        errs.append(f"ortgenai structure: {bad}, expected {want}")
    # Real AMD Quark output (amd-quark 0.13, MXFP8E4M3 config) of the baseline fixture: our numpy
    # kernel of MXQuantizeDequantize must reproduce what ORT + Quark's own kernel computed.
    quark_real = onnx.load(os.path.join(d, "quark_mxfp8e4m3_decoder_layer.onnx"))
    io = np.load(os.path.join(d, "quark_mxfp8e4m3_decoder_layer.expected.npz"))
    y = ReferenceEvaluator(quark_real, new_ops=CUSTOM).run(None, {"hidden_states": io["x"]})[0]
    if not np.array_equal(y, io["y"]):
        errs.append(f"real Quark model: numpy oracle differs from Quark's kernel by {float(np.abs(y - io['y']).max())}")
    checks = 4
    for x in errs:
        print("FAIL", x)
    print(f"{checks - min(len(errs), checks)} passed, {min(len(errs), checks)} failed")
    return 1 if errs else 0


if __name__ == "__main__":
    if sys.argv[1] == "--real":
        sys.exit(check_real(sys.argv[2]))
    sys.exit(main(sys.argv[1]))
