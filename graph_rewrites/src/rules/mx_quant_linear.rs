//! Rule `mx_quant_linear`: an E8M0-scaled `QuantizeLinear` no fusion absorbed becomes
//! `com.mxfuse::MxQuantizeLinear`, so the model runs in ONNX Runtime at all.
//!
//! Search pattern => q = QuantizeLinear(x, s: FLOAT8E8M0 [, zp])  ⇒  q = com.mxfuse::MxQuantizeLinear(x, s)
//!
//! ```text
//! before                                         after
//! x, scale ─ QuantizeLinear(axis, block_size,    x, scale ─ MxQuantizeLinear(axis, block_size,
//!            saturate, output_dtype) = q ─ ...              saturate, output_dtype) = q ─ ...
//! ```
//!
//! Key points:
//! * A fallback rule, like `mx_dequant`: it only sees the QuantizeLinears rule `mxquant` and the
//!   fusions left — a constant (static) E8M0 scale of any granularity, a scale computed by a
//!   formula the matcher refuses, an E5M2 output. ONNX Runtime 1.31's CPU EP has no kernel for
//!   any of them.
//! * Same computation, bit for bit: `MxQuantizeLinear` is `QuantizeLinear`-24 for an E8M0 scale
//!   (x / 2^k in f32, then the FP8 cast with `saturate`; docs/ops.md). The output type is
//!   `output_dtype`, or the zero point's type when a zero point is given.
//! * Refused, with the reason: x not float/float16/bfloat16 (int32), an output type other than
//!   FLOAT8E4M3FN/FLOAT8E5M2 (uint8 by default, int8, FNUZ, FLOAT4E2M1), a zero point that is
//!   not a constant zero (ONNX forbids a non-zero float8 zero point), `output_dtype` and the zero
//!   point's type disagreeing, a `precision` other than float (the division would round x and
//!   the scale to it), scale shapes that do not fit the granularity.
//! * Static Q → DQ → MatMul is not fused into `MxMatMul`: after this rule and `mx_dequant` it
//!   runs as MxQuantizeLinear → MxDequantize → MatMul (see docs/ops.md "MxQuantizeLinear").

use std::sync::LazyLock;

use crate::pattern::predicates::{
    attr_int, dtype, is_float8_zero, mx_scale_layout, quantize_divides_in_float, scale_is_e8m0,
};
use crate::pattern::{Emit, Fuse, Match, OpId, Pat, Pattern, Rule, RuleConfig, Site, N, V};
use crate::reject;
use crate::view::{ValueId, ONNX_DOMAIN};

pub struct MxQuantLinearRule {
    pat: Pattern,
    q: N,
    x: V,
    scale: V,
}

pub static RULE: LazyLock<MxQuantLinearRule> = LazyLock::new(|| {
    let mut p = Pat::new();
    let x = p.input("x");
    let scale = p.input("scale");
    let q = p
        .op(OpId {
            domain: ONNX_DOMAIN,
            op_type: "QuantizeLinear",
            versions: crate::pattern::opsets::MX_QDQ_VERSIONS,
            aliases: &[],
        })
        .args([x, scale])
        .extra_inputs() // zero point: checked to be absent or zero
        .node_where("scale is FLOAT8E8M0", scale_is_e8m0)
        .node();
    let y = p.out(q, 0);
    p.produces(y);
    MxQuantLinearRule {
        pat: p.finish(y),
        q,
        x,
        scale,
    }
});

pub struct Params {
    x: ValueId,
    scale: ValueId,
    y: ValueId,
    axis: i64,
    block_size: i64,
    output_dtype: i64,
    saturate: i64,
}

impl Rule for MxQuantLinearRule {
    const NAME: &'static str = "mx_quant_linear";
    const FALLBACK: bool = true;
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
        let (x, scale) = (m[self.x], m[self.scale]);
        let n = m.node(self.q).ok_or_else(|| reject!("internal: no node"))?;
        let name = g.node_name(n);
        let x_type = g.tensor_info(x).map(|i| i.elem_type).unwrap_or(0);
        if !dtype::ACTIVATION.contains(&x_type) {
            return Err(reject!(
                "QuantizeLinear '{name}' reads {} x: MxQuantizeLinear reads float, float16 or bfloat16",
                dtype::name(x_type)
            ));
        }
        let attr_dtype = attr_int(g.attr(n, "output_dtype"), 0)
            .ok_or_else(|| reject!("output_dtype is not an int"))?;
        let output_dtype = match g.inputs(n).get(2).copied().flatten() {
            Some(zp) => {
                let zp_type = g.tensor_info(zp).map(|i| i.elem_type).unwrap_or(0) as i64;
                if attr_dtype != 0 && attr_dtype != zp_type {
                    return Err(reject!(
                        "QuantizeLinear '{name}' has output_dtype {attr_dtype} but a zero point of type {zp_type} (ONNX: invalid)"
                    ));
                }
                // A float8 zero point must be zero (ONNX); anything else is not this op.
                if !is_float8_zero(g, zp) {
                    return Err(reject!(
                        "QuantizeLinear '{name}' has a zero point that is not a constant zero"
                    ));
                }
                zp_type
            }
            // ONNX's default output type without a zero point is uint8.
            None if attr_dtype == 0 => dtype::UINT8 as i64,
            None => attr_dtype,
        };
        if output_dtype != dtype::FLOAT8E4M3FN as i64 && output_dtype != dtype::FLOAT8E5M2 as i64 {
            return Err(reject!(
                "QuantizeLinear '{name}' writes {} (type {output_dtype}): MxQuantizeLinear writes FLOAT8E4M3FN and FLOAT8E5M2 only",
                dtype::name(output_dtype as i32)
            ));
        }
        quantize_divides_in_float(g, n, &format!("QuantizeLinear '{name}'"))?;
        let saturate = attr_int(g.attr(n, "saturate"), 1)
            .filter(|s| *s == 0 || *s == 1)
            .ok_or_else(|| reject!("QuantizeLinear '{name}': saturate is not 0 or 1"))?;
        // Where both shapes are known, the kernel's own shape rule decides now, not at run time.
        let (axis, block_size) =
            mx_scale_layout(g, n, x, scale, &format!("QuantizeLinear '{name}'"))?;
        Ok(Fuse::new(Params {
            x,
            scale,
            y: m.root(),
            axis,
            block_size,
            output_dtype,
            saturate,
        }))
    }

    fn rewrite(&self, _site: &Site, p: Params, e: &mut Emit<'_>) -> Result<(), String> {
        let spec = e
            .op("MxQuantizeLinear")
            .input(p.x)
            .input(p.scale)
            .attr_int("axis", p.axis)
            .attr_int("block_size", p.block_size)
            .attr_int("output_dtype", p.output_dtype)
            .attr_int("saturate", p.saturate)
            .output(p.y);
        e.add(spec)?;
        Ok(())
    }
}
