"""Mutation fuzzer for bad-input handling: the plugin EP, the custom-op library and the `mxfuse`
CLI must turn any malformed model into an error, never a crash of the host process, a hang, or
a Rust panic (a caught panic is still a missing check).

Each case takes a seed model (the committed fixtures and their offline-rewritten `com.mxfuse`
forms), applies one or two random mutations (dtypes, dims, raw data, attributes, inputs, graph
input shapes), and runs it in a child process three ways: `mxfuse rewrite`, ORT with the plugin
EP (online fusion, then a run on random inputs), and ORT with the custom-op library. A child
killed by a signal, one past its time limit, and any "panicked at" on stderr is a finding; ORT
errors, CLI errors and refusals are the expected outcome.

    python3 tests/fuzz/mutate_models.py --cases 300 --seed 1 [--keep DIR]

Exit status 1 when a finding was recorded; `--keep` writes each finding's model there.
"""

import argparse
import copy
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
from onnx import TensorProto as TP

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "models" / "fixtures"
EP_NAME = "MxFuseExecutionProvider"

DTYPES = [TP.FLOAT, TP.FLOAT16, TP.BFLOAT16, TP.DOUBLE, TP.INT8, TP.UINT8, TP.INT32, TP.INT64,
          TP.FLOAT8E4M3FN, TP.FLOAT8E5M2, TP.FLOAT8E8M0, TP.FLOAT4E2M1, TP.BOOL, TP.STRING]
ODD_INTS = [-1, 0, 1, 2, 3, 5, 16, 31, 33, 64, 1 << 31, -(1 << 40)]
ODD_FLOATS = [0.0, -1.0, 1e-30, 1e30, float("nan"), float("inf"), -float("inf")]


def build(name: str, hint: str) -> str:
    for p in ("release", "debug"):
        f = ROOT / "target" / p / name
        if f.is_file():
            return str(f)
    sys.exit(f"{name} not found; run `{hint}`")


def seeds(cli: str, work: Path) -> list[Path]:
    """The fixtures, plus each one rewritten offline (the `com.mxfuse` spelling)."""
    out = []
    for f in sorted(FIXTURES.glob("*.onnx")) + sorted((FIXTURES / "real").glob("*.onnx")):
        if os.path.getsize(f) > 8 << 20:
            continue
        out.append(f)
        fused = work / f"{f.stem}.fused.onnx"
        r = subprocess.run([cli, "rewrite", str(f), "-o", str(fused)], capture_output=True)
        if r.returncode == 0 and fused.is_file():
            out.append(fused)
    return out


# ---- mutations: each edits the model in place and returns a short description ----------------

# Nodes our code reads most: the fused ops and the quantize / norm ops the rules match.
OURS = {"QuantizeLinear", "DequantizeLinear", "Cast", "MXQuantizeDequantize", "RMSNormalization",
        "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "Reshape", "ReduceMax"}


def _node(m, rng, pred=lambda n: True):
    """A random node with `pred`, most often one of ours (a random one mostly breaks the model
    where ONNX Runtime's own checks stop it before our code runs)."""
    nodes = [n for n in m.graph.node if pred(n)]
    ours = [n for n in nodes if n.domain == "com.mxfuse" or n.op_type in OURS]
    if ours and rng.random() < 0.7:
        nodes = ours
    return rng.choice(nodes) if nodes else None


def mut_attr(m, rng, drop=False):
    """An attribute of a random node set to an odd value (`drop`: removed)."""
    n = _node(m, rng, lambda n: len(n.attribute) > 0)
    if n is None:
        return None
    a = rng.choice(list(n.attribute))
    if drop:
        n.attribute.remove(a)
        return f"{n.op_type}.{a.name} removed"
    if a.type == onnx.AttributeProto.INT:
        a.i = rng.choice(ODD_INTS)
    elif a.type == onnx.AttributeProto.FLOAT:
        a.f = rng.choice(ODD_FLOATS)
    elif a.type == onnx.AttributeProto.STRING:
        a.s = rng.choice([b"", b"bogus", b"up", b"down", b"nearest"])
    elif a.type == onnx.AttributeProto.INTS:
        del a.ints[:]
        a.ints.extend(rng.choice([[], [-5], [0, 0, 0, 0, 0], [1 << 40]]))
    else:
        n.attribute.remove(a)
        return f"{n.op_type}.{a.name} removed"
    return f"{n.op_type}.{a.name} = {onnx.helper.get_attribute_value(a)!r}"


def mut_drop_attr(m, rng):
    return mut_attr(m, rng, drop=True)


def mut_inputs(m, rng):
    n = _node(m, rng, lambda n: len(n.input) > 0)
    if n is None:
        return None
    i = rng.randrange(len(n.input))
    choice = rng.randrange(4)
    if choice == 0:
        n.input[i] = ""
        return f"{n.op_type} input {i} emptied"
    if choice == 1:
        del n.input[-1]
        return f"{n.op_type} last input dropped"
    if choice == 2:
        n.input.append(n.input[i])
        return f"{n.op_type} extra input"
    other = rng.choice([v for nd in m.graph.node for v in nd.output] or ["x"])
    n.input[i] = other
    return f"{n.op_type} input {i} <- {other}"


def mut_init_dtype(m, rng):
    if not m.graph.initializer:
        return None
    t = rng.choice(list(m.graph.initializer))
    t.data_type = rng.choice(DTYPES)
    return f"initializer {t.name} dtype {t.data_type}"


def mut_init_dims(m, rng):
    if not m.graph.initializer:
        return None
    t = rng.choice(list(m.graph.initializer))
    dims = list(t.dims)
    if dims and rng.random() < 0.7:
        j = rng.randrange(len(dims))
        dims[j] = rng.choice([0, 1, 31, 33, dims[j] * 2, dims[j] // 2 or 1])
    else:
        dims = dims + [1] if rng.random() < 0.5 else dims[1:]
    del t.dims[:]
    t.dims.extend(dims)
    return f"initializer {t.name} dims {dims}"


def mut_init_data(m, rng):
    inits = [t for t in m.graph.initializer if t.raw_data]
    if not inits:
        return None
    t = rng.choice(inits)
    if rng.random() < 0.5:
        t.raw_data = t.raw_data[: rng.randrange(len(t.raw_data))]
        return f"initializer {t.name} raw data truncated"
    data = bytearray(t.raw_data)
    for _ in range(max(1, len(data) // 50)):
        data[rng.randrange(len(data))] = rng.choice([0x00, 0x7F, 0xFF, 0x80, 0xFE])
    t.raw_data = bytes(data)
    return f"initializer {t.name} bytes poisoned (NaN / 0 / 0xFF codes)"


def mut_graph_input(m, rng):
    ins = [v for v in m.graph.input if v.type.HasField("tensor_type")]
    if not ins:
        return None
    v = rng.choice(ins)
    tt = v.type.tensor_type
    if rng.random() < 0.4:
        tt.elem_type = rng.choice(DTYPES[:8])
        return f"graph input {v.name} elem_type {tt.elem_type}"
    dims = tt.shape.dim
    if not len(dims):
        return None
    d = dims[rng.randrange(len(dims))]
    if rng.random() < 0.5:
        d.dim_value = rng.choice([1, 3, 31, 33, 48, 96])
    else:
        d.dim_param = "fuzz"
    return f"graph input {v.name} dim -> {d}"


def mut_op_type(m, rng):
    n = _node(m, rng)
    if n is None:
        return None
    ops = sorted({(x.domain, x.op_type) for x in m.graph.node} - {(n.domain, n.op_type)})
    if not ops:
        return None
    n.domain, n.op_type = rng.choice(ops)
    return f"{n.name} now {n.domain}::{n.op_type}"


def mut_strip_shapes(m, rng):
    """Unknown shapes everywhere: no value_info, graph inputs and outputs without dims."""
    del m.graph.value_info[:]
    for v in list(m.graph.input) + list(m.graph.output):
        if v.type.HasField("tensor_type") and rng.random() < 0.7:
            v.type.tensor_type.ClearField("shape")
    return "shapes stripped"


MUTATIONS = [mut_strip_shapes, mut_attr, mut_drop_attr, mut_inputs, mut_init_dtype, mut_init_dims, mut_init_data,
             mut_graph_input, mut_op_type]
# com.mxfuse nodes and the quantize chain are where our own code runs: bias the attribute and
# input mutations towards them.
WEIGHTS = [1, 4, 1, 2, 2, 2, 2, 3, 1]


# ---- the child: run one model three ways --------------------------------------------------------

CHILD = r"""
import json, sys, numpy as np, onnxruntime as ort
path, lib, mode, seed_shapes = sys.argv[1:5]
# Shapes of the seed model's inputs (a mutation may have stripped or changed the declared ones).
seed_shapes = json.loads(seed_shapes)
so = ort.SessionOptions()
so.log_severity_level = 4
if mode.startswith("ep"):
    ort.register_execution_provider_library("MxFuseExecutionProvider", lib)
    want = ort.OrtHardwareDeviceType.GPU if mode == "ep-gpu" else ort.OrtHardwareDeviceType.CPU
    devs = [d for d in ort.get_ep_devices() if d.ep_name == "MxFuseExecutionProvider"
            and d.device.type == want]
    if not devs:
        print("NO-DEVICE", mode); sys.exit(0)
    so.add_provider_for_devices(devs, {})
else:
    so.register_custom_ops_library(lib)
try:
    s = ort.InferenceSession(path, so)
except Exception as e:
    print("LOAD-ERROR", str(e).splitlines()[0][:200]); sys.exit(0)
rng = np.random.default_rng(0)
feeds = {}
for i in s.get_inputs():
    declared = seed_shapes.get(i.name, i.shape if i.shape is not None else [])
    shape = [d if isinstance(d, int) and d >= 0 else 2 for d in declared]
    t = i.type[len("tensor("):-1]
    dt = {"float": np.float32, "float16": np.float16, "double": np.float64, "int64": np.int64,
          "int32": np.int32, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}.get(t)
    if dt is None:
        print("SKIP input type", t); sys.exit(0)
    feeds[i.name] = (rng.standard_normal(shape) * 3).astype(dt)
try:
    s.run(None, feeds)
    print("RAN")
except Exception as e:
    msg = " ".join(str(e).split())[:400]
    # The run finished; only the conversion of an FP8 / E8M0 output to numpy failed.
    print("RAN" if "No corresponding Numpy type" in msg else "RUN-ERROR", msg)
"""


def input_shapes(model_path: Path) -> dict:
    """Graph input name -> dims of the unmutated model (symbolic dims as None)."""
    m = onnx.load(str(model_path), load_external_data=False)
    return {v.name: [d.dim_value if d.HasField("dim_value") else None
                     for d in v.type.tensor_type.shape.dim]
            for v in m.graph.input if v.type.HasField("tensor_type")}


def run_child(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[str, str]:
    """('ok' | 'crash' | 'hang' | 'panic', detail); `env` adds to the child's environment."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return "hang", f"no result after {timeout:.0f} s"
    err = r.stderr or ""
    if r.returncode < 0:
        return "crash", f"signal {-r.returncode}: {err[-400:]}"
    if "panicked at" in err:
        line = next(l for l in err.splitlines() if "panicked at" in l)
        return "panic", line[:300] + " | " + err[err.find("panicked at"):][:300]
    if r.returncode != 0 and cmd[0].endswith("python3") and "Traceback" in err:
        return "crash", f"child exited {r.returncode}: {err[-400:]}"
    return "ok", (r.stdout.strip().splitlines() or [""])[-1][:400]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--keep", type=Path, help="directory for the models of findings")
    ap.add_argument("--report", type=Path, help="JSON summary")
    ap.add_argument("--verbose", action="store_true", help="print every run's outcome")
    args = ap.parse_args()
    cli = build("mxfuse", "cargo build --release -p graph_rewrites")
    lib = build("libmxfuse_ep.so", "cargo build --release -p provider")
    rng = random.Random(args.seed)
    findings, outcomes = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pool = seeds(cli, work)
        for case in range(args.cases):
            src = rng.choice(pool)
            m = onnx.load(str(src))
            what = []
            for _ in range(rng.choice([1, 1, 2])):
                mut = rng.choices(MUTATIONS, WEIGHTS)[0]
                d = mut(m, rng)
                if d:
                    what.append(d)
            if not what:
                continue
            shapes = json.dumps(input_shapes(src))
            path = work / f"case{case}.onnx"
            try:
                onnx.save(m, str(path))
            except Exception:
                continue  # not even serialisable
            runs = {
                "cli": [cli, "rewrite", str(path), "-o", str(work / "out.onnx")],
                "ep": [sys.executable, "-c", CHILD, str(path), lib, "ep", shapes],
                "custom_ops": [sys.executable, "-c", CHILD, str(path), lib, "custom", shapes],
            }
            for how, cmd in runs.items():
                kind, detail = run_child(cmd, args.timeout)
                # ok outcomes by what the child said first (RAN, LOAD-ERROR, RUN-ERROR, ...).
                key = kind if kind != "ok" else f"{how}:{(detail.split() or ['exit0'])[0]}"
                outcomes[key] = outcomes.get(key, 0) + 1
                if args.verbose:
                    print(f"case {case} {src.name} {what} {how}: {kind} {detail}", flush=True)
                if kind != "ok":
                    f = {"case": case, "seed_model": src.name, "mutations": what, "run": how,
                         "kind": kind, "detail": detail}
                    findings.append(f)
                    print(json.dumps(f), flush=True)
                    if args.keep:
                        args.keep.mkdir(parents=True, exist_ok=True)
                        onnx.save(m, str(args.keep / f"case{case}_{how}.onnx"))
    summary = {"cases": args.cases, "seed": args.seed, "outcomes": outcomes,
               "findings": len(findings)}
    print(json.dumps(summary))
    if args.report:
        args.report.write_text(json.dumps({"summary": summary, "findings": findings}, indent=1))
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    main()
