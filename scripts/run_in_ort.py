"""Runs an MXFP8 model three ways and compares them:

1. the original model through `onnx.reference` (the ONNX spec's evaluator; ORT's own CPU EP
   cannot run Q/DQ with E8M0 scales), with the project's numpy kernels of the contrib and AMD
   Quark ops it lacks (models/tests/python/check_models.py); a model with another op it cannot
   evaluate skips this comparison and says so,
2. the original model in ONNX Runtime with the mxfuse plugin EP (fuses online),
3. the offline-rewritten model in ONNX Runtime with the mxfuse custom-op library (and, for a
   float16 output where 2 and 3 differ, also with the plugin EP: on the custom-op path ORT's CPU
   EP runs some unfused f16 ops in f32, see docs/provider.md "f16 on the custom-op path").

When 2 and 3 are not bit-identical and the plugin EP took another number of the original
model's nodes than the rewrite replaced, the script says so: the two paths fused different sites
(the EP sees ORT's shape inference), and what runs unfused on one path sums in another order.

The differences to `onnx.reference` are for you to judge: in an f32 model they are GEMM summation
order (~1e-7 relative); in an f16 model ORT and `onnx.reference` also round the unfused f16 ops
(attention, residual adds) differently, and an E4M3 rounding downstream that this flips moves the
outputs by up to a few percent of their range: the script says so under such an output (the fused
ops themselves are checked by the bit-identical comparison).

bfloat16 graph inputs and outputs are passed as OrtValues / fetched through an exact Cast (ORT's
Python API has no numpy type for them).

Inputs are generated: float inputs random normal, an integer input named like `*mask*` all ones,
like `*position*` 0, 1, 2, ... along its last axis, any other integer input (token ids) random in
[0, 8); each symbolic dim is 1 when it is an input's first dim and 8 otherwise, one value per dim
name. A decoder with a KV cache usually needs some set by hand (ORT GenAI's `kv_cache_dim` is the
head size, `total_sequence_length` = past + new tokens): `--dim NAME=VALUE` (repeatable), or give
every input yourself with `--feeds INPUTS.npz` (arrays named as the model's inputs).

LIB.so is the mxfuse library (plugin EP + custom ops); without it, this checkout's
`target/release/libmxfuse_ep.so` (wherever the command is run from), else the installed
`onnxruntime_ep_mxfuse` wheel's.

Usage: python scripts/run_in_ort.py ORIGINAL.onnx REWRITTEN.onnx [LIB.so] [--dim NAME=VALUE]... [--feeds INPUTS.npz]
"""
import atexit
import collections
import os
import sys

try:
    import ml_dtypes
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator
except ImportError as e:  # a newcomer's first run: one line saying what to install, not a traceback
    sys.exit(f"run_in_ort.py needs {e.name or e}: pip install onnxruntime==1.31.1 onnx==1.23.2 numpy ml_dtypes "
             "(what scripts/quickstart.sh installs)")

# The plugin EP API (register_execution_provider_library, add_provider_for_devices) and the
# library's OrtApi version: ONNX Runtime 1.31 (docs/provider.md). An older one failed with an
# AttributeError traceback (< 1.22) or the library's refusal after the reference run.
ORT_MIN = (1, 31)

# The numpy kernels of com.microsoft SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization /
# QuickGelu / AllReduce and com.amd.quark MXQuantizeDequantize (fp8_e4m3, block 32; also under its
# deprecated name com.vai.quantize MXFixNeuron) that onnx.reference does not have.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "tests", "python"))
from check_models import CUSTOM, QUARK, VAI  # noqa: E402

EP_NAME = "MxFuseExecutionProvider"


def symbolic_dims(path, batch=1, seq=8, dims=None):
    """{symbolic dim name: value} of the model's inputs: `dims` where given, else `batch` for an
    input's first dim and `seq` for the others (the first use of a name decides)."""
    dims = dict(dims or {})
    m = onnx.load(path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    out = {}
    for i in m.graph.input:
        if i.name in inits:
            continue
        for k, d in enumerate(i.type.tensor_type.shape.dim):
            if not d.HasField("dim_value"):
                name = d.dim_param or f"{i.name}[{k}]"
                out.setdefault(name, dims.get(name, batch if k == 0 else seq))
    return out


def feeds_for(path, seed=0, batch=1, seq=8, dims=None):
    """Generated inputs (see the module text); `dims` sets symbolic dims by name."""
    m = onnx.load(path, load_external_data=False)
    rng = np.random.default_rng(seed)
    inits = {i.name for i in m.graph.initializer}
    sym = symbolic_dims(path, batch, seq, dims)
    feeds = {}
    for i in m.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else sym[d.dim_param or f"{i.name}[{k}]"]
                 for k, d in enumerate(t.shape.dim)]
        dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        name = i.name.lower()
        if np.issubdtype(dt, np.integer):
            # Token ids, attention masks and positions: random normals cast to int gave negative
            # ids and a mask of -1/0/1.
            if "mask" in name:
                feeds[i.name] = np.ones(shape, dt)
            elif "position" in name and shape:
                feeds[i.name] = np.broadcast_to(np.arange(shape[-1], dtype=dt), shape).copy()
            else:
                feeds[i.name] = rng.integers(0, 8, shape).astype(dt)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(dt)
    return feeds


def parse_args(argv):
    """(original, rewritten, lib or None, {dim: value}, feeds file or None); exits 2 with the usage
    text on anything else."""
    pos, dims, npz = [], {}, None
    it = iter(argv)
    try:
        for a in it:
            if a == "--dim":
                name, _, value = next(it).partition("=")
                dims[name] = int(value)
            elif a.startswith("--dim="):
                name, _, value = a[len("--dim="):].partition("=")
                dims[name] = int(value)
            elif a == "--feeds":
                npz = next(it)
            elif a.startswith("--feeds="):
                npz = a[len("--feeds="):]
            elif a.startswith("-"):
                raise ValueError(a)
            else:
                pos.append(a)
    except (StopIteration, ValueError):
        pos = []
    if len(pos) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    return pos[0], pos[1], pos[2] if len(pos) > 2 else None, dims, npz


# ORT's Python API cannot hand out FLOAT8E8M0 tensors (no numpy type): such outputs are left out.
E8M0 = onnx.TensorProto.FLOAT8E8M0


def outputs_of(path):
    """(names of the outputs to fetch, {name: elem_type}, names left out)."""
    m = onnx.load(path, load_external_data=False)
    types = {o.name: o.type.tensor_type.elem_type for o in m.graph.output}
    fetch = [n for n, t in types.items() if t != E8M0]
    return fetch, types, [n for n in types if n not in fetch]


def values(arr, elem):
    """ORT hands float8 outputs out as their raw uint8 bytes: view them as the element type
    (onnx.reference's ml_dtypes one) so that they compare as numbers."""
    dt = onnx.helper.tensor_dtype_to_np_dtype(elem)
    if arr.dtype == np.uint8 and dt != np.uint8 and dt.itemsize == 1:
        return arr.view(dt)
    return arr


def reference_model(path):
    """The model for onnx.reference, with every omitted ('') node output given a name of its
    own: onnx.reference stores such outputs under '' and a later node's omitted input ('', e.g.
    Clip's min after SkipSimplifiedLayerNormalization's unused outputs) then reads that value."""
    m = onnx.load(path)
    k = 0
    for n in m.graph.node:
        for i, o in enumerate(n.output):
            if o == "":
                n.output[i] = f"run_in_ort_omitted_{k}"
                k += 1
    return m


def foreign_nodes(path):
    """Nodes of AMD Quark's domains (com.amd.quark and its deprecated com.vai.quantize) in a model:
    the custom-op library does not register them (a second registration of a domain fails the
    session, and Quark's own library registers it); the plugin EP publishes Quark's MX op in both."""
    m = onnx.load(path, load_external_data=False)
    return collections.Counter(n.domain for n in m.graph.node if n.domain in (QUARK, VAI))


BF16 = onnx.TensorProto.BFLOAT16
# Suffix of the double copies of bfloat16 graph outputs (see with_f64_outputs).
AS_F64 = "__run_in_ort_f64"


def with_f64_outputs(path):
    """ORT's Python API has no numpy type for bfloat16: it neither takes nor returns such arrays
    ("Numpy_type 256 can't be converted to MLDataType"). A model with bfloat16 graph outputs is
    run as a copy (next to it, so external data resolves) with an exact Cast of each of them as an
    extra output; returns (path to run, {output: name to fetch}). The Cast is to double: ORT's
    common-subexpression pass would merge a Cast to float with the model's own `Cast(x, float)`
    (a norm's upcast of the residual sum), changing what the EP sees."""
    m = onnx.load(path, load_external_data=False)
    bf16 = [o.name for o in m.graph.output if o.type.tensor_type.elem_type == BF16]
    if not bf16:
        return path, {}
    for name in bf16:
        m.graph.node.append(onnx.helper.make_node("Cast", [name], [name + AS_F64], to=onnx.TensorProto.DOUBLE))
        m.graph.output.append(onnx.helper.make_tensor_value_info(name + AS_F64, onnx.TensorProto.DOUBLE, None))
    root, ext = os.path.splitext(path)
    copy = f"{root}.run_in_ort_f64{ext}"
    onnx.save(m, copy)
    atexit.register(os.remove, copy)
    COPIES[copy] = str(path)
    return copy, {name: name + AS_F64 for name in bf16}


# The bfloat16 copies (above) and the models they stand for.
COPIES = {}


def said(text):
    """`text` with each bfloat16 copy's path (gone when the script exits) replaced by the model
    the user gave: a load error named `m.run_in_ort_f64.onnx`, a file they never made (probe 10)."""
    for copy, original in COPIES.items():
        text = text.replace(copy, original)
    return text


def run(session, fetch, feeds):
    """session.run, passing bfloat16 inputs as OrtValues (ORT cannot convert ml_dtypes arrays)."""
    if not any(a.dtype == ml_dtypes.bfloat16 for a in feeds.values()):
        return session.run(fetch, feeds)
    ovs = {k: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(a.view(np.uint16), BF16)
           if a.dtype == ml_dtypes.bfloat16 else ort.OrtValue.ortvalue_from_numpy(a)
           for k, a in feeds.items()}
    return [v.numpy() for v in session.run_with_ort_values(fetch, ovs)]


def run_or_exit(session, fetch, feeds, path, what):
    """run(), or exit with ONNX Runtime's reason in one line and how to give other inputs: a
    decoder's KV-cache dims are rarely what the generated inputs guess (ORT GenAI's
    GroupQueryAttention: "Input 'past_key' dimension 3 should match the packed KV head
    dimension"), and a traceback did not say what to change."""
    try:
        return run(session, fetch, feeds)
    except Exception as e:  # ORT raises its own exception types
        why = (str(e).strip().splitlines() or [type(e).__name__])[0]
        sys.exit(said(f"ONNX Runtime could not run {path} on {what}: {why}"))


def load_session(path, so, providers=None):
    """The session, or exit with ONNX Runtime's reason in one line (an IR-14 / opset-28 model, a
    bf16 model ORT's CPU EP has no kernels for) instead of a traceback."""
    try:
        return ort.InferenceSession(path, sess_options=so, providers=providers)
    except Exception as e:  # ORT raises its own exception types
        why = str(e).splitlines()[0]
        # The commonest case: a bf16 graph whose unfused ops (an attention Add) have no bf16
        # kernel on ORT's CPU EP — with or without mxfuse (docs/provider.md, "bf16 models").
        hint = ("\n(ONNX Runtime's CPU EP has no bfloat16 kernel for that op, so this model does not run on "
                "CPU with or without mxfuse: docs/provider.md, 'bf16 models'; the rewrite itself is "
                "checked by `mxfuse rewrite` and the Rust/Python tests)") if "NOT_IMPLEMENTED" in why and "bfloat16" in open_types(path) else ""
        sys.exit(said(f"ONNX Runtime cannot load {path}: {why}{hint}"))


def open_types(path):
    """The element type names of a model's graph inputs, outputs and initializers ('' if it
    cannot be read)."""
    try:
        g = onnx.load(path, load_external_data=False).graph
    except Exception:
        return ""
    elems = [v.type.tensor_type.elem_type for v in list(g.input) + list(g.output) + list(g.value_info)]
    elems += [t.data_type for t in g.initializer]
    return " ".join(onnx.TensorProto.DataType.Name(e).lower() for e in set(elems) if e)


def ep_session_options(lib):
    """Session options with the mxfuse plugin EP on the CPU device."""
    devices = [d for d in ort.get_ep_devices()
               if d.ep_name == EP_NAME and d.device.type == ort.OrtHardwareDeviceType.CPU]
    so = ort.SessionOptions()
    so.add_provider_for_devices(devices, {})
    so.log_severity_level = 3  # errors only
    return so


def check_ort_version(version):
    """Exits with one line when ONNX Runtime is older than the plugin EP API the script uses."""
    try:
        have = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:  # a dev build's odd version string: let ORT itself decide
        return
    if have < ORT_MIN:
        sys.exit(f"onnxruntime {version} is too old: mxfuse needs ONNX Runtime >= {ORT_MIN[0]}.{ORT_MIN[1]} "
                 "(pip install onnxruntime==1.31.1)")


def check_model(path):
    """Exits with one line when `path` is not a readable ONNX model (the traceback of `open` or of
    protobuf's "Wire format was corrupt" before; new-user probe 9)."""
    if not os.path.isfile(path):
        sys.exit(f"{path}: no such file" if not os.path.exists(path) else f"{path}: not a file")
    try:
        onnx.load(path, load_external_data=False)
    except Exception as e:  # protobuf's DecodeError, or an unreadable file
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        sys.exit(f"{path}: not a valid ONNX model ({why})")


def library_path(given):
    """The absolute path of the mxfuse library: LIB.so as given, else this checkout's release
    build, else the installed wheel's; exits with what to do when there is none (ORT's own error
    is a traceback naming only the path it tried — the default used to be `target/release`
    relative to the working directory, so the script failed when run from anywhere else)."""
    if given:
        lib = os.path.abspath(given)
        if not os.path.isfile(lib):
            sys.exit(f"{given}: no such file (LIB.so is the mxfuse library, e.g. target/release/libmxfuse_ep.so)")
        return lib
    checkout = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "libmxfuse_ep.so")
    if os.path.isfile(checkout):
        return os.path.abspath(checkout)
    try:
        import onnxruntime_ep_mxfuse
        return onnxruntime_ep_mxfuse.get_library_path()
    except (ImportError, FileNotFoundError):
        sys.exit(f"no mxfuse library: {os.path.abspath(checkout)} is not built (`cargo build --release -p provider`) "
                 "and the onnxruntime_ep_mxfuse wheel is not installed (`pip install ./python`); "
                 "or pass its path as the third argument")


def load_feeds(npz):
    """{input name: array} from an .npz; exits with one line when it is missing or not an .npz."""
    try:
        z = np.load(npz)
    except (OSError, ValueError) as e:  # missing, unreadable, or pickled data (not an array file)
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        sys.exit(f"--feeds {npz}: not a readable .npz of the model's inputs ({why})")
    if not isinstance(z, np.lib.npyio.NpzFile):  # a bare .npy: one unnamed array
        sys.exit(f"--feeds {npz}: not a readable .npz of the model's inputs (one array, not one per input "
                 "name: np.savez(path, **{name: array}))")
    with z:
        return {k: z[k] for k in z.files}


def register(lib):
    """Registers the plugin EP before anything runs; a LIB.so that is not the mxfuse library (or
    one ORT cannot load) is one line, not the traceback it was after the reference run."""
    try:
        ort.register_execution_provider_library(EP_NAME, lib)
    except Exception as e:  # onnxruntime's Fail / NotImplemented: a missing symbol, a bad file, an old ORT
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:240]
        sys.exit(f"{lib}: ONNX Runtime cannot load it as the mxfuse library ({why})")


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0)
    original, rewritten, lib, dims, npz = parse_args(sys.argv[1:])
    check_ort_version(ort.__version__)
    for path in (original, rewritten):
        check_model(path)
    given = load_feeds(npz) if npz else None  # a bad --feeds file fails before the library's log lines
    lib = library_path(lib)
    register(lib)
    if npz:
        feeds = given
        what = f"the inputs of {npz}"
    else:
        sym = symbolic_dims(original, dims=dims)
        unknown = [d for d in dims if d not in sym]
        if unknown:  # a typo would otherwise be ignored and the default used
            sys.exit(f"--dim {', '.join(unknown)}: {original}'s inputs have no such symbolic dim "
                     f"(they have {', '.join(sym) or 'none'})")
        feeds = feeds_for(original, dims=dims)
        what = ("generated inputs (symbolic dims " + ", ".join(f"{k}={v}" for k, v in sym.items()) +
                "; set them with --dim NAME=VALUE, or give the inputs with --feeds INPUTS.npz)") if sym else \
            "generated inputs (no symbolic dims; give the inputs with --feeds INPUTS.npz)"
    fetch, types, skipped = outputs_of(original)
    if skipped:
        print(f"outputs {skipped} are FLOAT8E8M0, which ORT's Python API cannot return: not compared")

    try:
        ref = dict(zip(types, ReferenceEvaluator(reference_model(original), new_ops=CUSTOM).run(None, feeds)))
    except (NotImplementedError, AssertionError) as e:  # an op (or attribute) it has no kernel for
        print(f"onnx.reference cannot evaluate this model ({str(e).splitlines()[0][:160]}): "
              "comparing the plugin EP with the rewritten model only")
        ref = None
    except Exception as e:  # inputs the model cannot take (a dim the graph fixes by its weights)
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        print(f"onnx.reference failed on {what}: {why}; comparing the plugin EP with the rewritten model only")
        ref = None

    so = ep_session_options(lib)
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    original_run, renamed = with_f64_outputs(original)
    rewritten_run, _ = with_f64_outputs(rewritten)
    fetch_run = [renamed.get(n, n) for n in fetch]
    session = load_session(original_run, so)
    placed = {}
    for sg in session.get_provider_graph_assignment_info():
        n, k = placed.get(sg.ep_name, (0, 0))
        placed[sg.ep_name] = (n + 1, k + len(sg.get_nodes()))
    for ep, (n, k) in sorted(placed.items()):
        print(f"{ep}: {n} subgraphs, {k} nodes of the original model")
    online = run_or_exit(session, fetch_run, feeds, original_run, what)

    quark = foreign_nodes(rewritten)
    if quark:
        how = "the rewritten model on the plugin EP"
        kept = " and ".join(f"{k} {d}" for d, k in sorted(quark.items()))
        print(f"the rewritten model keeps {kept} nodes (see the rewrite's refusals): "
              "the custom-op library alone cannot run them (docs/provider.md, Foreign ops), so it "
              "runs with the plugin EP, or would with AMD Quark's custom-op library registered too")
        so2 = ep_session_options(lib)
    else:
        how = "rewritten+custom ops"
        so2 = ort.SessionOptions()
        so2.log_severity_level = 3
        so2.register_custom_ops_library(lib)
    offline = run_or_exit(load_session(rewritten_run, so2, None if quark else ["CPUExecutionProvider"]), fetch_run,
                          feeds, rewritten_run, what)

    # An f16 output that differs on the custom-op path: ORT's CPU EP moves "isolated" f16 nodes
    # of the unfused remainder (attention) to f32 there (InsertCastTransformer), which rounds
    # differently, and one E4M3 rounding downstream may flip (docs/provider.md, "f16 on the
    # custom-op path"). The fused ops themselves are checked by running the rewritten model on
    # the plugin EP, where the unfused ops run as in the online session.
    f16_differs = [n for n, a, b in zip(fetch, online, offline)
                   if a.dtype == np.float16 and not np.array_equal(a, b, equal_nan=True)]
    offline_ep = None
    if f16_differs and not quark:
        offline_ep = dict(zip(fetch, run_or_exit(load_session(rewritten_run, ep_session_options(lib)), fetch_run, feeds,
                                                 rewritten_run, what)))

    ok = True
    for name, a, b in zip(fetch, online, offline):
        same = np.array_equal(a, b, equal_nan=True)
        line = f"output {name}: plugin EP vs {how} bit-identical: {same}"
        if not same and offline_ep is not None and name in f16_differs:
            same = np.array_equal(a, offline_ep[name], equal_nan=True)
            line += (f" (f16: ORT's CPU EP runs unfused f16 ops in f32 on that path, see docs/provider.md); "
                     f"vs the rewritten model on the plugin EP bit-identical: {same}")
        if ref is not None:
            r, v = ref[name], values(a, types[name]).astype(np.float64)
            err = float(np.max(np.abs(v - r.astype(np.float64)))) if r.size else 0.0
            scale = float(np.max(np.abs(r.astype(np.float64)))) if r.size else 1.0
            line += f"; max |plugin EP - onnx.reference| = {err:.3g} (max |ref| = {scale:.3g})"
        print(line)
        ok &= same
        if ref is not None and a.dtype == np.float16:
            print("  (float16: ORT and onnx.reference round the unfused f16 ops differently, and one E4M3 "
                  "rounding flipped downstream moves an output by up to a few percent; see --help)")
    if not ok:
        explain_different_fusions(original, rewritten, placed.get(EP_NAME, (0, 0))[1])
    print("OK" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


def explain_different_fusions(original, rewritten, online_fused):
    """When the two ORT runs differ: whether the plugin EP and the offline rewrite took different
    numbers of the original model's nodes (the EP sees ORT's shape inference, which may know
    shapes mxfuse's offline inference does not): a site fused on one path only runs unfused on
    the other, its GEMMs summing in another order (new-user probe 7: a MoE with a NonZero
    dispatch, before mxfuse inferred NonZero, printed a bare MISMATCH)."""
    kept = {n.name for n in onnx.load(rewritten, load_external_data=False).graph.node}
    offline_fused = sum(1 for n in onnx.load(original, load_external_data=False).graph.node if n.name not in kept)
    if offline_fused != online_fused:
        print(f"the plugin EP took {online_fused} of the original model's nodes, the offline rewrite {offline_fused}: "
              "they fused different sites (`mxfuse inspect ORIGINAL.onnx` lists the offline refusals, the EP's "
              "VERBOSE log its own), so some ops run unfused on one path only (their GEMMs sum in "
              "another order: judge by the differences to onnx.reference above)")


if __name__ == "__main__":
    main()
