"""Whole MXFP8 MoE decoder layers (new-user probe 7): an RMSNorm, a router (Softmax or Sigmoid →
TopK → normalized weights), a shared expert and the routed experts in the spellings exporters
emit — dense (every expert on every token, weighted by a one-hot of the top-k: no Gather, Where or
Loop), stacked `[E, N, K]` / `[E, K, N]` experts gathered per (token, slot) for transformers'
`batched_mm` (weight first and activation first), and a data-dependent dispatch
(`Gather(x, NonZero(Equal(ids, e)))`, torch dynamo's unrolled Mixtral-style expert loop) — with
opset-24 MXFP8 or AMD Quark fake-quant, symbolic batch and sequence, two layers, and one session
run on changing token counts.

An expert of the data-dependent dispatch may be routed no token: its quantizer then sees zero
rows.

mxfuse's offline shape inference did not know `NonZero` (the fusions after it were refused with
that reason), so offline the quantizer stayed the standard ops, its E8M0 scale computed by ORT:
ONNX Runtime 1.31's `ReduceMax` keeps the reduced axis of an empty input ([0, 2, 32] instead of
[0, 2]), and `MxQuantizeLinear` / `MxDequantize` refused that empty scale ("blocked scale has
shape [0, 2, 32], expected [0, 2]") on every step where an expert got no token. An empty x now
takes any empty scale (kernels/src/scale_map.rs, unit-tested there), and NonZero's shape is
inferred, so offline the dispatch fuses as the EP fuses it (the fused quantizer on zero rows).
"""

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from test_gather_dequant import emulated_device_process
from test_mx_dequant import K, N, claimed_ops, e8m0_tensor, ep_session, mx_activation, offline_session, rewrite, same_bits, save
from test_weight_only import quark_oracle_ops


def routed_expert_model(path):
    """y [n, N] = MXFP8(x[tokens routed to expert 0]) @ W: the tokens are
    `NonZero(Equal(ids, 0))`, so y has as many rows as ids has zeros (maybe none)."""
    rng = np.random.default_rng(7)
    nodes = [
        helper.make_node("Equal", ["ids", "zero"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["nz"], name="route"),
        helper.make_node("Squeeze", ["nz", "axis0"], ["tok"]),
        helper.make_node("Gather", ["x", "tok"], ["xe"], axis=0),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array((rng.standard_normal((K, N)) * 0.1).astype(np.float32), "w")]
    xd = mx_activation(nodes, inits, "xe")
    nodes.append(helper.make_node("MatMul", [xd, "w"], ["y"]))
    return save(nodes, inits, [helper.make_tensor_value_info("x", TP.FLOAT, ["t", K]),
                               helper.make_tensor_value_info("ids", TP.INT64, ["t"])],
                [helper.make_tensor_value_info("y", TP.FLOAT, None)], path)


def test_an_expert_routed_no_token_runs_offline_and_online(lib, ep_devices, mxfuse_cli, tmp_path):
    src = routed_expert_model(tmp_path / "m.onnx")
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    # Offline as online: NonZero keeps the rows' rank, the quantizer and the linear fuse.
    assert report["counts"].get("mxquant") == 1, report
    assert not any("NonZero" in r["reason"] for r in report["rejections"]), report["rejections"]
    offline = offline_session(tmp_path / "fused.onnx", lib)
    online = ep_session(src, ep_devices)
    assert "MatMul" in claimed_ops(online), claimed_ops(online)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, K)).astype(np.float32)
    for ids in ([1, 2, 3, 1, 2], [0, 2, 0, 0, 1], [0, 0, 0, 0, 0], [3, 3, 3, 3, 3]):
        feed = {"x": x, "ids": np.array(ids, np.int64)}
        want = ReferenceEvaluator(onnx.load(src)).run(None, feed)[0]
        for sess in (offline, online):
            got = sess.run(None, feed)[0]
            assert got.shape == want.shape == (ids.count(0), N)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(np.abs(want).max(initial=0), 1))


class Layers:
    """Builds MoE decoder layers node by node (names are unique per builder)."""

    def __init__(self, quark, seed=0, shape_of_normed=None):
        self.nodes, self.inits, self.n, self.quark = [], [], 0, quark
        # The MoE output's reshape back: `Reshape(out, Shape(x))`, or (a TorchScript export's
        # `batch, seq, hidden = hidden_states.shape` on the normed value) "gather":
        # Shape(normed) → Gather 0 / 1 / 2 → Concat; "slice": opset 15's Shape(normed, 0, -1)
        # → Concat with [hidden].
        self.shape_of_normed = shape_of_normed
        self.hidden = []  # values of x's shape [batch, seq, h] (the residual Adds' operands, sums)
        self.rng = np.random.default_rng(seed)

    def name(self, p):
        self.n += 1
        return f"{p}_{self.n}"

    def const(self, arr):
        name = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def i64(self, v):
        return self.const(np.array(v, np.int64))

    def op(self, op, ins, nout=1, **attrs):
        outs = [self.name(op.lower()) for _ in range(nout)]
        self.nodes.append(helper.make_node(op, ins, outs, name=self.name(op), **attrs))
        return outs[0] if nout == 1 else outs

    def fake_quant(self, x, axis):
        return self.op("MXQuantizeDequantize", [x], domain="com.amd.quark", axis=axis, block_size=32,
                       element_dtype="fp8_e4m3", rounding_mode=2)

    def act_quant(self, x, k):
        """MXFP8 of x [rows, k] along k: opset-24 OCP floor (block shape [-1, k/32, 32]) or Quark."""
        if self.quark:
            return self.fake_quant(x, -1)
        amax = self.op("ReduceMax", [self.op("Abs", [self.op("Reshape", [x, self.i64([-1, k // 32, 32])])]),
                                     self.i64([-1])], keepdims=0)
        sc = self.op("Cast", [self.op("Mul", [amax, self.const(np.float32(2.0**-8))])], to=TP.FLOAT8E8M0,
                     round_mode="down", saturate=1)
        q = self.op("QuantizeLinear", [x, sc], axis=-1, block_size=32, output_dtype=TP.FLOAT8E4M3FN)
        return self.op("DequantizeLinear", [q, sc], axis=-1, block_size=32, output_dtype=TP.FLOAT)

    def weight(self, shape, axis):
        """A constant MXFP8 weight blocked 32 along `axis`: E4M3 + E8M0 DequantizeLinear, or a
        float weight behind Quark's fake quant."""
        if self.quark:
            return self.fake_quant(self.const((self.rng.standard_normal(shape) * 0.2).astype(np.float32)), axis)
        sshape = list(shape)
        sshape[axis] //= 32
        sn = self.name("ws")
        self.inits.append(e8m0_tensor(sn, self.rng.integers(120, 125, sshape)))
        q = self.const(self.rng.standard_normal(shape).astype(ml_dtypes.float8_e4m3fn))
        return self.op("DequantizeLinear", [q, sn], axis=axis, block_size=32, output_dtype=TP.FLOAT)

    def swiglu(self, g, u):
        return self.op("Mul", [self.op("Mul", [g, self.op("Sigmoid", [g])]), u])

    def mlp(self, xq, h, i):
        g = self.op("MatMul", [xq, self.weight((h, i), 0)])
        u = self.op("MatMul", [xq, self.weight((h, i), 0)])
        return self.op("MatMul", [self.act_quant(self.swiglu(g, u), i), self.weight((i, h), 0)])

    def layer(self, x, dispatch, router, h=64, i=64, e=4, k=2):
        sq = self.op("ReduceMean", [self.op("Mul", [x, x]), self.i64([-1])], keepdims=1)
        inv = self.op("Reciprocal", [self.op("Sqrt", [self.op("Add", [sq, self.const(np.float32(1e-6))])])])
        normed = self.op("Mul", [self.op("Mul", [x, inv]), self.const(np.full(h, 1.1, np.float32))])
        rows = self.op("Reshape", [normed, self.i64([-1, h])])  # [T, h]
        logits = self.op("MatMul", [rows, self.const((self.rng.standard_normal((h, e)) * 0.3).astype(np.float32))])
        probs = self.op("Softmax" if router == "softmax" else "Sigmoid", [logits], **({"axis": -1} if router == "softmax" else {}))
        top, ids = self.op("TopK", [probs, self.i64([k])], nout=2, axis=-1)
        w = self.op("Div", [top, self.op("ReduceSum", [top, self.i64([-1])], keepdims=1)])
        xq = self.act_quant(rows, h)
        out = self.mlp(xq, h, i)  # the shared expert
        if dispatch == "dense":
            onehot = self.op("OneHot", [ids, self.i64(e), self.const(np.array([0, 1], np.float32))], axis=-1)
            dense = self.op("ReduceSum", [self.op("Mul", [onehot, self.op("Unsqueeze", [w, self.i64([-1])])]),
                                          self.i64([1])], keepdims=0)  # [T, e]
            for j in range(e):
                wj = self.op("Slice", [dense, self.i64([j]), self.i64([j + 1]), self.i64([1])])
                out = self.op("Add", [out, self.op("Mul", [self.mlp(xq, h, i), wj])])
        elif dispatch == "nonzero":
            for j in range(e):
                nz = self.op("Transpose", [self.op("NonZero", [self.op("Equal", [ids, self.i64(j)])])], perm=[1, 0])
                tok = self.op("Gather", [nz, self.i64(0)], axis=1)
                yj = self.mlp(self.op("Gather", [xq, tok], axis=0), h, i)
                yj = self.op("Mul", [yj, self.op("Unsqueeze", [self.op("GatherND", [w, nz]), self.i64([-1])])])
                out = self.op("ScatterND", [out, self.op("Unsqueeze", [tok, self.i64([-1])]), yj], reduction="add")
        else:  # stacked experts, batched_mm: one (token, slot) sample per row
            weight_first = dispatch == "stacked_weight_first"
            flat_ids = self.op("Reshape", [ids, self.i64([-1])])
            t = self.op("Gather", [self.op("Shape", [rows]), self.i64([0])], axis=0)
            per_slot = self.op("Concat", [t, self.i64([k, h])], axis=0)
            xs = self.op("Reshape", [self.op("Expand", [self.op("Unsqueeze", [rows, self.i64([1])]), per_slot]),
                                     self.i64([-1, h])])

            def bmm(a, kk, nn):
                if weight_first:
                    wsel = self.op("Gather", [self.weight((e, nn, kk), 2), flat_ids], axis=0)
                    y = self.op("MatMul", [wsel, self.op("Unsqueeze", [a, self.i64([-1])])])
                    return self.op("Squeeze", [y, self.i64([-1])])
                wsel = self.op("Gather", [self.weight((e, kk, nn), 1), flat_ids], axis=0)
                y = self.op("MatMul", [self.op("Unsqueeze", [a, self.i64([1])]), wsel])
                return self.op("Squeeze", [y, self.i64([1])])
            g, u = self.op("Split", [bmm(self.act_quant(xs, h), h, 2 * i), self.i64([i, i])], nout=2, axis=-1)
            y = self.op("Reshape", [bmm(self.act_quant(self.swiglu(g, u), i), i, h), per_slot])
            out = self.op("Add", [out, self.op("ReduceSum", [self.op("Mul", [y, self.op("Unsqueeze", [w, self.i64([-1])])]),
                                                              self.i64([1])], keepdims=0)])
        if self.shape_of_normed == "gather":
            dims = self.op("Shape", [normed])
            dims = [self.op("Unsqueeze", [self.op("Gather", [dims, self.i64(i)], axis=0), self.i64([0])])
                    for i in range(3)]
            back = self.op("Reshape", [out, self.op("Concat", dims, axis=0)])
        elif self.shape_of_normed == "slice":
            lead = self.op("Shape", [normed], start=0, end=-1)
            back = self.op("Reshape", [out, self.op("Concat", [lead, self.i64([h])], axis=0)])
        else:
            back = self.op("Reshape", [out, self.op("Shape", [x])])
        y = self.op("Add", [x, back])
        self.hidden += [back, y]
        return y


def moe_decoder(path, dispatch, router="softmax", quark=False, layers=2, value_info=False,
                shape_of_normed=None):
    """`layers` MoE decoder layers on x [batch, seq, 64] (f32). `value_info`: the residual Adds'
    operands and sums recorded as [batch, seq, 64], as an exporter records them. Without it ORT
    infers layer 2's residual sum `x + Reshape(out, Shape(x))` as [?, ?, 64]; the plugin EP fills
    those dims in with the offline rewrite's inference ([batch, seq, 64]) and fuses that norm too
    (test_no_value_info.py). `shape_of_normed`: see `Layers`."""
    b = Layers(quark, shape_of_normed=shape_of_normed)
    x = "x"
    for _ in range(layers):
        x = b.layer(x, dispatch, router)
    save(b.nodes, b.inits, [helper.make_tensor_value_info("x", TP.FLOAT, ["batch", "seq", 64])],
         [helper.make_tensor_value_info(x, TP.FLOAT, None)], path)
    m = onnx.load(path)
    if quark:
        m.opset_import.append(helper.make_opsetid("com.amd.quark", 1))
    if value_info:
        m.graph.value_info.extend(helper.make_tensor_value_info(h, TP.FLOAT, ["batch", "seq", 64])
                                  for h in b.hidden[:-1])
    onnx.save(m, path)
    return path


TOKENS = [(1, 1), (1, 3), (1, 16), (2, 8), (1, 37), (1, 1)]


@pytest.mark.parametrize("dispatch,router,quark,fused", [
    # The norm fuses through the MoE block's Reshape([-1, H]) (test_moe_flat_norm.py).
    ("dense", "softmax", False, {"swiglu_mxquant_matmul": 10, "add_rmsnorm_mxquant": 2, "mxquant": 0}),
    ("dense", "sigmoid", True, {"swiglu_mxquant_matmul": 10, "add_rmsnorm_mxquant": 2, "mxquant": 0}),
    ("stacked_weight_first", "sigmoid", False,
     {"mx_gather_dequant": 4, "swiglu_mxquant_matmul": 4, "add_rmsnorm_mxquant": 2}),
    ("stacked_activation_first", "softmax", True,
     {"mx_gather_dequant": 4, "swiglu_mxquant_matmul": 4, "add_rmsnorm_mxquant": 2}),
])
def test_moe_decoder_layers_fuse_and_match_onnx_reference_on_changing_token_counts(
        dispatch, router, quark, fused, lib, ep_devices, mxfuse_cli, tmp_path):
    src = moe_decoder(tmp_path / "m.onnx", dispatch, router, quark, value_info=True)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert {k: report["counts"][k] for k in fused} == fused, report["counts"]
    ops = [n.op_type for n in onnx.load(tmp_path / "fused.onnx").graph.node]
    assert ops.count("MxGatherMatMul") == (4 if "stacked" in dispatch else 0), ops
    assert not {"QuantizeLinear", "DequantizeLinear", "MXQuantizeDequantize"} & set(ops), ops
    custom, _ = quark_oracle_ops()
    ref = ReferenceEvaluator(onnx.load(src), new_ops=custom)
    online, offline = ep_session(src, ep_devices), offline_session(tmp_path / "fused.onnx", lib)
    rng = np.random.default_rng(3)
    for shape in TOKENS:  # one session, token counts changing from run to run
        feed = {"x": rng.standard_normal((*shape, 64)).astype(np.float32)}
        want = ref.run(None, feed)[0]
        got = online.run(None, feed)[0]
        assert same_bits(got, offline.run(None, feed)[0]), shape
        # Float order (docs/ops.md, MxMatMul: 1e-5 relative; 3e-7 measured here through two
        # layers): a flipped E4M3 rounding or expert choice would show as far more.
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max(), err_msg=str(shape))


def test_moe_decoder_with_a_data_dependent_dispatch_on_the_emulated_device(lib, ep_devices, tmp_path):
    """The NonZero dispatch (an expert may get no token) on the device placement (the emulated
    device memory the GPU tests use): the same bits as the CPU device."""
    src = moe_decoder(tmp_path / "m.onnx", "nonzero", layers=1)
    cpu = ep_session(src, ep_devices)
    for shape in [(1, 1), (1, 3), (2, 8)]:
        feed = {"x": np.random.default_rng(shape[1]).standard_normal((*shape, 64)).astype(np.float32)}
        out = emulated_device_process(lib, src, feed, tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "'MatMul'" in out.stdout and "'QuantizeLinear'" in out.stdout, out.stdout
        assert same_bits(np.load(tmp_path / "y.npy"), cpu.run(None, feed)[0]), shape
