"""Generative fuzzer for the `com.mxfuse` ops (docs/ops.md) as ONNX Runtime runs them: one-node
models with random input types, ranks, dims (K not a multiple of 32, zero and mismatched dims,
scales of the wrong shape), random attribute values, and run-time inputs that may disagree with
the declared shapes. Each model runs in a child process through the custom-op library and through
the plugin EP. A run must end in outputs or an ORT error: a signal, a hang, or a Rust panic on
stderr is a finding.

    python3 tests/fuzz/random_ops.py --cases 300 --seed 1 [--keep DIR] [--verbose]

Exit status 1 when a finding was recorded. Shares the child runner of mutate_models.py.
"""

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutate_models import CHILD, build, run_child  # noqa: E402

FLOATS = [TP.FLOAT, TP.FLOAT16, TP.BFLOAT16]
ANY = FLOATS + [TP.DOUBLE, TP.UINT8, TP.INT8, TP.INT64, TP.FLOAT8E4M3FN, TP.FLOAT8E5M2,
                TP.FLOAT8E8M0, TP.FLOAT4E2M1]
NUMPY = {TP.FLOAT: np.float32, TP.FLOAT16: np.float16, TP.DOUBLE: np.float64, TP.UINT8: np.uint8,
         TP.INT8: np.int8, TP.INT64: np.int64}


def pick_dtype(rng, good):
    return rng.choice(good) if rng.random() < 0.8 else rng.choice(ANY)


def pick_k(rng):
    return rng.choice([32, 64, 96, 128, 256]) if rng.random() < 0.75 else rng.choice([0, 1, 31, 33, 48])


def lead(rng):
    return [rng.choice([1, 2, 3, 8]) for _ in range(rng.choice([0, 1, 1, 2]))]


def bend(rng, shape):
    """Usually the shape, sometimes a wrong one (a dim changed, one dropped or added)."""
    if rng.random() < 0.8:
        return shape
    s = list(shape)
    r = rng.randrange(3)
    if r == 0 and s:
        s[rng.randrange(len(s))] = rng.choice([0, 1, 5, 33])
    elif r == 1 and s:
        s.pop()
    else:
        s.append(rng.choice([1, 2]))
    return s


def attr(rng, name, good, odd):
    """(name, value) usually from `good`, sometimes from `odd`, sometimes left out (None)."""
    x = rng.random()
    if x < 0.08:
        return None
    return name, (rng.choice(good) if x < 0.93 else rng.choice(odd))


STR_ODD = ["", "bogus", "FLOOR", "up"]
INT_ODD = [-1, 2, 7, 1 << 31, -(1 << 33)]
FLOAT_ODD = [0.0, -1.0, float("nan"), float("inf"), 1e30]


def common_quant_attrs(rng):
    return [attr(rng, "block_size", [32], [0, 16, 64, -32]),
            attr(rng, "scale_rule", ["floor", "rceil"], STR_ODD),
            attr(rng, "nan_policy", ["propagate", "ignore"], STR_ODD)]


def case_mx_quantize(rng):
    k, pre = pick_k(rng), lead(rng)
    ins = [("x", pick_dtype(rng, FLOATS), bend(rng, pre + [k]))]
    outs = [("q", TP.FLOAT8E4M3FN), ("scale", TP.FLOAT8E8M0)]
    return "MxQuantize", ins, outs, common_quant_attrs(rng)


def case_mx_dequantize(rng):
    k, pre = pick_k(rng), lead(rng)
    x_t = pick_dtype(rng, [TP.FLOAT8E4M3FN, TP.FLOAT8E5M2, TP.FLOAT4E2M1])
    shape = pre + [k]
    block = rng.choice([0, 32, 32, 16, 5, -1])
    if block > 0:
        s_shape = pre + [max(1, -(-k // block))]
    else:
        s_shape = rng.choice([[], [1], [k]])
    ins = [("x", x_t, bend(rng, shape)), ("scale", pick_dtype(rng, [TP.FLOAT8E8M0]), bend(rng, s_shape))]
    attrs = [attr(rng, "axis", [-1, len(shape) - 1], [5, -9, 1 << 31]),
             ("block_size", block),
             attr(rng, "output_dtype", [1, 10, 16], [0, 17, 7, 23])]
    return "MxDequantize", ins, [("y", TP.FLOAT)], attrs


def case_mx_quantize_linear(rng):
    k, pre = pick_k(rng), lead(rng)
    shape = pre + [k]
    block = rng.choice([0, 32, 32, 16, 5, -1])
    s_shape = pre + [max(1, -(-k // block))] if block > 0 else rng.choice([[], [1], [k]])
    ins = [("x", pick_dtype(rng, FLOATS), bend(rng, shape)),
           ("scale", pick_dtype(rng, [TP.FLOAT8E8M0]), bend(rng, s_shape))]
    attrs = [attr(rng, "axis", [-1, len(shape) - 1], [5, -9]), ("block_size", block),
             attr(rng, "output_dtype", [17, 19], [1, 18, 23, 0]),
             attr(rng, "saturate", [0, 1], [2, -1])]
    return "MxQuantizeLinear", ins, [("y", TP.FLOAT8E4M3FN)], attrs


def case_add_rmsnorm(rng):
    h, pre = pick_k(rng), lead(rng)
    t = pick_dtype(rng, FLOATS)
    ins = [("x", t, bend(rng, pre + [h]))]
    ins.append(("residual", t if rng.random() < 0.9 else pick_dtype(rng, FLOATS), bend(rng, pre + [h]))
               if rng.random() < 0.7 else None)
    ins.append(("gamma", rng.choice([t, TP.FLOAT]) if rng.random() < 0.9 else pick_dtype(rng, ANY),
                bend(rng, [h])))
    outs = [("q", TP.FLOAT8E4M3FN), ("scale", TP.FLOAT8E8M0)]
    outs += [("residual_out", t)] if rng.random() < 0.7 else []
    outs += [("normed", t)] if outs[-1][0] == "residual_out" and rng.random() < 0.4 else []
    attrs = common_quant_attrs(rng) + [
        attr(rng, "epsilon", [1e-6, 1e-5], FLOAT_ODD),
        attr(rng, "gemma", [0, 1], INT_ODD),
        attr(rng, "gamma_in_f32", [0, 1], INT_ODD),
        attr(rng, "inv_form", ["rsqrt", "recip_mul", "div"], STR_ODD),
        attr(rng, "round_sum", [0, 1], INT_ODD),
        attr(rng, "allreduce", [0], [1, 2]),
    ]
    return "AddRmsNormMxQuant", ins, outs, attrs


def case_swiglu(rng):
    i, pre = pick_k(rng), lead(rng)
    t = pick_dtype(rng, FLOATS)
    layout = rng.choice(["separate", "split_halves", "interleaved"] + (["bogus"] if rng.random() < 0.1 else []))
    if layout == "separate":
        ins = [("gate", t, bend(rng, pre + [i])), ("up", t, bend(rng, pre + [i]))]
    else:
        ins = [("gate_up", t, bend(rng, pre + [2 * i]))]
    attrs = common_quant_attrs(rng) + [
        ("layout", layout),
        attr(rng, "activation", ["silu", "oai"], STR_ODD),
        attr(rng, "alpha", [1.0, 1.702], FLOAT_ODD),
        attr(rng, "limit", [7.0], FLOAT_ODD),
        attr(rng, "beta", [1.0], FLOAT_ODD),
        attr(rng, "fp32_activation", [0, 1], INT_ODD),
        attr(rng, "swish_form", ["unrolled", "single_op"], STR_ODD),
    ]
    return "SwiGluMxQuant", ins, [("q", TP.FLOAT8E4M3FN), ("scale", TP.FLOAT8E8M0)], attrs


def case_mx_matmul(rng):
    k, pre, n = pick_k(rng), lead(rng) or [2], rng.choice([1, 8, 32, 33])
    ins = [("a_q", pick_dtype(rng, [TP.FLOAT8E4M3FN]), bend(rng, pre + [k])),
           ("a_scale", pick_dtype(rng, [TP.FLOAT8E8M0]), bend(rng, pre + [max(k // 32, 1)]))]
    trans_b = rng.choice([0, 1])
    kind = rng.choice(["mx", "mx", "fp4", "float"])
    if kind == "float":
        ins.append(("b", pick_dtype(rng, FLOATS), bend(rng, [k, n])))
        ins.append(None)
    else:
        bt = TP.FLOAT8E4M3FN if kind == "mx" else TP.FLOAT4E2M1
        bshape = [n, k] if trans_b else [k, n]
        sshape = [n, max(k // 32, 1)] if trans_b else [max(k // 32, 1), n]
        ins.append(("b", pick_dtype(rng, [bt]), bend(rng, bshape)))
        ins.append(("b_scale", pick_dtype(rng, [TP.FLOAT8E8M0]), bend(rng, sshape)))
    if rng.random() < 0.3:
        ins.append(("bias", pick_dtype(rng, [TP.FLOAT]), rng.choice([[], [n], [1, n], [3], [n, 2]])))
    attrs = [attr(rng, "trans_b", [trans_b], [2, -1]),
             attr(rng, "alpha", [1.0, 0.5], FLOAT_ODD),
             attr(rng, "beta", [1.0], FLOAT_ODD),
             attr(rng, "output_dtype", [1, 10, 16], [0, 17, 7])]
    return "MxMatMul", ins, [("y", TP.FLOAT)], attrs


CASES = [case_mx_quantize, case_mx_dequantize, case_mx_quantize_linear, case_add_rmsnorm,
         case_swiglu, case_mx_matmul]


def make_model(rng, op, ins, outs, attrs, path):
    """Inputs become graph inputs (random run-time values) or, at random, initializers (so the
    provider's constant prepack path sees them too)."""
    inputs, inits, names, feeds = [], [], [], {}
    for spec in ins:
        if spec is None:
            names.append("")
            continue
        name, dtype, shape = spec
        names.append(name)
        constant = rng.random() < 0.35 or dtype not in NUMPY or dtype == TP.BFLOAT16
        if constant and all(d >= 0 for d in shape) and int(np.prod(shape, dtype=np.int64)) < 1 << 16:
            count = int(np.prod(shape, dtype=np.int64))
            if dtype == TP.FLOAT4E2M1:
                raw = rng.randbytes((count + 1) // 2)
            else:
                width = {TP.FLOAT: 4, TP.DOUBLE: 8, TP.INT64: 8, TP.FLOAT16: 2, TP.BFLOAT16: 2}.get(dtype, 1)
                raw = rng.randbytes(count * width)
            inits.append(helper.make_tensor(name, dtype, shape, raw, raw=True))
        else:
            # Some dims symbolic; the run feeds the intended shape either way.
            dims = [d if rng.random() < 0.7 else f"d{len(inputs)}_{j}" for j, d in enumerate(shape)]
            feeds[name] = shape
            inputs.append(helper.make_tensor_value_info(name, dtype, dims))
    while names and names[-1] == "":
        names.pop()
    kw = {a[0]: a[1] for a in attrs if a is not None}
    node = helper.make_node(op, names, [o[0] for o in outs], domain="com.mxfuse", **kw)
    # Outputs untyped: the op's own type inference decides (a declared type that disagrees is
    # ORT's load error, not a test of ours).
    graph = helper.make_graph([node], "fuzz", inputs,
                              [helper.make_empty_tensor_value_info(o[0]) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24),
                                                    helper.make_opsetid("com.mxfuse", 1)])
    model.ir_version = 11
    onnx.save(model, str(path))
    return kw, feeds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--report", type=Path)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--gpu", action="store_true",
                    help="run the EP on its GPU device (instead of the CPU device)")
    ap.add_argument("--lib", help="libmxfuse_ep.so (default: target/release or target/debug)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="for the children, e.g. MXFUSE_EP_TEST_DEVICE_MEMORY=host (the EP's "
                         "GPU executor on host memory, launches replaced by the CPU kernels)")
    args = ap.parse_args()
    lib = args.lib or build("libmxfuse_ep.so", "cargo build --release -p provider")
    env = dict(kv.split("=", 1) for kv in args.env)
    rng = random.Random(args.seed)
    findings, outcomes = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in range(args.cases):
            op, ins, outs, attrs = rng.choice(CASES)(rng)
            path = Path(tmp) / f"case{case}.onnx"
            kw, shapes = make_model(rng, op, ins, outs, attrs, path)
            for how in ("custom", "ep-gpu" if args.gpu else "ep"):
                cmd = [sys.executable, "-c", CHILD, str(path), lib, how, json.dumps(shapes)]
                kind, detail = run_child(cmd, args.timeout, env)
                key = kind if kind != "ok" else f"{op}:{how}:{(detail.split() or ['exit0'])[0]}"
                outcomes[key] = outcomes.get(key, 0) + 1
                if args.verbose:
                    print(f"case {case} {op} {kw} {how}: {kind} {detail}", flush=True)
                if kind != "ok":
                    f = {"case": case, "op": op, "attrs": repr(kw), "inputs": repr(ins),
                         "run": how, "kind": kind, "detail": detail}
                    findings.append(f)
                    print(json.dumps(f), flush=True)
                    if args.keep:
                        args.keep.mkdir(parents=True, exist_ok=True)
                        (args.keep / f"case{case}.onnx").write_bytes(path.read_bytes())
    summary = {"cases": args.cases, "seed": args.seed, "outcomes": dict(sorted(outcomes.items())),
               "findings": len(findings)}
    print(json.dumps(summary, indent=1))
    if args.report:
        args.report.write_text(json.dumps({"summary": summary, "findings": findings}, indent=1))
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    main()
