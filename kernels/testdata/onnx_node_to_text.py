"""Converts ONNX backend node-test directories (made by shared/samples/scripts/gen_onnx_node_tests.py)
into the line format kernels/tests/onnx_node_tests.rs reads, one file per case:
    op <OpType>
    attr <name> <value>
    <input|output> <name> <f32|f16|e4m3> <dims,comma-separated or -> <hex values, comma-separated>
Usage: python3 onnx_node_to_text.py NODE_DIR OUT_DIR CASE...   (onnx 1.23, ml_dtypes)"""
import glob, os, re, sys
import numpy as np, onnx
from onnx import helper, numpy_helper

node_dir, out_dir, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
key = lambda p: int(re.findall(r"(\d+)\.pb$", p)[0])

def fmt(a):
    kind = {"float32": ("f32", np.uint32), "float16": ("f16", np.uint16), "float8_e4m3fn": ("e4m3", np.uint8)}[str(a.dtype)]
    width = np.dtype(kind[1]).itemsize * 2
    dims = ",".join(map(str, a.shape)) or "-"
    return kind[0], dims, ",".join(f"{v:0{width}x}" for v in a.reshape(-1).view(kind[1]))

for case in cases:
    m = onnx.load(os.path.join(node_dir, case, "model.onnx"))
    (node,) = m.graph.node
    lines = [f"op {node.op_type}"] + [f"attr {a.name} {helper.get_attribute_value(a)}" for a in node.attribute]
    ds = os.path.join(node_dir, case, "test_data_set_0")
    for kind, vis in (("input", m.graph.input), ("output", m.graph.output)):
        for vi, p in zip(vis, sorted(glob.glob(f"{ds}/{kind}_*.pb"), key=key)):
            lines.append(f"{kind} {vi.name} " + " ".join(fmt(numpy_helper.to_array(onnx.load_tensor(p)))))
    with open(os.path.join(out_dir, case + ".txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
