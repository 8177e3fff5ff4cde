//! Rule `mx_weight_matmul`: a float activation times a constant MX weight (weight-only MXFP8 /
//! MXFP4) becomes one `com.mxfuse::MxMatMul` with a float `a` and no `a_scale`, reading the
//! weight's E4M3 / E2M1 values and E8M0 scales in place instead of dequantizing it every step.
//!
//! Search pattern => y = MatMul(x: float, DequantizeLinear(W, s: FLOAT8E8M0) [→ Transpose]) | Gemm(x, DequantizeLinear(W, s) [, C])
//!                  | MatMul(x, MXQuantizeDequantize(W_float)) | Gemm(x, MXQuantizeDequantize(W_float) [, C])
//!
//! ```text
//! before                                              after
//! W, s ─ DequantizeLinear(axis K, block 32) = w       x, W, s [, C] ─ MxMatMul(a = x, a_scale = "",
//! x: float ─ MatMul(x, w) | Gemm(x, w [, C]) = y                        trans_b, alpha, beta) = y
//!   (or MatMul(x, Transpose(w)) with w [N, K])        (w = MxDequantize(W, s) only if others read it)
//! ```
//!
//! Key points:
//! * The weight side is exactly what the MXFP8-activation fusions absorb (`mx_consumers`:
//!   `matmul_use` / `classify_weight`, the same predicates): FLOAT8E4M3FN or FLOAT4E2M1 values
//!   and FLOAT8E8M0 scales, both constants, blocked 32 along K (axis 0 of `[K, N]`, axis 1 of a
//!   `transB = 1` Gemm's `[N, K]` or of an `[N, K]` weight a MatMul reads through
//!   `Transpose(perm = [1, 0])`), no zero point or a constant zero one; a Gemm with
//!   `transA = 0`, finite alpha / beta and a bias of the output's type that broadcasts to
//!   `[M, N]`. Everything else is refused with the reason (a weight that is not constant, another
//!   axis or block size, K unknown or not a multiple of 32, ...) and runs as before
//!   (`mx_dequant` + the float MatMul).
//! * The MXFP8-activation fusions keep priority: a MatMul whose activation is itself
//!   MX-dequantized (an E8M0 `DequantizeLinear`, a Quark fake-quant) is not this rule's match at
//!   all (a structural non-match, no refusal in the report); `add_rmsnorm_mxquant`,
//!   `swiglu_mxquant_matmul` and `mxquant` take it. Except an E8M0 `DequantizeLinear` whose
//!   quantizer all three refuse (an RCEIL scale computed in float16, an unknown scale rule, a static
//!   scale): the fallbacks leave it as `MxDequantize`, a float activation to this rule. The
//!   offline pipeline took such a MatMul one iteration later (reading that `MxDequantize`); the
//!   plugin EP, which scans ORT's graph once, never did, so online every such weight was
//!   dequantized on every step and the two paths computed different GEMMs (new-user probe 11).
//! * Same numbers up to f32 summation order: `MxMatMul` computes `Σ a · deq(W)` with `a`
//!   widened exactly to f32, f32 accumulation, one rounding to the output type. The unfused
//!   graph rounds deq(W) to the activation type first (its DequantizeLinear's `output_dtype`):
//!   for float16 / bfloat16 that is refused unless every dequantized weight value is exactly a
//!   value of that type (checked on the constant scales, and on the values where a scale is out
//!   of the always-exact range), so both read the same weights.
//! * A weight DequantizeLinear (or Transpose) that something else also reads stays for it: the
//!   replacement re-creates its output as `MxDequantize` (so the provider's claim carries the
//!   constants, as the other MX fusions' claims do). A Transpose read by anything else is
//!   refused (the MatMul keeps reading the float weight). The rule reads an `MxDequantize` weight
//!   as a DequantizeLinear (`is_weight_dequantize`), so the next pass takes a shared weight's
//!   next float reader, as the plugin EP does (ORT duplicates a shared DequantizeLinear per
//!   reader before the EP sees the graph).
//! * Quark weight-only: `MXQuantizeDequantize(W)` of a constant float `[K, N]` W (fp8_e4m3,
//!   block 32, axis 0 — `Weight::QuarkFloat`, as the MXFP8 fusions read it) is quantized at
//!   rewrite time (by the check, whose bytes `emit_matmuls` stores) and read as `MxMatMul(x, "", W_mxfp8, W_mxfp8_scale, trans_b
//!   = 1)`, only when those bytes dequantize to exactly the fake-quant's output
//!   (`check_quark_weight_exact`, run by `classify_weight`: Quark's reference kernel, rounded to W's
//!   type, element by element; blocks with an Inf or below 2^-119 are refused). A fake-quant
//!   others also read is re-created as `MxDequantize` of the `[K, N]`-layout bytes, which the
//!   MxMatMul reads with `trans_b = 0`.

use std::sync::LazyLock;

use super::mx_consumers::{
    classify_weight, emit_matmuls, emit_mx_dequantize, is_op, is_weight_dequantize, matmul_use,
    only_read_by, plain_transpose, prequantize_weight_kn, Consumers, Weight,
};
use super::spellings::modelopt::{e8m0_scales, is_trt_dequantize};
use super::spellings::mx_quant::BLOCK;
use crate::pattern::predicates::{attr_int, dtype, scale_is_e8m0};
use crate::pattern::{
    Attempt, DynRule, Emit, Fuse, Match, OpId, Pat, Pattern, Reject, Rule, RuleConfig, Site,
};
use crate::reject;
use crate::view::{is_quark_mx, Dim, GraphView, NodeId, ValueId, ONNX_DOMAIN};

pub struct MxWeightMatMulRule {
    pat: Pattern,
}

/// The E8M0 `DequantizeLinear` producing `v`, if there is one.
fn mx_dequant_of(g: &dyn GraphView, v: ValueId) -> Option<NodeId> {
    let (n, 0) = g.producer(v)? else {
        return None;
    };
    (is_op(g, n, ONNX_DOMAIN, "DequantizeLinear") && scale_is_e8m0(g, n)).then_some(n)
}

/// The node's weight (input 1) is an E8M0 `DequantizeLinear`'s (or `MxDequantize`'s: a shared
/// weight's dequantize an earlier fusion re-created for this reader) output, directly or through
/// a rank-2 Transpose, or a Quark fake-quant's output (directly).
fn weight_is_mx_dequantized(g: &dyn GraphView, n: NodeId) -> bool {
    let Some(b) = g.inputs(n).get(1).copied().flatten() else {
        return false;
    };
    if g.producer(b).is_some_and(|(p, _)| is_quark_mx(g, p)) {
        return true;
    }
    let src = plain_transpose(g, b).map_or(b, |(_, src)| src);
    g.producer(src).is_some_and(|(p, i)| {
        i == 0 && ((is_weight_dequantize(g, p) && scale_is_e8m0(g, p)) || is_trt_dequantize(g, p))
    })
}

/// The node's activation (input 0) is not MX-dequantized: those MatMuls belong to the
/// MXFP8-activation fusions. An E8M0 `DequantizeLinear` activation whose quantizer none of
/// them takes counts as a float one (module docs): the fallback `mx_dequant` turns it into
/// `MxDequantize`, which this rule reads as any float activation.
fn activation_is_not_mx(g: &dyn GraphView, n: NodeId) -> bool {
    let Some(a) = g.inputs(n).first().copied().flatten() else {
        return false;
    };
    match g.producer(a) {
        Some((p, _)) => match mx_dequant_of(g, a) {
            Some(dq) => quantizer_left_to_fallback(g, dq),
            None => !is_quark_mx(g, p) && !is_trt_dequantize(g, p),
        },
        None => true,
    }
}

/// No MXFP8-activation fusion (`add_rmsnorm_mxquant`, `swiglu_mxquant_matmul`, `mxquant`)
/// accepts the quantizer whose `q` the E8M0 DequantizeLinear `dq` reads (or `q` has no
/// producer: a graph input or constant), so the fallbacks take that Q / DQ. Asked with the
/// default settings: a setting that makes one of them accept instead only means it takes the
/// MatMul first (its root, the quantizer, comes first in every scan), as before.
///
/// Judged once per quantizer and scan: the verdict is kept in the scan's memo
/// ([`GraphView::memo`], keyed by `q`; the graph does not change within a scan), so the q / k / v
/// MatMuls of one normed activation, or a MatMul the pattern tries as more than one
/// alternative, do not run the three fusions' matchers again each.
fn quantizer_left_to_fallback(g: &dyn GraphView, dq: NodeId) -> bool {
    let Some(q) = g.inputs(dq).first().copied().flatten() else {
        return false;
    };
    let Some((qn, _)) = g.producer(q) else {
        return true;
    };
    match g.memo() {
        Some(memo) => {
            memo.get_or_make(q, || LeftToFallback(no_fusion_takes(g, q, qn)))
                .0
        }
        None => no_fusion_takes(g, q, qn),
    }
}

/// [`quantizer_left_to_fallback`]'s verdict on a quantizer, as the memo stores it (its own type:
/// the memo's other entries are constants' work, keyed by their ids).
#[derive(Clone)]
struct LeftToFallback(bool);

/// None of the three activation fusions accepts the quantizer `qn` producing `q`.
fn no_fusion_takes(g: &dyn GraphView, q: ValueId, qn: NodeId) -> bool {
    let key = (g.domain(qn), g.op_type(qn));
    let cfg = RuleConfig::default();
    let fusions: [&dyn DynRule; 3] = [
        &*super::add_rmsnorm_mxquant::RULE,
        &*super::swiglu_mxquant_matmul::RULE,
        &*super::mxquant::RULE,
    ];
    !fusions.iter().any(|r| {
        r.root_ops().contains(&key) && matches!(r.try_at(g, q, &cfg), Attempt::Accepted(..))
    })
}

pub static RULE: LazyLock<MxWeightMatMulRule> = LazyLock::new(|| {
    let mut p = Pat::new();
    let x = p.input("x");
    let w = p.input("w");
    let mm = p
        .op(OpId {
            domain: ONNX_DOMAIN,
            op_type: "MatMul",
            versions: &[1, 9, 13],
            aliases: &[],
        })
        .args([x, w])
        .node_where(
            "weight is an E8M0 DequantizeLinear or a Quark fake-quant",
            weight_is_mx_dequantized,
        )
        .node_where("activation is not MX-dequantized", activation_is_not_mx)
        .out();
    let gemm = p
        .op(OpId {
            domain: ONNX_DOMAIN,
            op_type: "Gemm",
            versions: &[7, 9, 11, 13],
            aliases: &[],
        })
        .args([x, w])
        .extra_inputs() // C: checked by matmul_use
        .node_where(
            "weight is an E8M0 DequantizeLinear or a Quark fake-quant",
            weight_is_mx_dequantized,
        )
        .node_where("activation is not MX-dequantized", activation_is_not_mx)
        .out();
    let y = p.any_of("y", [mm, gemm]);
    p.produces(y);
    MxWeightMatMulRule { pat: p.finish(y) }
});

pub struct Params {
    a: ValueId,
    consumers: Consumers,
    /// A Quark weight fake-quant others read too: its constant float weight and output, which
    /// the replacement re-creates as `MxDequantize` of the weight quantized at rewrite time
    /// (`[K, N]`, read by the MxMatMul too), so that the claim carries the constant.
    quark_kept: Option<(ValueId, ValueId, i32)>,
    /// The weight DequantizeLinear's output re-created for other readers: (values, scales,
    /// axis, output_dtype, output).
    kept: Option<(ValueId, ValueId, i64, i64, ValueId)>,
}

/// The last dim of `a`: K, known and a multiple of the block.
fn activation_k(g: &dyn GraphView, a: ValueId) -> Result<i64, Reject> {
    let shape = g.tensor_info(a).and_then(|i| i.shape);
    match shape.as_deref().and_then(|s| s.last()) {
        Some(Dim::Known(k)) if *k > 0 && k % BLOCK == 0 => Ok(*k),
        Some(Dim::Known(k)) => Err(reject!(
            "activation '{}' has K = {k}: MxMatMul needs a positive multiple of {BLOCK}",
            g.value_name(a)
        )),
        _ => Err(reject!(
            "activation '{}' has an unknown shape or K (last dim): K must be a known multiple of {BLOCK}",
            g.value_name(a)
        )),
    }
}

/// The scale bytes for which every dequantized value `v · 2^(s − 127)` of `values_type` is
/// exactly a value of float type `t` (so rounding the dequantized weight to `t`, as the unfused
/// DequantizeLinear does, changes nothing): float16 needs the largest value ≤ 65504 and the
/// smallest step ≥ 2^-24; bfloat16 the smallest step ≥ 2^-133 (its subnormal spacing; its range
/// is float's). E4M3: values 2^-9 · j (j < 16 integer), at most 448; E2M1: 2^-1 · j, at most 6.
fn exact_scale_range(t: i32, values_type: i32) -> (u8, u8) {
    let e2m1 = values_type == dtype::FLOAT4E2M1;
    match t {
        // 448 · 2^7 = 57344, 2^-9 · 2^-15 = 2^-24; 6 · 2^13 = 49152, 2^-1 · 2^-23 = 2^-24.
        dtype::FLOAT16 if e2m1 => (127 - 23, 127 + 13),
        dtype::FLOAT16 => (127 - 15, 127 + 7),
        // 2^-9 · 2^-124 = 2^-133; E2M1's smallest step 2^-128 is above it at every scale.
        dtype::BFLOAT16 if !e2m1 => (3, 255),
        _ => (0, 255),
    }
}

/// Refuses the weight when rounding its dequantized values to the activation type `t` (what the
/// unfused graph's DequantizeLinear does) would change one: scales within
/// [`exact_scale_range`] are exact for every value; for the others the values are dequantized
/// (as `MxDequantize` does) and each checked.
fn check_weight_exact_in(
    g: &dyn GraphView,
    values: ValueId,
    scales: ValueId,
    dq: NodeId,
    t: i32,
) -> Result<(), Reject> {
    let vt = g.tensor_info(values).map(|i| i.elem_type).unwrap_or(0);
    let (lo, hi) = exact_scale_range(t, vt);
    let name = g.value_name(values);
    let s = g
        .const_value(scales)
        .ok_or_else(|| reject!("scales of weight '{name}' could not be read"))?;
    if s.raw.iter().all(|b| (lo..=hi).contains(b) || *b == 0xFF) {
        return Ok(());
    }
    let v = g
        .const_value(values)
        .ok_or_else(|| reject!("weight '{name}' could not be read"))?;
    // The model's dims, checked: a malformed model (negative dims, or dims whose product
    // overflows or does not fit the stored bytes) is a refusal, never a wrapped size.
    let dims =
        |d: &[i64]| -> Option<Vec<usize>> { d.iter().map(|&x| usize::try_from(x).ok()).collect() };
    let (Some(vd), Some(sd)) = (dims(&v.dims), dims(&s.dims)) else {
        return Err(reject!("weight '{name}' or its scales have a negative dim"));
    };
    let axis = attr_int(g.attr(dq, "axis"), 1).unwrap_or(1);
    let x_dtype = if vt == dtype::FLOAT4E2M1 {
        kernels::DType::E2M1
    } else {
        kernels::DType::E4M3
    };
    // At most two values a byte (FLOAT4E2M1 packs two).
    let n = vd
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|n| n.div_ceil(2) <= v.raw.len())
        .ok_or_else(|| {
            reject!(
                "weight '{name}': its dims {:?} do not fit its {} bytes",
                vd,
                v.raw.len()
            )
        })?;
    let mut y = vec![0u8; n * 4];
    let run = kernels::ops::mx_dequantize(
        kernels::ops::TensorRef::new(x_dtype, &vd, &v.raw).map_err(|e| reject!("{e}"))?,
        kernels::ops::TensorRef::new(kernels::DType::E8M0, &sd, &s.raw)
            .map_err(|e| reject!("{e}"))?,
        kernels::ops::TensorMut::new(kernels::DType::F32, &vd, &mut y)
            .map_err(|e| reject!("{e}"))?,
        &kernels::MxDequantAttrs {
            axis,
            block_size: BLOCK as usize,
            output_dtype: kernels::DType::F32,
        },
        &kernels::Serial,
    );
    run.map_err(|e| reject!("weight '{name}' does not dequantize: {e}"))?;
    let exact = |f: f32| {
        f.is_nan()
            || match t {
                dtype::FLOAT16 => half::f16::from_f32(f).to_f32() == f,
                dtype::BFLOAT16 => half::bf16::from_f32(f).to_f32() == f,
                _ => true,
            }
    };
    let bad = y
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .find(|f| !exact(*f));
    match bad {
        None => Ok(()),
        Some(f) => Err(reject!(
            "dequantized weight '{name}' holds {f:e}, which is not a {} value: the unfused DequantizeLinear rounds it, MxMatMul would not",
            dtype::name(t)
        )),
    }
}

/// A Quark fake-quantized constant weight (`classify_weight` has checked it: fp8_e4m3, block 32 along
/// K, a constant `[K, N]` float of the output's type, and — `check_quark_weight_exact` — that
/// the E4M3 values and E8M0 scales stored at rewrite time dequantize to exactly what the
/// fake-quant writes). The fake-quant goes with the fusion when only this MatMul reads it, and
/// stays for its other readers otherwise.
fn quark_weight(
    g: &dyn GraphView,
    mm: NodeId,
    a: ValueId,
    a_dtype: i32,
    u: super::mx_consumers::MatMulUse,
    (weight, fake_quant): (ValueId, NodeId),
) -> Result<Fuse<Params>, Reject> {
    let (op, name) = (g.op_type(mm), g.node_label(mm));
    if u.out_dtype != a_dtype {
        return Err(reject!(
            "{op} '{name}' writes {} from a {} activation",
            dtype::name(u.out_dtype),
            dtype::name(a_dtype)
        ));
    }
    let wf = g.outputs(fake_quant)[0];
    let quark_kept = (!only_read_by(g, fake_quant, &[mm])).then_some((weight, wf, u.out_dtype));
    let consumers = Consumers {
        matmuls: vec![u],
        ..Default::default()
    };
    let fuse = Fuse::new(Params {
        a,
        consumers,
        kept: None,
        quark_kept,
    })
    .also(fake_quant, quark_kept.map(|k| k.1));
    Ok(if quark_kept.is_some() {
        fuse.note(format!(
            "weight fake-quant '{}' stays for its other readers (as MxDequantize of the weight quantized at rewrite time: the same values)",
            g.node_label(fake_quant)
        ))
    } else {
        fuse
    })
}

impl Rule for MxWeightMatMulRule {
    const NAME: &'static str = "mx_weight_matmul";
    type Params = Params;

    fn pattern(&self) -> &Pattern {
        &self.pat
    }

    fn check(&self, m: &Match<'_>, _cfg: &RuleConfig) -> Result<Fuse<Params>, Reject> {
        let g = m.graph();
        let (mm, _) = g
            .producer(m.root())
            .ok_or_else(|| reject!("internal: no node"))?;
        let name = g.node_label(mm);
        let op = g.op_type(mm);
        let a = g
            .inputs(mm)
            .first()
            .copied()
            .flatten()
            .ok_or_else(|| reject!("{op} '{name}' has no activation"))?;
        let a_dtype = g.tensor_info(a).map(|i| i.elem_type).unwrap_or(0);
        if !dtype::ACTIVATION.contains(&a_dtype) {
            return Err(reject!(
                "{op} '{name}': activation '{}' is {}, not float, float16 or bfloat16",
                g.value_name(a),
                dtype::name(a_dtype)
            ));
        }
        let k = activation_k(g, a).map_err(|r| reject!("{op} '{name}': {}", r.0))?;
        let u = matmul_use(g, mm, a, k, a_dtype)?;
        if let Weight::QuarkFloat {
            weight, fake_quant, ..
        } = u.weight
        {
            return quark_weight(g, mm, a, a_dtype, u, (weight, fake_quant));
        }
        let Weight::Mx {
            values,
            scales,
            dequant,
            transpose,
        } = u.weight
        else {
            // The pattern saw an E8M0 DequantizeLinear behind the weight: say why it was not
            // read as MX (through a Transpose the MX weight was tried and refused).
            let b = g.inputs(mm).get(1).copied().flatten();
            let why = b
                .and_then(|b| plain_transpose(g, b))
                .and_then(|(_, src)| classify_weight(g, src, k, true).err())
                .map_or_else(
                    || "a MatMul reads an MX weight as MX only from a DequantizeLinear feeding it directly or through a Transpose".to_string(),
                    |r| r.0,
                );
            return Err(reject!("{op} '{name}': weight not read as MX: {why}"));
        };
        if u.out_dtype != a_dtype {
            return Err(reject!(
                "{op} '{name}' writes {} from a {} activation",
                dtype::name(u.out_dtype),
                dtype::name(a_dtype)
            ));
        }
        let dq_dtype = attr_int(g.attr(dequant, "output_dtype"), 0).unwrap_or(-1);
        if dq_dtype != a_dtype as i64 {
            return Err(reject!(
                "weight DequantizeLinear '{}' writes output_dtype {dq_dtype}, the activation is {}",
                g.node_label(dequant),
                dtype::name(a_dtype)
            ));
        }
        check_weight_exact_in(g, values, scales, dequant, a_dtype)
            .map_err(|r| reject!("{op} '{name}': {}", r.0))?;
        // What goes with the fusion: the Transpose (only if nothing else reads it) and the
        // DequantizeLinear, whose output is re-created when anything else reads it.
        let mut dq_reader = mm;
        if let Some(t) = transpose {
            if !only_read_by(g, t, &[mm]) {
                return Err(reject!(
                    "{op} '{name}': the weight's Transpose '{}' has other readers",
                    g.node_label(t)
                ));
            }
            dq_reader = t;
        }
        let wd = g.outputs(dequant)[0];
        let kept = (!only_read_by(g, dequant, &[dq_reader])).then(|| {
            let axis = attr_int(g.attr(dequant, "axis"), 1).unwrap_or(1);
            (values, scales, axis, dq_dtype, wd)
        });
        let consumers = Consumers {
            matmuls: vec![u],
            ..Default::default()
        };
        let mut fuse = Fuse::new(Params {
            a,
            consumers,
            kept,
            quark_kept: None,
        })
        .also(dequant, kept.map(|k| k.4));
        if let Some(t) = transpose {
            fuse = fuse.also(t, []);
        }
        if kept.is_some() {
            fuse = fuse.note(format!(
                "weight DequantizeLinear '{}' stays (as MxDequantize) for its other readers",
                g.node_label(dequant)
            ));
        }
        Ok(fuse)
    }

    fn rewrite(&self, _site: &Site, mut p: Params, e: &mut Emit<'_>) -> Result<(), String> {
        if let Some((values, scales, axis, dt, wd)) = p.kept {
            let scales = e8m0_scales(e, scales)?;
            emit_mx_dequantize(e, (values, scales), axis, dt, wd)?;
        }
        if let Some((w, wf, dt)) = p.quark_kept {
            // check_quark_weight_exact: these values dequantize to exactly the fake-quant's
            // output (rounding to `dt` changes none of them).
            let mx = p.consumers.matmuls.iter().find_map(|u| match &u.weight {
                Weight::QuarkFloat { mx, .. } => Some(mx.clone()),
                _ => None,
            });
            let mx = mx.ok_or("internal: a kept Quark weight without its MatMul")?;
            let (values, scales) = prequantize_weight_kn(e, w, &mx)?;
            emit_mx_dequantize(e, (values, scales), 0, dt as i64, wf)?;
            for u in &mut p.consumers.matmuls {
                if let Weight::QuarkFloat { fake_quant, .. } = u.weight {
                    u.weight = Weight::Mx {
                        values,
                        scales,
                        dequant: fake_quant,
                        transpose: None,
                    };
                    u.trans_b = false;
                }
            }
        }
        emit_matmuls(e, &p.consumers, p.a, None)
    }
}
