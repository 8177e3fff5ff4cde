"""Weight-only MX models (rule `mx_weight_matmul`): float activations (float32 / float16 /
bfloat16) against constant MXFP8 (FLOAT8E4M3FN) or MXFP4 (FLOAT4E2M1) weights with FLOAT8E8M0
block scales (32 along K), dequantized by an opset-24 `DequantizeLinear` feeding `MatMul`, a
`Gemm` with a bias (`transB = 1`) or a `MatMul` through a `Transpose`.

ONNX Runtime 1.31's CPU EP cannot load these (no E8M0 DequantizeLinear kernel). With mxfuse the
weight's DequantizeLinear and its MatMul become one `MxMatMul` with a float `a` and no `a_scale`:
the weight is never dequantized per step. Both ways of running mxfuse (plugin EP on the original
model, custom-op library on the rewritten one) give the same bits, and match `Σ x · deq(W)`
(f64) within the f32 accumulation bound — and `onnx.reference` on the unfused float32 graph
within float order. Fresh random inputs each run (the seed is printed on failure).

Quark weight-only exports spell the weight `com.amd.quark::MXQuantizeDequantize(W)` of a float
constant (fp8_e4m3, block 32 along K): the rule quantizes W at rewrite time (exactly the
fake-quant's values, else it refuses) and the MatMul / Gemm becomes the same `MxMatMul`; checked
against onnx.reference on the unfused graph with the project's numpy Quark kernel
(`models/tests/python/check_models.py` CUSTOM).
"""

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from conftest import ROOT
from test_mx_dequant import EP, claimed_ops, e8m0_tensor, ep_session, offline_session, rewrite, same_bits, save
from test_mxfp4 import E2M1, fp4_tensor

K, N = 128, 48
NP = {TP.FLOAT: np.float32, TP.FLOAT16: np.float16}


def e4m3_codes(rng, shape):
    """Random E4M3FN bytes without the NaN codes (0x7F / 0xFF)."""
    c = rng.integers(0, 256, shape, dtype=np.uint8)
    return np.where((c & 0x7F) == 0x7F, c ^ 1, c).astype(np.uint8)


def decode(codes, values_type):
    if values_type == TP.FLOAT4E2M1:
        return E2M1[codes]
    return codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def weight(rng, values_type, nk, scales=None):
    """(values initializer, scales initializer, deq(W) as f32 [K, N]): `[N, K]` (axis 1) when
    `nk`, else `[K, N]` (axis 0); scales random in 118..124 unless given (`[K/32, N]`). With
    given scales, E4M3 subnormal codes become normal ones (bfloat16 holds every normal E4M3
    value at every scale byte, not the subnormals at the smallest)."""
    codes = rng.integers(0, 16, (K, N)).astype(np.uint8) if values_type == TP.FLOAT4E2M1 \
        else e4m3_codes(rng, (K, N))
    if scales is not None and values_type != TP.FLOAT4E2M1:
        codes = np.where((codes & 0x78) == 0, codes | 0x08, codes).astype(np.uint8)
    s = rng.integers(118, 125, (K // 32, N)).astype(np.uint8) if scales is None else scales
    with np.errstate(over="ignore", invalid="ignore"):
        deq = decode(codes, values_type) * np.repeat(
            np.where(s == 255, np.float32(np.nan), np.ldexp(np.float32(1), s.astype(np.int32) - 127)
                     .astype(np.float32)), 32, axis=0)
    if nk:
        codes, s = codes.T.copy(), s.T.copy()
    if values_type == TP.FLOAT4E2M1:
        vals = fp4_tensor("wq", codes)
    else:
        vals = helper.make_tensor("wq", TP.FLOAT8E4M3FN, list(codes.shape), codes.tobytes(), raw=True)
    return vals, e8m0_tensor("ws", s), deq.astype(np.float32)


def model(path, form, act_type, values_type, m, rng, scales=None):
    """x [m, K] (float32 input, Cast to bfloat16 inside for a bf16 activation) times the MX
    weight in `form`: "matmul" ([K, N]), "gemm" (transB = 1, bias [N]), "transpose" (MatMul of
    Transpose([N, K])). Returns the path, deq(W) [K, N] and the bias (or None)."""
    nk = form != "matmul"
    vals, sc, deq = weight(rng, values_type, nk, scales)
    io_type = TP.FLOAT if act_type == TP.BFLOAT16 else act_type
    nodes, inits = [], [vals, sc]
    x = "x"
    if act_type == TP.BFLOAT16:
        nodes.append(helper.make_node("Cast", ["x"], ["xb"], to=TP.BFLOAT16))
        x = "xb"
    nodes.append(helper.make_node("DequantizeLinear", ["wq", "ws"], ["wd"], axis=1 if nk else 0,
                                  block_size=32, output_dtype=act_type, name="w_dq"))
    bias = None
    y = "y" if act_type != TP.BFLOAT16 else "yb"
    if form == "matmul":
        nodes.append(helper.make_node("MatMul", [x, "wd"], [y]))
    elif form == "transpose":
        nodes += [helper.make_node("Transpose", ["wd"], ["wt"], perm=[1, 0]),
                  helper.make_node("MatMul", [x, "wt"], [y])]
    else:
        bias = rng.standard_normal(N).astype(np.float32)
        b = bias.astype(ml_dtypes.bfloat16) if act_type == TP.BFLOAT16 else bias.astype(NP[act_type])
        bias = b.astype(np.float32)
        inits.append(helper.make_tensor("c", act_type, [N], b.tobytes(), raw=True))
        nodes.append(helper.make_node("Gemm", [x, "wd", "c"], [y], transB=1))
    if act_type == TP.BFLOAT16:
        nodes.append(helper.make_node("Cast", ["yb"], ["y"], to=TP.FLOAT))
    save(nodes, inits, [helper.make_tensor_value_info("x", io_type, [m, K])],
         [helper.make_tensor_value_info("y", io_type, [m, N])], path)
    return path, deq, bias


def oracle(x, deq, bias):
    """Σ x · deq(W) (+ bias) in f64 and the f32 accumulation bound K·2^-22·Σ|x·w|. Where an f32
    product x · deq(w) overflows (the graph multiplies in f32: at scale byte 254, |w| >= 2
    dequantizes to ±Inf and |x·w| >= 2 overflows too) or is NaN, the sum is IEEE's over those
    products: NaN when both infinities occur, else that infinity. (The f64 products alone would
    say +Inf where an f32 product is -Inf: 75 of 384 such blocks in a 2-million-block simulation;
    one failed a CI run.)"""
    x64, w64 = x.astype(np.float64), deq.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        want = x64 @ w64
        bound = K * 2.0**-22 * (np.abs(x64) @ np.abs(w64))
        p32 = x.astype(np.float32)[..., :, None] * deq.astype(np.float32)  # [..., K, N]
    pos, neg, nan = (p32 == np.inf).any(-2), (p32 == -np.inf).any(-2), np.isnan(p32).any(-2)
    want = np.where(nan | (pos & neg), np.nan, np.where(pos, np.inf, np.where(neg, -np.inf, want)))
    if bias is not None:
        want = want + bias
    return want, bound


def check_close(got, want, bound, act_type, what):
    got = np.asarray(got, np.float64)
    rel = {TP.FLOAT: 2.0**-23, TP.FLOAT16: 2.0**-10, TP.BFLOAT16: 2.0**-7}[act_type]
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), what
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf]), what
    ok = ~nan & ~inf
    # Beyond the output type's range: the f32 sum rounds to ±Inf there (float16).
    big = ok & np.isinf(got)
    assert np.all(np.abs(want[big]) > 65000), what
    ok &= ~big
    tol = bound[ok] * (1 + rel) + np.abs(want[ok]) * rel + 1e-30
    err = np.abs(got[ok] - want[ok])
    assert np.all(err <= tol), f"{what}: worst {np.max(err - tol)}"


def run_both(src, tmp_path, lib, ep_devices, mxfuse_cli, x):
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    ep = ep_session(src, ep_devices)
    off = offline_session(tmp_path / "fused.onnx", lib)
    return report, ep, ep.run(None, {"x": x})[0], off.run(None, {"x": x})[0]


@pytest.mark.parametrize("form", ["matmul", "gemm", "transpose"])
@pytest.mark.parametrize("values_type", [TP.FLOAT8E4M3FN, TP.FLOAT4E2M1])
@pytest.mark.parametrize("act_type", [TP.FLOAT, TP.FLOAT16, TP.BFLOAT16])
@pytest.mark.parametrize("m", [1, 5, 40])
def test_weight_only_matches_the_oracle_on_both_paths(form, values_type, act_type, m, lib, ep_devices,
                                                       mxfuse_cli, tmp_path):
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    src, deq, bias = model(tmp_path / "m.onnx", form, act_type, values_type, m, rng)
    io = np.float16 if act_type == TP.FLOAT16 else np.float32
    x = rng.standard_normal((m, K)).astype(io)
    report, ep, y_ep, y_off = run_both(src, tmp_path, lib, ep_devices, mxfuse_cli, x)
    what = f"seed {seed}"
    assert report["counts"]["mx_weight_matmul"] == 1 and report["counts"]["mx_dequant"] == 0, report
    assert "DequantizeLinear" in claimed_ops(ep), (what, claimed_ops(ep))
    assert same_bits(y_ep, y_off), what
    xa = x.astype(np.float32)
    if act_type == TP.BFLOAT16:
        xa = xa.astype(ml_dtypes.bfloat16).astype(np.float32)
    want, bound = oracle(xa, deq, bias)
    check_close(y_ep, want, bound, act_type, what)
    if act_type == TP.FLOAT:
        # The unfused graph as onnx.reference runs it: float order only.
        ref = ReferenceEvaluator(onnx.load(src)).run(None, {"x": x})[0]
        assert np.allclose(y_ep, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max()), what


@pytest.mark.parametrize("act_type", [TP.FLOAT, TP.BFLOAT16])
def test_edge_scales_0_254_255(act_type, lib, ep_devices, mxfuse_cli, tmp_path):
    """Scale bytes 0 (2^-127: tiny products, off the fast route), 254 (|w| ≥ 2 dequantizes to
    ±Inf) and 255 (NaN) in some blocks, float32 and bfloat16 activations: IEEE results as the
    oracle's and, for float32, onnx.reference's. For bfloat16 the smallest byte is 3 instead of
    0: below it E4M3 values fall under bfloat16's subnormal spacing and the rule refuses
    (graph_rewrites/tests/rules_mx_weight_matmul.rs, "bf16 underflow"; ORT's CPU EP then has no
    bfloat16 MatMul to run the model at all)."""
    rng = np.random.default_rng()
    s = rng.integers(118, 125, (K // 32, N)).astype(np.uint8)
    low = 0 if act_type == TP.FLOAT else 3
    s[0, 0], s[1, 1], s[2, 2], s[3, 3:6] = low, 254, 255, low
    for form in ["matmul", "gemm"]:
        src, deq, bias = model(tmp_path / f"{form}.onnx", form, act_type, TP.FLOAT8E4M3FN, 3, rng, s)
        x = rng.standard_normal((3, K)).astype(np.float32)
        report, ep, y_ep, y_off = run_both(src, tmp_path, lib, ep_devices, mxfuse_cli, x)
        assert report["counts"]["mx_weight_matmul"] == 1, report
        assert same_bits(y_ep, y_off)
        xa = x if act_type == TP.FLOAT else x.astype(ml_dtypes.bfloat16).astype(np.float32)
        want, bound = oracle(xa, deq, bias)
        check_close(y_ep, want, bound, act_type, form)
        if act_type == TP.FLOAT:
            ref = ReferenceEvaluator(onnx.load(src)).run(None, {"x": x})[0]
            assert np.array_equal(np.isnan(y_ep), np.isnan(ref))
            assert np.array_equal(np.isinf(y_ep), np.isinf(ref))


def test_float16_weight_the_unfused_graph_would_round_is_refused_and_still_runs(lib, ep_devices, mxfuse_cli,
                                                                               tmp_path):
    """Scale 254 in float16: the unfused DequantizeLinear writes ±Inf for those weights, which
    MxMatMul would not: refused with the reason; the model runs as MxDequantize + ORT's MatMul."""
    rng = np.random.default_rng()
    s = rng.integers(118, 125, (K // 32, N)).astype(np.uint8)
    s[1, 1] = 254
    src, _, _ = model(tmp_path / "m.onnx", "matmul", TP.FLOAT16, TP.FLOAT8E4M3FN, 2, rng, s)
    x = rng.standard_normal((2, K)).astype(np.float16)
    report, ep, y_ep, y_off = run_both(src, tmp_path, lib, ep_devices, mxfuse_cli, x)
    assert report["counts"]["mx_weight_matmul"] == 0 and report["counts"]["mx_dequant"] == 1, report
    reasons = [r["reason"] for r in report["rejections"] if r["rule"] == "mx_weight_matmul"]
    assert reasons and "not a float16 value" in reasons[0], report
    assert claimed_ops(ep) == ["DequantizeLinear"], claimed_ops(ep)
    assert same_bits(y_ep, y_off)


def test_runtime_weight_is_not_fused(lib, ep_devices, mxfuse_cli, tmp_path):
    """A weight given at run time (a graph input) stays DequantizeLinear → MxDequantize."""
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws"], ["wd"], axis=0, block_size=32,
                              output_dtype=TP.FLOAT),
             helper.make_node("MatMul", ["x", "wd"], ["y"])]
    s = np.full((K // 32, N), 120, np.uint8)
    src = tmp_path / "m.onnx"
    save(nodes, [e8m0_tensor("ws", s)],
         [helper.make_tensor_value_info("x", TP.FLOAT, [2, K]),
          helper.make_tensor_value_info("wq", TP.FLOAT8E4M3FN, [K, N])],
         [helper.make_tensor_value_info("y", TP.FLOAT, [2, N])], src)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_weight_matmul"] == 0 and report["counts"]["mx_dequant"] == 1, report
    reasons = [r["reason"] for r in report["rejections"] if r["rule"] == "mx_weight_matmul"]
    assert reasons and "not constant" in reasons[0], report


def test_weight_also_read_by_a_gather_stays_for_it(lib, ep_devices, mxfuse_cli, tmp_path):
    """A tied embedding: the MX weight [N, K] feeds a Gather (embedding rows) and, through a
    Transpose, the float-activation MatMul (lm head). The MatMul reads the MX constants; the
    DequantizeLinear re-created for the Gather is then taken with it (rule mx_gather_dequant:
    only the gathered rows are dequantized; bit for bit onnx.reference)."""
    rng = np.random.default_rng()
    vals, sc, deq = weight(rng, TP.FLOAT8E4M3FN, True)
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws"], ["wd"], axis=1, block_size=32,
                              output_dtype=TP.FLOAT),
             helper.make_node("Gather", ["wd", "ids"], ["emb"], axis=0),
             helper.make_node("Transpose", ["wd"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"])]
    src = tmp_path / "m.onnx"
    save(nodes, [vals, sc],
         [helper.make_tensor_value_info("x", TP.FLOAT, [3, K]),
          helper.make_tensor_value_info("ids", TP.INT64, [4])],
         [helper.make_tensor_value_info("y", TP.FLOAT, [3, N]),
          helper.make_tensor_value_info("emb", TP.FLOAT, [4, K])], src)
    feeds = {"x": rng.standard_normal((3, K)).astype(np.float32),
             "ids": rng.integers(0, N, 4).astype(np.int64)}
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_weight_matmul"] == 1, report
    fused = onnx.load(tmp_path / "fused.onnx")
    assert sorted(n.op_type for n in fused.graph.node) == ["MxGatherDequantize", "MxMatMul"]
    ref = ReferenceEvaluator(onnx.load(src)).run(None, feeds)
    want, bound = oracle(feeds["x"], deq, None)
    for sess in [ep_session(src, ep_devices), offline_session(tmp_path / "fused.onnx", lib)]:
        y, emb = sess.run(None, feeds)
        assert same_bits(emb, ref[1])
        check_close(y, want, bound, TP.FLOAT, "tied")


def test_weight_read_by_two_matmuls_gives_the_same_bits_on_both_paths(lib, ep_devices, mxfuse_cli,
                                                                      tmp_path):
    """One MX weight read by two float-activation MatMuls (shared / tied weights). ONNX Runtime
    gives each reader its own DequantizeLinear before the EP sees the graph, so the EP fuses both;
    the offline rewrite fuses both too (the second reads the MxDequantize the first fusion
    re-created). Before, offline fused only the first and the two paths' bits differed."""
    rng = np.random.default_rng()
    vals, sc, deq = weight(rng, TP.FLOAT8E4M3FN, False)
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws"], ["wd"], axis=0, block_size=32,
                              output_dtype=TP.FLOAT),
             helper.make_node("MatMul", ["x", "wd"], ["y"]),
             helper.make_node("Relu", ["x"], ["x2"]),
             helper.make_node("MatMul", ["x2", "wd"], ["y2"])]
    src = tmp_path / "m.onnx"
    save(nodes, [vals, sc], [helper.make_tensor_value_info("x", TP.FLOAT, ["m", K])],
         [helper.make_tensor_value_info(n, TP.FLOAT, ["m", N]) for n in ("y", "y2")], src)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_weight_matmul"] == 2, report
    fused = onnx.load(tmp_path / "fused.onnx")
    assert sorted(n.op_type for n in fused.graph.node) == ["MxMatMul", "MxMatMul", "Relu"]
    x = rng.standard_normal((5, K)).astype(np.float32)
    ep, off = ep_session(src, ep_devices), offline_session(tmp_path / "fused.onnx", lib)
    assert claimed_ops(ep).count("MatMul") == 2, claimed_ops(ep)
    for a, b, xin in zip(ep.run(None, {"x": x}), off.run(None, {"x": x}), (x, np.maximum(x, 0))):
        assert same_bits(a, b)
        want, bound = oracle(xin, deq, None)
        check_close(a, want, bound, TP.FLOAT, "shared weight")


@pytest.mark.parametrize("act_type,op,c,round_mode", [(TP.FLOAT16, "Div", 448.0, "up"),
                                                      (TP.FLOAT, "Mul", 2.0**-7, "down")])
def test_matmul_behind_a_refused_activation_quantizer_reads_the_weight_in_place_on_both_paths(
        act_type, op, c, round_mode, lib, ep_devices, mxfuse_cli, tmp_path):
    """An MXFP8 activation quantizer no fusion takes (its RCEIL scale `Div(amax, 448)` computed in
    float16, or `Mul(amax, 2^-7)`, no MX scale rule) feeding a MatMul of an MX weight, in one
    layer read by q / k / v. Offline, the fallbacks took the Q / DQ and the next pipeline
    iteration read each weight in place (`MxMatMul` of the `MxDequantize`d activation); the plugin
    EP, which sees the graph once, dequantized the weights on every step (`MxDequantize` + ORT's
    MatMul) and its bits differed from the rewrite's (new-user probe 11). Now both read them in
    place."""
    rng = np.random.default_rng()
    t = NP[act_type]
    inits = [numpy_helper.from_array(np.array([0, K // 32, 32], np.int64), "blk"),
             numpy_helper.from_array(np.array([-1], np.int64), "ax"),
             numpy_helper.from_array(np.array(c, t), "c")]
    nodes = [
        helper.make_node("Reshape", ["x", "blk"], ["xb"]),
        helper.make_node("Abs", ["xb"], ["ab"]),
        helper.make_node("ReduceMax", ["ab", "ax"], ["amax"], keepdims=0),
        helper.make_node(op, ["amax", "c"], ["s"]),
        helper.make_node("Cast", ["s"], ["scale"], to=TP.FLOAT8E8M0, round_mode=round_mode, saturate=1),
        helper.make_node("QuantizeLinear", ["x", "scale"], ["q"], axis=-1, block_size=32,
                         output_dtype=TP.FLOAT8E4M3FN),
        helper.make_node("DequantizeLinear", ["q", "scale"], ["xd"], axis=-1, block_size=32,
                         output_dtype=act_type),
    ]
    deqs = []
    for i in range(3):
        vals, sc, deq = weight(rng, TP.FLOAT8E4M3FN, False)
        vals.name, sc.name = f"wq{i}", f"ws{i}"
        inits += [vals, sc]
        deqs.append(deq)
        nodes += [helper.make_node("DequantizeLinear", [f"wq{i}", f"ws{i}"], [f"wd{i}"], axis=0,
                                   block_size=32, output_dtype=act_type),
                  helper.make_node("MatMul", ["xd", f"wd{i}"], [f"y{i}"])]
    src = save(nodes, inits, [helper.make_tensor_value_info("x", act_type, ["m", K])],
               [helper.make_tensor_value_info(f"y{i}", act_type, ["m", N]) for i in range(3)],
               tmp_path / "m.onnx")
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mxquant"] == 0, report
    assert report["counts"]["mx_weight_matmul"] == 3, report
    ep, off = ep_session(src, ep_devices), offline_session(tmp_path / "fused.onnx", lib)
    assert claimed_ops(ep).count("MatMul") == 3, claimed_ops(ep)
    x = rng.standard_normal((5, K)).astype(t)
    want = ReferenceEvaluator(onnx.load(src)).run(None, {"x": x})
    for a, b, w in zip(ep.run(None, {"x": x}), off.run(None, {"x": x}), want):
        assert same_bits(a, b)
        w = w.astype(np.float32)
        # Summation order (f32 accumulation, one rounding to the output type).
        tol = 1e-5 if act_type == TP.FLOAT else 2e-3
        np.testing.assert_allclose(a.astype(np.float32), w, rtol=0, atol=tol * np.abs(w).max())


def quark_oracle_ops():
    """The numpy Quark kernel for onnx.reference and its oracle function."""
    import sys
    sys.path.insert(0, str(ROOT / "models" / "tests" / "python"))
    from check_models import CUSTOM
    from mx_quantize_onnx import quark_qdq_numpy
    return CUSTOM, quark_qdq_numpy


def quark_model(path, w, act_type, m, gemm, extra_reader=False):
    """x [m, K] of `act_type` (float32 / float16) times `MXQuantizeDequantize(w)` (w [K, N] of
    that type, fp8_e4m3, block 32, axis 0): a MatMul, or a Gemm with alpha 0.5 and a bias [N].
    With `extra_reader` the fake-quantized weight is also a graph output."""
    np_t = NP[act_type]
    inits = [numpy_helper.from_array(w.astype(np_t), "w")]
    nodes = [helper.make_node("MXQuantizeDequantize", ["w"], ["wf"], domain="com.amd.quark",
                              axis=0, block_size=32, element_dtype="fp8_e4m3", rounding_mode=2)]
    bias = None
    if gemm:
        bias = np.linspace(-1, 1, N).astype(np_t)
        inits.append(numpy_helper.from_array(bias, "c"))
        nodes.append(helper.make_node("Gemm", ["x", "wf", "c"], ["y"], alpha=0.5))
    else:
        nodes.append(helper.make_node("MatMul", ["x", "wf"], ["y"]))
    outs = [helper.make_tensor_value_info("y", act_type, [m, N])]
    if extra_reader:
        outs.append(helper.make_tensor_value_info("wf", act_type, [K, N]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", act_type, [m, K])], outs, inits)
    opsets = [helper.make_opsetid("", 24), helper.make_opsetid("com.amd.quark", 1)]
    onnx.save(helper.make_model(g, opset_imports=opsets, ir_version=11), path)
    return path, None if bias is None else bias.astype(np.float32)


def shared_quark_model(path, w, chained):
    """x [m, K] float32; `wf = MXQuantizeDequantize(w)` read by `y = MatMul(x, wf)` and
    `y2 = MatMul(h, wf)`, h = Relu(x), or Relu(y) when `chained` (w square then)."""
    nodes = [helper.make_node("MXQuantizeDequantize", ["w"], ["wf"], domain="com.amd.quark",
                              axis=0, block_size=32, element_dtype="fp8_e4m3", rounding_mode=2),
             helper.make_node("MatMul", ["x", "wf"], ["y"]),
             helper.make_node("Relu", ["y" if chained else "x"], ["h"]),
             helper.make_node("MatMul", ["h", "wf"], ["y2"])]
    n = w.shape[1]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["m", K])],
                          [helper.make_tensor_value_info(o, TP.FLOAT, ["m", n]) for o in ("y", "y2")],
                          [numpy_helper.from_array(w, "w")])
    opsets = [helper.make_opsetid("", 24), helper.make_opsetid("com.amd.quark", 1)]
    onnx.save(helper.make_model(g, opset_imports=opsets, ir_version=11), path)
    return path


def test_quark_weight_read_by_two_matmuls_gives_the_same_bits_on_both_paths(lib, ep_devices,
                                                                           mxfuse_cli, tmp_path):
    """One Quark weight fake-quant read by two float MatMuls. Offline both read the weight
    quantized at rewrite time (`[K, N]` bytes, trans_b = 0). On the EP (ORT does not duplicate the
    custom op per reader, so the two sites overlap) the second reader joins the first one's claim,
    and Compile prepacks the rewrite-created initializer as the custom-op library does. Before,
    the EP fused one reader, offline the other, and even a fused `[K, N]` reader's bits differed
    (Compile did not prepack initializers the rewrite created). Chained readers (y2 reads
    Relu(y)) are not joined: one fused node would feed its own input; that session loads and runs
    the second MatMul on ORT's CPU EP, float order from the offline rewrite."""
    custom, _ = quark_oracle_ops()
    rng = np.random.default_rng(5)
    for chained in (False, True):
        w = (0.1 * rng.standard_normal((K, K if chained else N))).astype(np.float32)
        src = shared_quark_model(tmp_path / f"m{chained}.onnx", w, chained)
        dst = tmp_path / f"m{chained}.fused.onnx"
        report = rewrite(mxfuse_cli, src, dst)
        assert report["counts"]["mx_weight_matmul"] == 2, report
        assert sorted(n.op_type for n in onnx.load(dst).graph.node) == ["MxMatMul", "MxMatMul", "Relu"]
        ep, off = ep_session(src, ep_devices), offline_session(dst, lib)
        assert claimed_ops(ep).count("MatMul") == (1 if chained else 2), (chained, claimed_ops(ep))
        x = rng.standard_normal((5, K)).astype(np.float32)
        ref = ReferenceEvaluator(onnx.load(src), new_ops=custom).run(None, {"x": x})
        for name, a, b, r in zip(("y", "y2"), ep.run(None, {"x": x}), off.run(None, {"x": x}), ref):
            if not (chained and name == "y2"):
                assert same_bits(a, b), (chained, name)
            np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-5 * np.abs(r).max(),
                                       err_msg=f"chained={chained} {name}")


def test_ep_checks_a_quark_weight_once_per_session(ep_devices, tmp_path, capfd):
    """GetCapability checks the Quark weight (quantized and compared with Quark's kernel: seconds
    on a real model's weights); Compile's rewrite of the claimed subgraph reuses that verdict and
    its bytes instead of checking again (the EP's VERBOSE log says how many it ran)."""
    w = (0.1 * np.random.default_rng(3).standard_normal((K, N))).astype(np.float32)
    src = shared_quark_model(tmp_path / "m.onnx", w, False)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(ep_devices, {})
    so.log_severity_level = 0
    s = ort.InferenceSession(str(src), so)
    assert claimed_ops(s).count("MatMul") == 2
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "mxfuse: Compile ran" in line]
    assert len(lines) == 1, err[-4000:]
    assert "Compile ran 0 Quark weight check(s) and reused" in lines[0], lines[0]


@pytest.mark.parametrize("gemm", [False, True])
@pytest.mark.parametrize("act_type", [TP.FLOAT, TP.FLOAT16])
@pytest.mark.parametrize("m", [1, 7])
def test_quark_weight_only_matches_the_unfused_graph_on_both_paths(gemm, act_type, m, lib, ep_devices,
                                                                    mxfuse_cli, tmp_path):
    """MatMul / Gemm of a Quark fake-quantized constant weight (columns of different magnitudes,
    a zero block): one MxMatMul on both paths (same bits), the fake-quant gone; equal to
    Σ x · quark(W) within the accumulation bound and, for float32, to onnx.reference on the
    unfused graph with the numpy Quark kernel within float order."""
    custom, quark_qdq_numpy = quark_oracle_ops()
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    np_t = NP[act_type]
    w = (rng.standard_normal((K, N)) * np.exp2(np.arange(N) % 7 - 3)).astype(np_t)
    w[32:64, 3] = 0
    src, bias = quark_model(tmp_path / "m.onnx", w, act_type, m, gemm)
    x = rng.standard_normal((m, K)).astype(np_t)
    report, ep, y_ep, y_off = run_both(src, tmp_path, lib, ep_devices, mxfuse_cli, x)
    what = f"seed {seed}"
    assert report["counts"]["mx_weight_matmul"] == 1, report
    fused = onnx.load(tmp_path / "fused.onnx")
    assert [n.op_type for n in fused.graph.node] == ["MxMatMul"], what
    assert "MXQuantizeDequantize" in claimed_ops(ep), (what, claimed_ops(ep))
    assert same_bits(y_ep, y_off), what
    deq = quark_qdq_numpy(w.astype(np.float32), 0).astype(np_t).astype(np.float32)
    want, bound = oracle(x.astype(np.float32), deq, None)
    if gemm:
        want, bound = 0.5 * want + bias, 0.5 * bound
    check_close(y_ep, want, bound, act_type, what)
    if act_type == TP.FLOAT:
        ref = ReferenceEvaluator(onnx.load(src), new_ops=custom).run(None, {"x": x})[0]
        assert np.allclose(y_ep, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max()), what


def test_quark_weight_fake_quant_with_another_reader_stays(lib, ep_devices, mxfuse_cli, tmp_path):
    """The fake-quantized weight is also a graph output: it stays for it, re-created as
    MxDequantize of the weight quantized at rewrite time (same bits as onnx.reference's numpy
    Quark kernel), which the MxMatMul reads too."""
    custom, _ = quark_oracle_ops()
    rng = np.random.default_rng()
    w = rng.standard_normal((K, N)).astype(np.float32)
    src, _ = quark_model(tmp_path / "m.onnx", w, TP.FLOAT, 3, False, extra_reader=True)
    x = rng.standard_normal((3, K)).astype(np.float32)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_weight_matmul"] == 1, report
    fused = onnx.load(tmp_path / "fused.onnx")
    assert sorted(n.op_type for n in fused.graph.node) == ["MxDequantize", "MxMatMul"]
    ref = ReferenceEvaluator(onnx.load(src), new_ops=custom).run(None, {"x": x})
    outs = [s.run(None, {"x": x}) for s in [ep_session(src, ep_devices),
                                             offline_session(tmp_path / "fused.onnx", lib)]]
    # As for the shared DequantizeLinear above, the two paths may sum in another order here
    # (each is checked against the oracle, not against the other bit for bit).
    want, bound = oracle(x, ref[1], None)
    for y, wf in outs:
        assert same_bits(wf, ref[1])
        check_close(y, want, bound, TP.FLOAT, "shared fake-quant")
        assert np.allclose(y, ref[0], rtol=1e-5, atol=1e-5 * np.abs(ref[0]).max())


def test_quark_weight_with_inf_is_refused(mxfuse_cli, tmp_path):
    """An Inf in the weight: Quark passes it through and scales its block from the finite
    elements; E4M3 has no Inf — refused with the reason, the fake-quant stays."""
    w = np.random.default_rng().standard_normal((K, N)).astype(np.float32)
    w[5, 2] = np.inf
    src, _ = quark_model(tmp_path / "m.onnx", w, TP.FLOAT, 2, False)
    report = rewrite(mxfuse_cli, src, tmp_path / "fused.onnx")
    assert report["counts"]["mx_weight_matmul"] == 0, report
    reasons = [r["reason"] for r in report["rejections"] if r["rule"] == "mx_weight_matmul"]
    assert reasons and "holds an Inf" in reasons[0], report
    fused = onnx.load(tmp_path / "fused.onnx")
    assert sorted(n.op_type for n in fused.graph.node) == ["MXQuantizeDequantize", "MatMul"]


def test_ep_fuses_a_quark_weight_above_16_mib(ep_devices, tmp_path):
    """A 20 MiB float32 Quark weight: the EP reads it as the offline CLI does (the graph's 64 MiB
    constant cap) and claims its MatMul; the EP's own 16 MiB cap before left such weights — most
    of a real model's — fake-quantized on ORT's CPU EP every step."""
    k, n = 2048, 2560
    w = (0.05 * np.random.default_rng(5).standard_normal((k, n))).astype(np.float32)
    nodes = [helper.make_node("MXQuantizeDequantize", ["w"], ["wf"], domain="com.amd.quark",
                              axis=0, block_size=32, element_dtype="fp8_e4m3", rounding_mode=2),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [2, k])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [2, n])],
                          [numpy_helper.from_array(w, "w")])
    opsets = [helper.make_opsetid("", 24), helper.make_opsetid("com.amd.quark", 1)]
    onnx.save(helper.make_model(g, opset_imports=opsets, ir_version=11), tmp_path / "m.onnx")
    s = ep_session(tmp_path / "m.onnx", ep_devices)
    assert sorted(claimed_ops(s)) == ["MXQuantizeDequantize", "MatMul"], claimed_ops(s)
    y = s.run(None, {"x": np.ones((2, k), np.float32)})[0]
    assert y.shape == (2, n) and np.isfinite(y).all()


def test_oracle_sums_the_f32_products_where_they_overflow():
    """The oracle's infinities are those of the graph's f32 products: -1.75·2^127 is a finite
    f32 weight but 1.5 times it overflows to -Inf in f32 (finite in f64), so beside a +Inf product
    the sum is NaN, where f64 products alone would give +Inf."""
    big = np.float32(-1.75 * 2.0**127)
    x = np.zeros((1, K), np.float32)
    x[0, :2] = 1.5, 1.0
    deq = np.zeros((K, N), np.float32)
    deq[:2, 0] = big, np.inf      # -Inf and +Inf products: NaN
    deq[:2, 1] = big, -np.inf     # both -Inf: -Inf
    deq[:2, 2] = big / 4, np.inf  # a finite product and +Inf: +Inf
    want, _ = oracle(x, deq, None)
    assert np.isnan(want[0, 0]) and want[0, 1] == -np.inf and want[0, 2] == np.inf
    assert np.all(want[0, 3:] == 0)
