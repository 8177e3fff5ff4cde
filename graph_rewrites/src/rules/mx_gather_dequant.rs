//! Rule `mx_gather_dequant`: a `Gather` of an E8M0-scaled dequantize becomes one
//! `com.mxfuse::MxGatherDequantize`, which dequantizes only the gathered slices; where the
//! gathered MX experts' one reader is the bmm with the tokens' activations, that MatMul goes too:
//! one `com.mxfuse::MxGatherMatMul` reading the selected experts in place.
//!
//! Search pattern => y = Gather(DequantizeLinear(x, s: FLOAT8E8M0) | MxDequantize(x, s) | com.amd.quark::MXQuantizeDequantize(W const), idx, axis ≠ the quantized axis) | MXQuantizeDequantize(Gather(W const, idx)) [─ MatMul(y, a) | MatMul(a, y)]  ⇒  y = com.mxfuse::MxGatherDequantize(x, s, idx) | out = com.mxfuse::MxGatherMatMul(a, x, s, idx)
//!
//! ```text
//! before                                            after
//! x [E, N, K], s [E, N, K/32]                       x, s, idx ─ MxGatherDequantize(axis,
//!   ─ DequantizeLinear(axis = 2, block_size = 32)            block_size, output_dtype,
//!   = w [E, N, K] ─ Gather(w, idx, axis = 0)                 gather_axis = 0) = y
//!   = y [idx.., N, K] ─ (other readers)                      ─ (other readers)
//!
//!   y [S, N, K] ─ MatMul(y, a [S, K, 1]) = out      a, x, s, idx ─ MxGatherMatMul(trans_b = 1,
//!   (its one reader; gathered_bmm.rs)                            output_dtype) = out [S, N, 1]
//! ```
//!
//! Key points:
//! * Where it comes from: MoE experts stored stacked (`[E, K, N]` or `[E, N, K]`) and selected
//!   per token by expert id (transformers' `batched_mm` experts, exported by torch dynamo:
//!   `gate_up_proj[expert_ids]` → bmm), and MX-quantized embedding tables read by token id.
//!   Without this rule the fallback `mx_dequant` dequantizes every expert (all E of them)
//!   every step and the Gather then copies the few selected: with 128 experts and top-4, 32x
//!   the work at one token.
//! * Same computation, bit for bit: along any axis but the quantized one, gathering commutes
//!   with the dequantize (each output element is the same value byte times the same scale
//!   byte; docs/ops.md). Gathering along the quantized axis would split blocks: refused.
//! * The dequantize must have no reader but this Gather (and not be a graph output); otherwise
//!   it stays, and `mx_dequant` (or the fusion that absorbs its other readers) takes it. An
//!   `MxDequantize` a fusion left for this Gather (its MatMul readers fused) is taken on the
//!   next pass of the offline pipeline.
//! * Refused, with the reason: the dequantize refusals of `mx_dequant`, values of unknown rank,
//!   indices other than int32 / int64, a gather axis out of range or on the quantized axis.
//! * The bmm (rules/gathered_bmm.rs says what it must be; otherwise a note says why the MatMul
//!   stays): the float-`a` MX GEMM per selected expert, exact products and f32 accumulation, so
//!   only the summation order differs from DequantizeLinear → Gather → MatMul in f32.
//! * AMD Quark's spelling (rules/gathered_quark.rs): float constant experts fake-quantized by
//!   `MXQuantizeDequantize`, gathered before or after the fake quant. The constant is quantized
//!   at rewrite time by the Quark weight check (exact, or refused with its reason) and gathered
//!   as above. The rule runs before `mxquant`, which would otherwise take a fake quant along the
//!   last axis as an activation quantizer (`MxQuantize` of every expert every step); it
//!   leaves those this rule takes to it (`RuleConfig::gather_rule_runs`).
//! * CPU only: on a device placement the EP leaves these to `mx_dequant` and ORT's Gather.

use std::sync::LazyLock;

use super::gathered_bmm::{gathered_bmm, Bmm, Experts};
use super::gathered_quark::{check_quark_experts, QuarkExperts};
use super::mx_consumers::prequantize_along;
use super::mx_dequant::{dequant_layout, e8m0_dequantize};
use crate::pattern::predicates::{attr_int, dtype, known_dims};
use crate::pattern::{Emit, Fuse, Match, OpId, Pat, Pattern, Rule, RuleConfig, Site, N, V};
use crate::reject;
use crate::view::{Dim, ValueId, MXFUSE_DOMAIN, ONNX_DOMAIN};

pub struct MxGatherDequantRule {
    pat: Pattern,
    /// The dequantize, one of three spellings: ONNX `DequantizeLinear` ...
    dq: N,
    x: V,
    scale: V,
    /// ... the `MxDequantize` a fusion kept for this reader ...
    mx_dq: N,
    mx_x: V,
    mx_scale: V,
    /// ... or Quark's fake-quant of a float constant (rules/gathered_quark.rs).
    fq: N,
    fq_w: V,
    gather: N,
    indices: V,
    /// Quark's fake-quant after the Gather: `MXQuantizeDequantize(Gather(W, ids))`.
    fq_after: N,
    gather_w: N,
    w_gathered: V,
    indices_w: V,
}

pub static RULE: LazyLock<MxGatherDequantRule> = LazyLock::new(|| {
    let mut p = Pat::new();
    let x = p.input("x");
    let scale = p.input("scale");
    let dq = e8m0_dequantize(&mut p, x, scale).single_use().node();
    let mx_x = p.input("x");
    let mx_scale = p.input("scale");
    let mx_dq = p
        .op(OpId::new(MXFUSE_DOMAIN, "MxDequantize"))
        .args([mx_x, mx_scale])
        .single_use()
        .node();
    let fq_w = p.input("weight");
    let fq = p.op(OpId::quark_mx()).args([fq_w]).single_use().node();
    let (w0, w1, w2) = (p.out(dq, 0), p.out(mx_dq, 0), p.out(fq, 0));
    let w = p.any_of("dequantized", [w0, w1, w2]);
    let indices = p.input("indices");
    let gather = p
        .op(OpId::new(ONNX_DOMAIN, "Gather"))
        .args([w, indices])
        .node();
    let w_gathered = p.input("weight");
    let indices_w = p.input("indices");
    let gather_w = p
        .op(OpId::new(ONNX_DOMAIN, "Gather"))
        .args([w_gathered, indices_w])
        .single_use()
        .node();
    let gathered = p.out(gather_w, 0);
    let fq_after = p.op(OpId::quark_mx()).args([gathered]).node();
    let (y0, y1) = (p.out(gather, 0), p.out(fq_after, 0));
    let y = p.any_of("gathered", [y0, y1]);
    // Not always produced: when the Gather's one reader is a bmm the rule takes as well
    // (`MxGatherMatMul`), nothing reads it any more.
    p.escaping(y);
    MxGatherDequantRule {
        pat: p.finish(y),
        dq,
        x,
        scale,
        mx_dq,
        mx_x,
        mx_scale,
        fq,
        fq_w,
        gather,
        indices,
        fq_after,
        gather_w,
        w_gathered,
        indices_w,
    }
});

/// What is gathered: stored MX values and scales, or a Quark constant quantized at rewrite time.
pub enum Source {
    Mx { x: ValueId, scale: ValueId },
    Quark(QuarkExperts),
}

pub struct Params {
    source: Source,
    indices: ValueId,
    y: ValueId,
    axis: i64,
    block_size: i64,
    output_dtype: i64,
    gather_axis: i64,
    /// The bmm reading the gathered experts, taken too (`MxGatherMatMul`).
    bmm: Option<Bmm>,
}

impl Rule for MxGatherDequantRule {
    const NAME: &'static str = "mx_gather_dequant";
    type Params = Params;

    fn pattern(&self) -> &Pattern {
        &self.pat
    }

    fn check(
        &self,
        m: &Match<'_>,
        _cfg: &RuleConfig,
    ) -> Result<Fuse<Params>, crate::pattern::Reject> {
        let g = m.graph();
        let (gather, indices, data) = match (m.node(self.gather), m.node(self.gather_w)) {
            (Some(n), _) => (n, m[self.indices], m.get(self.x).or(m.get(self.mx_x))),
            (None, Some(n)) => (n, m[self.indices_w], Some(m[self.w_gathered])),
            (None, None) => return Err(reject!("internal: no Gather node")),
        };
        let data = m
            .get(self.fq_w)
            .or(data)
            .ok_or_else(|| reject!("internal: no data"))?;
        let gname = g.node_label(gather);
        let idx_info = g.tensor_info(indices);
        let idx_type = idx_info.as_ref().map(|i| i.elem_type).unwrap_or(0);
        if idx_type != dtype::INT64 && idx_type != dtype::INT32 {
            return Err(reject!(
                "Gather '{gname}' reads {} indices: MxGatherDequantize takes int32 or int64",
                dtype::name(idx_type)
            ));
        }
        let rank = g
            .tensor_info(data)
            .and_then(|i| i.shape)
            .map(|s| s.len() as i64)
            .ok_or_else(|| {
                reject!(
                    "Gather '{gname}': the rank of the MX values '{}' is unknown",
                    g.value_name(data)
                )
            })?;
        let gather_axis = attr_int(g.attr(gather, "axis"), 0)
            .filter(|a| (-rank..rank).contains(a))
            .ok_or_else(|| reject!("Gather '{gname}': axis is not an int in [-{rank}, {rank})"))?
            .rem_euclid(rank);
        let quark = match (m.node(self.fq), m.node(self.fq_after)) {
            (Some(fq), _) => Some(check_quark_experts(
                g,
                fq,
                data,
                gather_axis as usize,
                None,
            )?),
            (None, Some(fq)) => {
                let idx_rank = idx_info.and_then(|i| i.shape).map(|s| s.len());
                let idx_rank = idx_rank.ok_or_else(|| {
                    reject!("Gather '{gname}': the rank of its indices is unknown")
                })?;
                Some(check_quark_experts(
                    g,
                    fq,
                    data,
                    gather_axis as usize,
                    Some(idx_rank),
                )?)
            }
            (None, None) => None,
        };
        let (source, axis, block_size, output_dtype, experts) = match quark {
            Some(q) => {
                let (q_axis, output_dtype) = (q.axis as i64, q.output_dtype);
                let experts = Experts {
                    elem_type: dtype::FLOAT8E4M3FN,
                    dims: Some(q.dims.iter().map(|&d| d as usize).collect()),
                    axis: q.axis as i64,
                    block_size: 32,
                    output_dtype: q.output_dtype,
                };
                (Source::Quark(q), q_axis, 32, output_dtype, experts)
            }
            None => {
                let (n, x, scale, op) = match (m.node(self.dq), m.node(self.mx_dq)) {
                    (Some(n), _) => (n, m[self.x], m[self.scale], "DequantizeLinear"),
                    (None, Some(n)) => (n, m[self.mx_x], m[self.mx_scale], "MxDequantize"),
                    (None, None) => return Err(reject!("internal: no dequantize node")),
                };
                let (axis, block_size, output_dtype) = dequant_layout(g, n, x, scale, op)?;
                // One scale for the whole tensor gathers along any axis; a per-axis or blocked
                // scale only off its axis (a gather there would split blocks).
                let scale_shape = g.tensor_info(scale).and_then(|i| i.shape);
                let per_tensor = block_size == 0
                    && matches!(scale_shape.as_deref(), Some([]) | Some([Dim::Known(1)]));
                if !per_tensor && axis.rem_euclid(rank) == gather_axis {
                    // Named by the dequantized value, which keeps its name when `mx_dequant`
                    // turns the DequantizeLinear into MxDequantize: the next pass's refusal is
                    // the same line.
                    return Err(reject!(
                        "Gather '{gname}' gathers along the quantized axis {axis} of the MX dequantized '{}': the gathered slices would split scale blocks",
                        g.value_name(g.outputs(n)[0])
                    ));
                }
                let experts = Experts {
                    elem_type: g.tensor_info(x).map(|i| i.elem_type).unwrap_or(0),
                    dims: known_dims(g, x),
                    axis: axis.rem_euclid(rank),
                    block_size,
                    output_dtype,
                };
                (
                    Source::Mx { x, scale },
                    axis,
                    block_size,
                    output_dtype,
                    experts,
                )
            }
        };
        let bmm = if gather_axis == 0 && rank == 3 {
            gathered_bmm(g, m.root(), indices, &experts)
        } else {
            Ok(None)
        };
        let (bmm, note) = match bmm {
            Ok(b) => (b, None),
            Err(why) => (None, Some(why)),
        };
        let mut fuse = Fuse::new(Params {
            source,
            indices,
            y: m.root(),
            axis,
            block_size,
            output_dtype,
            gather_axis,
            bmm,
        });
        if let Some(b) = bmm {
            fuse = fuse.also(b.matmul, [b.y]);
        }
        if let Some(why) = note {
            fuse = fuse.note(format!("the gathered experts' MatMul stays: {why}"));
        }
        Ok(fuse)
    }

    fn rewrite(&self, site: &Site, p: Params, e: &mut Emit<'_>) -> Result<(), String> {
        let (x, scale) = match &p.source {
            Source::Mx { x, scale } => (*x, *scale),
            Source::Quark(q) => prequantize_along(e, q.weight, &q.mx, &q.dims, q.axis)?,
        };
        if let Some(b) = p.bmm {
            let spec = e
                .op("MxGatherMatMul")
                .input(b.act)
                .input(x)
                .input(scale)
                .input(p.indices)
                .attr_int("trans_b", i64::from(b.trans_b))
                .attr_int("output_dtype", p.output_dtype)
                .output(b.y);
            e.add(spec)?;
            if !site.produces(p.y) {
                return Ok(());
            }
        }
        let spec = e
            .op("MxGatherDequantize")
            .input(x)
            .input(scale)
            .input(p.indices)
            .attr_int("axis", p.axis)
            .attr_int("block_size", p.block_size)
            .attr_int("output_dtype", p.output_dtype)
            .attr_int("gather_axis", p.gather_axis)
            .output(p.y);
        e.add(spec)?;
        Ok(())
    }
}
