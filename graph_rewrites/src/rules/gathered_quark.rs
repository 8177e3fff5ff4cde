//! The AMD Quark spelling of gathered MX weights, for rule `mx_gather_dequant`: a float constant
//! fake-quantized by `com.amd.quark::MXQuantizeDequantize`, gathered before or after the fake
//! quant. The rule quantizes the constant at rewrite time, exactly as the Quark weight path of
//! the MatMul fusions does ([`check_quark_exact_along`]), and gathers the stored E4M3 values and
//! E8M0 scales like any MX dequantize.
//!
//! ```text
//! W [E, N, K] float constant ─ MXQuantizeDequantize(axis = 2) ─ Gather(·, ids, axis = 0) = y
//! W [E, N, K] float constant ─ Gather(·, ids, axis = 0) ─ MXQuantizeDequantize(axis = 2) = y
//!   ⇒ y = MxGatherDequantize(W_mxfp8 [E, N, K], W_mxfp8_scale [E, N, K/32], ids, axis = 2)
//! ```
//!
//! Key points:
//! * The two spellings are one computation when the gathered axis is not the quantized one:
//!   Quark's op quantizes each line of the tensor along `axis` on its own (blocks of 32 from the
//!   line's start, the exponent from the block's largest finite element; Quark's kernel,
//!   `kernels::reference::quark_mx`), and a Gather off that axis copies whole lines. After the
//!   Gather, the fake-quant's `axis` counts the gathered tensor's axes: the ids' axes take the
//!   gather axis's place, and quantizing along one of them (blocks across the selected experts)
//!   is refused.
//! * Exact or refused: the stored bytes must dequantize to what the fake-quant writes, element by
//!   element ([`check_quark_exact_along`]; it refuses Inf blocks, blocks below 2^-119, float16 /
//!   bfloat16 outputs that round the product). The refusal is its reason (ONNX Runtime's CPU EP
//!   has no `MXQuantizeDequantize`: such models need the plugin EP, which publishes one).
//! * The constant's float type is the output type (float, float16, bfloat16).
//! * Stacks up to the Quark weight cap: 4 GiB by default (`ir::QUARK_WEIGHT_MAX_BYTES`, setting
//!   `quark_weight_max_mib`; a real MoE layer's experts, e.g. `[32, 1536, 6144]` f32, 1.2 GB),
//!   read without a copy where the view holds them and checked at ~1 GB/s (BENCHMARKS.md
//!   "Rewrite", h-quarkbig); refused with their size above it. Until h-quarkbig the cap was
//!   other constants' 64 MiB, so real experts stayed fake-quantized.
//! * A refused fake quant stays rule `mxquant`'s, as before this spelling was fused
//!   (`MxQuantize` of the whole constant at run time): [`taken_with_its_gather`] is how it
//!   leaves the accepted ones to this rule.

use std::sync::Arc;

use super::mx_consumers::{check_quark_exact_along, QuarkMx};
use crate::pattern::predicates::{attr_int, attr_string, dtype, known_dims};
use crate::pattern::Reject;
use crate::reject;
use crate::view::{GraphView, NodeId, ValueId, ONNX_DOMAIN};

/// A checked Quark weight: the float constant, its dims, the quantized axis (normalized, on the
/// constant), its rewrite-time MXFP8 bytes and its float type.
pub struct QuarkExperts {
    pub weight: ValueId,
    pub dims: Vec<i64>,
    pub axis: usize,
    pub mx: Arc<QuarkMx>,
    pub output_dtype: i64,
}

/// Checks the fake-quant `fq` of the constant `weight` that a Gather reads along `gather_axis`
/// (normalized on `weight`). `after_gather`: the fake-quant reads the Gather's output, whose
/// indices have this rank (its `axis` counts that tensor's axes).
pub fn check_quark_experts(
    g: &dyn GraphView,
    fq: NodeId,
    weight: ValueId,
    gather_axis: usize,
    after_gather: Option<usize>,
) -> Result<QuarkExperts, Reject> {
    let fname = g.node_label(fq);
    let elem = attr_string(g.attr(fq, "element_dtype"), "int8").unwrap_or_default();
    let block = attr_int(g.attr(fq, "block_size"), 32).unwrap_or(0);
    if elem != "fp8_e4m3" || block != 32 {
        return Err(reject!(
            "Quark fake-quant '{fname}' is {elem} in blocks of {block}: only fp8_e4m3 in blocks of 32 is MXFP8"
        ));
    }
    let wname = g.value_name(weight);
    let dims = known_dims(g, weight).filter(|_| g.is_constant(weight));
    let Some(dims) = dims else {
        return Err(reject!(
            "the Quark-quantized '{wname}' is not a constant of known dims: it stays fake-quantized at run time"
        ));
    };
    let ty = g.tensor_info(weight).map_or(0, |i| i.elem_type);
    if !dtype::ACTIVATION.contains(&ty) {
        return Err(reject!(
            "the Quark-quantized '{wname}' is {}: MxGatherDequantize writes float, float16 or bfloat16",
            dtype::name(ty)
        ));
    }
    let rank = dims.len();
    // The fake-quant's input: the constant, or the gathered tensor (the ids' axes in place of
    // the gather axis).
    let in_rank = rank + after_gather.unwrap_or(1) - 1;
    // Quark's default axis is 1; its kernel quantizes a rank-1 tensor along its only axis.
    let axis = attr_int(g.attr(fq, "axis"), 1)
        .map(|a| if in_rank == 1 { 0 } else { a })
        .filter(|a| (-(in_rank as i64)..in_rank as i64).contains(a))
        .ok_or_else(|| reject!("Quark fake-quant '{fname}': axis out of range"))?
        .rem_euclid(in_rank as i64) as usize;
    let axis = match after_gather {
        None => axis,
        Some(_) if axis < gather_axis => axis,
        Some(r) if axis >= gather_axis + r => axis + 1 - r,
        Some(_) => {
            return Err(reject!(
                "Quark fake-quant '{fname}' quantizes the gathered '{wname}' along the ids' axis {axis}: its blocks would span the selected slices"
            ))
        }
    };
    if axis == gather_axis {
        return Err(reject!(
            "Gather gathers along the quantized axis {axis} of the Quark-quantized '{wname}': the gathered slices would split scale blocks"
        ));
    }
    let mx = check_quark_exact_along(g, weight, axis)?;
    Ok(QuarkExperts {
        weight,
        dims: dims.iter().map(|&d| d as i64).collect(),
        axis,
        mx,
        output_dtype: ty as i64,
    })
}

/// Whether the Quark fake quant `fq` is of a constant whose one reader is a Gather (ids int32 /
/// int64) that rule `mx_gather_dequant` takes with it: [`check_quark_experts`] passes. Rule
/// `mxquant` leaves such a fake quant alone when this rule runs (as an activation quantizer it
/// would quantize every expert at run time), and takes every other, as before this spelling was
/// fused: a refused one, or any with this rule off (a device placement drops it), keeps the
/// run-time `MxQuantize` path. The check is memoized per scan, so the rule's own check of the
/// same constant at the Gather costs nothing more.
pub fn taken_with_its_gather(g: &dyn GraphView, fq: NodeId) -> bool {
    let (Some(w), Some(&y)) = (
        g.inputs(fq).first().copied().flatten(),
        g.outputs(fq).first(),
    ) else {
        return false;
    };
    if !g.is_constant(w) || g.is_graph_output(y) {
        return false;
    }
    let &[(gather, 0)] = &g.consumers(y)[..] else {
        return false;
    };
    let ids = g.inputs(gather).get(1).copied().flatten();
    let ids_type = ids
        .and_then(|i| g.tensor_info(i))
        .map_or(0, |i| i.elem_type);
    let rank = known_dims(g, w).map_or(0, |d| d.len() as i64);
    let axis = attr_int(g.attr(gather, "axis"), 0).filter(|a| (-rank..rank).contains(a));
    match axis {
        Some(a)
            if g.op_type(gather) == "Gather"
                && g.domain(gather) == ONNX_DOMAIN
                && [dtype::INT32, dtype::INT64].contains(&ids_type) =>
        {
            check_quark_experts(g, fq, w, a.rem_euclid(rank) as usize, None).is_ok()
        }
        _ => false,
    }
}
