//! The SwiGLU spellings rule `swiglu_mxquant_matmul` starts with.
//!
//! Search pattern => act = SwiGLU(gate, up), spelled as any of
//!
//! ```text
//! gate, up = any two values; a Split / two Slices behind them are absorbed when the fused op
//!            can read their input instead (see [`super::gate_up`])
//! SiLU·up:    Sigmoid(g) ─ Mul(g, σ) ─ Mul(·, up)
//! SwiGLU-OAI: g = Clip(gate, max=L) | Min(gate, L);
//!             u = Clip(up, -L, L) | Max(Min(up, L), -L) | Min(Max(up, -L), L) ─ Add(β)
//!             (Clip-11+ bounds are inputs; Clip-1/6, opset < 11, attributes: see [`clip_bound`])
//!             Mul(g, α) ─ Sigmoid ─ Mul(g, σ) ─ Mul(·, u)
//! one-op:     com.microsoft::QuickGelu(g, α)·u;  Swish(g, α)·u  (opset 24);  SwiGLU(g, u) (opset 28)
//! ```
//!
//! Key points:
//! * One pattern covers every spelling: the clamps, `+β`, `Mul(α)` are optional pieces and the
//!   check refuses combinations that are not SiLU·up or complete SwiGLU-OAI.
//! * Each ONNX op rounds its output to T; `Swish`/`SwiGLU` are defined by their function bodies
//!   (unrolled: `Mul(α) → Sigmoid → Mul`), so only `QuickGelu` is a single rounding
//!   (`swish_form = single_op`).
//! * gate and up must have the same shape: a broadcasting Mul is not what the kernel computes.
//! * α, β and a `Min` / `Max` limit may be stored as a vector (`[I]`) of one repeated value: taken
//!   when the elements are bit-equal and the vector broadcasts into gate's shape unchanged
//!   (`uniform`); unequal values are refused (the fused op takes one).
//!
//! Not handled: Casts inside the activation, a Clip on the gate with a lower bound (also a
//! Clip-6 gate clamp: its absent `min` is the lowest float, which clamps -inf). (The gate/up
//! sources [`super::gate_up`] cannot absorb are not refused: gate and up are read as they are.)

use super::gate_up::{check_gate_up, gate_up, GateUpPat, GateUpSource};
use crate::pattern::opsets::since_version;
use crate::pattern::predicates::{attr_float, dtype, scalar_f64, values_f64};
use crate::pattern::{Match, OpId, Pat, Reject, N, V};
use crate::reject;
use crate::view::{Dim, GraphView, NodeId, ValueId, MS_DOMAIN, ONNX_DOMAIN};

/// Handles of the SwiGLU subpattern.
#[derive(Clone, Copy, Debug)]
pub struct SwigluPat {
    /// The activation (the quantizer's input).
    pub act: V,
    /// Where gate and up come from.
    pub src: GateUpPat,
    pub clip_gate: N,
    pub min_gate: N,
    pub gate_limit: V,
    pub clip_up: N,
    /// `Max(Min(up, hi), lo)` and `Min(Max(up, lo), hi)`: the outer node of each.
    pub max_min_up: N,
    pub min_max_up: N,
    pub up_lo: V,
    pub up_hi: V,
    pub up_lo2: V,
    pub up_hi2: V,
    pub add_beta: N,
    pub beta: V,
    pub mul_alpha: N,
    pub alpha: V,
    pub sigmoid_mul: N,
    pub quick_gelu: N,
    pub swish: N,
    pub act_mul: N,
    pub swiglu: N,
}

fn onnx(op: &'static str) -> OpId {
    OpId::new(ONNX_DOMAIN, op)
}

/// Declares every SwiGLU spelling; `act` is the activation.
pub fn swiglu(p: &mut Pat) -> SwigluPat {
    let src = gate_up(p);
    let (gate, up) = (src.gate, src.up);
    // OAI clamps (min / max inputs of Clip are optional: the check reads them).
    let clip_gate = p.op(onnx("Clip")).args([gate]).extra_inputs().node();
    let gate_limit = p.konst("gate_limit");
    let min_gate = p
        .op(onnx("Min"))
        .args([gate, gate_limit])
        .commutative()
        .node();
    let (cg, mg) = (p.out(clip_gate, 0), p.out(min_gate, 0));
    let g = p.any_of("gate_clamped", [cg, mg, gate]);
    let clip_up = p.op(onnx("Clip")).args([up]).extra_inputs().node();
    let cu = p.out(clip_up, 0);
    // The same clamp as two ops (exporters given tensor bounds; Min/Max keep NaN like Clip in
    // ORT, checked in f32 and f16), in either order: for lo < hi both are clamp(up, lo, hi).
    let (up_lo, up_hi) = (p.konst("up_lo"), p.konst("up_hi"));
    let min_first = p.op(onnx("Min")).args([up, up_hi]).commutative().out();
    let max_min_up = p
        .op(onnx("Max"))
        .args([min_first, up_lo])
        .commutative()
        .node();
    let (up_lo2, up_hi2) = (p.konst("up_lo2"), p.konst("up_hi2"));
    let max_first = p.op(onnx("Max")).args([up, up_lo2]).commutative().out();
    let min_max_up = p
        .op(onnx("Min"))
        .args([max_first, up_hi2])
        .commutative()
        .node();
    let (mmu, mxu) = (p.out(max_min_up, 0), p.out(min_max_up, 0));
    let u = p.any_of("up_clamped", [cu, mmu, mxu, up]);
    let beta = p.konst("beta");
    let add_beta = p.op(onnx("Add")).args([u, beta]).commutative().node();
    let ab = p.out(add_beta, 0);
    let ub = p.any_of("up_plus_beta", [ab, u]);
    // gate·σ(α·gate).
    let alpha = p.konst("alpha");
    let mul_alpha = p.op(onnx("Mul")).args([g, alpha]).commutative().node();
    let ma = p.out(mul_alpha, 0);
    let z = p.any_of("sigmoid_input", [ma, g]);
    let sig = p.op(onnx("Sigmoid")).args([z]).out();
    let sigmoid_mul = p.op(onnx("Mul")).args([g, sig]).commutative().node();
    let quick_gelu = p.op(OpId::new(MS_DOMAIN, "QuickGelu")).args([g]).node();
    let swish = p.op(onnx("Swish")).args([g]).node();
    let (sm, qg, sw) = (p.out(sigmoid_mul, 0), p.out(quick_gelu, 0), p.out(swish, 0));
    let glu = p.any_of("swish", [sm, qg, sw]);
    let act_mul = p.op(onnx("Mul")).args([glu, ub]).commutative().node();
    let swiglu = p.op(onnx("SwiGLU")).args([g, ub]).node();
    let (am, sg) = (p.out(act_mul, 0), p.out(swiglu, 0));
    let act = p.any_of("swiglu_act", [am, sg]);
    SwigluPat {
        act,
        src,
        clip_gate,
        min_gate,
        gate_limit,
        clip_up,
        max_min_up,
        min_max_up,
        up_lo,
        up_hi,
        up_lo2,
        up_hi2,
        add_beta,
        beta,
        mul_alpha,
        alpha,
        sigmoid_mul,
        quick_gelu,
        swish,
        act_mul,
        swiglu,
    }
}

/// What the matched activation computes, as `SwiGluMxQuant` attributes.
#[derive(Clone, Debug)]
pub struct SwigluSpec {
    /// What the fused op reads, and the Split / Slices it absorbs.
    pub source: GateUpSource,
    /// `"silu"` or `"oai"`.
    pub activation: &'static str,
    pub alpha: f32,
    pub limit: f32,
    pub beta: f32,
    /// `"unrolled"` or `"single_op"`.
    pub swish_form: &'static str,
}

fn elem(g: &dyn GraphView, v: ValueId) -> i32 {
    g.tensor_info(v).map(|i| i.elem_type).unwrap_or(0)
}

fn shape(g: &dyn GraphView, v: ValueId) -> Option<Vec<Dim>> {
    g.tensor_info(v).and_then(|i| i.shape)
}

fn scalar(g: &dyn GraphView, v: ValueId, what: &str) -> Result<f64, Reject> {
    g.const_value(v)
        .and_then(|t| scalar_f64(&t))
        .ok_or_else(|| {
            reject!(
                "{what} '{}' is not a readable scalar constant",
                g.value_name(v)
            )
        })
}

/// The value of a constant an elementwise op of the activation reads (α, a `Min` / `Max` limit,
/// β): a one-element constant (its rank is `keeps_gate_shape`'s check), or a vector of equal
/// elements — an export's `[I]` α of 1.702 or limit of 7 — that broadcasts into gate's shape
/// `gs` without changing it (each dim 1 or gate's known dim, no more dims): elementwise, every
/// element then does what the one value does, so the fused op's scalar attribute computes the
/// same bits. Equal means bit-equal (0.0 and -0.0, or two NaNs of other payloads, are not).
fn uniform(g: &dyn GraphView, v: ValueId, what: &str, gs: &[Dim]) -> Result<f64, Reject> {
    let t = g.const_value(v);
    let values = t.as_ref().and_then(values_f64).unwrap_or_default();
    let (Some(t), Some(&first)) = (t, values.first()) else {
        return Err(reject!(
            "{what} '{}' is not a readable constant",
            g.value_name(v)
        ));
    };
    if values.len() == 1 {
        return Ok(first);
    }
    let width = t.raw.len() / values.len();
    if t.raw.chunks_exact(width).any(|e| e != &t.raw[..width]) {
        return Err(reject!(
            "{what} '{}' holds {} values that are not all equal: the fused op takes one {what}",
            g.value_name(v),
            values.len()
        ));
    }
    let fits = t.dims.len() <= gs.len()
        && t.dims
            .iter()
            .rev()
            .zip(gs.iter().rev())
            .all(|(&d, gd)| d == 1 || *gd == Dim::Known(d));
    if !fits {
        let dims = Some(t.dims.iter().map(|&d| Dim::Known(d)).collect());
        return Err(reject!(
            "{what} '{}' {} does not broadcast into gate's shape {} unchanged",
            g.value_name(v),
            super::rms_norm::fmt_shape(&dims),
            super::rms_norm::fmt_shape(&Some(gs.to_vec()))
        ));
    }
    Ok(first)
}

/// An optional Clip bound (`slot` 1 = min, 2 = max): `None` when absent.
///
/// Clip-1/6 (opset < 11) state the bounds as `min` / `max` attributes, and an absent one is
/// not "no bound" there but the schema's default, the lowest / largest float: such a Clip still
/// clamps ∓inf to ∓FLT_MAX, which an unbounded clamp does not. So an attribute bound, stated or
/// default, is always `Some` (reading only the inputs took a Clip-6's stated `max` for none).
fn clip_bound(g: &dyn GraphView, n: NodeId, slot: usize) -> Result<Option<f64>, Reject> {
    if since_version(g, ONNX_DOMAIN, "Clip").is_some_and(|v| v < 11) {
        let (name, default) = if slot == 1 {
            ("min", f32::MIN)
        } else {
            ("max", f32::MAX)
        };
        return attr_float(g.attr(n, name), default)
            .map(|b| Some(f64::from(b)))
            .ok_or_else(|| reject!("Clip '{}' attribute {name} is not a float", g.node_name(n)));
    }
    match g.inputs(n).get(slot).copied().flatten() {
        None => Ok(None),
        Some(v) if g.is_constant(v) => scalar(g, v, "Clip bound").map(Some),
        Some(v) => Err(reject!(
            "Clip '{}' bound '{}' is not a constant{}",
            g.node_name(n),
            g.value_name(v),
            crate::view::not_constant_note(g, v)
        )),
    }
}

/// Checks the matched activation. `t` and `i` are the dtype and last dim of `act`.
pub fn check_swiglu(m: &Match<'_>, h: &SwigluPat, t: i32, i: i64) -> Result<SwigluSpec, Reject> {
    let g = m.graph();
    let (gate, up) = (m[h.src.gate], m[h.src.up]);
    // e.g. act = silu(g)·σ(g): "up" would be the Sigmoid the fusion removes.
    let inside = |vs: Vec<ValueId>| match vs.into_iter().find(|v| m.produces_inside(*v)) {
        Some(v) => Err(reject!(
            "fused input '{}' is computed inside the fusion",
            g.value_name(v)
        )),
        None => Ok(()),
    };
    inside(vec![gate, up])?;
    for v in [gate, up] {
        if elem(g, v) != t {
            return Err(reject!(
                "'{}' is {}, the activation {}",
                g.value_name(v),
                dtype::name(elem(g, v)),
                dtype::name(t)
            ));
        }
    }
    let (gs, us) = (shape(g, gate), shape(g, up));
    if gs.is_none()
        || gs != us
        || gs.as_ref().and_then(|s| s.last().cloned()) != Some(Dim::Known(i))
    {
        return Err(reject!(
            "gate '{}' {gs:?} and up '{}' {us:?} must have the same shape [..., {i}] (no broadcast)",
            g.value_name(gate),
            g.value_name(up)
        ));
    }
    let source = check_gate_up(m, &h.src, t, i);
    inside(source.inputs.values())?;
    let mut spec = SwigluSpec {
        source,
        activation: "silu",
        alpha: 1.0,
        limit: 7.0,
        beta: 1.0,
        swish_form: "unrolled",
    };
    let gs = gs.unwrap_or_default();
    spec.alpha = swish_alpha(m, h, &mut spec.swish_form, &gs)?;
    oai_parts(m, h, &mut spec, &gs)?;
    keeps_gate_shape(m, h, &gs)?;
    Ok(spec)
}

/// The activation has gate's shape: a one-element constant of higher rank than gate (α, a
/// limit or β stored as `[1, 1, 1, 1]` for a rank-3 gate) broadcasts it to more dims, which the
/// fused op does not write (new-user probe 11: fused, the rewrite changed the linear's output
/// rank and did not load).
fn keeps_gate_shape(m: &Match<'_>, h: &SwigluPat, gs: &[Dim]) -> Result<(), Reject> {
    let g = m.graph();
    let act = m[h.act];
    if let Some(s) = g.tensor_info(act).and_then(|i| i.shape) {
        if s != gs {
            return Err(reject!(
                "activation '{}' {} is not gate's shape {}: a constant broadcasts it",
                g.value_name(act),
                super::rms_norm::fmt_shape(&Some(s)),
                super::rms_norm::fmt_shape(&Some(gs.to_vec()))
            ));
        }
    }
    let mut operands: Vec<ValueId> = [
        h.alpha,
        h.gate_limit,
        h.up_lo,
        h.up_hi,
        h.up_lo2,
        h.up_hi2,
        h.beta,
    ]
    .into_iter()
    .filter_map(|v| m.get(v))
    .collect();
    for n in [h.clip_gate, h.clip_up]
        .into_iter()
        .filter_map(|n| m.node(n))
    {
        operands.extend(g.inputs(n).iter().skip(1).flatten());
    }
    for v in operands {
        let rank = super::rms_norm::known_rank(g, v);
        if rank.is_some_and(|r| r > gs.len()) {
            return Err(reject!(
                "constant '{}' has rank {}, gate {}: it broadcasts the activation to more dims than the fused op writes",
                g.value_name(v),
                rank.unwrap_or(0),
                gs.len()
            ));
        }
    }
    Ok(())
}

/// α of `gate·σ(α·gate)` and whether it is one rounding (QuickGelu) or unrolled.
fn swish_alpha(
    m: &Match<'_>,
    h: &SwigluPat,
    form: &mut &'static str,
    gs: &[Dim],
) -> Result<f32, Reject> {
    let g = m.graph();
    let one_op = [h.quick_gelu, h.swish]
        .into_iter()
        .find_map(|n| m.node(n))
        .or(m.node(h.swiglu));
    if let Some(n) = one_op {
        // ORT's QuickGelu defaults to 1.702; ONNX Swish / SwiGLU to 1.0.
        let default = if g.op_type(n) == "QuickGelu" {
            1.702
        } else {
            1.0
        };
        if g.op_type(n) == "QuickGelu" {
            *form = "single_op";
        }
        return attr_float(g.attr(n, "alpha"), default)
            .ok_or_else(|| reject!("alpha of '{}' is not a float", g.node_name(n)));
    }
    match m.node(h.mul_alpha) {
        Some(_) => Ok(uniform(g, m[h.alpha], "alpha", gs)? as f32),
        None => Ok(1.0),
    }
}

/// SwiGLU-OAI: all of the gate clamp, the symmetric up clamp and `+β`, or none of them.
fn oai_parts(
    m: &Match<'_>,
    h: &SwigluPat,
    spec: &mut SwigluSpec,
    gs: &[Dim],
) -> Result<(), Reject> {
    let g = m.graph();
    let gate_clamp = m.node(h.clip_gate).or(m.node(h.min_gate));
    let up_clamp = [h.clip_up, h.max_min_up, h.min_max_up]
        .into_iter()
        .find_map(|n| m.node(n));
    let add_beta = m.node(h.add_beta);
    match (gate_clamp, up_clamp, add_beta) {
        (None, None, None) => return Ok(()),
        (Some(_), Some(_), Some(_)) => {}
        _ => {
            return Err(reject!(
                "partial SwiGLU-OAI (gate clamp {}, up clamp {}, +beta {}): neither SiLU·up nor SwiGLU-OAI",
                gate_clamp.is_some(),
                up_clamp.is_some(),
                add_beta.is_some()
            ))
        }
    }
    let (Some(gc), Some(uc)) = (gate_clamp, up_clamp) else {
        return Ok(());
    };
    let gate_limit = match m.node(h.clip_gate) {
        Some(_) => {
            if let Some(lo) = clip_bound(g, gc, 1)?.filter(|lo| *lo != f64::NEG_INFINITY) {
                let default = if lo == f64::from(f32::MIN) {
                    " (a Clip-6's default min, the lowest float: it clamps -inf)"
                } else {
                    ""
                };
                return Err(reject!(
                    "gate Clip '{}' has a lower bound {lo}{default}: SwiGLU-OAI clamps the gate from above only",
                    g.node_name(gc)
                ));
            }
            clip_bound(g, gc, 2)?
                .ok_or_else(|| reject!("gate Clip '{}' has no upper bound", g.node_name(gc)))?
        }
        None => uniform(g, m[h.gate_limit], "gate limit", gs)?,
    };
    let (lo, hi) = if m.node(h.clip_up).is_some() {
        (clip_bound(g, uc, 1)?, clip_bound(g, uc, 2)?)
    } else {
        // With lo > hi the two orders differ (constant -L or L): neither is a clamp.
        if gate_limit.is_nan() || gate_limit <= 0.0 {
            return Err(reject!(
                "up clamp '{}' by Min/Max with limit {gate_limit} <= 0 is not a clamp",
                g.node_name(uc)
            ));
        }
        let (lo, hi) = if m.node(h.max_min_up).is_some() {
            (h.up_lo, h.up_hi)
        } else {
            (h.up_lo2, h.up_hi2)
        };
        (
            Some(uniform(g, m[lo], "up lower bound", gs)?),
            Some(uniform(g, m[hi], "up upper bound", gs)?),
        )
    };
    if lo != Some(-gate_limit) || hi != Some(gate_limit) {
        return Err(reject!(
            "up clamp '{}' bounds ({lo:?}, {hi:?}) are not ±{gate_limit} (the gate limit)",
            g.node_name(uc)
        ));
    }
    spec.activation = "oai";
    spec.limit = gate_limit as f32;
    spec.beta = uniform(g, m[h.beta], "beta", gs)? as f32;
    Ok(())
}
