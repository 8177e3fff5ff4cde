"""MXFP8-quantize an exported float ONNX model the way MX quantizers spell it, for the rewrite-rule fixtures.

Every MatMul whose B input is a 2-D float initializer [K, N] with K a multiple of 32 (the linear layers;
not attention score/context MatMuls, not batched-expert MatMuls, not Gemm routers) gets:
  --form std    standard ONNX opset 24: the activation goes through
                Reshape[0,..,K/32,32] -> Abs -> ReduceMax(-1) -> Mul(2^-8) -> Cast(FLOAT8E8M0, round_mode=down)
                -> QuantizeLinear(block_size=32, FLOAT8E4M3FN) -> DequantizeLinear (RCEIL with --rule rceil:
                Mul(1/448), round_mode=up), one quantization per activation tensor however many MatMuls read it;
                the weight becomes DequantizeLinear(E4M3 [K,N], E8M0 [K/32,N], axis=0, block_size=32).
  --form quark  AMD Quark: com.amd.quark::MXQuantizeDequantize(element_dtype=fp8_e4m3, block_size=32) with
                axis=-1 on the activation and axis=0 on the (still float) weight.
Exporter metadata (doc strings, metadata_props) is dropped to keep fixtures small.

Check: `--check` runs the float and the quantized model in onnx.reference (Quark's op through the numpy
OCP-MX oracle below) and prints the max |difference| of the outputs.
Usage: python mx_quantize_onnx.py IN.onnx OUT.onnx [--form std|quark] [--rule floor|rceil] [--check]
(--check feeds random token ids to the first input: for models without other inputs.)
Needs: onnx >= 1.18, numpy, ml_dtypes.
"""
import argparse

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

BLOCK = 32
QUARK = "com.amd.quark"


def ocp_e8m0_floor(amax):
    """E8M0 byte per block by the OCP floor rule; all-zero blocks get byte 0 (as ONNX Cast(down, saturate))."""
    a = np.where(amax == 0, 1.0, amax)
    # The exact biased exponent (frexp: a = m·2^e, m in [0.5, 1)): an f32 log2 rounds amax just
    # below a power of two up to it and gave a byte one too high.
    _, e2 = np.frexp(a)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where(np.isfinite(a), e2 - 1.0, np.floor(np.log2(a))) - 8
    return np.where(amax == 0, 0, np.clip(e, -127, 127) + 127).astype(np.uint8)


def mx_weight(w):
    """[K, N] float -> (E4M3 [K, N], E8M0 [K/32, N]) along axis 0, OCP floor rule."""
    k, n = w.shape
    blocks = w.astype(np.float32).reshape(k // BLOCK, BLOCK, n)
    s = ocp_e8m0_floor(np.abs(blocks).max(axis=1))
    scale = np.exp2(s.astype(np.float32) - 127)
    q = np.clip(blocks / scale[:, None, :], -448, 448).astype(ml_dtypes.float8_e4m3fn)
    return q.reshape(k, n), s


def quark_qdq_numpy(x, axis):
    """Numpy oracle of Quark's MXQuantizeDequantize(fp8_e4m3, block 32, OCP floor) along `axis`
    (a ragged axis is zero-padded to whole blocks, as Quark does)."""
    x = np.asarray(x, np.float32)
    if x.ndim == 0:  # Quark puts the op on scalar constants too (eps, α) and returns them unchanged
        return x.copy()
    x = np.moveaxis(x, axis, -1)
    shp = x.shape
    pad = -shp[-1] % BLOCK  # Quark zero-pads the axis to whole blocks (zeros never raise an amax)
    xp = np.concatenate([x, np.zeros(shp[:-1] + (pad,), np.float32)], -1) if pad else x
    xb = xp.reshape(-1, xp.shape[-1] // BLOCK, BLOCK)
    scale = np.exp2(ocp_e8m0_floor(np.abs(xb).max(-1)).astype(np.float32) - 127)[..., None]
    y = np.clip(xb / scale, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) * scale
    y = y.reshape(xp.shape)[..., : shp[-1]]
    return np.moveaxis(y, -1, axis)


def rank_of(model):
    """Tensor name -> rank: onnx shape inference, then a forward pass for what it cannot see (outputs
    of contrib ops such as SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization or
    GroupQueryAttention, and everything downstream of them): an output without a known rank gets the
    largest rank among the node's inputs, right for the norm / attention / elementwise / MatMul
    chains that feed linear layers."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    ranks = {}
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            ranks[vi.name] = len(vi.type.tensor_type.shape.dim)
    for t in g.initializer:
        ranks[t.name] = len(t.dims)
    for n in g.node:
        known = [ranks[i] for i in n.input if i in ranks]
        for o in n.output:
            if o and o not in ranks and known:
                ranks[o] = max(known)
    return ranks


def quantize(model, form, rule):
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    ranks = rank_of(model)
    new_nodes, new_inits, done_act, done_w = [], [], {}, {}
    consts_made = False

    def act_std(x, k):
        nonlocal consts_made
        p = f"{x}.mx"
        r = ranks[x]
        new_inits.append(nh.from_array(np.array([0] * (r - 1) + [k // BLOCK, BLOCK], np.int64), f"{p}.block_shape"))
        if not consts_made:
            new_inits.append(nh.from_array(np.array([-1], np.int64), "mx.last_axis"))
            c = 2.0 ** -8 if rule == "floor" else 1.0 / 448.0
            new_inits.append(nh.from_array(np.array(c, np.float32), "mx.scale_mul"))
            consts_made = True
        return [
            h.make_node("Reshape", [x, f"{p}.block_shape"], [f"{p}.blocks"], name=f"{p}.reshape"),
            h.make_node("Abs", [f"{p}.blocks"], [f"{p}.abs"], name=f"{p}.abs"),
            h.make_node("ReduceMax", [f"{p}.abs", "mx.last_axis"], [f"{p}.amax"], keepdims=0, name=f"{p}.amax"),
            h.make_node("Mul", [f"{p}.amax", "mx.scale_mul"], [f"{p}.amax_scaled"], name=f"{p}.mul"),
            h.make_node("Cast", [f"{p}.amax_scaled"], [f"{p}.scale"], to=T.FLOAT8E8M0, saturate=1,
                        round_mode="down" if rule == "floor" else "up", name=f"{p}.cast"),
            h.make_node("QuantizeLinear", [x, f"{p}.scale"], [f"{p}.q"], axis=-1, block_size=BLOCK,
                        output_dtype=T.FLOAT8E4M3FN, saturate=1, name=f"{p}.quantize"),
            h.make_node("DequantizeLinear", [f"{p}.q", f"{p}.scale"], [f"{p}.dq"], axis=-1, block_size=BLOCK,
                        output_dtype=T.FLOAT, name=f"{p}.dequantize"),
        ], f"{p}.dq"

    def quark(x, axis, suffix):
        out = f"{x}.{suffix}"
        return [h.make_node("MXQuantizeDequantize", [x], [out], domain=QUARK, axis=axis, block_size=BLOCK,
                            element_dtype="fp8_e4m3", rounding_mode=2, name=out)], out

    quantized = 0
    for node in g.node:
        w = inits.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
        if w is None or len(w.dims) != 2 or w.dims[0] % BLOCK or w.data_type != T.FLOAT \
                or ranks.get(node.input[0]) is None:
            new_nodes.append(node)
            continue
        a, wname = node.input[0], node.input[1]
        if a not in done_act:
            nodes, out = act_std(a, w.dims[0]) if form == "std" else quark(a, -1, "mx_qdq")
            new_nodes.extend(nodes)
            done_act[a] = out
        if wname not in done_w:
            if form == "std":
                q, s = mx_weight(nh.to_array(w))
                qt = nh.from_array(q, f"{wname}.e4m3")
                st = h.make_tensor(f"{wname}.e8m0", T.FLOAT8E8M0, list(s.shape), s.tobytes(), raw=True)
                new_inits += [qt, st]
                new_nodes.append(h.make_node("DequantizeLinear", [qt.name, st.name], [f"{wname}.dq"], axis=0,
                                             block_size=BLOCK, output_dtype=T.FLOAT, name=f"{wname}.dequantize"))
                done_w[wname] = f"{wname}.dq"
            else:
                nodes, out = quark(wname, 0, "mx_qdq")
                new_nodes.extend(nodes)
                done_w[wname] = out
        node.input[0], node.input[1] = done_act[a], done_w[wname]
        new_nodes.append(node)
        quantized += 1
    if form == "std":  # the float weights that were replaced are no longer used
        used = {i for n in new_nodes for i in n.input}
        kept = [t for t in g.initializer if t.name in used]
        del g.initializer[:]
        g.initializer.extend(kept)
    g.initializer.extend(new_inits)
    del g.node[:]
    g.node.extend(new_nodes)
    opsets = {o.domain: o.version for o in model.opset_import}
    if form == "std":
        opsets[""] = max(opsets.get("", 1), 24)
        model.ir_version = max(model.ir_version, 11)
    else:
        opsets[QUARK] = 1
    del model.opset_import[:]
    model.opset_import.extend(h.make_opsetid(d, v) for d, v in sorted(opsets.items()))
    return quantized


def strip_metadata(model):
    del model.metadata_props[:]
    model.doc_string = ""
    model.graph.doc_string = ""
    for n in model.graph.node:
        n.doc_string = ""
        del n.metadata_props[:]
    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        del vi.metadata_props[:]
    for t in model.graph.initializer:
        del t.metadata_props[:]


def run_reference(model, feeds):
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    class MXQuantizeDequantize(OpRun):
        op_domain = QUARK

        def _run(self, x, axis=None, block_size=None, element_dtype=None, rounding_mode=None):
            return (quark_qdq_numpy(x, axis).astype(x.dtype),)

    return ReferenceEvaluator(model, new_ops=[MXQuantizeDequantize]).run(None, feeds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--form", choices=["std", "quark"], default="std")
    ap.add_argument("--rule", choices=["floor", "rceil"], default="floor")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    model = onnx.load(a.input)
    strip_metadata(model)
    base = onnx.ModelProto()
    base.CopyFrom(model)
    n = quantize(model, a.form, a.rule)
    standard = all(onnx.defs.has(n.op_type, n.domain) for n in model.graph.node)
    if a.form == "std" and standard:
        onnx.checker.check_model(model, full_check=True)
    elif a.form == "std":
        print("note: contrib ops in the model (ORT-only); onnx.checker skipped")
    onnx.save(model, a.output)
    print(f"{a.output}: {n} MatMuls quantized ({a.form}, {a.rule})")
    if a.check:
        ids = np.random.default_rng(0).integers(0, 250, (1, 8)).astype(np.int64)
        feeds = {model.graph.input[0].name: ids}
        ref = run_reference(base, feeds)[0]
        got = run_reference(model, feeds)[0]
        print(f"max |quantized - float| = {float(np.abs(got - ref).max()):.3e} (|float| max {float(np.abs(ref).max()):.3e})")


if __name__ == "__main__":
    main()
