//! Rule `mx_dequant`: an E8M0-scaled `DequantizeLinear` no fusion absorbed becomes
//! `com.mxfuse::MxDequantize`, so the model runs in ONNX Runtime at all.
//!
//! Search pattern => y = DequantizeLinear(x, s: FLOAT8E8M0)  ⇒  y = com.mxfuse::MxDequantize(x, s)
//!
//! ```text
//! before                                          after
//! x, scale ─ DequantizeLinear(axis, block_size,   x, scale ─ MxDequantize(axis, block_size,
//!            output_dtype) = y ─ Add / Gemm+bias /           output_dtype) = y ─ (same readers)
//!            Gather / graph output
//! ```
//!
//! Key points:
//! * A fallback rule: it runs once every fusion is done, so it only sees DequantizeLinears no
//!   fusion absorbed — an activation's read by something besides MatMuls (the fusion absorbed
//!   the MatMuls and noted the rest), a weight's feeding a Gather or a Gemm with a bias, E5M2
//!   values, MXFP4 (FLOAT4E2M1) weights no MxMatMul absorbed (a weight that is not a
//!   constant; a float activation's MatMul is rule `mx_weight_matmul`'s unless it refused).
//!   ONNX Runtime 1.31's CPU EP has no kernel for any of them.
//! * Same computation, bit for bit: `MxDequantize` is `DequantizeLinear`-24 for an E8M0 scale
//!   (the f32 product is exact; docs/ops.md), attributes copied as they are.
//! * FLOAT4E2M1 x is packed two per byte (ONNX): `MxDequantize` reads it as it is.
//! * Refused, with the reason: other value types (int8, FNUZ), a non-zero zero point, `output_dtype` unset (ONNX then makes y FLOAT8E8M0, no float type), scale shapes that
//!   do not fit the granularity.
//! * Leftover Quark `MXQuantizeDequantize` activations are taken by rule `mxquant` (which now
//!   re-creates the fake-quantized float with `MxDequantize` for non-MatMul readers); what does
//!   not map (another axis than the last, a weight quantizer) keeps its refusal there and runs on
//!   the EP's own Quark kernel.

use std::sync::LazyLock;

use crate::pattern::predicates::{attr_int, dtype, is_float8_zero, mx_scale_layout, scale_is_e8m0};
use crate::pattern::{
    Emit, Fuse, Match, OpBuilder, OpId, Pat, Pattern, Rule, RuleConfig, Site, N, V,
};
use crate::reject;
use crate::view::{GraphView, NodeId, ValueId, ONNX_DOMAIN};

pub struct MxDequantRule {
    pat: Pattern,
    dq: N,
    x: V,
    scale: V,
}

pub static RULE: LazyLock<MxDequantRule> = LazyLock::new(|| {
    let mut p = Pat::new();
    let x = p.input("x");
    let scale = p.input("scale");
    let dq = e8m0_dequantize(&mut p, x, scale).node();
    let y = p.out(dq, 0);
    p.produces(y);
    MxDequantRule {
        pat: p.finish(y),
        dq,
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
}

impl Rule for MxDequantRule {
    const NAME: &'static str = "mx_dequant";
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
        let n = m
            .node(self.dq)
            .ok_or_else(|| reject!("internal: no node"))?;
        let (axis, block_size, output_dtype) = dequant_layout(g, n, x, scale, "DequantizeLinear")?;
        Ok(Fuse::new(Params {
            x,
            scale,
            y: m.root(),
            axis,
            block_size,
            output_dtype,
        }))
    }

    fn rewrite(&self, _site: &Site, p: Params, e: &mut Emit<'_>) -> Result<(), String> {
        let spec = e
            .op("MxDequantize")
            .input(p.x)
            .input(p.scale)
            .attr_int("axis", p.axis)
            .attr_int("block_size", p.block_size)
            .attr_int("output_dtype", p.output_dtype)
            .output(p.y);
        e.add(spec)?;
        Ok(())
    }
}

/// The pattern node `DequantizeLinear(x, scale)` with a FLOAT8E8M0 scale (opset 24+; a zero
/// point allowed, for [`dequant_layout`] to check), to be finished by the caller.
pub(crate) fn e8m0_dequantize(p: &mut Pat, x: V, scale: V) -> OpBuilder<'_> {
    p.op(OpId {
        domain: ONNX_DOMAIN,
        op_type: "DequantizeLinear",
        versions: crate::pattern::opsets::MX_QDQ_VERSIONS,
        aliases: &[],
    })
    .args([x, scale])
    .extra_inputs() // zero point: checked to be absent or zero
    .node_where("scale is FLOAT8E8M0", scale_is_e8m0)
}

/// What `MxDequantize` needs of E8M0-scaled dequantize node `n` (`DequantizeLinear`, or an
/// `MxDequantize` a fusion left, named `op` in reasons) reading `x` and `scale`: `(axis,
/// block_size, output_dtype)`, or why the kernel cannot run it.
pub(crate) fn dequant_layout(
    g: &dyn GraphView,
    n: NodeId,
    x: ValueId,
    scale: ValueId,
    op: &str,
) -> Result<(i64, i64, i64), crate::pattern::Reject> {
    let name = g.node_name(n);
    let x_type = g.tensor_info(x).map(|i| i.elem_type).unwrap_or(0);
    if ![dtype::FLOAT8E4M3FN, dtype::FLOAT8E5M2, dtype::FLOAT4E2M1].contains(&x_type) {
        return Err(reject!(
            "{op} '{name}' reads {} values: MxDequantize reads FLOAT8E4M3FN, FLOAT8E5M2 and FLOAT4E2M1",
            dtype::name(x_type)
        ));
    }
    if let Some(zp) = g.inputs(n).get(2).copied().flatten() {
        // A float8 zero point must be zero (ONNX); anything else is not this op.
        if !is_float8_zero(g, zp) {
            return Err(reject!(
                "{op} '{name}' has a zero point that is not a constant zero"
            ));
        }
    }
    let output_dtype = attr_int(g.attr(n, "output_dtype"), 0).unwrap_or(-1);
    if !dtype::ACTIVATION.contains(&(output_dtype as i32)) {
        return Err(reject!(
            "{op} '{name}' has output_dtype {output_dtype}: with an E8M0 scale ONNX needs it to be float, float16 or bfloat16"
        ));
    }
    // Where both shapes are known, the kernel's own shape rule decides now, not at run time.
    let (axis, block_size) = mx_scale_layout(g, n, x, scale, &format!("{op} '{name}'"))?;
    Ok((axis, block_size, output_dtype))
}
