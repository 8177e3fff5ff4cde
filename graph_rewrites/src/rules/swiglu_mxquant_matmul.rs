//! Rule `swiglu_mxquant_matmul`: `SwiGLU → MXFP8 quantize → MatMul` becomes one
//! `SwiGluMxQuant` and `MxMatMul`.
//!
//! Search pattern => q = MXFP8(SwiGLU(gate, up)) ─ MatMul(q, W)
//!   ⇒  (q, scale) = com.mxfuse::SwiGluMxQuant(gate_up | gate, up); MxMatMul(q, scale, W)
//!
//! ```text
//! before                                                  after
//! gate_up ─ Split ─┬ gate ─ [clamp] ─ σ-chain ─┐          gate_up ─ SwiGluMxQuant(layout=split_halves) = q, scale
//!                  └ up ── [clamp, +β] ────────┴ Mul = act     q, scale ─ MxMatMul(W_down) = y
//!   (or two Slices: halves → split_halves, even/odd → interleaved; or separate gate, up)
//! act ─ MXFP8 quantize = q, scale ─ [DQ] ─ MatMul(W_down) = y
//! ```
//!
//! Key points:
//! * Spellings: see [`super::spellings::swiglu`] (activation), [`super::spellings::gate_up`]
//!   (a Split or Slices producing gate/up, absorbed when the fused op can read their input:
//!   halves = `split_halves`, even/odd = `interleaved`; otherwise `separate`) and
//!   [`super::spellings::mx_quant`]; consumers as in `mxquant`.
//! * `fp32_activation` comes from the session setting `swiglu_fp32_activation` (default 0:
//!   reproduce the graph's per-op rounding bit-exactly).
//! * The activation itself never escapes: if anything but the quantizer reads it, the engine
//!   refuses the site (there is no fused output for it).
//!
//! Not handled: see the spelling module.

use std::sync::LazyLock;

use super::mx_consumers::{
    consumers_for, emit_kept_float, emit_matmuls, quant_outputs, Consumers, QuantAttrs,
};
use super::spellings::gate_up::GateUp;
use super::spellings::mx_quant::{check_mx_quant, mx_quant, MxQuantPat, QuantInfo};
use super::spellings::swiglu::{check_swiglu, swiglu, SwigluPat, SwigluSpec};
use crate::pattern::{Emit, Fuse, Match, Pat, Pattern, Reject, Rule, RuleConfig, Site};
use crate::view::ValueId;

pub struct SwigluMxQuantMatMulRule {
    pat: Pattern,
    s: SwigluPat,
    q: MxQuantPat,
}

pub static RULE: LazyLock<SwigluMxQuantMatMulRule> = LazyLock::new(|| {
    let mut p = Pat::new();
    let s = swiglu(&mut p);
    let q = mx_quant(&mut p, s.act);
    p.escaping(q.root);
    p.escaping(q.scale);
    SwigluMxQuantMatMulRule {
        pat: p.finish(q.root),
        s,
        q,
    }
});

pub struct Params {
    act: ValueId,
    spec: SwigluSpec,
    info: QuantInfo,
    consumers: Consumers,
    fp32_activation: bool,
    quant: QuantAttrs,
}

impl Rule for SwigluMxQuantMatMulRule {
    const NAME: &'static str = "swiglu_mxquant_matmul";
    type Params = Params;

    fn pattern(&self) -> &Pattern {
        &self.pat
    }

    fn check(&self, m: &Match<'_>, cfg: &RuleConfig) -> Result<Fuse<Params>, Reject> {
        let info = check_mx_quant(m, &self.q)?;
        let spec = check_swiglu(m, &self.s, info.dtype, info.k)?;
        let g = m.graph();
        let consumers = consumers_for(g, &info)?;
        let params = Params {
            act: m[self.s.act],
            fp32_activation: cfg.swiglu_fp32_activation,
            quant: QuantAttrs::resolve(&info, cfg),
            spec,
            info,
            consumers,
        };
        let mut fuse = Fuse::new(params);
        for n in fuse.params.spec.source.absorbed.clone() {
            fuse = fuse.also(n, []);
        }
        fuse = fuse.params.consumers.clone().absorb_into(fuse);
        Ok(fuse)
    }

    fn rewrite(&self, site: &Site, p: Params, e: &mut Emit<'_>) -> Result<(), String> {
        let (q, scale) = quant_outputs(e, site, p.act, p.info.q, p.info.scale);
        let s = &p.spec;
        let spec = match s.source.inputs {
            GateUp::SplitHalves(gu) => e
                .op("SwiGluMxQuant")
                .input(gu)
                .attr_str("layout", "split_halves"),
            GateUp::Interleaved(gu) => e
                .op("SwiGluMxQuant")
                .input(gu)
                .attr_str("layout", "interleaved"),
            GateUp::Separate { gate, up } => e
                .op("SwiGluMxQuant")
                .input(gate)
                .input(up)
                .attr_str("layout", "separate"),
        };
        let spec = spec
            .attr_str("activation", s.activation)
            .attr_float("alpha", s.alpha)
            .attr_float("limit", s.limit)
            .attr_float("beta", s.beta)
            .attr_int("fp32_activation", i64::from(p.fp32_activation))
            .attr_str("swish_form", s.swish_form)
            .output(q)
            .output(scale);
        e.add(p.quant.apply(spec))?;
        emit_kept_float(e, &p.consumers, q, scale)?;
        emit_matmuls(e, &p.consumers, q, Some(scale))
    }
}
