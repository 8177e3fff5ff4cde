"""Regenerates the bad-input corpus: python3 make_bad_models.py (onnx >= 1.16, numpy).

Each file must make `mxfuse` fail with a clear one-line error and exit status 1; EXPECTED.tsv
lists the fragment of the message each one must produce (tests/io_bad_inputs.rs checks both).
"""
import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(nodes, inputs=("x",), outputs=("y",), inits=(), ir=10, opsets=(("", 21),)):
    g = helper.make_graph(
        list(nodes),
        "bad",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in outputs],
        list(inits),
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = ir
    return m


def save(name, m):
    with open(name, "wb") as f:
        f.write(m.SerializeToString())


def external(name, location, offset=0, length=16):
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[4])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


relu = helper.make_node("Relu", ["x"], ["y"], name="relu")
good = model([relu], inits=[numpy_helper.from_array(np.arange(64, dtype=np.float32), "w")])
blob = good.SerializeToString()

with open("truncated.onnx", "wb") as f:
    f.write(blob[: len(blob) * 2 // 3])
random.seed(7)
with open("garbage.onnx", "wb") as f:
    f.write(bytes(random.getrandbits(8) for _ in range(512)))
open("empty.onnx", "wb").close()
save("no_graph.onnx", onnx.ModelProto(ir_version=10))
save("cycle.onnx", model([
    helper.make_node("Add", ["x", "b"], ["a"], name="first"),
    helper.make_node("Relu", ["a"], ["b"], name="second"),
    helper.make_node("Identity", ["a"], ["y"], name="out"),
]))
save("self_loop.onnx", model([helper.make_node("Add", ["x", "y"], ["y"], name="loop")]))
save("dangling_input.onnx", model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")]))
save("dangling_output.onnx", model([relu], outputs=("y", "missing")))
save("duplicate_producer.onnx", model([relu, helper.make_node("Abs", ["x"], ["y"], name="abs")]))
save("missing_external_file.onnx", model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                                         inits=[external("w", "no_such_file.bin")]))
save("external_escapes_dir.onnx", model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                                        inits=[external("w", "../weights.bin")]))
with open("short.bin", "wb") as f:
    f.write(bytes(8))
save("external_out_of_range.onnx", model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                                         inits=[external("w", "short.bin", offset=0, length=16)]))
save("ir_version_too_old.onnx", model([relu], ir=2))
save("ir_version_too_new.onnx", model([relu], ir=99))
save("opset_too_new.onnx", model([relu], opsets=(("", 99),)))
save("unimported_domain.onnx", model([helper.make_node("Gelu", ["x"], ["y"], name="g", domain="com.example")]))
save("node_without_op.onnx", model([helper.make_node("", ["x"], ["y"], name="blank")]))
