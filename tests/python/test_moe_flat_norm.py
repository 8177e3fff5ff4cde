"""The MoE block's `norm → Reshape(normed, [-1, H]) → MXFP8 quantize` (transformers' Mixtral /
MiniMax sparse-MoE `hidden_states.view(-1, hidden_dim)`), the router reading the flattened rows:
rule `add_rmsnorm_mxquant` reads the Reshape into `AddRmsNormMxQuant(flatten_rows = 1)`, which
writes q, scale and the router's rows as `[rows, H]` itself (no Reshape left on the E8M0 scale,
which ONNX Runtime's CPU EP could not run). Before, every MoE layer's norm stayed unfused and
only its quantizer fused (`mxquant`; new-user probe 7).

Checked offline (`mxfuse rewrite`), in the plugin EP on the CPU device and on the emulated device
placement, with symbolic batch / seq and token counts changing 1, 3, 16, 37: the EP's bits are
the offline rewrite's and the emulated device's, and onnx.reference agrees within float order
(those numbers for the CPU device: test_moe_dispatch's dense cases).

A TorchScript export also reads the un-flattened normed value's `Shape` (the MoE output's reshape
back): the rule re-emits it on the norm's input, and the EP's programs run it.
"""

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from test_gather_dequant import emulated_device_process
from test_moe_dispatch import moe_decoder
from test_mx_dequant import claimed_ops, ep_session, offline_session, rewrite, same_bits

TOKENS = [(1, 1), (1, 3), (1, 16), (1, 37)]


def test_the_norm_fuses_through_the_flattening_reshape_offline_and_in_the_ep(
        ep_devices, mxfuse_cli, tmp_path):
    src = moe_decoder(tmp_path / "m.onnx", "dense", "softmax", value_info=True)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["add_rmsnorm_mxquant"] == 2, report["counts"]
    assert report["counts"]["mxquant"] == 0, report["counts"]
    g = onnx.load(tmp_path / "fused.onnx").graph
    norms = [n for n in g.node if n.op_type == "AddRmsNormMxQuant"]
    assert len(norms) == 2
    for n in norms:
        assert helper.get_attribute_value(next(a for a in n.attribute if a.name == "flatten_rows")) == 1
        # Nothing reshapes the scale (or q): the MxMatMuls read them as written.
        readers = {i for m in g.node if m.op_type == "Reshape" for i in m.input}
        assert not set(n.output[:2]) & readers, n
    # The numbers, on changing token counts in one session (EP = offline bits, onnx.reference
    # within float order): test_moe_dispatch's dense cases, which fuse these norms too.
    claimed = claimed_ops(ep_session(src, ep_devices))
    assert claimed.count("ReduceMean") == 2 and claimed.count("QuantizeLinear") >= 2, claimed
    # Without the value_info the EP fuses both too (test_no_value_info.py).
    raw = ep_session(moe_decoder(tmp_path / "raw.onnx", "dense", "softmax"), ep_devices)
    assert claimed_ops(raw).count("ReduceMean") == 2, claimed_ops(raw)


def test_the_flattened_norm_runs_on_the_emulated_device(lib, ep_devices, tmp_path):
    """The device placement's program runs the fused norm with its flattened outputs (their
    shapes from the CPU kernel's output metas): the CPU device's bits."""
    src = moe_decoder(tmp_path / "m.onnx", "dense", "sigmoid", value_info=True)
    cpu = ep_session(src, ep_devices)
    for shape in TOKENS:
        feed = {"x": np.random.default_rng(shape[1]).standard_normal((*shape, 64)).astype(np.float32)}
        out = emulated_device_process(lib, src, feed, tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.count("'ReduceMean'") == 2, out.stdout  # both layers' norms
        assert same_bits(np.load(tmp_path / "y.npy"), cpu.run(None, feed)[0]), shape


@pytest.mark.parametrize("form", ["gather", "slice"])
def test_a_shape_reader_of_the_normed_value_fuses_offline_in_the_ep_and_on_the_emulated_device(
        form, lib, ep_devices, mxfuse_cli, tmp_path):
    """A TorchScript export reads the un-flattened normed value's Shape too (transformers'
    `batch, seq, hidden = hidden_states.shape` before the `view(-1, hidden)`; the MoE output's
    reshape back uses those dims): "gather" is Shape → Gather 0 / 1 / 2 → Concat, "slice" opset
    15's Shape(normed, 0, -1) → Concat with [hidden]. The fused norm writes only the flattened
    rows, so the rule re-emits the Shape on the norm's input x, which the EP's programs run (the
    int64 dims from the input's meta): both layers' norms fuse offline, on the CPU device and on
    the emulated device placement, with the router reading the flattened rows. Before, the norm
    stayed unfused in every such layer ("also read by Shape")."""
    src = moe_decoder(tmp_path / "m.onnx", "dense", "softmax", value_info=True, shape_of_normed=form)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["add_rmsnorm_mxquant"] == 2, report["counts"]
    g = onnx.load(tmp_path / "fused.onnx").graph
    xs = {n.input[0] for n in g.node if n.op_type == "AddRmsNormMxQuant"}
    shapes = [n for n in g.node if n.op_type == "Shape" and n.input[0] in xs]
    assert len(shapes) == 2, [(n.op_type, list(n.input)) for n in g.node]
    if form == "slice":
        assert all({a.name: a.i for a in n.attribute} == {"start": 0, "end": -1} for n in shapes)
    online, offline = ep_session(src, ep_devices), offline_session(tmp_path / "fused.onnx", lib)
    claimed = claimed_ops(online)
    assert claimed.count("ReduceMean") == 2 and claimed.count("Shape") == 2, claimed
    ref = ReferenceEvaluator(onnx.load(src))
    rng = np.random.default_rng(5)
    for shape in TOKENS:  # one session, token counts changing from run to run
        feed = {"x": rng.standard_normal((*shape, 64)).astype(np.float32)}
        want, got = ref.run(None, feed)[0], online.run(None, feed)[0]
        assert got.shape == want.shape == (*shape, 64)
        assert same_bits(got, offline.run(None, feed)[0]), shape
        # Float order (docs/ops.md, MxMatMul: 1e-5 relative), as test_moe_dispatch's dense cases.
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max(), err_msg=str(shape))
        out = emulated_device_process(lib, src, feed, tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.count("'ReduceMean'") == 2 and out.stdout.count("'Shape'") == 2, out.stdout
        assert same_bits(np.load(tmp_path / "y.npy"), got), shape
