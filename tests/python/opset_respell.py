"""A model re-expressed at another ONNX opset, as a user's converter or exporter gives it
(new-user probe 13, BENCHMARKS.md; tests/python/test_opset_conversions.py).

`at_opset(model, target)` tries `onnx.version_converter.convert_version` first (what a user runs)
and falls back on `respell`, which covers what the converter cannot do: a downgrade of Split-18
(onnx 1.23.2 has no adapter for it) and models with ORT contrib ops in the ONNX domain
(`SimplifiedLayerNormalization`: the converter has no schema for them). `respell` rewrites the
spellings that changed between opsets 11 and 28 for the ops the fixtures use, both ways:

| op | older spelling | newer spelling |
|---|---|---|
| ReduceMean, ReduceMax | `axes` attribute (< 18) | `axes` input (>= 18) |
| ReduceSum, Squeeze, Unsqueeze | `axes` attribute (< 13) | `axes` input (>= 13) |
| Split | `split` attribute (< 13) | `split` input (13-17); `num_outputs` or the input (>= 18) |
| Clip | `min` / `max` attributes (< 11) | `min` / `max` inputs (>= 11) |
| Cast | no `saturate` (< 19) | `saturate` (>= 19, default 1) |
| ReduceMean, ReduceMax | no `noop_with_empty_axes` (< 18) | `noop_with_empty_axes` (>= 18) |

Every other op the fixtures hold kept its inputs and attributes over that range (new versions only
add types); the result is checked with `onnx.checker` by the caller."""

import numpy as np
import onnx
from onnx import helper, numpy_helper, version_converter

AXES_INPUT_SINCE = {"ReduceMean": 18, "ReduceMax": 18, "ReduceSum": 13, "Squeeze": 13, "Unsqueeze": 13}


def onnx_opset(model):
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def ir_version_for(opset):
    """The smallest IR version whose onnx release has `opset`."""
    return min(row[1] for row in helper.VERSION_TABLE if row[2] >= opset)


def at_opset(model, target):
    """(converted model, "convert_version" | "respell")."""
    try:
        return version_converter.convert_version(model, target), "convert_version"
    except Exception:  # noqa: BLE001 - the converter raises RuntimeError / ValueError / C++ assertions
        return respell(model, target), "respell"


def respell(model, target):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    dims = split_dims(m)
    new_inits, nodes = [], []
    for n in g.node:
        if n.domain in ("", "ai.onnx"):
            if n.op_type in AXES_INPUT_SINCE:
                axes_to(n, target >= AXES_INPUT_SINCE[n.op_type], consts, new_inits)
            elif n.op_type == "Split":
                split_to(n, target, consts, dims, new_inits)
            elif n.op_type == "Clip":
                clip_to(n, target, consts, new_inits)
            elif n.op_type == "Cast" and target < 19:
                drop_attr(n, "saturate")
            if n.op_type in ("ReduceMean", "ReduceMax") and target < 18:
                if attr(n, "noop_with_empty_axes"):
                    raise ValueError(f"{n.op_type} '{n.name}': noop_with_empty_axes has no spelling before 18")
                drop_attr(n, "noop_with_empty_axes")
        nodes.append(n)
    g.initializer.extend(new_inits)
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = target
    m.ir_version = max(m.ir_version, ir_version_for(target))
    return m


def attr(n, name):
    return next((helper.get_attribute_value(a) for a in n.attribute if a.name == name), None)


def drop_attr(n, name):
    keep = [a for a in n.attribute if a.name != name]
    del n.attribute[:]
    n.attribute.extend(keep)


def const_input(n, i, consts):
    if len(n.input) > i and n.input[i]:
        if n.input[i] not in consts:
            raise ValueError(f"{n.op_type} '{n.name}' input {i} is not a constant initializer")
        return [int(v) for v in consts[n.input[i]].reshape(-1)]
    return None


def new_const(values, stem, new_inits):
    name = f"{stem}__opset_respell_{len(new_inits)}"
    new_inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
    return name


def axes_to(n, as_input, consts, new_inits):
    if as_input:
        axes = attr(n, "axes")
        if axes is not None:
            drop_attr(n, "axes")
            n.input.extend([""] * (1 - len(n.input)) + [new_const(axes, n.name or n.op_type, new_inits)])
    else:
        axes = const_input(n, 1, consts)
        if axes is not None:
            del n.input[1:]
            n.attribute.append(helper.make_attribute("axes", axes))


def clip_to(n, target, consts, new_inits):
    if target >= 11:
        bounds = [attr(n, "min"), attr(n, "max")]
        if any(b is not None for b in bounds):
            drop_attr(n, "min")
            drop_attr(n, "max")
            del n.input[1:]
            for b in bounds:
                n.input.append("" if b is None else new_const_f(b, n.name or "Clip", new_inits))
    else:
        bounds = []
        for i in (1, 2):
            if len(n.input) > i and n.input[i]:
                if n.input[i] not in consts:
                    raise ValueError(f"Clip '{n.name}' bound {i} is not a constant initializer")
                bounds.append(float(consts[n.input[i]].reshape(-1)[0]))
            else:
                bounds.append(None)
        del n.input[1:]
        for name, b in zip(("min", "max"), bounds):
            if b is not None:
                n.attribute.append(helper.make_attribute(name, b))


def new_const_f(value, stem, new_inits):
    name = f"{stem}__opset_respell_{len(new_inits)}"
    new_inits.append(numpy_helper.from_array(np.array(value, np.float32), name))
    return name


def split_dims(m):
    """The size of each Split's split axis where shape inference knows it."""
    try:
        inferred = onnx.shape_inference.infer_shapes(m).graph
    except Exception:  # noqa: BLE001 - contrib ops without a schema
        inferred = m.graph
    shapes = {v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
              for v in list(inferred.value_info) + list(inferred.input) + list(inferred.output)}
    shapes.update({t.name: list(t.dims) for t in m.graph.initializer})
    out = {}
    for n in m.graph.node:
        if n.op_type == "Split" and n.input[0] in shapes:
            s = shapes[n.input[0]]
            axis = attr(n, "axis") or 0
            if -len(s) <= axis < len(s):
                out[n.name or n.output[0]] = s[axis]
    return out


def split_to(n, target, consts, dims, new_inits):
    sizes = attr(n, "split") or const_input(n, 1, consts)
    parts = attr(n, "num_outputs") or len(n.output)
    if sizes is None:
        dim = dims.get(n.name or n.output[0])
        if dim and dim % parts == 0:
            sizes = [dim // parts] * parts
    drop_attr(n, "split")
    drop_attr(n, "num_outputs")
    del n.input[1:]
    if target < 13:
        if sizes is not None:
            n.attribute.append(helper.make_attribute("split", sizes))
    elif sizes is not None:
        n.input.append(new_const(sizes, n.name or n.op_type, new_inits))
    elif target >= 18:
        # Split-18 needs `split` or `num_outputs`; equal parts as before.
        n.attribute.append(helper.make_attribute("num_outputs", parts))


# The ops and types whose first opset bounds where a model can go (a converter cannot take them
# lower): FLOAT8E8M0 scales (the standard MX quantize) exist from opset 24.
FIRST_OPSET = {"RMSNormalization": 23, "Swish": 24, "SwiGLU": 28}
# Attributes an op gained: the model cannot go below the version that added them.
FIRST_ATTR = {("Shape", "start"): 15, ("Shape", "end"): 15}


def lowest_opset(model):
    """The lowest opset `model` can be re-expressed at, and why (None: no bound past 11)."""
    low, why = 10, None
    uses_e8m0 = any(
        a.type == onnx.AttributeProto.INT and a.name == "to" and a.i == onnx.TensorProto.FLOAT8E8M0
        for n in model.graph.node for a in n.attribute) or any(
        t.data_type == onnx.TensorProto.FLOAT8E8M0 for t in model.graph.initializer)
    if uses_e8m0:
        low, why = 24, "FLOAT8E8M0 exists from opset 24"
    for n in model.graph.node:
        first = FIRST_OPSET.get(n.op_type) if n.domain in ("", "ai.onnx") else None
        if first and first > low:
            low, why = first, f"{n.op_type} exists from opset {first}"
        for a in n.attribute:
            first = FIRST_ATTR.get((n.op_type, a.name))
            if first and first > low:
                low, why = first, f"{n.op_type} attribute '{a.name}' exists from opset {first}"
    return low, why
