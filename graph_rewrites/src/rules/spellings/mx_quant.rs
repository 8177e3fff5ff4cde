//! The MXFP8 quantize spellings every rule ends in.
//!
//! Search pattern => q = MXFP8(x), spelled as either
//!
//! ```text
//! standard (opset ≥ 24)                                     AMD Quark
//! x ─ Reshape[..,K/32,32] ─ Abs ─ ReduceMax(-1, keepdims=0)  x ─ com.amd.quark::MXQuantizeDequantize
//!     ─ Mul(2^-8) | Mul(1/448) | Div(448)                        (element_dtype=fp8_e4m3, block 32,
//!     ─ Cast(to=FLOAT8E8M0, round_mode) = scale                   axis = last)  = fake-quantized x
//! x, scale ─ QuantizeLinear(axis=-1, block_size=32, E4M3FN) = q
//!
//! NVIDIA TensorRT Model Optimizer (ModelOpt)
//! x ─ trt::TRT_MXFP8DynamicQuantize(axis=-1, block_size=32, output_dtype=E4M3FN) = q, scale (uint8)
//! q, scale ─ trt::TRT_MXFP8DequantizeLinear(axis=-1, block_size=32, output_dtype = x's type)
//!          = quantized-dequantized x
//! ```
//!
//! with the same amax also spelled `x ─ Abs ─ Reshape[..,K/32,32] ─ ReduceMax` (Abs is
//! elementwise: it commutes with the Reshape), `ReduceMax(-1, keepdims=1) ─ Squeeze(-1)`
//! (torch's `amax(-1, keepdim=True)` then `squeeze(-1)`) and `ReduceMax(-1, keepdims=1) ─
//! Reshape[..,K/32]` (`amax(-1, keepdim=True).view(*x.shape[:-1], K // 32)`; the shape a
//! constant or computed from `Shape(x)` like the block shape, checked to keep x's leading dims):
//! all compute the same `[.., K/32]` amax bit for bit.
//!
//! The block shape is a constant or computed from `Shape(x)` — `Concat(Shape(x, end=-1) |
//! Slice(Shape(x), 0, -1) | Unsqueeze(Gather(Shape(x), i))…, [K/32, 32])`, exporters' spelling
//! for symbolic batch / sequence dims; such a shape computation goes with the fusion
//! ([`super::block_shape`]).
//! The block shape may also flatten x into one block a row, `[-1, 32]` (torchao's `to_mx`:
//! `x.reshape(-1, 32)`), when the amax is Reshape'd back to `[..x's leading dims.., K/32]`: the
//! same blocks in the same order (`block_shape::is_flat_block_reshape`).
//!
//! Key points:
//! * The scale rule is identified by the constant *and* the Cast rounding: `Mul(2^-8)` or
//!   `Div(256)` + `round_mode=down` is OCP floor; `Mul(fl(1/448))` (that f32 exactly) or `Div(448)` +
//!   `round_mode=up` is RCEIL.
//!   Any other combination is refused: it would compute something neither kernel computes.
//! * `x` is read twice inside the match (scale path and QuantizeLinear): the pattern binds one
//!   value to both.
//! * Quark's op is floor, and its kernel ignores NaN/Inf when picking the block exponent
//!   (`nan_policy = ignore`).
//! * The ModelOpt pair is read like Quark's fake quant (its DequantizeLinear's output is the
//!   quantized-dequantized float the MatMuls read; its uint8 q / scale stay inside the match).
//!   Its rule is RCEIL (ModelOpt's `MXFP8QTensor` and `compute_e8m0`: ceil(log2(amax/448)),
//!   cuDNN's block-scale quantize: round-up of amax/448; TensorRT's kernel itself is not
//!   public): taken for float16 / bfloat16 activations only, where every one of those readings
//!   gives the same bytes. For float activations ModelOpt's float32 `log2` rounds a block
//!   maximum a few ulps above 448·2^k down to k (the exact rule: k+1), so those are refused.
//!   Non-finite activations are outside what the sources define (ModelOpt's reference makes a
//!   NaN block's scale byte 0 and saturates an Inf); the fusion uses `nan_policy = propagate`
//!   (docs/ops.md, "ModelOpt spelling").
//! * The QuantizeLinear must divide in float (`precision` unset or 1, opset ≥ 23): another
//!   precision rounds x before the division, which the fused quantizers do not do (refused).
//!
//! Not handled: Quark's fp32-subnormal corner (its scale can go below
//!   2^-127, E8M0's minimum; ours clamps) — documented in docs/ops.md.

use crate::pattern::predicates::{
    attr_int, attr_string, dtype, is_float8_zero, quantize_divides_in_float, scalar_f64, values_i64,
};
use crate::pattern::{Match, OpId, Pat, Reject, N, V};
use crate::reject;
use crate::view::{Dim, GraphView, NodeId, ValueId, ONNX_DOMAIN, TRT_DOMAIN};

use super::block_shape::{
    block_reshape_k, block_shape_nodes, check_amax_reshape, check_block_reshape,
    is_flat_block_reshape,
};

/// MX block size: the only one the kernels implement.
pub const BLOCK: i64 = 32;

/// Handles of the quantize subpattern.
#[derive(Clone, Copy, Debug)]
pub struct MxQuantPat {
    /// The quantized activation input.
    pub x: V,
    /// The root: `q` (standard) or the fake-quantized output (Quark).
    pub root: V,
    pub reshape: N,
    /// The block Reshape of the `Abs(x)` spelling.
    pub reshape_abs: N,
    pub reduce_max: N,
    /// `Squeeze(-1)` after a `keepdims=1` ReduceMax.
    pub squeeze: N,
    /// `Reshape[.., K/32]` after a `keepdims=1` ReduceMax (drops the kept axis like the Squeeze).
    pub amax_reshape: N,
    pub mul: N,
    pub div: N,
    pub scale_const: V,
    pub cast: N,
    /// Standard spelling: the scale value.
    pub scale: V,
    pub quantize: N,
    pub quark: N,
    /// The ModelOpt pair: `TRT_MXFP8DynamicQuantize` and the `TRT_MXFP8DequantizeLinear` of its
    /// two outputs.
    pub trt_quantize: N,
    pub trt_dequantize: N,
}

/// Declares both spellings of `MXFP8(x)`; the root is an alternative between them.
pub fn mx_quant(p: &mut Pat, x: V) -> MxQuantPat {
    // The block shape is a constant, or computed from `Shape(x)` (symbolic dims): the check reads
    // it structurally (`block_shape::check_block_reshape`).
    let shape = p.input("block_shape");
    let reshape = p
        .op(OpId::new(ONNX_DOMAIN, "Reshape"))
        .args([x, shape])
        .node();
    let blk = p.out(reshape, 0);
    let abs_blk = p.op(OpId::new(ONNX_DOMAIN, "Abs")).args([blk]).out();
    let abs_x = p.op(OpId::new(ONNX_DOMAIN, "Abs")).args([x]).out();
    let shape_abs = p.input("block_shape_abs");
    let reshape_abs = p
        .op(OpId::new(ONNX_DOMAIN, "Reshape"))
        .args([abs_x, shape_abs])
        .node();
    let blk_abs = p.out(reshape_abs, 0);
    let abs = p.any_of("abs_blocks", [abs_blk, blk_abs]);
    // ReduceMax-18 takes axes as an input, ReduceMax-13 as an attribute: the check reads both.
    let reduce_max = p
        .op(OpId::new(ONNX_DOMAIN, "ReduceMax"))
        .args([abs])
        .extra_inputs()
        .node();
    let amax_r = p.out(reduce_max, 0);
    // Squeeze-13 takes axes as an input, Squeeze-11 as an attribute: the check reads both.
    let squeeze = p
        .op(OpId::new(ONNX_DOMAIN, "Squeeze"))
        .args([amax_r])
        .extra_inputs()
        .node();
    let amax_sq = p.out(squeeze, 0);
    let amax_shape = p.input("amax_shape");
    let amax_reshape = p
        .op(OpId::new(ONNX_DOMAIN, "Reshape"))
        .args([amax_r, amax_shape])
        .node();
    let amax_rs = p.out(amax_reshape, 0);
    let amax_t = p.any_of("block_amax_squeezed", [amax_r, amax_sq, amax_rs]);
    // f16/bf16 graphs cast the block amax to float first (exact), so the scale arithmetic is
    // fp32; the check reads the dtype the Mul/Div computes in from the constant.
    let amax_cast = p
        .op(OpId::new(ONNX_DOMAIN, "Cast"))
        .args([amax_t])
        .attr_int("to", None, dtype::FLOAT as i64)
        .out();
    let amax = p.any_of("block_amax", [amax_cast, amax_t]);
    let scale_const = p.konst("scale_constant");
    let mul = p
        .op(OpId::new(ONNX_DOMAIN, "Mul"))
        .args([amax, scale_const])
        .commutative()
        .node();
    let div = p
        .op(OpId::new(ONNX_DOMAIN, "Div"))
        .args([amax, scale_const])
        .node();
    let (mul_out, div_out) = (p.out(mul, 0), p.out(div, 0));
    let scaled = p.any_of("scaled_amax", [mul_out, div_out]);
    let cast = p
        .op(OpId {
            domain: ONNX_DOMAIN,
            op_type: "Cast",
            versions: crate::pattern::opsets::MX_QDQ_VERSIONS,
            aliases: &[],
        })
        .args([scaled])
        .attr_int("to", None, dtype::FLOAT8E8M0 as i64)
        .node();
    let scale = p.out(cast, 0);
    let quantize = p
        .op(OpId {
            domain: ONNX_DOMAIN,
            op_type: "QuantizeLinear",
            versions: crate::pattern::opsets::MX_QDQ_VERSIONS,
            aliases: &[],
        })
        .args([x, scale])
        .extra_inputs() // zero point: checked to be absent or zero
        .node();
    let q = p.out(quantize, 0);
    let quark = p
        .op(OpId::quark_mx())
        .args([x])
        // Axis 0 of a constant is how Quark quantizes a [K, N] weight: no activation
        // candidate. Such nodes are folded into their MatMul's MxMatMul (`mx_consumers`), so
        // they are no refusal either.
        .node_where("not a weight quantizer (axis 0 of a constant)", |g, n| {
            let axis0 = matches!(g.attr(n, "axis"), Some(crate::view::AttrValue::Int(0)));
            let on_const = g
                .inputs(n)
                .first()
                .copied()
                .flatten()
                .is_some_and(|x| g.is_constant(x));
            !(axis0 && on_const)
        })
        .node();
    let fake = p.out(quark, 0);
    let trt_quantize = p
        .op(OpId::new(TRT_DOMAIN, "TRT_MXFP8DynamicQuantize"))
        .args([x])
        .node();
    let (trt_q, trt_scale) = (p.out(trt_quantize, 0), p.out(trt_quantize, 1));
    let trt_dequantize = p
        .op(OpId::new(TRT_DOMAIN, "TRT_MXFP8DequantizeLinear"))
        .args([trt_q, trt_scale])
        .node();
    let trt_qdq = p.out(trt_dequantize, 0);
    let root = p.any_of("mx_quantized", [q, fake, trt_qdq]);
    MxQuantPat {
        x,
        root,
        reshape,
        reshape_abs,
        reduce_max,
        squeeze,
        amax_reshape,
        mul,
        div,
        scale_const,
        cast,
        scale,
        quantize,
        quark,
        trt_quantize,
        trt_dequantize,
    }
}

/// Which E8M0 rule a quantizer uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleRule {
    Floor,
    Rceil,
    /// The floor rule with amax·2^-8 computed (rounded) in float16: a float16 graph that scales
    /// its float16 block amax before the Cast.
    FloorF16,
}

impl ScaleRule {
    pub fn as_str(self) -> &'static str {
        match self {
            ScaleRule::Floor => "floor",
            ScaleRule::Rceil => "rceil",
            ScaleRule::FloorF16 => "floor_f16",
        }
    }
}

/// What the quantize check learned.
#[derive(Clone, Debug)]
pub struct QuantInfo {
    pub rule: ScaleRule,
    pub nan_policy: &'static str,
    /// Activation dtype (ONNX numbering).
    pub dtype: i32,
    /// Last-axis length (a multiple of 32).
    pub k: i64,
    /// Quark spelling: the fake-quantized float value; ModelOpt: the output of its
    /// `TRT_MXFP8DequantizeLinear`; standard: `None`.
    pub fake_out: Option<ValueId>,
    /// Standard spelling: q and scale.
    pub q: Option<ValueId>,
    pub scale: Option<ValueId>,
    /// The nodes computing a run-time block shape from `Shape(x)` that only the block Reshape
    /// reads: they go with the fusion.
    pub shape_nodes: Vec<NodeId>,
}

impl QuantInfo {
    /// A quantize-dequantize spelling (Quark's fake quant, ModelOpt's pair) whose float output
    /// `out` the MatMuls read.
    fn qdq(
        (rule, nan_policy): (ScaleRule, &'static str),
        dtype: i32,
        k: i64,
        out: ValueId,
    ) -> Self {
        QuantInfo {
            rule,
            nan_policy,
            dtype,
            k,
            fake_out: Some(out),
            q: None,
            scale: None,
            shape_nodes: Vec::new(),
        }
    }
}

/// Names the node where shape information first goes missing upstream of `x` (its inputs have
/// shapes, its output has none: an op mxfuse's inference does not know, with no value_info in
/// the model), so a refusal points at the cause rather than at a value downstream of it.
fn where_inference_stops(g: &dyn GraphView, x: ValueId) -> String {
    let shaped = |v: ValueId| g.tensor_info(v).and_then(|i| i.shape).is_some();
    let mut v = x;
    for _ in 0..256 {
        let Some((n, _)) = g.producer(v) else {
            return String::new();
        };
        match g.inputs(n).iter().flatten().find(|i| !shaped(**i)) {
            Some(up) => v = *up,
            None => {
                let domain = g.domain(n);
                let op = if domain.is_empty() {
                    g.op_type(n).to_string()
                } else {
                    format!("{domain}::{}", g.op_type(n))
                };
                return format!(
                    " (no value_info in the model, and mxfuse's shape inference does not know {op} '{}': add shapes, e.g. with onnx.shape_inference)",
                    g.node_name(n)
                );
            }
        }
    }
    String::new()
}

/// Rank and last dimension of `x`, refusing unknown or non-multiple-of-32 last dims.
pub fn last_dim(g: &dyn GraphView, x: ValueId) -> Result<(usize, i64, i32), Reject> {
    let info = g.tensor_info(x).ok_or_else(|| {
        reject!(
            "type of '{}' is unknown{}",
            g.value_name(x),
            where_inference_stops(g, x)
        )
    })?;
    if !dtype::ACTIVATION.contains(&info.elem_type) {
        return Err(reject!(
            "'{}' is {}: only float, float16 and bfloat16 activations are supported",
            g.value_name(x),
            dtype::name(info.elem_type)
        ));
    }
    let shape = info.shape.ok_or_else(|| {
        reject!(
            "rank of '{}' is unknown{}",
            g.value_name(x),
            where_inference_stops(g, x)
        )
    })?;
    match shape.last() {
        Some(Dim::Known(k)) if *k > 0 && k % BLOCK == 0 => Ok((shape.len(), *k, info.elem_type)),
        Some(Dim::Known(k)) => Err(reject!(
            "last dim of '{}' is {k}, not a multiple of {BLOCK}",
            g.value_name(x)
        )),
        Some(_) => Err(reject!(
            "last dim of '{}' is not known statically",
            g.value_name(x)
        )),
        None => Err(reject!("'{}' is a scalar", g.value_name(x))),
    }
}

pub(crate) fn is_last_axis(axis: i64, rank: usize) -> bool {
    axis == -1 || axis == rank as i64 - 1
}

/// Checks the matched quantize spelling and identifies its rule.
pub fn check_mx_quant(m: &Match<'_>, h: &MxQuantPat) -> Result<QuantInfo, Reject> {
    let g = m.graph();
    let x = m[h.x];
    let block_reshape = m.node(h.reshape).or(m.node(h.reshape_abs));
    let (rank, k, dt) = match last_dim(g, x) {
        Ok(v) => v,
        // A symbolic last dim that the standard spelling's block Reshape pins to [K/32, 32].
        Err(why) => {
            let info = g.tensor_info(x);
            let symbolic = info
                .as_ref()
                .and_then(|i| i.shape.as_ref())
                .and_then(|d| d.last())
                .is_some_and(|d| !matches!(d, Dim::Known(_)));
            let rank = info
                .as_ref()
                .and_then(|i| i.shape.as_ref())
                .map_or(0, Vec::len);
            let dt = info.map_or(0, |i| i.elem_type);
            let k = block_reshape.and_then(|r| block_reshape_k(g, r, x, rank));
            match k {
                Some(k) if symbolic && dtype::ACTIVATION.contains(&dt) => (rank, k, dt),
                _ => return Err(why),
            }
        }
    };
    if let (Some(qn), Some(dqn)) = (m.node(h.trt_quantize), m.node(h.trt_dequantize)) {
        super::modelopt::check_trt_pair(g, (qn, dqn), rank, dt)?;
        return Ok(QuantInfo::qdq(
            (ScaleRule::Rceil, "propagate"),
            dt,
            k,
            m.root(),
        ));
    }
    if let Some(n) = m.node(h.quark) {
        let elem = attr_string(g.attr(n, "element_dtype"), "int8").unwrap_or_default();
        if elem != "fp8_e4m3" {
            return Err(reject!(
                "Quark MX element_dtype is '{elem}', only fp8_e4m3 is MXFP8"
            ));
        }
        let bs = attr_int(g.attr(n, "block_size"), 32).unwrap_or(0);
        if bs != BLOCK {
            return Err(reject!(
                "Quark MX block_size is {bs}, the kernels need {BLOCK}"
            ));
        }
        // Quark's default axis is 1: on a [B,S,H] activation that is the sequence axis.
        let axis = attr_int(g.attr(n, "axis"), 1).unwrap_or(i64::MIN);
        if !is_last_axis(axis, rank) {
            return Err(reject!(
                "Quark MX quantizes axis {axis}, not the last axis of a rank-{rank} tensor"
            ));
        }
        return Ok(QuantInfo::qdq(
            (ScaleRule::Floor, "ignore"),
            dt,
            k,
            m.root(),
        ));
    }
    let (Some(reshape), Some(rmax), Some(cast), Some(ql)) = (
        m.node(h.reshape).or(m.node(h.reshape_abs)),
        m.node(h.reduce_max),
        m.node(h.cast),
        m.node(h.quantize),
    ) else {
        return Err(reject!("internal: incomplete standard MX quantize match"));
    };
    let amax_reshape = m.node(h.amax_reshape);
    // `[-1, 32]`: every block a row of its own (torchao's spelling), read back into the scale's
    // shape by the amax Reshape (new-user probe 12: was refused as "does not split the last
    // axis"). On a rank-1 x it is the plain `[K/32, 32]`.
    let flat = rank >= 2 && is_flat_block_reshape(g, reshape);
    if flat {
        if amax_reshape.is_none() {
            return Err(reject!(
                "block Reshape [-1, {BLOCK}] flattens the rows of '{}': the block amax then needs a Reshape back to [..., {}] before the Cast",
                g.value_name(x),
                k / BLOCK
            ));
        }
    } else {
        check_block_reshape(g, reshape, x, rank, k)?;
    }
    if let Some(r) = amax_reshape {
        check_amax_reshape(g, r, x, rank, k)?;
    }
    let reshapes: Vec<NodeId> = std::iter::once(reshape).chain(amax_reshape).collect();
    let shape_nodes = block_shape_nodes(m, &reshapes, x)?;
    let squeeze = m.node(h.squeeze);
    // A Reshape to [.., K/32] gives the scale's shape from either keepdims.
    let keep = match (squeeze, amax_reshape) {
        (Some(_), _) => Some(true),
        (None, Some(_)) => None,
        (None, None) => Some(false),
    };
    // The blocks are `[.., K/32, 32]` (x's rank + 1) or, flattened, `[N, 32]`.
    let blocks_rank = if flat { 2 } else { rank + 1 };
    check_reduce_last(g, rmax, blocks_rank, keep)?;
    if let Some(sq) = squeeze {
        check_squeeze_last(g, sq, blocks_rank)?;
    }
    // Which rule: the constant and the rounding of the Cast must agree on one.
    let c = g.const_value(m[h.scale_const]).and_then(|t| scalar_f64(&t));
    let c = c.ok_or_else(|| reject!("scale constant is not a readable scalar"))?;
    let round = attr_string(g.attr(cast, "round_mode"), "up").unwrap_or_default();
    let saturate = attr_int(g.attr(cast, "saturate"), 1).unwrap_or(0);
    if saturate != 1 {
        return Err(reject!(
            "Cast to FLOAT8E8M0 has saturate={saturate}: zero blocks would become NaN scales"
        ));
    }
    let by_mul = m.node(h.mul).is_some();
    // The RCEIL constant must be fl32(1/448) itself, the one the kernels multiply by: a constant
    // a few ulps off (accepted up to 1e-6 relative before) rounds some products across a power
    // of two — amax = 448·2^j, e.g. 3.5, gets the next scale with fl32(1/448) + 1 ulp.
    let rceil_constant = c == f64::from((1.0f64 / 448.0) as f32);
    let rule = match (by_mul, round.as_str()) {
        (true, "down") if c == 2f64.powi(-8) => ScaleRule::Floor,
        (true, "up") if rceil_constant => ScaleRule::Rceil,
        (false, "up") if c == 448.0 => ScaleRule::Rceil,
        // amax / 256 and amax · 2^-8 are the same correctly rounded number (a power-of-two
        // scaling), subnormal results included: the floor rule bit for bit.
        (false, "down") if c == 256.0 => ScaleRule::Floor,
        _ => {
            let op = if by_mul { "Mul" } else { "Div" };
            return Err(reject!("{op}({c}) with Cast round_mode={round} is not a known MX scale rule (floor: Mul(2^-8)|Div(256)+down; rceil: Mul(fl32(1/448), exactly that f32)|Div(448)+up)"));
        }
    };
    // The graph scales amax in its own dtype before the Cast. Exact in f32 and bf16 for
    // every amax ≥ 2^-118. bf16 is accepted with one known difference (docs/ops.md, scale
    // bytes): the single bf16 amax 0x1.fep-119 rounds up to byte 1 there, byte 0 here (blocks
    // of magnitude ~3e-36). In f16 the floor product lands on f16's subnormal grid below
    // amax 2^-6 and may round to the next power of two: the kernels' `floor_f16` rule computes
    // exactly that, provided amax is the f16 maximum of f16 values (x itself is float16;
    // an f16 Cast of an f32 amax would round twice). RCEIL's quotient rounded to f16 / bf16
    // before the round-up has no kernel rule: refused.
    let amax_t = g
        .tensor_info(m[h.scale_const])
        .map(|i| i.elem_type)
        .unwrap_or(0);
    let rule = if rule == ScaleRule::Floor && amax_t == dtype::FLOAT16 && dt == dtype::FLOAT16 {
        ScaleRule::FloorF16
    } else {
        rule
    };
    if (amax_t == dtype::FLOAT16 && rule != ScaleRule::FloorF16)
        || (rule == ScaleRule::Rceil && amax_t != dtype::FLOAT)
    {
        // Say what the export can do about it (new-user probe 11: an f16 model whose every
        // quantizer was refused, the report saying only that the rounding differs).
        let why = if rule == ScaleRule::Floor {
            "the block values are not float16, so the float16 amax is itself a rounding of the true one"
        } else {
            "amax/448 is rounded to that type before the round-up"
        };
        return Err(reject!(
            "the {} scale is computed in {}: its rounding differs from the exact rule the kernels use ({why}); Cast the block amax to float before scaling it, as the fused spelling expects",
            rule.as_str(),
            dtype::name(amax_t)
        ));
    }
    check_quantize_linear(g, ql, rank)?;
    Ok(QuantInfo {
        rule,
        nan_policy: "propagate",
        dtype: dt,
        k,
        fake_out: None,
        q: Some(m.root()),
        scale: Some(m[h.scale]),
        shape_nodes,
    })
}

/// `squeezed`: `Some(true)` when the amax goes through `Squeeze(-1)`, so the ReduceMax keeps its
/// axis; `Some(false)` when nothing follows; `None` when a Reshape to `[.., K/32]` follows, which
/// gives that shape from either keepdims.
fn check_reduce_last(
    g: &dyn GraphView,
    n: crate::view::NodeId,
    rank: usize,
    squeezed: Option<bool>,
) -> Result<(), Reject> {
    let keepdims = attr_int(g.attr(n, "keepdims"), 1);
    if let Some(squeezed) = squeezed.filter(|s| keepdims != Some(*s as i64)) {
        return Err(reject!(
            "ReduceMax has keepdims={} but {} (scales are [..., K/32])",
            keepdims.unwrap_or(-1),
            if squeezed {
                "a Squeeze or Reshape drops the kept axis"
            } else {
                "nothing removes the axis"
            }
        ));
    }
    match axes_of(g, n).as_deref() {
        Some([a]) if is_last_axis(*a, rank) => Ok(()),
        other => Err(reject!("ReduceMax axes {other:?} are not the block axis")),
    }
}

/// The Squeeze after a `keepdims=1` ReduceMax (input of rank `rank`) must remove exactly the
/// block axis: without axes it would also drop any other size-1 dim (a batch of 1).
fn check_squeeze_last(
    g: &dyn GraphView,
    n: crate::view::NodeId,
    rank: usize,
) -> Result<(), Reject> {
    match axes_of(g, n).as_deref() {
        Some([a]) if is_last_axis(*a, rank) => Ok(()),
        other => Err(reject!(
            "Squeeze axes {other:?} are not the block axis alone"
        )),
    }
}

/// A reduce / squeeze node's constant axes: input 1 (opset 13+ Squeeze, 18+ ReduceMax) or the
/// `axes` attribute (older opsets); `None` when absent or not constant.
fn axes_of(g: &dyn GraphView, n: crate::view::NodeId) -> Option<Vec<i64>> {
    match g.inputs(n).get(1).copied().flatten() {
        Some(v) => g.const_value(v).and_then(|t| values_i64(&t)),
        None => match g.attr(n, "axes") {
            Some(crate::view::AttrValue::Ints(a)) => Some(a),
            _ => None,
        },
    }
}

fn check_quantize_linear(
    g: &dyn GraphView,
    n: crate::view::NodeId,
    rank: usize,
) -> Result<(), Reject> {
    // QuantizeLinear's axis defaults to 1, not -1.
    let axis = attr_int(g.attr(n, "axis"), 1).unwrap_or(i64::MIN);
    if !is_last_axis(axis, rank) {
        return Err(reject!("QuantizeLinear axis {axis} is not the last axis"));
    }
    let bs = attr_int(g.attr(n, "block_size"), 0).unwrap_or(0);
    if bs != BLOCK {
        return Err(reject!("QuantizeLinear block_size is {bs}, not {BLOCK}"));
    }
    if attr_int(g.attr(n, "saturate"), 1) != Some(1) {
        return Err(reject!(
            "QuantizeLinear saturate=0 is not supported (the kernels saturate)"
        ));
    }
    quantize_divides_in_float(g, n, &format!("QuantizeLinear '{}'", g.node_name(n)))?;
    let zp = g.inputs(n).get(2).copied().flatten();
    let out_t = match zp {
        Some(z) => {
            let t = g
                .const_value(z)
                .ok_or_else(|| reject!("zero point is not a constant"))?;
            // +0 and -0 (0x80) are both zero: x/scale + (-0) is x/scale.
            if !is_float8_zero(g, z) {
                return Err(reject!("zero point is not zero"));
            }
            t.elem_type
        }
        None => attr_int(g.attr(n, "output_dtype"), 0).unwrap_or(0) as i32,
    };
    if out_t != dtype::FLOAT8E4M3FN {
        // ONNX's default without output_dtype or a zero point is uint8 (new-user probe 12: an
        // output_dtype left out was refused as "output is unknown").
        let (out_t, why) = match out_t {
            0 => (
                dtype::UINT8,
                " (QuantizeLinear without output_dtype or a zero point writes uint8: set output_dtype = FLOAT8E4M3FN)",
            ),
            t => (t, ""),
        };
        return Err(reject!(
            "QuantizeLinear output is {}, not float8e4m3fn{why}",
            dtype::name(out_t)
        ));
    }
    Ok(())
}
