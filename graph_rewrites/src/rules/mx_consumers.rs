//! The consumer side shared by every MX rule: the MatMuls that read a quantized activation
//! become `com.mxfuse::MxMatMul` on the MXFP8 values + row-major E8M0 scales.
//!
//! Search pattern => y = MatMul(deq(x), W) | Gemm(deq(x), W [, C], transB = 0|1, alpha, beta), read as
//!
//! ```text
//! standard: q, scale ─ DequantizeLinear(axis=-1, block 32) ─ MatMul(·, W) | Gemm(·, W [, C]) = y
//! Quark:    fake-quantized x ───────────────────────────── MatMul(·, W) | Gemm(·, W [, C]) = y
//!   ⇒  MxMatMul(q, scale, W' [, W'_scale] [, C]) = y      (y keeps its name)
//! ```
//!
//! Weight forms W: a float `[K, N]` tensor (kept as is); standard MX — `DequantizeLinear` of
//! FLOAT8E4M3FN `[K, N]` + FLOAT8E8M0 `[K/32, N]` constants (axis 0, block 32; read in place,
//! `trans_b = 0`); MXFP4 — the same with FLOAT4E2M1 values (packed two per byte; `MxMatMul`
//! reads them in place and widens them to E4M3 once, at prepack: every E2M1 value is an E4M3
//! value and the blocks are MXFP8's, so the product is the same; the file stays 4-bit); a Quark
//! fake-quant of a float constant (pre-quantized at rewrite time into `[N, K]` + `[N, K/32]`
//! initializers, `trans_b = 1`). An MX weight that is not a constant is not absorbed: the
//! MatMul is a reader left out (a note), its DequantizeLinear becomes `MxDequantize`.
//!
//! `Gemm` is what exporters emit for a linear layer on a rank-2 activation (torch's
//! `nn.Linear`: `transB = 1`, weight `[N, K]`, bias `C [N]`). With `transA = 0` it is
//! `MxMatMul` with the Gemm's `alpha`, `beta` and bias (its epilogue, docs/ops.md); with
//! `transB = 1` the float weight `[N, K]` (or MX weight `[N, K]` + `[N, K/32]`,
//! `DequantizeLinear(axis=1)`) is read with `trans_b = 1`. C must have the output's type and a
//! known shape that broadcasts unidirectionally to `[M, N]` (`[]`, `[1]`, `[N]`, `[1|M, 1|N]`).
//! A Gemm that cannot be absorbed (another bias, `transA = 1`) keeps the activation's
//! `DequantizeLinear`, which becomes `MxDequantize` (rule `mx_dequant`); a note of the fusion
//! says why.
//! A weight DequantizeLinear / fake-quant node is not removed by the fusion: if nothing else
//! reads it, dead-code elimination does.
//!
//! A MatMul reading `deq(x)` through a flattening `Reshape` (torch.export's `nn.Linear` on
//! `[B, S, K]`) is absorbed too: [`super::flat_linear`].

use crate::onnx_pb::{tensor_proto::DataLocation, TensorProto};
use crate::pattern::predicates::{
    attr_float, attr_int, attr_string, dtype, is_float8_zero, known_dims, mx_scale_layout,
    scale_is_e8m0,
};
use std::sync::Arc;

use crate::pattern::{Emit, Reject};
use crate::reject;
use crate::view::{
    is_quark_mx, ConstBytes, ConstMemo, Dim, GraphView, NodeId, ValueId, MXFUSE_DOMAIN, ONNX_DOMAIN,
};

use super::spellings::modelopt::{e8m0_scales, is_trt_dequantize, sibling_pairs, trt_weight};
use super::spellings::mx_quant::BLOCK;
use super::spellings::rms_norm::fmt_shape;

/// How a consumer MatMul's weight is given.
#[derive(Clone, Debug)]
pub enum Weight {
    /// A float `[K, N]` tensor.
    Float(ValueId),
    /// Standard MX constants, `[K, N]` + `[K/32, N]`, read by the `DequantizeLinear` `dequant`:
    /// E4M3FN (MXFP8) or E2M1 (MXFP4) values.
    Mx {
        values: ValueId,
        scales: ValueId,
        dequant: NodeId,
        /// `MatMul(a, Transpose(DequantizeLinear(W [N, K], axis 1)))`: the Transpose, which
        /// goes with the fusion like the DequantizeLinear (the MatMul reads W with `trans_b`).
        transpose: Option<NodeId>,
    },
    /// The Quark fake-quant node `fake_quant` of the float constant `weight` `[K, N]`, and the
    /// bytes the check quantized it to (the emit stores them).
    QuarkFloat {
        weight: ValueId,
        fake_quant: NodeId,
        mx: Arc<QuarkMx>,
    },
}

/// One MatMul that reads the quantized activation.
#[derive(Clone, Debug)]
pub struct MatMulUse {
    pub node: NodeId,
    pub weight: Weight,
    /// The weight is `[N, K]` (a `Gemm` with `transB = 1`, or a MatMul reading an MX weight
    /// through a Transpose).
    pub trans_b: bool,
    /// A `Gemm`'s `alpha`, `beta` and bias C (1, 1, none for a MatMul).
    pub gemm: GemmTerms,
    pub out: ValueId,
    pub out_dtype: i32,
    /// The MatMul reads the activation through `Reshape(deq(a), [.., K])` (torch's
    /// `view(-1, K)` before `addmm`): the `MxMatMul` reads the un-reshaped MXFP8 values and
    /// scales, and its output is reshaped to the MatMul's (see [`Flat`]).
    pub flat: Option<super::flat_linear::Flat>,
}

/// The parts of `y = alpha · A·B + beta · C` beyond the product.
#[derive(Clone, Debug)]
pub struct GemmTerms {
    pub alpha: f32,
    pub beta: f32,
    /// C, checked to have the output's type and to broadcast to `[M, N]`.
    pub bias: Option<ValueId>,
}

impl Default for GemmTerms {
    fn default() -> Self {
        GemmTerms {
            alpha: 1.0,
            beta: 1.0,
            bias: None,
        }
    }
}

/// The consumers a fusion absorbs.
#[derive(Clone, Debug, Default)]
pub struct Consumers {
    pub matmuls: Vec<MatMulUse>,
    /// Activation DequantizeLinear nodes (standard spelling) absorbed with their MatMuls, and
    /// the weight DequantizeLinears / Quark weight fake-quants (and a weight Transpose between
    /// them and a MatMul) that only absorbed MatMuls read:
    /// `MxMatMul` reads the weight's E4M3 values and E8M0 scales (Quark's: quantized at rewrite
    /// time), so those nodes go with the fusion (in ONNX Runtime, the CPU EP has no kernel for
    /// the former, and the latter would otherwise run every step).
    pub dequant: Vec<NodeId>,
    /// Quark spelling: the fake-quantized float (and its dtype) when something besides the
    /// absorbed MatMuls reads it — the replacement re-creates it as `MxDequantize(q, scale)`.
    pub kept_float: Option<(ValueId, i32)>,
    /// Readers left out of the fusion, and why (reported with the fusion).
    pub notes: Vec<String>,
    /// The run-time block-shape computation of the quantizer (`QuantInfo::shape_nodes`).
    pub shape: Vec<NodeId>,
}

impl Consumers {
    /// Adds the absorbed MatMuls (whose outputs the replacement re-produces) and activation
    /// DequantizeLinears to what a fusion removes.
    pub fn absorb_into<P>(&self, mut fuse: crate::pattern::Fuse<P>) -> crate::pattern::Fuse<P> {
        for u in &self.matmuls {
            fuse = match u.flat.as_ref().and_then(|f| f.back) {
                // The MatMul's only reader, a Reshape back, goes too: its output is produced.
                Some((back, out)) => fuse.also(u.node, []).also(back, [out]),
                None => fuse.also(u.node, [u.out]),
            };
        }
        for d in self.dequant.iter().chain(&self.shape) {
            fuse = fuse.also(*d, []);
        }
        if let Some((v, _)) = self.kept_float {
            fuse.extra_produces.push(v);
        }
        for n in &self.notes {
            fuse = fuse.note(n.clone());
        }
        fuse
    }
}

/// The quantizer attributes every fused op carries: the graph's rule and NaN policy unless the
/// session/CLI settings override them.
#[derive(Clone, Debug)]
pub struct QuantAttrs {
    pub scale_rule: String,
    pub nan_policy: String,
}

impl QuantAttrs {
    pub fn resolve(
        info: &super::spellings::mx_quant::QuantInfo,
        cfg: &crate::pattern::RuleConfig,
    ) -> Self {
        QuantAttrs {
            scale_rule: cfg
                .scale_rule_override
                .clone()
                .unwrap_or_else(|| info.rule.as_str().into()),
            nan_policy: cfg
                .nan_policy
                .clone()
                .unwrap_or_else(|| info.nan_policy.into()),
        }
    }

    /// Writes `block_size`, `scale_rule` and `nan_policy` onto `spec`.
    pub fn apply(&self, spec: crate::pattern::NodeSpec) -> crate::pattern::NodeSpec {
        spec.attr_int("block_size", BLOCK)
            .attr_str("scale_rule", &self.scale_rule)
            .attr_str("nan_policy", &self.nan_policy)
    }
}

pub(crate) fn is_op(g: &dyn GraphView, n: NodeId, domain: &str, op: &str) -> bool {
    g.domain(n) == domain && g.op_type(n) == op
}

/// A weight dequantize node: ONNX `DequantizeLinear`, or `com.mxfuse::MxDequantize` (the same
/// op for an E8M0 scale, bit for bit) — what a fusion re-creates for a shared weight's other
/// readers, so that those fuse in the next pass too, as they do in ONNX Runtime, which gives each
/// reader a `DequantizeLinear` of its own before the EP sees the graph (EnsureUniqueDQForNodeUnit).
pub(crate) fn is_weight_dequantize(g: &dyn GraphView, n: NodeId) -> bool {
    is_op(g, n, ONNX_DOMAIN, "DequantizeLinear") || is_op(g, n, MXFUSE_DOMAIN, "MxDequantize")
}

/// `Gemm(a, W [, C])` attributes MxMatMul computes: `Ok((trans_b, alpha, beta))`, or why not.
fn gemm_attrs(g: &dyn GraphView, mm: NodeId) -> Result<(bool, f32, f32), Reject> {
    let name = g.node_label(mm);
    if attr_int(g.attr(mm, "transA"), 0) != Some(0) {
        return Err(reject!(
            "Gemm '{name}' has transA = 1: the activation must be [M, K]"
        ));
    }
    let (alpha, beta) = (
        attr_float(g.attr(mm, "alpha"), 1.0),
        attr_float(g.attr(mm, "beta"), 1.0),
    );
    let (Some(alpha), Some(beta)) = (
        alpha.filter(|a| a.is_finite()),
        beta.filter(|b| b.is_finite()),
    ) else {
        return Err(reject!(
            "Gemm '{name}' has alpha {alpha:?} / beta {beta:?}: MxMatMul takes finite floats"
        ));
    };
    match attr_int(g.attr(mm, "transB"), 0) {
        Some(0) => Ok((false, alpha, beta)),
        Some(1) => Ok((true, alpha, beta)),
        other => Err(reject!("Gemm '{name}' has transB = {other:?}")),
    }
}

/// The Gemm's bias `c` if MxMatMul can read it: the output's type, a known shape that
/// broadcasts unidirectionally to `[M, N]` (`[]`, `[1]`, `[N]`, `[1|M, 1|N]`; M is the
/// activation's first dim, N the weight's), and not a value the fusion removes.
fn gemm_bias(
    g: &dyn GraphView,
    c: ValueId,
    (a, b): (ValueId, ValueId),
    (m, n): (Option<Dim>, Option<Dim>),
    out_dtype: i32,
) -> Result<ValueId, Reject> {
    let cname = g.value_name(c);
    if c == a || c == b {
        return Err(reject!("bias '{cname}' is the Gemm's own A or B"));
    }
    let info = g.tensor_info(c);
    let elem = info.as_ref().map(|i| i.elem_type).unwrap_or(0);
    if elem != out_dtype {
        return Err(reject!(
            "bias '{cname}' is {}, the output {}: ONNX Gemm's C has the output's type",
            dtype::name(elem),
            dtype::name(out_dtype)
        ));
    }
    // A dim fits when it is 1 or provably the full dim (equal known or equal symbolic values).
    let fits = |d: &Dim, full: &Option<Dim>| {
        *d == Dim::Known(1) || (!matches!(d, Dim::Unknown) && full.as_ref() == Some(d))
    };
    let shape = info.and_then(|i| i.shape);
    let ok = match shape.as_deref() {
        Some([]) => true,
        Some([cn]) => fits(cn, &n),
        Some([cm, cn]) => fits(cm, &m) && fits(cn, &n),
        _ => false,
    };
    if !ok {
        let dim = |d: Option<Dim>| d.map_or("?".to_string(), |d| d.to_string());
        return Err(reject!(
            "bias '{cname}' has shape {}: MxMatMul takes [], [1], [N], [1|M, 1|N] with [M, N] = [{}, {}]",
            fmt_shape(&shape),
            dim(m),
            dim(n)
        ));
    }
    Ok(c)
}

/// N, the weight's output-channel dim (`[K, N]`, or `[N, K]` when `trans_b`), if the shape
/// of the tensor behind it is known.
pub(crate) fn weight_n(g: &dyn GraphView, w: &Weight, trans_b: bool) -> Option<Dim> {
    let (v, trans) = match w {
        Weight::Float(v) => (*v, trans_b),
        Weight::Mx { values, .. } => (*values, trans_b),
        // Quark weights are `[K, N]` constants (`transB = 1` is refused for them).
        Weight::QuarkFloat { weight, .. } => (*weight, false),
    };
    let shape = g.tensor_info(v)?.shape?;
    match shape.as_slice() {
        [d0, d1] => Some(if trans { d0.clone() } else { d1.clone() }),
        _ => None,
    }
}

/// A MatMul (or `Gemm` with `transA = 0`) reading `a` as its first input, with a supported
/// weight and, for a Gemm, a bias MxMatMul can read.
/// `act_dtype` is the dtype of the activation (quantized, or float for rule
/// `mx_weight_matmul`): MatMul's A, B and Y share one type, so it stands in for an output
/// without value_info.
pub(crate) fn matmul_use(
    g: &dyn GraphView,
    mm: NodeId,
    a: ValueId,
    k: i64,
    act_dtype: i32,
) -> Result<MatMulUse, Reject> {
    let name = g.node_label(mm);
    let (trans_b, alpha, beta) = if is_op(g, mm, ONNX_DOMAIN, "MatMul") {
        (false, 1.0, 1.0)
    } else if is_op(g, mm, ONNX_DOMAIN, "Gemm") {
        gemm_attrs(g, mm)?
    } else {
        return Err(reject!(
            "quantized activation is read by {} '{name}', not a MatMul or Gemm",
            g.op_type(mm)
        ));
    };
    let ins = g.inputs(mm);
    if ins.first().copied().flatten() != Some(a) || ins.get(1).copied().flatten() == Some(a) {
        return Err(reject!(
            "{} '{name}' reads the quantized activation as its weight",
            g.op_type(mm)
        ));
    }
    let b = ins
        .get(1)
        .copied()
        .flatten()
        .ok_or_else(|| reject!("MatMul '{name}' has no weight"))?;
    let out = g.outputs(mm)[0];
    let out_dtype = g
        .tensor_info(out)
        .map(|i| i.elem_type)
        .filter(|t| *t != 0)
        .unwrap_or(act_dtype);
    // An MX `[N, K]` weight transposed for a MatMul (the layout torch's Linear stores) is that
    // weight read with trans_b; any other Transpose output is a float weight like any tensor.
    let transposed = plain_transpose(g, b)
        .filter(|_| is_op(g, mm, ONNX_DOMAIN, "MatMul"))
        .and_then(|(t, src)| match classify_weight(g, src, k, true) {
            Ok(Weight::Mx {
                values,
                scales,
                dequant,
                ..
            }) => Some(Weight::Mx {
                values,
                scales,
                dequant,
                transpose: Some(t),
            }),
            _ => None,
        });
    let trans_b = trans_b || transposed.is_some();
    let weight = match transposed {
        Some(w) => w,
        None => classify_weight(g, b, k, trans_b)
            .map_err(|r| reject!("{} '{name}': {}", g.op_type(mm), r.0))?,
    };
    let weight_dtype = match &weight {
        Weight::Float(w) | Weight::QuarkFloat { weight: w, .. } => {
            g.tensor_info(*w).map(|i| i.elem_type).unwrap_or(out_dtype)
        }
        Weight::Mx { .. } => out_dtype,
    };
    if !dtype::ACTIVATION.contains(&out_dtype) || weight_dtype != out_dtype {
        return Err(reject!(
            "MatMul '{name}' output is {} with weight {}: unsupported",
            dtype::name(out_dtype),
            dtype::name(weight_dtype)
        ));
    }
    let bias = match ins.get(2).copied().flatten() {
        Some(c) if is_op(g, mm, ONNX_DOMAIN, "Gemm") => {
            let m = g
                .tensor_info(a)
                .and_then(|i| i.shape)
                .and_then(|s| s.first().cloned());
            let n = weight_n(g, &weight, trans_b);
            Some(
                gemm_bias(g, c, (a, b), (m, n), out_dtype)
                    .map_err(|r| reject!("Gemm '{name}': {}", r.0))?,
            )
        }
        _ => None,
    };
    Ok(MatMulUse {
        node: mm,
        weight,
        trans_b,
        gemm: GemmTerms { alpha, beta, bias },
        out,
        out_dtype,
        flat: None,
    })
}

/// Where a float weight `b` is an MX weight dequantized at run time a few layout ops upstream
/// (`DequantizeLinear` with E8M0 scales, or Quark's fake-quant, reached through Gather /
/// Reshape / Transpose / Squeeze / Unsqueeze / Slice / Cast / Identity): "computed from ... through
/// ...", for a note. `None` for any other float weight.
fn mx_weight_behind(g: &dyn GraphView, b: ValueId) -> Option<String> {
    const LAYOUT_OPS: &[&str] = &[
        "Gather",
        "Reshape",
        "Transpose",
        "Squeeze",
        "Unsqueeze",
        "Slice",
        "Cast",
        "Identity",
    ];
    let mut v = b;
    let mut path: Vec<&str> = Vec::new();
    for _ in 0..4 {
        let (n, _) = g.producer(v)?;
        let mx = (is_op(g, n, ONNX_DOMAIN, "DequantizeLinear") && scale_is_e8m0(g, n))
            || is_quark_mx(g, n)
            || is_trt_dequantize(g, n);
        if mx {
            let through = if path.is_empty() {
                String::new()
            } else {
                format!(" through {}", path.join(" ← "))
            };
            return Some(format!(
                "computed from MX {} '{}'{through}",
                g.op_type(n),
                g.node_label(n)
            ));
        }
        if g.domain(n) != ONNX_DOMAIN || !LAYOUT_OPS.contains(&g.op_type(n)) {
            return None;
        }
        path.push(g.op_type(n));
        v = g.inputs(n).first().copied().flatten()?;
    }
    None
}

/// The Transpose producing `b` and its input, when it swaps the two axes of a rank-2 tensor
/// (`perm = [1, 0]`, or no perm: reversed axes).
pub(crate) fn plain_transpose(g: &dyn GraphView, b: ValueId) -> Option<(NodeId, ValueId)> {
    let (t, _) = g.producer(b)?;
    if !is_op(g, t, ONNX_DOMAIN, "Transpose") {
        return None;
    }
    let src = g.inputs(t).first().copied().flatten()?;
    let rank2 = g
        .tensor_info(src)
        .and_then(|i| i.shape)
        .is_some_and(|s| s.len() == 2);
    let swaps = match g.attr(t, "perm") {
        None => true,
        Some(crate::view::AttrValue::Ints(p)) => p == [1, 0],
        Some(_) => false,
    };
    (rank2 && swaps).then_some((t, src))
}

/// `[K, N]` (`[N, K]` when `trans_b`) with K known and equal to the activation's K.
fn check_kn(g: &dyn GraphView, w: ValueId, k: i64, trans_b: bool) -> Result<(), Reject> {
    let shape = g.tensor_info(w).and_then(|i| i.shape);
    match (shape.as_deref(), trans_b) {
        (Some([Dim::Known(kk), _]), false) | (Some([_, Dim::Known(kk)]), true) if *kk == k => {
            Ok(())
        }
        (other, _) => Err(reject!(
            "weight '{}' has shape {other:?}, expected {}",
            g.value_name(w),
            if trans_b {
                format!("[N, {k}]")
            } else {
                format!("[{k}, N]")
            }
        )),
    }
}

pub(crate) fn classify_weight(
    g: &dyn GraphView,
    b: ValueId,
    k: i64,
    trans_b: bool,
) -> Result<Weight, Reject> {
    if let Some((n, 0)) = g.producer(b) {
        if is_weight_dequantize(g, n) {
            let ins = g.inputs(n);
            let (Some(wq), Some(ws)) = (
                ins.first().copied().flatten(),
                ins.get(1).copied().flatten(),
            ) else {
                return Err(reject!("weight DequantizeLinear lacks inputs"));
            };
            let t = |v| g.tensor_info(v).map(|i| i.elem_type).unwrap_or(0);
            // Blocked along K: axis 0 of `[K, N]`, axis 1 of a Gemm's transposed `[N, K]`.
            let k_axis = if trans_b { [1, -1] } else { [0, -2] };
            let blocked = attr_int(g.attr(n, "axis"), 1).is_some_and(|a| k_axis.contains(&a))
                && attr_int(g.attr(n, "block_size"), 0) == Some(BLOCK);
            // A zero point must be a constant zero (the only one ONNX allows for these types).
            let no_zp = ins
                .get(2)
                .copied()
                .flatten()
                .is_none_or(|z| is_float8_zero(g, z));
            // MXFP4 values are MXFP8 values after widening (same blocks, same scales).
            let mx_values = [dtype::FLOAT8E4M3FN, dtype::FLOAT4E2M1].contains(&t(wq));
            if mx_values && t(ws) == dtype::FLOAT8E8M0 && blocked && no_zp {
                if !(g.is_constant(wq) && g.is_constant(ws)) {
                    // MxMatMul widens an FP4 weight once, when the session loads: a runtime
                    // one would be widened every call, so it stays a DequantizeLinear.
                    return Err(reject!(
                        "{} weight is not constant",
                        if t(wq) == dtype::FLOAT4E2M1 {
                            "MXFP4"
                        } else {
                            "MX"
                        }
                    ));
                }
                check_kn(g, wq, k, trans_b)?;
                // A scale that does not fit the values (an invalid model) was fused and failed
                // at run time in the kernel's own check (new-user probe 7).
                mx_scale_layout(g, n, wq, ws, "weight DequantizeLinear")?;
                return Ok(Weight::Mx {
                    values: wq,
                    scales: ws,
                    dequant: n,
                    transpose: None,
                });
            }
            return Err(reject!(
                "weight DequantizeLinear is not MXFP8/MXFP4 along K (E4M3 or E2M1 + E8M0, axis {}, block 32)",
                if trans_b { 1 } else { 0 }
            ));
        }
        if is_trt_dequantize(g, n) {
            let (values, scales) = trt_weight(g, n, trans_b)?;
            check_kn(g, values, k, trans_b)?;
            return Ok(Weight::Mx {
                values,
                scales,
                dequant: n,
                transpose: None,
            });
        }
        if is_quark_mx(g, n) {
            let w = g
                .inputs(n)
                .first()
                .copied()
                .flatten()
                .ok_or_else(|| reject!("weight fake-quant has no input"))?;
            if trans_b {
                return Err(reject!(
                    "Quark-quantized weight of a Gemm with transB = 1 is not fused"
                ));
            }
            let elem = attr_string(g.attr(n, "element_dtype"), "int8").unwrap_or_default();
            let ok = elem == "fp8_e4m3"
                && attr_int(g.attr(n, "block_size"), 32) == Some(BLOCK)
                && attr_int(g.attr(n, "axis"), 1) == Some(0);
            if !ok {
                return Err(reject!(
                    "weight fake-quant is not MXFP8 along K (fp8_e4m3, block 32, axis 0)"
                ));
            }
            if !g.is_constant(w) {
                return Err(reject!("Quark-quantized weight is not a constant"));
            }
            check_kn(g, w, k, false)?;
            let mx = check_quark_weight_exact(g, w)?;
            return Ok(Weight::QuarkFloat {
                weight: w,
                fake_quant: n,
                mx,
            });
        }
    }
    check_kn(g, b, k, trans_b)?;
    Ok(Weight::Float(b))
}

/// Splits the readers of the dequantized activation `deq` into MatMuls it can absorb and the
/// reasons the others cannot be (a graph output is one such reason). A `Reshape` that keeps the
/// last axis K ([`flat_reshape`]) is looked through: its MatMul readers are absorbed; it goes
/// with the fusion when nothing else reads it (returned in the third list), and otherwise stays
/// for its other readers — then it is itself a reader of `deq` left out.
fn split_readers(
    g: &dyn GraphView,
    deq: ValueId,
    k: i64,
    act_dtype: i32,
) -> (Vec<MatMulUse>, Vec<String>, Vec<NodeId>) {
    let mut uses: Vec<MatMulUse> = Vec::new();
    let mut kept = Vec::new();
    let mut reshapes = Vec::new();
    if g.is_graph_output(deq) {
        kept.push(format!("'{}' is a graph output", g.value_name(deq)));
    }
    for &(r, _) in g.consumers(deq).iter() {
        if uses.iter().any(|u| u.node == r) || reshapes.contains(&r) {
            continue; // listed once per input it reads
        }
        if is_op(g, r, ONNX_DOMAIN, "Reshape")
            && g.inputs(r).first().copied().flatten() == Some(deq)
        {
            let read = super::flat_linear::read_through(g, r, k, act_dtype);
            if read.absorbed {
                reshapes.push(r);
            }
            kept.extend(read.kept);
            uses.extend(read.uses);
            continue;
        }
        match matmul_use(g, r, deq, k, act_dtype) {
            Ok(u) => uses.push(u),
            Err(why) => kept.push(why.0),
        }
    }
    kept.dedup();
    (uses, kept, reshapes)
}

/// Consumers of a standard-spelling quantizer: the MatMuls (and Gemms `matmul_use` accepts)
/// reading each `DequantizeLinear(q, scale)` (last axis, block 32) are absorbed. A
/// DequantizeLinear with no other reader goes with them; one that also has other readers (an
/// Add, a Gemm with transA or a bias that does not broadcast, a graph output) stays for those and becomes `MxDequantize` (rule `mx_dequant`, which runs once
/// the fusions are done: ONNX Runtime's CPU EP has no E8M0 `DequantizeLinear` kernel). Each
/// reader left out is a note of the fusion. q/scale stay produced for every reader outside.
pub fn standard_consumers(
    g: &dyn GraphView,
    q: ValueId,
    scale: ValueId,
    k: i64,
    act_dtype: i32,
) -> Result<Consumers, Reject> {
    let mut c = Consumers::default();
    for &(dq, _) in g.consumers(q).iter() {
        if !is_op(g, dq, ONNX_DOMAIN, "DequantizeLinear") || c.dequant.contains(&dq) {
            continue;
        }
        let ins = g.inputs(dq);
        let dq_name = g.node_label(dq);
        // A zero point must be a constant float8 zero (the only one ONNX allows for float8):
        // (q - 0) · scale is what the fused GEMM reads.
        let zero_point_ok = ins
            .get(2)
            .copied()
            .flatten()
            .is_none_or(|z| is_float8_zero(g, z));
        let rank = g
            .tensor_info(q)
            .and_then(|i| i.shape)
            .map(|s| s.len() as i64)
            .unwrap_or(0);
        let axis = attr_int(g.attr(dq, "axis"), 1).unwrap_or(i64::MIN);
        let last = axis == -1 || axis == rank - 1;
        let block = attr_int(g.attr(dq, "block_size"), 0);
        let why_not = if ins.get(1).copied().flatten() != Some(scale) {
            Some("it reads another scale".to_string())
        } else if !zero_point_ok {
            Some("its zero point is not a constant zero".to_string())
        } else if !last || block != Some(BLOCK) {
            Some(format!(
                "it dequantizes axis {axis} in blocks of {}, not the last axis in blocks of {BLOCK}",
                block.unwrap_or(-1)
            ))
        } else {
            None
        };
        if let Some(why) = why_not {
            // Left alone; q/scale stay produced for it (and `mx_dequant` runs it).
            c.notes.push(format!(
                "DequantizeLinear '{dq_name}' of the quantized value is not absorbed: {why}"
            ));
            continue;
        }
        let (uses, kept, reshapes) = split_readers(g, g.outputs(dq)[0], k, act_dtype);
        c.dequant.extend(reshapes);
        for why in &kept {
            c.notes.push(format!(
                "DequantizeLinear '{dq_name}' stays (as MxDequantize) for a reader not absorbed: {why}"
            ));
        }
        if kept.is_empty() && !uses.is_empty() {
            c.dequant.push(dq);
        }
        c.matmuls.extend(uses);
    }
    Ok(c)
}

/// Consumers of a Quark fake-quantized activation: the MatMuls reading it are absorbed; when
/// anything else reads it (or it is a graph output) the fusion re-creates the fake-quantized
/// float as `MxDequantize(q, scale)` — exactly Quark's quantize-then-decode.
pub fn quark_consumers(
    g: &dyn GraphView,
    fake: ValueId,
    k: i64,
    act_dtype: i32,
) -> Result<Consumers, Reject> {
    if g.consumers(fake).is_empty() && !g.is_graph_output(fake) {
        return Err(reject!(
            "fake-quantized '{}' is not read",
            g.value_name(fake)
        ));
    }
    let (matmuls, kept, reshapes) = split_readers(g, fake, k, act_dtype);
    let notes = kept
        .iter()
        .map(|why| {
            format!(
                "fake-quantized '{}' is re-created (MxDequantize) for a reader not absorbed: {why}",
                g.value_name(fake)
            )
        })
        .collect();
    Ok(Consumers {
        matmuls,
        dequant: reshapes,
        kept_float: (!kept.is_empty()).then_some((fake, act_dtype)),
        notes,
        shape: Vec::new(),
    })
}

/// Emits the `MxDequantize` that re-creates a Quark fake-quantized float other readers need.
pub fn emit_kept_float(
    e: &mut Emit<'_>,
    c: &Consumers,
    q: ValueId,
    scale: ValueId,
) -> Result<(), String> {
    if let Some((v, dt)) = c.kept_float {
        emit_mx_dequantize(e, (q, scale), -1, dt as i64, v)?;
    }
    Ok(())
}

/// Emits `out = MxDequantize(x, scale)` blocked 32 along `axis`, writing `output_dtype`.
pub fn emit_mx_dequantize(
    e: &mut Emit<'_>,
    (x, scale): (ValueId, ValueId),
    axis: i64,
    output_dtype: i64,
    out: ValueId,
) -> Result<(), String> {
    let spec = e
        .op("MxDequantize")
        .input(x)
        .input(scale)
        .attr_int("axis", axis)
        .attr_int("block_size", BLOCK)
        .attr_int("output_dtype", output_dtype)
        .output(out);
    e.add(spec).map(|_| ())
}

/// Whether every output of node `n` is read only by `readers` (and is not a graph output).
pub(crate) fn only_read_by(g: &dyn GraphView, n: NodeId, readers: &[NodeId]) -> bool {
    g.outputs(n)
        .iter()
        .all(|&o| !g.is_graph_output(o) && g.consumers(o).iter().all(|(r, _)| readers.contains(r)))
}

/// Emits one `MxMatMul` per absorbed MatMul, reading `q` and `scale` — or, with no `scale`
/// (rule `mx_weight_matmul`), the float activation `q` with an empty `a_scale`.
pub fn emit_matmuls(
    e: &mut Emit<'_>,
    c: &Consumers,
    q: ValueId,
    scale: Option<ValueId>,
) -> Result<(), String> {
    for u in &c.matmuls {
        let (b, b_scale, trans_b) = match &u.weight {
            Weight::Float(w) => (*w, None, u.trans_b),
            Weight::Mx { values, scales, .. } => {
                (*values, Some(e8m0_scales(e, *scales)?), u.trans_b)
            }
            Weight::QuarkFloat { weight, mx, .. } => {
                let (vals, scales) = prequantize_weight(e, *weight, mx)?;
                (vals, Some(scales), true)
            }
        };
        let mut spec = e.op("MxMatMul").input(q).input_opt(scale).input(b);
        // Optional inputs and attributes only where they differ from a plain product (an empty
        // `b_scale` name in front of a float weight's bias, as ONNX skips optional inputs).
        if b_scale.is_some() || u.gemm.bias.is_some() {
            spec = spec.input_opt(b_scale);
        }
        if let Some(c) = u.gemm.bias {
            spec = spec.input(c);
            if u.gemm.beta != 1.0 {
                spec = spec.attr_float("beta", u.gemm.beta);
            }
        }
        if u.gemm.alpha != 1.0 {
            spec = spec.attr_float("alpha", u.gemm.alpha);
        }
        let spec = spec
            .attr_int("trans_b", trans_b as i64)
            .attr_int("output_dtype", u.out_dtype as i64);
        let Some(flat) = &u.flat else {
            e.add(spec.output(u.out))?;
            continue;
        };
        super::flat_linear::emit_unflattened(e, spec, u, flat, q)?;
    }
    Ok(())
}

/// A Quark fake-quantized weight quantized at rewrite time (OCP floor along K, as Quark's op
/// does) and checked exact ([`check_quark_weight_exact`]): `[N, K]` E4M3 values and `[N, K/32]`
/// E8M0 scales. Quantized along another axis of any rank ([`check_quark_exact_along`]), N counts
/// the blocks' rows: every index but the quantized one, in the tensor's order. The check's bytes
/// are the ones the emit stores (carried in [`Weight::QuarkFloat`]); within one scan of the rules
/// every check of the same weight shares them ([`crate::view::ConstMemo`]), so a weight several
/// MatMuls read is quantized once and each gets the same bytes. Across scans,
/// [`crate::pipeline::weight_checks`] keeps a pipeline run's refusals and an EP session's verdicts
/// (`Compile` reuses `GetCapability`'s bytes).
#[derive(Debug)]
pub struct QuarkMx {
    pub k: usize,
    pub n: usize,
    pub values: Vec<u8>,
    pub scales: Vec<u8>,
}

/// Refuses a Quark fake-quantized constant weight `w` (`MXQuantizeDequantize(fp8_e4m3, block 32,
/// axis 0)` of a `[K, N]` float constant) unless the E4M3 values and E8M0 scales the rewrite
/// stores for it (returned, [`QuarkMx`]) dequantize to exactly what the unfused fake-quant node
/// writes: Quark's kernel (`kernels::reference::quark_mx`) in f32, rounded to the weight's type
/// (float16 / bfloat16). Checked element by element (NaN matches NaN, ±0 match), so it holds
/// whatever the weight holds. Blocks it refuses: a ±Inf in a block (Quark passes it through
/// and scales the block from the finite elements; E4M3 has no Inf, the element becomes NaN —
/// a NaN element is NaN on both sides), blocks whose largest exponent is below 2^-119
/// (Quark's scale 2^(e − 135) is then below E8M0's smallest, 2^-127, and keeps bits E8M0 cannot;
/// zero blocks are exact), and float16 / bfloat16 weights whose fake-quantized values that type
/// rounds (the unfused output is rounded to it, MxMatMul reads the E4M3 · scale product exactly).
/// Memoized per scan ([`GraphView::memo`]): each weight is read, quantized and checked once.
/// Beyond the scan, where the memo has [`WeightChecks`] (a pipeline run: its refusals; an EP
/// session: `GetCapability`'s verdicts and bytes, which `Compile` reuses), a weight with the
/// same name, types and bytes is not checked again.
///
/// [`WeightChecks`]: crate::pipeline::weight_checks::WeightChecks
pub(crate) fn check_quark_weight_exact(
    g: &dyn GraphView,
    w: ValueId,
) -> Result<Arc<QuarkMx>, Reject> {
    check_quark_exact_along(g, w, 0)
}

/// The bytes of the Quark-quantized constant `w`, up to the Quark weight cap (setting
/// `quark_weight_max_mib`, [`ConstMemo::quark_max_bytes`]; 4 GiB by default): far above other
/// constants' 64 MiB, since the stored MXFP8 weight is a quarter of an f32 one and the check runs
/// at about the speed of reading. Borrowed where the view holds them ([`GraphView::const_bytes`]):
/// no copy of a gigabyte of experts beside ONNX Runtime's or the model's own. A weight over the
/// cap is refused with its size and the setting that raises it.
fn read_quark_weight(g: &dyn GraphView, w: ValueId) -> Result<ConstBytes<'_>, String> {
    let cap = g.memo().map_or(
        crate::ir::QUARK_WEIGHT_MAX_BYTES,
        ConstMemo::quark_max_bytes,
    );
    let name = g.value_name(w);
    let info = g.tensor_info(w);
    let bits = info
        .as_ref()
        .and_then(|i| crate::ir::elem_size_bits(i.elem_type));
    let count = known_dims(g, w).map(|d| d.iter().product::<usize>() as u64);
    if let (Some(bits), Some(count)) = (bits, count) {
        let bytes = count * bits / 8;
        if bytes > cap {
            return Err(format!(
                "the Quark-quantized weight '{name}' is {} MiB, over the {} MiB the rewrite reads \
                 for a Quark weight (setting quark_weight_max_mib): it stays fake-quantized at \
                 run time",
                bytes.div_ceil(1 << 20),
                cap >> 20
            ));
        }
    }
    g.const_bytes(w, cap)
        .ok_or_else(|| format!("weight '{name}' could not be read"))
}

/// [`check_quark_weight_exact`] for a constant `w` of any rank fake-quantized along `axis`
/// (normalized; `MXQuantizeDequantize(fp8_e4m3, block 32, axis)`, e.g. stacked MoE experts
/// `[E, N, K]` along 2): the blocks' rows in the tensor's order ([`QuarkMx`]), the same check,
/// memoized and kept across scans the same way (the axis is part of the key).
pub(crate) fn check_quark_exact_along(
    g: &dyn GraphView,
    w: ValueId,
    axis: usize,
) -> Result<Arc<QuarkMx>, Reject> {
    let make = || {
        let t = read_quark_weight(g, w)?;
        let check = || super::quark_check::quantize_quark_weight(g, w, &t, axis).map_err(|r| r.0);
        match g.memo().and_then(ConstMemo::weight_checks) {
            Some(checks) => checks.verdict(g, w, &t, axis, check),
            None => check().map(Arc::new),
        }
    };
    // The memo holds one check per value: another axis's (a constant two fake-quants read
    // along different axes) is not this one.
    match g.memo().map(|memo| memo.get_or_make(w, || (axis, make()))) {
        Some((a, r)) if a == axis => r,
        _ => make(),
    }
    .map_err(Reject)
}

/// Stores a checked Quark weight `w` ([`QuarkMx`]) as new initializers: `[N, K]` E4M3 values
/// and `[N, K/32]` E8M0 scales.
fn prequantize_weight(
    e: &mut Emit<'_>,
    w: ValueId,
    mx: &QuarkMx,
) -> Result<(ValueId, ValueId), String> {
    prequantize(e, w, mx, false)
}

/// [`prequantize_weight`] in the `[K, N]` layout: values `[K, N]`, scales `[K/32, N]` (ONNX
/// `DequantizeLinear(axis = 0, block_size = 32)`'s, read by `MxMatMul` with `trans_b = 0` and by
/// an `MxDequantize(axis = 0)` that re-creates the fake-quantized weight for other readers).
pub fn prequantize_weight_kn(
    e: &mut Emit<'_>,
    w: ValueId,
    mx: &QuarkMx,
) -> Result<(ValueId, ValueId), String> {
    prequantize(e, w, mx, true)
}

fn prequantize(
    e: &mut Emit<'_>,
    w: ValueId,
    mx: &QuarkMx,
    kn: bool,
) -> Result<(ValueId, ValueId), String> {
    let (k, n) = (mx.k as i64, mx.n as i64);
    if kn {
        store_along(e, w, mx, (&[k, n], 0), "_kn")
    } else {
        let (vdims, sdims) = (vec![n, k], vec![n, k / 32]);
        let name = e.graph().value_name(w).to_string();
        Ok(store_mx(
            e,
            &name,
            "",
            (mx.values.clone(), vdims),
            (mx.scales.clone(), sdims),
        ))
    }
}

/// Stores a Quark weight `w` of dims `dims` checked along `axis` ([`check_quark_exact_along`])
/// in its own layout, as `DequantizeLinear(axis, block_size = 32)` reads it: values of `dims`,
/// scales of `dims` with `dims[axis] / 32` ([`prequantize_weight_kn`] is the `[K, N]` case).
pub fn prequantize_along(
    e: &mut Emit<'_>,
    w: ValueId,
    mx: &QuarkMx,
    dims: &[i64],
    axis: usize,
) -> Result<(ValueId, ValueId), String> {
    store_along(e, w, mx, (dims, axis), "")
}

/// [`prequantize_along`] with the initializers' name suffix.
fn store_along(
    e: &mut Emit<'_>,
    w: ValueId,
    mx: &QuarkMx,
    (dims, axis): (&[i64], usize),
    suffix: &str,
) -> Result<(ValueId, ValueId), String> {
    let name = e.graph().value_name(w).to_string();
    let k = mx.k;
    let inner = dims[axis + 1..].iter().product::<i64>() as usize;
    // Rows (outer, inner) of K → [outer, K, inner]: a transpose within each outer index.
    let relayout = |v: &[u8], kb: usize| {
        if inner == 1 {
            return v.to_vec();
        }
        let mut o = vec![0u8; v.len()];
        for (src, dst) in v.chunks(inner * kb).zip(o.chunks_mut(inner * kb)) {
            for r in 0..inner {
                for c in 0..kb {
                    dst[c * inner + r] = src[r * kb + c];
                }
            }
        }
        o
    };
    let mut sdims = dims.to_vec();
    sdims[axis] /= 32;
    let values = (relayout(&mx.values, k), dims.to_vec());
    let scales = (relayout(&mx.scales, k / 32), sdims);
    Ok(store_mx(e, &name, suffix, values, scales))
}

/// New initializers `{name}_mxfp8{suffix}` (E4M3 values) and `..._scale` (E8M0 scales).
fn store_mx(
    e: &mut Emit<'_>,
    name: &str,
    suffix: &str,
    (vals, vdims): (Vec<u8>, Vec<i64>),
    (scales, sdims): (Vec<u8>, Vec<i64>),
) -> (ValueId, ValueId) {
    let proto = |name: String, dt: i32, dims: Vec<i64>, raw: Vec<u8>| TensorProto {
        name: Some(name),
        data_type: Some(dt),
        dims,
        raw_data: Some(raw),
        data_location: Some(DataLocation::Default as i32),
        ..Default::default()
    };
    let vname = format!("{name}_mxfp8{suffix}");
    let sname = format!("{name}_mxfp8{suffix}_scale");
    let tv = proto(vname.clone(), dtype::FLOAT8E4M3FN, vdims, vals);
    let ts = proto(sname.clone(), dtype::FLOAT8E8M0, sdims, scales);
    (e.initializer(&vname, tv), e.initializer(&sname, ts))
}

/// The values a fused quantizer writes: the graph's own `q`/`scale` when something outside the
/// fusion still reads them (they keep their names), fresh values otherwise.
pub fn quant_outputs(
    e: &mut Emit<'_>,
    site: &crate::pattern::Site,
    x: ValueId,
    q: Option<ValueId>,
    scale: Option<ValueId>,
) -> (ValueId, ValueId) {
    let shape = e.graph().tensor_info(x).and_then(|i| i.shape);
    let mut scale_shape = shape.clone();
    if let Some(Some(Dim::Known(k))) = scale_shape.as_mut().map(|s| s.last_mut()) {
        *k /= BLOCK;
    }
    let base = e.graph().value_name(x).to_string();
    let mut pick = |existing: Option<ValueId>,
                    suffix: &str,
                    elem_type: i32,
                    shape: Option<Vec<Dim>>| match existing {
        Some(v) if site.produces(v) => v,
        _ => e.value(
            &format!("{base}_{suffix}"),
            Some(crate::view::TensorInfo { elem_type, shape }),
        ),
    };
    let qv = pick(q, "mxfp8", dtype::FLOAT8E4M3FN, shape);
    let sv = pick(scale, "mxfp8_scale", dtype::FLOAT8E8M0, scale_shape);
    (qv, sv)
}

/// The consumers of whichever quantize spelling matched.
pub fn consumers_for(
    g: &dyn GraphView,
    info: &super::spellings::mx_quant::QuantInfo,
) -> Result<Consumers, Reject> {
    let mut c = match (info.fake_out, info.q, info.scale) {
        (Some(fake), _, _) => quark_consumers(g, fake, info.k, info.dtype)?,
        (None, Some(q), Some(s)) => standard_consumers(g, q, s, info.k, info.dtype)?,
        _ => return Err(reject!("internal: quantize spelling without outputs")),
    };
    c.shape = info.shape_nodes.clone();
    // ModelOpt's per-Linear quantizers of the same activation: a sibling pair whose readers
    // are all absorbed MatMuls goes with the fusion, its MatMuls reading this quantizer's bytes.
    if let Some(fake) = info.fake_out {
        for (qn, dqn, out) in sibling_pairs(g, fake) {
            let (uses, kept, reshapes) = split_readers(g, out, info.k, info.dtype);
            if kept.is_empty() && !uses.is_empty() {
                c.matmuls.extend(uses);
                c.dequant.extend(reshapes);
                c.dequant.extend([qn, dqn]);
            }
        }
    }
    let absorbed: Vec<NodeId> = c.matmuls.iter().map(|u| u.node).collect();
    for u in &c.matmuls {
        if let Weight::Float(b) = u.weight {
            if let Some(why) = mx_weight_behind(g, b) {
                // Through a Transpose the MX weight was tried (MatMul) and refused: say why.
                let refused = plain_transpose(g, b)
                    .filter(|_| is_op(g, u.node, ONNX_DOMAIN, "MatMul"))
                    .and_then(|(_, src)| classify_weight(g, src, info.k, true).err());
                let because = match refused {
                    Some(r) => format!("it was not read as MX: {}", r.0),
                    None => "an MX weight is read as MX only from a DequantizeLinear feeding \
                             the MatMul directly or, for a MatMul, through a Transpose"
                        .to_string(),
                };
                c.notes.push(format!(
                    "{} '{}' reads weight '{}' as floats {why}: that dequantization runs every \
                     step ({because})",
                    g.op_type(u.node),
                    g.node_label(u.node),
                    g.value_name(b)
                ));
            }
        }
    }
    for u in &c.matmuls {
        // The weight's DequantizeLinear or Quark fake-quant goes with the fusion when only the
        // absorbed MatMuls read it: the rewrite reads the constant behind it, so a claim without
        // it (the EP's) would see only a runtime float input at Compile and take another path.
        let (dequant, transpose) = match u.weight {
            Weight::Mx {
                dequant, transpose, ..
            } => (dequant, transpose),
            Weight::QuarkFloat { fake_quant, .. } => (fake_quant, None),
            Weight::Float(_) => continue,
        };
        // A Transpose between them goes first; the DequantizeLinear then when only it, or only
        // absorbed MatMuls, read it.
        let mut readers = absorbed.clone();
        if let Some(t) = transpose {
            if !only_read_by(g, t, &absorbed) {
                continue;
            }
            if !c.dequant.contains(&t) {
                c.dequant.push(t);
            }
            readers.push(t);
        }
        if only_read_by(g, dequant, &readers) && !c.dequant.contains(&dequant) {
            c.dequant.push(dequant);
        }
    }
    Ok(c)
}
