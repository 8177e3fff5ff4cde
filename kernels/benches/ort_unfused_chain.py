"""Times ONNX Runtime's CPU EP on the unfused chain the fused AddRmsNormMxQuant replaces, in the
spelling ORT's CPU EP can run: Add -> RMSNormalization (opset 23) -> block quant with a *float*
scale (Reshape -> Abs -> ReduceMax -> Mul(1/448) -> QuantizeLinear(block_size=32, FLOAT8E4M3FN));
ORT has no CPU kernel for Cast to FLOAT8E8M0. f32 tensors of M x H.
Prints: `ort_unfused_chain M=<m> H=<h> threads=<t> median_us=<t> min_us=<t> ort=<version>`.
Usage: python3 ort_unfused_chain.py [M=8] [H=6144] [threads=2]"""
import sys, time
import numpy as np, onnx, onnxruntime as ort
from onnx import helper, TensorProto as TP

M = int(sys.argv[1]) if len(sys.argv) > 1 else 8
H = int(sys.argv[2]) if len(sys.argv) > 2 else 6144
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2

c = lambda n, v, t=TP.FLOAT, dims=None: helper.make_tensor(n, t, dims or [len(v)], v)
nodes = [
    helper.make_node("Add", ["x", "r"], ["s"]),
    helper.make_node("RMSNormalization", ["s", "gamma"], ["y"], axis=-1, epsilon=1e-6),
    helper.make_node("Reshape", ["y", "bshape"], ["yb"]),
    helper.make_node("Abs", ["yb"], ["ab"]),
    helper.make_node("ReduceMax", ["ab", "axes"], ["amax"], keepdims=0),
    helper.make_node("Mul", ["amax", "inv448"], ["scale"]),
    helper.make_node("QuantizeLinear", ["y", "scale"], ["q"], axis=-1, block_size=32,
                     output_dtype=TP.FLOAT8E4M3FN, saturate=1),
]
graph = helper.make_graph(
    nodes, "unfused",
    [helper.make_tensor_value_info(n, TP.FLOAT, [M, H]) for n in ("x", "r")],
    [helper.make_tensor_value_info("q", TP.FLOAT8E4M3FN, [M, H]),
     helper.make_tensor_value_info("s", TP.FLOAT, [M, H]),
     helper.make_tensor_value_info("scale", TP.FLOAT, [M, H // 32])],
    [c("gamma", np.ones(H, np.float32).tolist()), c("bshape", [M, H // 32, 32], TP.INT64),
     c("axes", [-1], TP.INT64), c("inv448", [1.0 / 448.0], dims=[])],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
so = ort.SessionOptions()
so.intra_op_num_threads = threads
sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
feeds = {"x": rng.standard_normal((M, H), np.float32), "r": rng.standard_normal((M, H), np.float32)}
for _ in range(20):
    sess.run(None, feeds)
times = []
for _ in range(200):
    t0 = time.perf_counter()
    sess.run(None, feeds)
    times.append(time.perf_counter() - t0)
print(f"ort_unfused_chain M={M} H={H} threads={threads} median_us={np.median(times) * 1e6:.1f} "
      f"min_us={np.min(times) * 1e6:.1f} ort={ort.__version__}")
