//! Rule `mxquant`: a standalone MXFP8 quantize becomes one `MxQuantize`.
//!
//! Search pattern => (q, scale) = MXFP8(x)  ⇒  (q, scale) = com.mxfuse::MxQuantize(x)
//!
//! ```text
//! before                                              after
//! x ─ Reshape ─ Abs ─ ReduceMax ─ Mul ─ Cast = scale   x ─ MxQuantize = q, scale
//! x, scale ─ QuantizeLinear = q                        q, scale ─ MxMatMul(·, W) = y
//! q, scale ─ DequantizeLinear ─ MatMul(·, W) = y
//! ```
//!
//! Key points:
//! * Runs after the fused rules (registry order), so it only sees quantizers no fusion took.
//! * Its main use is making standard-MX models run at all: ONNX Runtime's CPU EP has no kernel
//!   for Q/DQ with E8M0 scales.
//! * q and scale keep their names when something outside still reads them.

use std::sync::LazyLock;

use super::gathered_quark::taken_with_its_gather;
use super::mx_consumers::{
    consumers_for, emit_kept_float, emit_matmuls, quant_outputs, Consumers, QuantAttrs,
};
use super::spellings::mx_quant::{check_mx_quant, mx_quant, MxQuantPat, QuantInfo};
use crate::pattern::predicates::scale_is_e8m0;
use crate::pattern::{Emit, Fuse, Match, Pat, Pattern, Rule, RuleConfig, Site};
use crate::reject;
use crate::view::{GraphView, NodeId, ValueId, ONNX_DOMAIN};

pub struct MxQuantRule {
    pat: Pattern,
    h: MxQuantPat,
}

pub static RULE: LazyLock<MxQuantRule> = LazyLock::new(|| {
    let mut p = Pat::new();
    let x = p.input("x");
    let h = mx_quant(&mut p, x);
    p.escaping(h.root);
    p.escaping(h.scale);
    MxQuantRule {
        pat: p.finish(h.root),
        h,
    }
});

pub struct Params {
    x: ValueId,
    info: QuantInfo,
    consumers: Consumers,
    quant: QuantAttrs,
}

impl Rule for MxQuantRule {
    const NAME: &'static str = "mxquant";
    type Params = Params;

    fn pattern(&self) -> &Pattern {
        &self.pat
    }

    fn check(
        &self,
        m: &Match<'_>,
        cfg: &RuleConfig,
    ) -> Result<Fuse<Params>, crate::pattern::Reject> {
        let g = m.graph();
        // A Quark fake quant of constant experts a Gather reads: rule `mx_gather_dequant`
        // quantizes them once, at rewrite time, where this rule would quantize all of them every
        // step. Left to it when it runs and takes them (refused ones stay here, as before).
        if let Some(fq) = m.node(self.h.quark) {
            if cfg.gather_rule_runs && taken_with_its_gather(g, fq) {
                return Err(reject!(
                    "left to rule mx_gather_dequant: it quantizes these constant experts at rewrite time with the Gather reading them"
                ));
            }
        }
        let info = check_mx_quant(m, &self.h)?;
        let consumers = consumers_for(g, &info)?;
        let params = Params {
            x: m[self.h.x],
            quant: QuantAttrs::resolve(&info, cfg),
            info,
            consumers,
        };
        let mut fuse = Fuse::new(params);
        fuse = fuse.params.consumers.clone().absorb_into(fuse);
        Ok(fuse)
    }

    /// A `QuantizeLinear` whose E8M0 scale is computed at run time is an MXFP8 (or other MX)
    /// quantize: when its scale subgraph is a spelling the pattern does not know, the report
    /// says where the match stopped instead of staying silent (the quantize then runs unfused,
    /// as `MxQuantizeLinear`).
    fn report_no_match(&self, g: &dyn GraphView, anchor: NodeId) -> Option<&'static str> {
        let scale = g.inputs(anchor).get(1).copied().flatten()?;
        (g.op_type(anchor) == "QuantizeLinear"
            && g.domain(anchor) == ONNX_DOMAIN
            && scale_is_e8m0(g, anchor)
            && !g.is_constant(scale))
        .then_some("run-time E8M0 scale of a spelling not recognised (runs unfused, as MxQuantizeLinear; the README lists the spellings)")
    }

    fn rewrite(&self, site: &Site, p: Params, e: &mut Emit<'_>) -> Result<(), String> {
        let (q, scale) = quant_outputs(e, site, p.x, p.info.q, p.info.scale);
        let spec = e.op("MxQuantize").input(p.x).output(q).output(scale);
        e.add(p.quant.apply(spec))?;
        emit_kept_float(e, &p.consumers, q, scale)?;
        emit_matmuls(e, &p.consumers, q, Some(scale))
    }
}
