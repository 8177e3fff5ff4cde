//! Rule `add_rmsnorm_mxquant`: `[AllReduce] → residual Add → RMSNorm → MXFP8 quantize →
//! MatMul(s)` becomes one `AddRmsNormMxQuant` and `MxMatMul`s.
//!
//! Search pattern => `q = MXFP8(RMSNorm([AllReduce](x) + residual, γ)) ─ MatMul(q, W_i)`
//!   ⇒  `(q, scale, sum, [normed]) = com.mxfuse::AddRmsNormMxQuant(x, residual, w); MxMatMul(q, scale, W_i)`
//!
//! ```text
//! before                                             after
//! x ─ [AllReduce] ─┐                                 x, residual, w ─ AddRmsNormMxQuant ─┬ q, scale
//! residual ────────┴ Add = sum ─ RMSNorm(w) = y        (sum keeps its name)              ├ sum ─▶ next layer
//!   y ─ MXFP8 quantize = q, scale ─ [DQ] ─ MatMul = y_i                                  └ [y] ─▶ router
//!   y ─▶ router MatMul (float, optional)             q, scale ─ MxMatMul(W_i) = y_i
//! ```
//!
//! Key points:
//! * Spellings: see [`super::spellings::rms_norm`] (residual stage and norm) and
//!   [`super::spellings::mx_quant`] (quantizer); consumers as in `mxquant`.
//! * The residual sum escapes to the next layer: it keeps the original Add's (or the Skip
//!   norm's output 3) name. The normed tensor is an extra output only when something outside the
//!   fusion reads it (an MoE router in float).
//! * A first layer has no Add: the fused op gets no residual input and `residual_out` is only
//!   written when the norm needs a slot before `normed`.
//! * An absorbed AllReduce is marked collective: if anything else reads its output the engine
//!   refuses the site rather than run it twice or drop it.
//!
//! Not handled: norms whose numerics the kernel cannot reproduce (see the spelling's check);
//! consumers other than MatMul keep reading the graph's own q/scale (they are re-produced).

use std::sync::LazyLock;

use super::mx_consumers::{
    consumers_for, emit_kept_float, emit_matmuls, quant_outputs, Consumers, QuantAttrs,
};
use super::spellings::mx_quant::{check_mx_quant, mx_quant, MxQuantPat, QuantInfo};
use super::spellings::rms_norm::{
    check_add_rms_norm, residual_stage, rms_norm, NormSpec, ResidualPat, RmsNormPat,
};
use crate::pattern::{Emit, Fuse, Match, Pat, Pattern, Reject, Rule, RuleConfig, Site};
use crate::view::{GraphView, TensorInfo, ValueId};

pub struct AddRmsNormMxQuantRule {
    pat: Pattern,
    r: ResidualPat,
    n: RmsNormPat,
    q: MxQuantPat,
}

pub static RULE: LazyLock<AddRmsNormMxQuantRule> = LazyLock::new(|| {
    let mut p = Pat::new();
    let r = residual_stage(&mut p);
    let n = rms_norm(&mut p, &r);
    let q = mx_quant(&mut p, n.y);
    for v in [q.root, q.scale, r.add_ar_out, r.add_out, n.y] {
        p.escaping(v);
    }
    AddRmsNormMxQuantRule {
        pat: p.finish(q.root),
        r,
        n,
        q,
    }
});

pub struct Params {
    /// The normalized tensor of the graph (the quantizer's input).
    y: ValueId,
    spec: NormSpec,
    info: QuantInfo,
    consumers: Consumers,
    quant: QuantAttrs,
}

impl Rule for AddRmsNormMxQuantRule {
    const NAME: &'static str = "add_rmsnorm_mxquant";
    type Params = Params;

    fn pattern(&self) -> &Pattern {
        &self.pat
    }

    fn check(&self, m: &Match<'_>, cfg: &RuleConfig) -> Result<Fuse<Params>, Reject> {
        let info = check_mx_quant(m, &self.q)?;
        let spec = check_add_rms_norm(m, &self.r, &self.n, info.dtype, info.k)?;
        let g = m.graph();
        let consumers = consumers_for(g, &info)?;
        let params = Params {
            y: m[self.n.y],
            quant: QuantAttrs::resolve(&info, cfg),
            spec,
            info,
            consumers,
        };
        let mut fuse = Fuse::new(params);
        // The Skip norm's sum is its output 3, which the pattern does not bind: declare it here.
        if let (Some(skip), Some(sum)) = (fuse.params.spec.inputs.skip, fuse.params.spec.inputs.sum)
        {
            fuse = fuse.also(skip, [sum]);
        }
        fuse = fuse.params.consumers.clone().absorb_into(fuse);
        Ok(fuse)
    }

    fn rewrite(&self, site: &Site, p: Params, e: &mut Emit<'_>) -> Result<(), String> {
        let (q, scale) = quant_outputs(e, site, p.y, p.info.q, p.info.scale);
        let (s, num) = (&p.spec.inputs, &p.spec.numerics);
        let normed = Some(p.y).filter(|v| site.produces(*v));
        let mut residual_out = s.sum.filter(|v| site.produces(*v));
        if residual_out.is_none() && normed.is_some() {
            // `normed` is output 3: slot 2 needs a value (the sum, written but unread).
            let info = e.graph().tensor_info(p.y).map(|i| TensorInfo {
                elem_type: p.info.dtype,
                shape: i.shape,
            });
            let base = format!("{}_residual_sum", e.graph().value_name(p.y));
            residual_out = Some(e.value(&base, info));
        }
        let mut spec = e
            .op("AddRmsNormMxQuant")
            .input(s.x)
            .input_opt(s.residual)
            .input(p.spec.gamma)
            .attr_float("epsilon", num.epsilon)
            .attr_int("gemma", i64::from(num.gemma))
            .attr_int("gamma_in_f32", i64::from(num.gamma_in_f32))
            .attr_str("inv_form", num.inv_form)
            .attr_int("round_sum", i64::from(num.round_sum))
            .attr_int("allreduce", i64::from(s.allreduce))
            .output(q)
            .output(scale);
        if let Some(r) = residual_out {
            spec = spec.output(r);
        }
        if let Some(n) = normed {
            spec = spec.output(n);
        }
        e.add(p.quant.apply(spec))?;
        emit_kept_float(e, &p.consumers, q, scale)?;
        emit_matmuls(e, &p.consumers, q, Some(scale))
    }
}
