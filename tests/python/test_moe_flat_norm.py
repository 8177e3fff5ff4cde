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
"""

import numpy as np
import onnx
from onnx import helper

from test_gather_dequant import emulated_device_process
from test_moe_dispatch import moe_decoder
from test_mx_dequant import claimed_ops, ep_session, rewrite, same_bits

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
    # Without the value_info (moe_decoder's docstring) the EP still fuses layer 1's norm.
    raw = ep_session(moe_decoder(tmp_path / "raw.onnx", "dense", "softmax"), ep_devices)
    assert claimed_ops(raw).count("ReduceMean") == 1, claimed_ops(raw)


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
