//! NVIDIA TensorRT Model Optimizer (ModelOpt) MXFP8 spelling: the `trt`-domain ops its ONNX
//! export writes, and what the rules need to read them as the other MX spellings.
//!
//! Search pattern => x ─ trt::TRT_MXFP8DynamicQuantize = (q: E4M3, scale: uint8 E8M0)
//!                   ─ trt::TRT_MXFP8DequantizeLinear ─ MatMul / Gemm (activations, `mx_quant`),
//!                   and W: E4M3 const, s: uint8 const ─ trt::TRT_MXFP8DequantizeLinear ─ MatMul /
//!                   Gemm (weights, `mx_consumers::classify_weight`)
//!
//! Semantics (docs/ops.md, "ModelOpt spelling", with the sources):
//! * `TRT_MXFP8DequantizeLinear(x, s; axis = -1, block_size = 32, output_dtype)` is ONNX
//!   `DequantizeLinear` of a FLOAT8E8M0 scale: `decode(x) · 2^(s − 127)`, the scale laid out
//!   as ONNX's blocked layout (x's shape with the axis divided by the block), stored as uint8.
//!   A weight scale byte 255 is refused: E8M0 NaN in TensorRT's E8M0 type, 2^128 (= Inf) in
//!   ModelOpt's numpy reading.
//! * `TRT_MXFP8DynamicQuantize(x; axis = -1, block_size = 32, output_dtype = 17)` quantizes with
//!   the RCEIL rule (module docs of `mx_quant`; float16 / bfloat16 only).
//! * The fused kernels read FLOAT8E8M0 scales: a uint8 weight scale is re-typed at rewrite time
//!   (a copy of its bytes, 1/32 of the weight's size) — [`e8m0_scales`].

use crate::onnx_pb::{tensor_proto::DataLocation, TensorProto};
use crate::pattern::predicates::{attr_int, dtype, known_dims};
use crate::pattern::{Emit, Reject};
use crate::reject;
use crate::view::{GraphView, NodeId, ValueId, TRT_DOMAIN};

use super::mx_quant::{is_last_axis, BLOCK};

/// Whether node `n` is TensorRT's MXFP8 dequantizer.
pub fn is_trt_dequantize(g: &dyn GraphView, n: NodeId) -> bool {
    g.domain(n) == TRT_DOMAIN && g.op_type(n) == "TRT_MXFP8DequantizeLinear"
}

/// TensorRT's attribute defaults (its ONNX parser and ModelOpt's exporter): axis -1, block 32.
pub fn trt_axis_block(g: &dyn GraphView, n: NodeId) -> (i64, i64) {
    let axis = attr_int(g.attr(n, "axis"), -1).unwrap_or(i64::MIN);
    let block = attr_int(g.attr(n, "block_size"), BLOCK).unwrap_or(0);
    (axis, block)
}

/// The ModelOpt pair `TRT_MXFP8DequantizeLinear(TRT_MXFP8DynamicQuantize(x))` on a rank-`rank`
/// activation of type `dt`: both blocked 32 along the last axis, E4M3 values, the dequantizer
/// writing x's own type; x float16 or bfloat16 (the `mx_quant` module docs say why float is
/// refused).
pub(crate) fn check_trt_pair(
    g: &dyn GraphView,
    (qn, dqn): (NodeId, NodeId),
    rank: usize,
    dt: i32,
) -> Result<(), Reject> {
    for (n, op) in [
        (qn, "TRT_MXFP8DynamicQuantize"),
        (dqn, "TRT_MXFP8DequantizeLinear"),
    ] {
        let (axis, block) = trt_axis_block(g, n);
        if !is_last_axis(axis, rank) {
            return Err(reject!(
                "{op} '{}' quantizes axis {axis}, not the last axis of a rank-{rank} tensor",
                g.node_label(n)
            ));
        }
        if block != BLOCK {
            return Err(reject!(
                "{op} '{}' has block_size {block}, the kernels need {BLOCK}",
                g.node_label(n)
            ));
        }
    }
    let q_type = attr_int(g.attr(qn, "output_dtype"), dtype::FLOAT8E4M3FN as i64).unwrap_or(-1);
    if q_type != dtype::FLOAT8E4M3FN as i64 {
        return Err(reject!(
            "TRT_MXFP8DynamicQuantize '{}' writes output_dtype {q_type}, not FLOAT8E4M3FN",
            g.node_label(qn)
        ));
    }
    let out = attr_int(g.attr(dqn, "output_dtype"), -1).unwrap_or(-1);
    if out != dt as i64 {
        return Err(reject!(
            "TRT_MXFP8DequantizeLinear '{}' writes output_dtype {out}, the quantized activation is {}",
            g.node_label(dqn),
            dtype::name(dt)
        ));
    }
    if dt == dtype::FLOAT {
        return Err(reject!(
            "TRT_MXFP8DynamicQuantize '{}' of a float activation: its scale rule is RCEIL, but for float inputs ModelOpt's reference (float32 log2, ceil) and the exact rule differ for block maxima a few ulps above 448·2^k, and TensorRT's kernel is not public (float16 / bfloat16 activations are fused: there every reading gives the same bytes)",
            g.node_label(qn)
        ));
    }
    Ok(())
}

/// A constant MXFP8 weight dequantized by `TRT_MXFP8DequantizeLinear` node `n`: E4M3 values
/// `[K, N]` blocked along axis 0 (`[N, K]` along axis 1 when `trans_b`) and uint8 E8M0 scales
/// in that blocked layout, both constants, no byte 255. Returns (values, scales).
pub fn trt_weight(
    g: &dyn GraphView,
    n: NodeId,
    trans_b: bool,
) -> Result<(ValueId, ValueId), Reject> {
    let ins = g.inputs(n);
    let (Some(wq), Some(ws)) = (
        ins.first().copied().flatten(),
        ins.get(1).copied().flatten(),
    ) else {
        return Err(reject!("weight TRT_MXFP8DequantizeLinear lacks inputs"));
    };
    let t = |v| g.tensor_info(v).map(|i| i.elem_type).unwrap_or(0);
    let (axis, block) = trt_axis_block(g, n);
    let k_axis = if trans_b { [1, -1] } else { [0, -2] };
    if t(wq) != dtype::FLOAT8E4M3FN
        || t(ws) != dtype::UINT8
        || block != BLOCK
        || !k_axis.contains(&axis)
    {
        return Err(reject!(
            "weight TRT_MXFP8DequantizeLinear is not MXFP8 along K (E4M3 + uint8 E8M0, axis {}, block 32): {} + {}, axis {axis}, block {block}",
            k_axis[0],
            dtype::name(t(wq)),
            dtype::name(t(ws))
        ));
    }
    if !(g.is_constant(wq) && g.is_constant(ws)) {
        return Err(reject!("MX weight is not constant"));
    }
    if let (Some(xd), Some(sd)) = (known_dims(g, wq), known_dims(g, ws)) {
        kernels::ScaleMap::new(&xd, &sd, axis, BLOCK as usize)
            .map_err(|e| reject!("weight TRT_MXFP8DequantizeLinear: {e}"))?;
    }
    let s = g
        .const_value(ws)
        .ok_or_else(|| reject!("scales '{}' could not be read", g.value_name(ws)))?;
    if s.raw.contains(&0xFF) {
        return Err(reject!(
            "scales '{}' hold byte 255: E8M0 NaN for TensorRT, 2^128 (Inf) in ModelOpt's reading",
            g.value_name(ws)
        ));
    }
    Ok((wq, ws))
}

/// `scales` as a FLOAT8E8M0 value: itself when it is one, else (a ModelOpt uint8 constant) a
/// new FLOAT8E8M0 initializer `{name}_e8m0` holding the same bytes.
pub fn e8m0_scales(e: &mut Emit<'_>, scales: ValueId) -> Result<ValueId, String> {
    let g = e.graph();
    if g.tensor_info(scales).map(|i| i.elem_type) != Some(dtype::UINT8) {
        return Ok(scales);
    }
    let name = g.value_name(scales).to_string();
    let t = g
        .const_value(scales)
        .ok_or_else(|| format!("scales '{name}' could not be read"))?;
    let proto = TensorProto {
        name: Some(format!("{name}_e8m0")),
        data_type: Some(dtype::FLOAT8E8M0),
        dims: t.dims.clone(),
        raw_data: Some(t.raw),
        data_location: Some(DataLocation::Default as i32),
        ..Default::default()
    };
    Ok(e.initializer(&format!("{name}_e8m0"), proto))
}

/// The other ModelOpt quantize pairs of the activation whose pair ends in `qdq` (the output of a
/// `TRT_MXFP8DequantizeLinear`): ModelOpt gives every Linear its own input quantizer, so q, k
/// and v quantize one activation three times. Each sibling returned passes the same checks
/// (its quantizer read only by its dequantizer), so it computes the same bytes:
/// `(quantizer, dequantizer, its output)`. ONNX Runtime's common-subexpression pass does not
/// merge `trt` nodes, so online a fusion takes the siblings' MatMuls itself (offline
/// `merge_quant_chains` has merged them already).
pub fn sibling_pairs(g: &dyn GraphView, qdq: ValueId) -> Vec<(NodeId, NodeId, ValueId)> {
    let Some((dq, 0)) = g.producer(qdq) else {
        return Vec::new();
    };
    let Some((quant, 0)) = g
        .inputs(dq)
        .first()
        .copied()
        .flatten()
        .and_then(|v| g.producer(v))
    else {
        return Vec::new();
    };
    let Some(x) = g.inputs(quant).first().copied().flatten() else {
        return Vec::new();
    };
    let (rank, dt) = match g.tensor_info(x) {
        Some(i) => (i.shape.map_or(0, |s| s.len()), i.elem_type),
        None => return Vec::new(),
    };
    let mut out = Vec::new();
    for &(qn, _) in g.consumers(x).iter() {
        let is_quant = g.domain(qn) == TRT_DOMAIN && g.op_type(qn) == "TRT_MXFP8DynamicQuantize";
        if qn == quant || !is_quant || out.iter().any(|&(q, _, _)| q == qn) {
            continue;
        }
        let (q, s) = match g.outputs(qn) {
            [q, s] => (*q, *s),
            _ => continue,
        };
        let readers: Vec<NodeId> = g.consumers(q).iter().map(|&(r, _)| r).collect();
        let [dqn] = readers[..] else { continue };
        let pair_only = is_trt_dequantize(g, dqn)
            && g.inputs(dqn).get(1).copied().flatten() == Some(s)
            && g.consumers(s).iter().all(|&(r, _)| r == dqn)
            && !g.is_graph_output(q)
            && !g.is_graph_output(s);
        if pair_only && check_trt_pair(g, (qn, dqn), rank, dt).is_ok() {
            out.push((qn, dqn, g.outputs(dqn)[0]));
        }
    }
    out
}
