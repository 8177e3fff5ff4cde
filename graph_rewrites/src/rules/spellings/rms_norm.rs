//! The residual-add and RMSNorm spellings rule `add_rmsnorm_mxquant` starts with.
//!
//! Search pattern => `y = RMSNorm([AllReduce](x) + residual, γ)`, spelled as any of
//!
//! ```text
//! residual stage (s = the norm input)         norm stage (y = the normalized tensor)
//! s = Add(AllReduce(x), residual)             decomposed: [Cast f32] ─ Pow(·,2) | Mul(·,·) ─ ReduceMean(-1)
//! s = Add(x, residual)     (either order)         | ReduceSum(-1) ─ Div(·, H) | Mul(·, 1/H) (H = 2^k)
//! s = x                    (first layer)          ─ [Add(eps)] ─ Sqrt ─ Reciprocal|Div(1,·)+Mul | Div = n,
//!                                                 Mul(n, γ) | Cast(Mul(n, γ)) | Mul(Cast(n), γ);
//!                                                 γ = w or Add(w, 1) (Gemma)
//!                                             RMSNormalization(s, w)                     (opset ≥ 23)
//!                                             SimplifiedLayerNormalization(s, w)         (ONNX domain)
//!                                             either single op as Cast(op(Cast(s, f32), w), T)
//! com.microsoft::SkipSimplifiedLayerNormalization([AllReduce](x), residual, w) → y, sum = output 3
//! ```
//!
//! Key points:
//! * The check extracts exactly the numerics the graph computes and refuses what the fused
//!   kernel cannot reproduce: a decomposed chain must compute in fp32 (the input is f32 or cast
//!   to f32), γ multiplies either in fp32 before the cast back (`gamma_in_f32 = 1`) or in T after
//!   it (`= 0`); `Reciprocal+Mul` and `Div` are kept apart (`inv_form`).
//! * The single-op norms follow ONNX Runtime's CPU kernels (measured bit for bit against ORT
//!   1.31 in f32 and f16): `RMSNormalization` and `SimplifiedLayerNormalization` compute
//!   `s · fl(1/sqrt(v + eps)) · γ` in fp32 (`inv_form = rsqrt`, `gamma_in_f32 = 1`, also what
//!   `onnx.reference` and the kernels' evaluator do); `SkipSimplifiedLayerNormalization` divides
//!   (`div`) and normalizes the unrounded fp32 sum (`round_sum = 0`).
//! * A single-op norm may read `s` cast to f32 and be cast back to T after it (fp16
//!   conversions that keep the norm in fp32, onnxconverter-common's `op_block_list`): the
//!   upcast is exact and the op then computes in fp32 as the kernel does; it must write f32
//!   (y is rounded to T once, by the Cast), and a Cast on one side only is refused.
//! * The mean may be the sum of squares over the last axis divided by its length H, a constant
//!   exactly H (`x.pow(2).sum(-1, keepdim=True) / H`): ORT's CPU ReduceMean is its ReduceSum then
//!   a division by the count, so this is the ReduceMean spelling's computation. A multiply by
//!   1/H is the same bits only when 1/H is exact (H a power of two); by 1/H rounded to float it is
//!   refused (the kernel divides), as is a constant that is not H (or 1/H), and an H the shapes
//!   do not state.
//! * Gemma's `Add(w, 1)` is absorbed only in the decomposed spelling, where its dtype matches
//!   where γ multiplies; the single-op norms take their scale input as is (`gemma = 0`).
//! * The AllReduce alternatives come first: an AllReduce feeding the residual Add is absorbed
//!   (marked collective). When both Add operands are AllReduces (a first layer's residual is
//!   the embedding's AllReduce, read by the input norm too) the one only the Add reads wins
//!   (`single_use`); an AllReduce read elsewhere still matches, and the engine refuses the
//!   site. The Skip norm's two operands are treated the same way (sole AllReduce first, then
//!   one read elsewhere, refused), so both paths refuse rather than leave such an AllReduce
//!   in place.
//!
//! Not handled (refused with the reason): a decomposed chain computed in f16/bf16 (every
//! intermediate rounded to T); `stash_type` ≠ 1; Skip with a bias input (no bias operand in the
//! fused op); normalization over more than the last axis (`axis` ≠ -1 / rank−1); the mean as
//! `Mul(ReduceSum, 1/H)` with H not a power of two (1/H rounded: not the kernel's division);
//! the inverse RMS as `Pow(v, -0.5)` (ORT's powf is not the kernel's 1 / sqrt bit for bit).

use crate::pattern::predicates::{attr_float, attr_int, dtype, scalar_f64, values_i64};
use crate::pattern::{Match, OpId, Pat, Reject, N, V};
use crate::reject;
use crate::view::{Dim, GraphView, NodeId, ValueId, MS_DOMAIN, ONNX_DOMAIN};

/// Handles of the residual stage (`s = [AllReduce](x) + residual`, or `s = x`).
#[derive(Clone, Copy, Debug)]
pub struct ResidualPat {
    /// The norm input (an alternative between the stages below).
    pub s: V,
    /// The branch output when no AllReduce is absorbed.
    pub x: V,
    pub residual: V,
    /// The absorbed AllReduce (an alternative between `allreduce_sole` and `allreduce`) and
    /// its input.
    pub allreduce_sole: N,
    pub allreduce: N,
    pub x_ar: V,
    /// `Add(AllReduce(x), residual)` and its output, for each AllReduce node.
    pub add_ar_sole: N,
    pub add_ar: N,
    pub add_ar_out: V,
    /// `Add(x, residual)` and its output.
    pub add: N,
    pub add_out: V,
}

/// Declares the residual stage; `s` is its output (the norm input).
pub fn residual_stage(p: &mut Pat) -> ResidualPat {
    let x_ar = p.input("x_before_allreduce");
    // Extra inputs are accepted structurally so the check can refuse them with a reason.
    let ar = |p: &mut Pat, sole: bool| {
        let b = p
            .op(OpId::new(MS_DOMAIN, "AllReduce"))
            .args([x_ar])
            .extra_inputs()
            .collective();
        if sole {
            b.single_use().node()
        } else {
            b.node()
        }
    };
    // A first layer's residual is the embedding's AllReduce, read by the input norm too: when
    // both Add operands are AllReduces, the one only this Add reads is the one to absorb. An
    // AllReduce with other readers still matches (second alternative) so the engine refuses it.
    let allreduce_sole = ar(p, true);
    let allreduce = ar(p, false);
    let (sole_out, ar_out) = (p.out(allreduce_sole, 0), p.out(allreduce, 0));
    let residual = p.input("residual");
    let x = p.input("x");
    let add_ar_sole = p
        .op(OpId::new(ONNX_DOMAIN, "Add"))
        .args([sole_out, residual])
        .commutative()
        .node();
    let add_ar = p
        .op(OpId::new(ONNX_DOMAIN, "Add"))
        .args([ar_out, residual])
        .commutative()
        .node();
    let add = p
        .op(OpId::new(ONNX_DOMAIN, "Add"))
        .args([x, residual])
        .commutative()
        .node();
    let (sole_sum, ar_sum, add_out) = (p.out(add_ar_sole, 0), p.out(add_ar, 0), p.out(add, 0));
    let add_ar_out = p.any_of("allreduce_sum", [sole_sum, ar_sum]);
    // No AllReduce-only alternative: a first-layer AllReduce's output is the residual stream
    // of the next layer, so absorbing it would always be refused; leaving it as `x` fuses.
    let s = p.any_of("norm_input", [add_ar_out, add_out, x]);
    ResidualPat {
        s,
        x,
        residual,
        allreduce_sole,
        allreduce,
        x_ar,
        add_ar_sole,
        add_ar,
        add_ar_out,
        add,
        add_out,
    }
}

/// Handles of the norm stage.
#[derive(Clone, Copy, Debug)]
pub struct RmsNormPat {
    /// The normalized tensor (the quantizer's input).
    pub y: V,
    /// The raw weight input (before a Gemma `Add(w, 1)`).
    pub w: V,
    pub gamma_add: N,
    pub cast_up: N,
    pub pow: N,
    pub pow_exponent: V,
    pub square: N,
    pub reduce: N,
    /// The mean as `Div(ReduceSum(sq), H)` or `Mul(ReduceSum(sq), 1/H)`.
    pub reduce_sum: N,
    pub mean_count: V,
    pub div_count: N,
    pub mul_count: N,
    pub eps: V,
    pub add_eps: N,
    pub recip: N,
    /// `Pow(v, c)` where the inverse RMS goes: refused (see `decomposed_norm`).
    pub rsqrt_pow: N,
    pub rsqrt_exponent: V,
    /// `Div(1, Sqrt)`: the TorchScript exporter's `rsqrt` (same bits as `Reciprocal`).
    pub div_one: N,
    pub one_numerator: V,
    pub div: N,
    /// `Mul(n, γ)`: y itself (f32) or cast back after it.
    pub mul_gamma: N,
    pub cast_back: N,
    /// `Cast(n)` then `Mul(·, γ)` in T.
    pub cast_n: N,
    pub mul_gamma_t: N,
    pub rms_normalization: N,
    pub simplified: N,
    /// `Cast(single-op norm)` back to T (the single-op norm then reads `Cast(s, f32)` or `s`).
    pub cast_back_single: N,
    /// Skip variants: a single-use AllReduce output as input 0, as input 1; an AllReduce read
    /// elsewhere as input 0, as input 1 (matched so the engine refuses it, as on the Add path);
    /// no AllReduce.
    pub skip_ar0: N,
    pub skip_ar1: N,
    pub skip_shared_ar0: N,
    pub skip_shared_ar1: N,
    pub skip: N,
}

fn onnx(op: &'static str) -> OpId {
    OpId::new(ONNX_DOMAIN, op)
}

/// Declares every norm spelling over the residual stage `r`; `y` is the normalized tensor.
pub fn rms_norm(p: &mut Pat, r: &ResidualPat) -> RmsNormPat {
    let s = r.s;
    // Decomposed chain.
    let cast_up = p
        .op(onnx("Cast"))
        .args([s])
        .attr_int("to", None, dtype::FLOAT as i64)
        .node();
    let cast_up_out = p.out(cast_up, 0);
    let xf = p.any_of("norm_x_f32", [cast_up_out, s]);
    let pow_exponent = p.input("pow_exponent");
    let pow = p.op(onnx("Pow")).args([xf, pow_exponent]).node();
    let square = p.op(onnx("Mul")).args([xf, xf]).node();
    let (pow_out, square_out) = (p.out(pow, 0), p.out(square, 0));
    let sq = p.any_of("x_squared", [pow_out, square_out]);
    let reduce = p.op(onnx("ReduceMean")).args([sq]).extra_inputs().node();
    // The mean as a sum divided by H (`x.pow(2).sum(-1, keepdim=True) / H`): ORT's ReduceMean is
    // its ReduceSum then a division by the count, so `Div(ReduceSum, H)` computes the same; a
    // multiply by 1/H only where that is exact (checked). The count is any value here so a
    // non-constant one is refused with the reason, not left as a near miss.
    let reduce_sum = p.op(onnx("ReduceSum")).args([sq]).extra_inputs().node();
    let sum_sq = p.out(reduce_sum, 0);
    let mean_count = p.input("mean_count");
    let div_count = p.op(onnx("Div")).args([sum_sq, mean_count]).node();
    let mul_count = p
        .op(onnx("Mul"))
        .args([sum_sq, mean_count])
        .commutative()
        .node();
    let (reduce_out, div_count_out, mul_count_out) =
        (p.out(reduce, 0), p.out(div_count, 0), p.out(mul_count, 0));
    let mean = p.any_of(
        "mean_of_squares",
        [reduce_out, div_count_out, mul_count_out],
    );
    let eps = p.input("epsilon");
    let add_eps = p.op(onnx("Add")).args([mean, eps]).commutative().node();
    let var_eps = p.out(add_eps, 0);
    // No `Add(eps)`: epsilon 0 (ONNX Runtime's optimizer drops an `Add` of 0 before the EP sees
    // the graph, so online this is how an eps = 0 norm arrives).
    let var = p.any_of("mean_plus_eps", [var_eps, mean]);
    let sqrt = p.op(onnx("Sqrt")).args([var]).out();
    let recip = p.op(onnx("Reciprocal")).args([sqrt]).node();
    let one_numerator = p.konst("one_numerator");
    let div_one = p.op(onnx("Div")).args([one_numerator, sqrt]).node();
    // `Pow(v, -0.5)` as the inverse RMS: matched only so the check refuses it with its reason
    // (a near miss elsewhere would not point at the Pow).
    let rsqrt_exponent = p.input("rsqrt_exponent");
    let rsqrt_pow = p.op(onnx("Pow")).args([var, rsqrt_exponent]).node();
    let (recip_out, div_one_out, rsqrt_pow_out) =
        (p.out(recip, 0), p.out(div_one, 0), p.out(rsqrt_pow, 0));
    let inv = p.any_of("inv_rms", [recip_out, div_one_out, rsqrt_pow_out]);
    let mul_inv = p.op(onnx("Mul")).args([xf, inv]).commutative().out();
    let div = p.op(onnx("Div")).args([xf, sqrt]).node();
    let div_out = p.out(div, 0);
    let n = p.any_of("normalized", [mul_inv, div_out]);
    // γ: Gemma's `Add(w, 1)` (exactly 1: anything else is just a computed weight) or w.
    let w = p.input("gamma");
    let one = p.konst_scalar("gamma_one", 1.0);
    let gamma_add = p.op(onnx("Add")).args([w, one]).commutative().node();
    let gamma_add_out = p.out(gamma_add, 0);
    let g = p.any_of("gamma_weight", [gamma_add_out, w]);
    let mul_gamma = p.op(onnx("Mul")).args([n, g]).commutative().node();
    let mul_gamma_out = p.out(mul_gamma, 0);
    let cast_back = p.op(onnx("Cast")).args([mul_gamma_out]).node();
    let cast_n = p.op(onnx("Cast")).args([n]).node();
    let cast_n_out = p.out(cast_n, 0);
    let mul_gamma_t = p.op(onnx("Mul")).args([cast_n_out, g]).commutative().node();
    // Single-op norms, on s or on s cast to f32 (then cast back to T after the op: checked).
    let rms_normalization = p.op(onnx("RMSNormalization")).args([xf, w]).node();
    let simplified = p
        .op(onnx("SimplifiedLayerNormalization"))
        .args([xf, w])
        .node();
    let (rms_out, simplified_out) = (p.out(rms_normalization, 0), p.out(simplified, 0));
    let single = p.any_of("single_op_norm", [rms_out, simplified_out]);
    let cast_back_single = p.op(onnx("Cast")).args([single]).node();
    // The Skip norm's sum is `input + skip`: an AllReduce on either operand is the branch. As on
    // the Add path, a single-use AllReduce is preferred (a first layer's other operand is the
    // embedding's AllReduce, read by the input norm too); one read elsewhere still matches so
    // the engine refuses the site rather than leave the AllReduce where it is.
    let skip_variant = |p: &mut Pat, a: V, b: V| {
        p.op(OpId::new(MS_DOMAIN, "SkipSimplifiedLayerNormalization"))
            .args([a, b, w])
            .extra_inputs()
            .node()
    };
    let (sole_out, shared_out) = (p.out(r.allreduce_sole, 0), p.out(r.allreduce, 0));
    let skip_ar0 = skip_variant(p, sole_out, r.residual);
    let skip_ar1 = skip_variant(p, r.residual, sole_out);
    let skip_shared_ar0 = skip_variant(p, shared_out, r.residual);
    let skip_shared_ar1 = skip_variant(p, r.residual, shared_out);
    let skip = skip_variant(p, r.x, r.residual);
    let outs = [
        p.out(cast_back, 0),
        p.out(mul_gamma_t, 0),
        mul_gamma_out,
        rms_out,
        simplified_out,
        p.out(cast_back_single, 0),
        p.out(skip_ar0, 0),
        p.out(skip_ar1, 0),
        p.out(skip_shared_ar0, 0),
        p.out(skip_shared_ar1, 0),
        p.out(skip, 0),
    ];
    let y = p.any_of("rms_normed", outs);
    RmsNormPat {
        y,
        w,
        gamma_add,
        cast_up,
        pow,
        pow_exponent,
        square,
        reduce,
        reduce_sum,
        mean_count,
        div_count,
        mul_count,
        eps,
        add_eps,
        recip,
        rsqrt_pow,
        rsqrt_exponent,
        div_one,
        one_numerator,
        div,
        mul_gamma,
        cast_back,
        cast_n,
        mul_gamma_t,
        rms_normalization,
        simplified,
        cast_back_single,
        skip_ar0,
        skip_ar1,
        skip_shared_ar0,
        skip_shared_ar1,
        skip,
    }
}

/// Where the fused op reads its inputs: the residual stage of a match.
#[derive(Clone, Debug)]
pub struct Residual {
    /// The branch input `x` (before the absorbed AllReduce, if any).
    pub x: ValueId,
    pub residual: Option<ValueId>,
    pub allreduce: bool,
    /// The graph value holding `x + residual` when something outside the norm reads it (it
    /// keeps its name).
    pub sum: Option<ValueId>,
    /// The Skip norm, whose output 3 (`sum`) the pattern does not bind.
    pub skip: Option<NodeId>,
}

/// The numerics the matched norm computes, as `AddRmsNormMxQuant` attributes.
#[derive(Clone, Debug)]
pub struct Numerics {
    pub epsilon: f32,
    pub gemma: bool,
    pub gamma_in_f32: bool,
    pub inv_form: &'static str,
    pub round_sum: bool,
}

/// Everything the rule needs to emit `AddRmsNormMxQuant`.
#[derive(Clone, Debug)]
pub struct NormSpec {
    pub inputs: Residual,
    /// The γ input of the fused op (w, before a Gemma `+1`).
    pub gamma: ValueId,
    pub numerics: Numerics,
}

fn elem(g: &dyn GraphView, v: ValueId) -> i32 {
    g.tensor_info(v).map(|i| i.elem_type).unwrap_or(0)
}

fn shape(g: &dyn GraphView, v: ValueId) -> Option<Vec<Dim>> {
    g.tensor_info(v).and_then(|i| i.shape)
}

/// A scalar constant's value, or a reason naming `what`.
fn const_scalar(g: &dyn GraphView, v: ValueId, what: &str) -> Result<f64, Reject> {
    if !g.is_constant(v) {
        return Err(reject!(
            "{what} '{}' is not a constant{}",
            g.value_name(v),
            crate::view::not_constant_note(g, v)
        ));
    }
    g.const_value(v)
        .and_then(|t| scalar_f64(&t))
        .ok_or_else(|| reject!("{what} '{}' is not a readable scalar", g.value_name(v)))
}

/// Whether `axis` names the last axis of a rank-`rank` tensor.
fn is_last(axis: i64, rank: usize) -> bool {
    axis == -1 || axis == rank as i64 - 1
}

/// Checks the residual and norm stages of a match. `t` and `h` are the dtype and last dim of
/// the normalized tensor (already checked by the quantize spelling).
pub fn check_add_rms_norm(
    m: &Match<'_>,
    r: &ResidualPat,
    n: &RmsNormPat,
    t: i32,
    h: i64,
) -> Result<NormSpec, Reject> {
    let g = m.graph();
    let skip = [
        n.skip_ar0,
        n.skip_ar1,
        n.skip_shared_ar0,
        n.skip_shared_ar1,
        n.skip,
    ]
    .into_iter()
    .find_map(|k| m.node(k));
    // The Skip norm has no separate norm input: its residual input stands for it.
    let s = if skip.is_some() {
        m[r.residual]
    } else {
        m[r.s]
    };
    if elem(g, s) != t {
        return Err(reject!(
            "norm input '{}' is {} but its output is {}",
            g.value_name(s),
            dtype::name(elem(g, s)),
            dtype::name(t)
        ));
    }
    let rank = shape(g, m[n.y]).map(|d| d.len()).unwrap_or(0);
    let (inputs, numerics) = match (m.node(n.rms_normalization), m.node(n.simplified), skip) {
        (Some(node), _, _) | (_, Some(node), _) => (
            residual_of_add(m, r),
            single_op_norm(g, node, m.node(n.cast_up), m.node(n.cast_back_single), rank)?,
        ),
        (_, _, Some(node)) => skip_norm(m, r, n, node, t)?,
        _ => {
            keeps_rank(m, n, shape(g, s).map_or(rank, |d| d.len()))?;
            (residual_of_add(m, r), decomposed_norm(m, n, t, rank)?)
        }
    };
    if inputs.allreduce {
        let ar = m.node(r.allreduce_sole).or(m.node(r.allreduce));
        let ar = ar.ok_or_else(|| reject!("internal: AllReduce not bound"))?;
        let count = g.inputs(ar).iter().flatten().count();
        if count != 1 {
            return Err(reject!(
                "AllReduce '{}' has {count} inputs: only the one-tensor form is fused",
                g.node_name(ar)
            ));
        }
    }
    let spec = NormSpec {
        inputs,
        gamma: m[n.w],
        numerics,
    };
    // Degenerate graphs (x + x with x = AllReduce(y), γ computed from the norm itself) would
    // leave the fused op reading a value its own fusion removes.
    let fused_inputs = [Some(spec.inputs.x), spec.inputs.residual, Some(spec.gamma)];
    if let Some(v) = fused_inputs
        .into_iter()
        .flatten()
        .find(|v| m.produces_inside(*v))
    {
        return Err(reject!(
            "fused input '{}' is computed inside the fusion",
            g.value_name(v)
        ));
    }
    check_operands(g, &spec, s, t, h)?;
    normed_keeps_rank(m, n, shape(g, s).map_or(rank, |d| d.len()))?;
    Ok(spec)
}

/// x / residual / sum / allreduce from the Add alternatives (or the first-layer `s = x`).
fn residual_of_add(m: &Match<'_>, r: &ResidualPat) -> Residual {
    let (ar, plain) = (m.node(r.add_ar_sole).or(m.node(r.add_ar)), m.node(r.add));
    let (x, sum) = match (ar, plain) {
        (Some(_), _) => (m[r.x_ar], m.get(r.add_ar_out)),
        (_, Some(_)) => (m[r.x], m.get(r.add_out)),
        _ => (m[r.s], None),
    };
    let residual = (ar.is_some() || plain.is_some()).then(|| m[r.residual]);
    Residual {
        x,
        residual,
        allreduce: ar.is_some(),
        sum,
        skip: None,
    }
}

/// `[batch, seq, 64]`, `?` for an unknown dim, `unknown` without a shape.
/// A value's rank: its constant's dims, else its inferred shape's; `None` when neither is known.
/// (The over-ranked one-element constant checks of the norm and SwiGLU spellings.)
pub(crate) fn known_rank(g: &dyn GraphView, v: ValueId) -> Option<usize> {
    g.const_value(v)
        .map(|t| t.dims.len())
        .or_else(|| g.tensor_info(v).and_then(|i| i.shape).map(|s| s.len()))
}

pub(crate) fn fmt_shape(s: &Option<Vec<Dim>>) -> String {
    let Some(dims) = s else {
        return "unknown".into();
    };
    let dims: Vec<String> = dims.iter().map(Dim::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// Shapes and dtypes of x, residual and γ: exactly `[..., H]` twice and `[H]`.
fn check_operands(
    g: &dyn GraphView,
    spec: &NormSpec,
    s: ValueId,
    t: i32,
    h: i64,
) -> Result<(), Reject> {
    let s_shape = shape(g, s);
    for v in [Some(spec.inputs.x), spec.inputs.residual]
        .into_iter()
        .flatten()
    {
        if elem(g, v) != t {
            return Err(reject!(
                "residual operand '{}' is {}, not {}",
                g.value_name(v),
                dtype::name(elem(g, v)),
                dtype::name(t)
            ));
        }
        // A broadcasting Add would need the smaller operand expanded: refuse it.
        let v_shape = shape(g, v);
        if v_shape != s_shape || s_shape.is_none() {
            // Same rank, dims that differ only by being named in one and unknown or a number
            // in the other: not provably the same shape (a named dim could be 1 and broadcast).
            let unproven = match (&v_shape, &s_shape) {
                (Some(a), Some(b)) => {
                    a.len() == b.len()
                        && a.iter().zip(b).all(|(x, y)| {
                            x == y || !matches!((x, y), (Dim::Known(_), Dim::Known(_)))
                        })
                }
                _ => true,
            };
            let why = if unproven {
                "the fused op needs both operands of exactly the sum's shape and the model's shapes do not show they are (set the dims or add value_info)"
            } else {
                "broadcasting is not fused"
            };
            return Err(reject!(
                "residual operand '{}' has shape {}, the sum {}: {why}",
                g.value_name(v),
                fmt_shape(&v_shape),
                fmt_shape(&s_shape)
            ));
        }
    }
    let gt = elem(g, spec.gamma);
    if gt != t && gt != dtype::FLOAT {
        return Err(reject!(
            "norm weight '{}' is {}: must be {} or float",
            g.value_name(spec.gamma),
            dtype::name(gt),
            dtype::name(t)
        ));
    }
    // γ `[1, .., 1, H]` (a weight exported with the activation's broadcast shape) multiplies by
    // the same H values as `[H]`, and the product keeps the sum's shape as long as γ's rank is at
    // most the sum's; a higher rank would add leading 1 dims the fused op does not produce.
    let s_rank = s_shape.as_ref().map_or(0, Vec::len);
    match shape(g, spec.gamma).as_deref() {
        Some([lead @ .., Dim::Known(d)])
            if *d == h
                && lead.iter().all(|x| *x == Dim::Known(1))
                && (lead.is_empty() || lead.len() < s_rank) =>
        {
            Ok(())
        }
        other => Err(reject!(
            "norm weight '{}' has shape {}, expected [{h}] (or [1, .., 1, {h}] of at most the input's rank)",
            g.value_name(spec.gamma),
            fmt_shape(&other.map(<[Dim]>::to_vec))
        )),
    }
}

/// `epsilon` (default 1e-5) and, if the op has them, `axis` = last and `stash_type` = 1.
fn norm_attrs(g: &dyn GraphView, node: NodeId, rank: usize) -> Result<f32, Reject> {
    let name = g.node_name(node);
    let axis = attr_int(g.attr(node, "axis"), -1).unwrap_or(i64::MIN);
    if !is_last(axis, rank) {
        return Err(reject!(
            "{} '{name}' normalizes from axis {axis}, not only the last axis",
            g.op_type(node)
        ));
    }
    let stash = attr_int(g.attr(node, "stash_type"), 1).unwrap_or(0);
    if stash != 1 {
        return Err(reject!(
            "{} '{name}' has stash_type={stash}: only fp32 computation (1) is fused",
            g.op_type(node)
        ));
    }
    attr_float(g.attr(node, "epsilon"), 1e-5)
        .ok_or_else(|| reject!("epsilon of '{name}' is not a float"))
}

/// `RMSNormalization` or `SimplifiedLayerNormalization`: fp32 throughout, reciprocal then
/// multiply (see the module docs). Between Casts (`cast_up` of s to f32, `cast_back` of y to T)
/// the op must be all f32 — a float16 output cast to bfloat16 rounds twice, and a mixed-type op
/// (f32 X, f16 scale) is not one the kernels were measured against —, and the Casts come in pairs.
fn single_op_norm(
    g: &dyn GraphView,
    node: NodeId,
    cast_up: Option<NodeId>,
    cast_back: Option<NodeId>,
    rank: usize,
) -> Result<Numerics, Reject> {
    let (op, name) = (g.op_type(node), g.node_name(node));
    match (cast_up, cast_back) {
        (Some(_), Some(c)) => {
            let out = g.outputs(node).first().map_or(0, |v| elem(g, *v));
            if out != dtype::FLOAT {
                return Err(reject!(
                    "{op} '{name}' between Casts writes {}, not float: y would be rounded before Cast '{}'",
                    dtype::name(out),
                    g.node_name(c)
                ));
            }
        }
        (Some(c), None) | (None, Some(c)) => {
            return Err(reject!(
                "{op} '{name}' has Cast '{}' on one side only: a mixed-type single-op norm is not fused",
                g.node_name(c)
            ))
        }
        (None, None) => {}
    }
    Ok(Numerics {
        epsilon: norm_attrs(g, node, rank)?,
        gemma: false,
        gamma_in_f32: true,
        inv_form: "rsqrt",
        round_sum: true,
    })
}

/// `SkipSimplifiedLayerNormalization(a, b, w)`: the Add is inside; ORT divides and normalizes
/// the unrounded fp32 sum.
fn skip_norm(
    m: &Match<'_>,
    r: &ResidualPat,
    n: &RmsNormPat,
    node: NodeId,
    t: i32,
) -> Result<(Residual, Numerics), Reject> {
    let g = m.graph();
    let name = g.node_name(node);
    // ORT sums `(input + skip) + bias` with an fp32 rounding after each add; the fused op adds
    // x + residual once and has no bias operand, so neither folding the bias into the residual
    // nor into x reproduces those bits.
    if let Some(bias) = g.inputs(node).get(3).copied().flatten() {
        return Err(reject!(
            "SkipSimplifiedLayerNormalization '{name}' has a bias input '{}': the fused op has no bias operand and input + skip + bias (two fp32 roundings) cannot be folded into its one add",
            g.value_name(bias)
        ));
    }
    // ORT's schema default for the Skip norms is 1e-12 (not the 1e-5 of the plain norms).
    let epsilon = attr_float(g.attr(node, "epsilon"), 1e-12)
        .ok_or_else(|| reject!("epsilon of '{name}' is not a float"))?;
    let plain = m.node(n.skip).is_some();
    // Outputs 1 and 2 (mean, inv_std_var) are not re-produced: the engine refuses the site if
    // anything reads them.
    let sum = g.outputs(node).get(3).copied();
    let inputs = Residual {
        x: if plain { m[r.x] } else { m[r.x_ar] },
        residual: Some(m[r.residual]),
        allreduce: !plain,
        sum: sum.filter(|v| g.is_graph_output(*v) || !g.consumers(*v).is_empty()),
        skip: Some(node),
    };
    // For float the rounded and the fp32 sum are the same bits.
    let round_sum = t == dtype::FLOAT;
    let numerics = Numerics {
        epsilon,
        gemma: false,
        gamma_in_f32: true,
        inv_form: "div",
        round_sum,
    };
    Ok((inputs, numerics))
}

/// The decomposed chain: computed in fp32, γ before or after the cast back.
fn decomposed_norm(m: &Match<'_>, n: &RmsNormPat, t: i32, rank: usize) -> Result<Numerics, Reject> {
    let g = m.graph();
    if m.node(n.reduce).is_none() && m.node(n.reduce_sum).is_none() {
        return Err(reject!("internal: no norm spelling bound"));
    }
    // ORT's Pow is the C library's powf, which no fused kernel reproduces bit for bit: the kernel
    // takes one fp32 reciprocal of an fp32 sqrt (what Sqrt -> Reciprocal computes in ORT), and
    // the two differ in the last bit for some variances, which can move a value across an E4M3
    // rounding boundary.
    if let Some(pw) = m.node(n.rsqrt_pow) {
        let e = const_scalar(g, m[n.rsqrt_exponent], "Pow exponent");
        return Err(match e {
            Ok(-0.5) => reject!(
                "Pow '{}' takes the inverse RMS as variance^-0.5: ONNX Runtime computes that with powf, the fused kernel as 1 / sqrt (the Sqrt -> Reciprocal spelling's bits), and they differ in the last bit for some inputs; Sqrt -> Reciprocal, Div(1, Sqrt) or Sqrt -> Div fuse",
                g.node_label(pw)
            ),
            Ok(e) => reject!(
                "Pow '{}' raises the variance to {e}: not an inverse square root",
                g.node_label(pw)
            ),
            Err(r) => r,
        });
    }
    // Every intermediate must be f32: the kernel computes in fp32 and rounds only y to T. The
    // chain computes in the dtype of its input after the optional Cast (read from the
    // structure, so models without intermediate value_info still fuse).
    let compute = if m.node(n.cast_up).is_some() {
        dtype::FLOAT
    } else {
        t
    };
    if compute != dtype::FLOAT {
        return Err(reject!(
            "decomposed RMSNorm computes in {}: its intermediates are rounded to that type, the fused kernel computes in fp32",
            dtype::name(compute)
        ));
    }
    if let Some(pow) = m.node(n.pow) {
        let e = const_scalar(g, m[n.pow_exponent], "Pow exponent")?;
        if e != 2.0 {
            return Err(reject!(
                "Pow '{}' has exponent {e}, not 2",
                g.node_name(pow)
            ));
        }
    }
    match (m.node(n.reduce), m.node(n.reduce_sum)) {
        (Some(reduce), _) => check_reduce(g, reduce, rank)?,
        (_, Some(sum)) => check_sum_over_count(m, n, sum, rank)?,
        _ => {}
    }
    let eps = match m.node(n.add_eps) {
        Some(_) => {
            let eps_t = g.tensor_info(m[n.eps]).map(|i| i.elem_type).unwrap_or(0);
            if eps_t != dtype::FLOAT {
                return Err(reject!("epsilon is {}, not float", dtype::name(eps_t)));
            }
            const_scalar(g, m[n.eps], "epsilon")?
        }
        None => 0.0,
    };
    if m.node(n.div_one).is_some() {
        let c = const_scalar(g, m[n.one_numerator], "reciprocal numerator")?;
        if c != 1.0 {
            return Err(reject!("Div({c}, Sqrt) is not a reciprocal"));
        }
    }
    let recip = m.node(n.recip).is_some() || m.node(n.div_one).is_some();
    let inv_form = if recip { "recip_mul" } else { "div" };
    let cast_to = |c: NodeId| attr_int(g.attr(c, "to"), 0).unwrap_or(0) as i32;
    let gamma_in_f32 = match (m.node(n.cast_back), m.node(n.cast_n)) {
        (Some(c), _) | (_, Some(c)) if cast_to(c) != t => {
            return Err(reject!(
                "Cast '{}' back to {} does not give the norm's dtype {}",
                g.node_name(c),
                dtype::name(cast_to(c)),
                dtype::name(t)
            ))
        }
        // Cast(Mul(n, γ)): γ multiplies in fp32.
        (Some(_), _) => true,
        // Mul(Cast(n), γ): normalize, cast back, multiply in T (HF Llama).
        (_, Some(_)) => false,
        // Mul(n, γ) with no cast: everything (T included) is f32.
        _ => true,
    };
    // The weight's dtype is the multiply's (Gemma's `Add(w, 1)` keeps it).
    let (gw, want) = (elem(g, m[n.w]), if gamma_in_f32 { dtype::FLOAT } else { t });
    if gw != want {
        return Err(reject!(
            "norm weight multiplies in {}, expected {} for this spelling",
            dtype::name(gw),
            dtype::name(want)
        ));
    }
    Ok(Numerics {
        epsilon: eps as f32,
        gemma: m.node(n.gamma_add).is_some(),
        gamma_in_f32,
        inv_form,
        round_sum: true,
    })
}

/// The normed tensor keeps the sum's rank (the fused op writes the sum's shape): the catch-all
/// after the operand and γ checks, which name the cause where they can.
fn normed_keeps_rank(m: &Match<'_>, n: &RmsNormPat, rank: usize) -> Result<(), Reject> {
    let g = m.graph();
    let y = m[n.y];
    match g.tensor_info(y).and_then(|i| i.shape) {
        Some(s) if s.len() != rank => Err(reject!(
            "normed '{}' {} has rank {}, the sum {rank}: a constant broadcasts it",
            g.value_name(y),
            fmt_shape(&Some(s.clone())),
            s.len()
        )),
        _ => Ok(()),
    }
}

/// The decomposed chain keeps the sum's rank: a one-element constant of higher rank (eps, the
/// Pow exponent, Gemma's 1 stored as `[1, 1, 1, 1]` for a rank-3 sum) broadcasts the normed
/// tensor to more dims, which the fused op does not write (new-user probe 11: fused, the rewrite
/// dropped a dim). Checked on the constants' ranks here, on the normed value's inferred rank by
/// [`normed_keeps_rank`].
fn keeps_rank(m: &Match<'_>, n: &RmsNormPat, rank: usize) -> Result<(), Reject> {
    let g = m.graph();
    let mut operands: Vec<ValueId> = [n.pow_exponent, n.mean_count, n.eps, n.one_numerator]
        .into_iter()
        .filter_map(|v| m.get(v))
        .collect();
    if let Some(a) = m.node(n.gamma_add) {
        operands.extend(g.inputs(a).iter().flatten());
    }
    for v in operands.into_iter().filter(|v| g.is_constant(*v)) {
        let r = known_rank(g, v);
        if r.is_some_and(|r| r > rank) {
            return Err(reject!(
                "constant '{}' has rank {}, the sum {rank}: it broadcasts the normed tensor to more dims than the fused op writes",
                g.value_name(v),
                r.unwrap_or(0)
            ));
        }
    }
    Ok(())
}

/// A `ReduceMean` or `ReduceSum` over exactly the last axis, keeping dims. Exactly one axis is
/// required (from the `axes` input, or the attribute of the versions before it became one), so
/// `noop_with_empty_axes` never applies: empty axes are refused, never taken as a no-op.
fn check_reduce(g: &dyn GraphView, n: NodeId, rank: usize) -> Result<(), Reject> {
    let op = g.op_type(n);
    if attr_int(g.attr(n, "keepdims"), 1) != Some(1) {
        return Err(reject!("{op} '{}' must keep dims", g.node_label(n)));
    }
    let axes = match g.inputs(n).get(1).copied().flatten() {
        Some(v) => g.const_value(v).and_then(|t| values_i64(&t)),
        None => match g.attr(n, "axes") {
            Some(crate::view::AttrValue::Ints(a)) => Some(a),
            _ => None,
        },
    };
    match axes.as_deref() {
        Some([a]) if is_last(*a, rank) => Ok(()),
        other => Err(reject!(
            "{op} '{}' axes {other:?} are not the last axis",
            g.node_label(n)
        )),
    }
}

/// The mean spelled as the sum of squares over the last axis divided by its length H:
/// `Div(ReduceSum(sq), H)`, or `Mul(ReduceSum(sq), 1/H)` where 1/H is exact. ORT's CPU ReduceMean
/// is its ReduceSum then `/= (float)H` (`ReduceAggregatorMean`), so `Div(ReduceSum, H)` is the
/// very computation the ReduceMean spelling is, and the kernel's mean (sum in f64, `/ H`, rounded
/// once) stands for both within the same float-order tolerance (docs/ops.md). A multiply by a
/// rounded 1/H is a different rounding of the quotient and is refused.
fn check_sum_over_count(
    m: &Match<'_>,
    n: &RmsNormPat,
    sum: NodeId,
    rank: usize,
) -> Result<(), Reject> {
    let g = m.graph();
    check_reduce(g, sum, rank)?;
    let count = m[n.mean_count];
    let scaler = m.node(n.div_count).or(m.node(n.mul_count));
    let scaler = scaler.ok_or_else(|| reject!("internal: ReduceSum without its Div / Mul"))?;
    let (op, name) = (g.op_type(scaler), g.node_label(scaler));
    let c = const_scalar(g, count, &format!("{op} '{name}' operand"))?;
    let ct = elem(g, count);
    if ct != dtype::FLOAT {
        return Err(reject!(
            "{op} '{name}' operand '{}' is {}, not float",
            g.value_name(count),
            dtype::name(ct)
        ));
    }
    // H is the length of the axis summed as the shapes state it: the squares', else the value
    // squared (x, or x before its Cast to f32; all of one shape). A symbolic or unknown length
    // cannot be proven equal to the constant.
    let first_in = |k: NodeId| g.inputs(k).first().copied().flatten();
    let squared = m.node(n.pow).or(m.node(n.square)).and_then(first_in);
    let uncast = m.node(n.cast_up).and_then(first_in);
    let last = |v: ValueId| match shape(g, v)?.last() {
        Some(Dim::Known(d)) if *d > 0 => Some(*d),
        _ => None,
    };
    let h = [first_in(sum), squared, uncast]
        .into_iter()
        .flatten()
        .find_map(last);
    let Some(h) = h else {
        return Err(reject!(
            "ReduceSum '{}' sums an axis of unknown length: {op} '{name}' by {c} is not provably its mean (set the dims or add value_info)",
            g.node_label(sum)
        ));
    };
    let hf = h as f64;
    if op == "Div" {
        return if c == hf {
            Ok(())
        } else {
            Err(reject!(
                "Div '{name}' divides the sum of squares by {c}, not by its length {h}: not a mean"
            ))
        };
    }
    // The kernel divides by H. Times 1/H is the same bits only when 1/H is exact (H a power of
    // two: then the product and the quotient are one correctly rounded value); times 1/H
    // rounded to float differs from the division in the last bit for some sums.
    let inv = 1.0 / hf;
    if c == inv && (h as u64).is_power_of_two() {
        Ok(())
    } else if c == f64::from(inv as f32) {
        Err(reject!(
            "Mul '{name}' scales the sum of squares by {c}, 1/{h} rounded to float: the fused kernel divides by {h}, and a multiply by a rounded reciprocal differs from that division in the last bit (exact only for a power-of-two length)"
        ))
    } else {
        Err(reject!(
            "Mul '{name}' scales the sum of squares by {c}, not 1/{h} (its length {h}): not a mean"
        ))
    }
}
