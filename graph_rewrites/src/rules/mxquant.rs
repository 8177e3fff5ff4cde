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

use super::mx_consumers::{
    consumers_for, emit_kept_float, emit_matmuls, quant_outputs, Consumers, QuantAttrs,
};
use super::spellings::mx_quant::{check_mx_quant, mx_quant, MxQuantPat, QuantInfo};
use crate::pattern::{Emit, Fuse, Match, Pat, Pattern, Rule, RuleConfig, Site};
use crate::view::ValueId;

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
        let info = check_mx_quant(m, &self.h)?;
        let g = m.graph();
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

    fn rewrite(&self, site: &Site, p: Params, e: &mut Emit<'_>) -> Result<(), String> {
        let (q, scale) = quant_outputs(e, site, p.x, p.info.q, p.info.scale);
        let spec = e.op("MxQuantize").input(p.x).output(q).output(scale);
        e.add(p.quant.apply(spec))?;
        emit_kept_float(e, &p.consumers, q, scale)?;
        emit_matmuls(e, &p.consumers, q, scale)
    }
}
