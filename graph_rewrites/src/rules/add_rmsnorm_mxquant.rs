//! Rule `add_rmsnorm_mxquant`: `[AllReduce] → residual Add → RMSNorm → MXFP8 quantize →
//! MatMul(s)` becomes one `AddRmsNormMxQuant` and `MxMatMul`s.
//!
//! Search pattern => `q = MXFP8([Reshape](RMSNorm([AllReduce](x) + residual, γ))) ─ MatMul(q, W_i)`
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
//! * A MoE block flattens the normed rows before its router and experts read them
//!   (transformers' Mixtral / MiniMax `hidden_states.view(-1, hidden_dim)`):
//!   `y ─ Reshape([-1, H] | [N, H]) = rows ─ MXFP8 quantize`, `rows ─▶ router`. Blocks of 32 run
//!   along H and a Reshape that keeps H ([`flat_reshape`]) only regroups whole rows, so quantize
//!   and Reshape commute: the fused op runs on x's rows as they are and writes q, scale and
//!   normed as `[rows, H]` (`flatten_rows = 1`; the same bytes). No Reshape is left on the E8M0
//!   scale — ONNX Runtime's CPU EP has none for that type, and the plugin EP's device programs
//!   only run constant-shape Reshapes. Read through only when the Reshape is 2-D `[-1, H]`, or
//!   `[N, H]` with x's leading dims known to make N rows, and nothing else reads the un-flattened
//!   `y` (it is no longer written) but ONNX `Shape`s; anything else is refused with the reason.
//! * Such a `Shape(y)` is a TorchScript export's `batch, seq, hidden = hidden_states.shape` before
//!   the `view(-1, hidden)` (Mixtral / Qwen-MoE / MiniMax; the MoE output is reshaped back with
//!   those dims). It is re-emitted as `Shape(x)` (with its `start` / `end`): x has y's shape, as
//!   [`check_add_rms_norm`] proves the residual operands exactly the sum's shape and the norm
//!   keeps it. Re-emitting it on the residual sum instead would make a first layer, which has
//!   none, write one. The plugin EP's programs run that Shape (provider `ops::shape`); a Shape
//!   left outside the claim could not read a value the fused node no longer writes.
//!
//! Not handled: norms whose numerics the kernel cannot reproduce (see the spelling's check);
//! consumers other than MatMul keep reading the graph's own q/scale (they are re-produced).

use std::sync::LazyLock;

use super::flat_linear::flat_reshape;
use super::mx_consumers::{
    consumers_for, emit_kept_float, emit_matmuls, is_op, quant_outputs, Consumers, QuantAttrs,
};
use super::spellings::mx_quant::{check_mx_quant, mx_quant, MxQuantPat, QuantInfo};
use super::spellings::rms_norm::{
    check_add_rms_norm, residual_stage, rms_norm, NormSpec, ResidualPat, RmsNormPat,
};
use crate::pattern::{
    Emit, Fuse, Match, NodeSpec, OpId, Pat, Pattern, Reject, Rule, RuleConfig, Site, N,
};
use crate::reject;
use crate::view::{AttrValue, Dim, GraphView, NodeId, TensorInfo, ValueId, ONNX_DOMAIN};

pub struct AddRmsNormMxQuantRule {
    pat: Pattern,
    r: ResidualPat,
    n: RmsNormPat,
    /// The MoE block's flattening `Reshape(y, [-1, H])` in front of the quantizer (optional).
    flat: N,
    q: MxQuantPat,
}

pub static RULE: LazyLock<AddRmsNormMxQuantRule> = LazyLock::new(|| {
    let mut p = Pat::new();
    let r = residual_stage(&mut p);
    let n = rms_norm(&mut p, &r);
    let flat_shape = p.input("flat_shape");
    let flat = p
        .op(OpId::new(ONNX_DOMAIN, "Reshape"))
        .args([n.y, flat_shape])
        .node();
    let rows = p.out(flat, 0);
    let quantized = p.any_of("quantized_rows", [n.y, rows]);
    let q = mx_quant(&mut p, quantized);
    for v in [q.root, q.scale, r.add_ar_out, r.add_out, n.y, rows] {
        p.escaping(v);
    }
    AddRmsNormMxQuantRule {
        pat: p.finish(q.root),
        r,
        n,
        flat,
        q,
    }
});

pub struct Params {
    /// The normalized tensor of the graph.
    y: ValueId,
    /// The quantizer's input: `y`, or its flattening Reshape's output `[rows, H]` (then the
    /// fused op writes q, scale and normed flattened).
    rows: ValueId,
    flatten: bool,
    /// `Shape` nodes reading the un-flattened `y` (TorchScript's `batch, seq, hidden =
    /// hidden_states.shape`): re-emitted on the norm's input x, which has y's shape.
    shapes: Vec<NodeId>,
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
        let g = m.graph();
        // Before the norm's checks: a Reshape that changes H would otherwise be reported as a
        // norm weight of the wrong length.
        let flat = m.node(self.flat);
        let shapes = match flat {
            Some(r) => check_flattening(g, r, m[self.n.y], info.k)?,
            None => Vec::new(),
        };
        let spec = check_add_rms_norm(m, &self.r, &self.n, info.dtype, info.k)?;
        let consumers = consumers_for(g, &info)?;
        let params = Params {
            y: m[self.n.y],
            rows: m[self.q.x],
            flatten: flat.is_some(),
            shapes: shapes.clone(),
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
        for n in shapes {
            fuse = fuse.also(n, g.outputs(n).iter().copied());
        }
        fuse = fuse.params.consumers.clone().absorb_into(fuse);
        Ok(fuse)
    }

    fn rewrite(&self, site: &Site, p: Params, e: &mut Emit<'_>) -> Result<(), String> {
        let (q, scale) = quant_outputs(e, site, p.rows, p.info.q, p.info.scale);
        let (s, num) = (&p.spec.inputs, &p.spec.numerics);
        // Flattened: `y` itself has no reader left (`check_flattening`); the router reads `rows`.
        let normed = Some(p.rows).filter(|v| site.produces(*v));
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
            .attr_int("allreduce", i64::from(s.allreduce));
        if p.flatten {
            spec = spec.attr_int("flatten_rows", 1);
        }
        spec = spec.output(q).output(scale);
        if let Some(r) = residual_out {
            spec = spec.output(r);
        }
        if let Some(n) = normed {
            spec = spec.output(n);
        }
        e.add(p.quant.apply(spec))?;
        for &n in &p.shapes {
            let mut shape = NodeSpec {
                domain: ONNX_DOMAIN.into(),
                op_type: "Shape".into(),
                ..Default::default()
            }
            .input(s.x);
            for a in ["start", "end"] {
                if let Some(AttrValue::Int(v)) = e.graph().attr(n, a) {
                    shape = shape.attr_int(a, v);
                }
            }
            for &o in e.graph().outputs(n) {
                shape = shape.output(o);
            }
            e.add(shape)?;
        }
        emit_kept_float(e, &p.consumers, q, scale)?;
        emit_matmuls(e, &p.consumers, q, Some(scale))
    }
}

/// Whether the Reshape `r` between the norm's output `y` and the quantizer can be read into the
/// fused op as `flatten_rows`: it provably keeps H = `k`, the quantizer's last dim (y's last dim
/// is known to be k, and [`flat_reshape`]: `allowzero = 0`, a constant shape ending in k with no
/// 0 entry), it makes `[rows, H]` (-1 rows, or N rows that y's known leading dims give), and
/// nothing but `r` and ONNX `Shape`s reads `y` (the fused op then writes only the flattened
/// rows; the Shapes, returned, are re-emitted on the norm's input).
fn check_flattening(
    g: &dyn GraphView,
    r: NodeId,
    y: ValueId,
    k: i64,
) -> Result<Vec<NodeId>, Reject> {
    let label = g.node_label(r);
    let shape_y = g.tensor_info(y).and_then(|i| i.shape);
    match shape_y.as_ref().and_then(|s| s.last()) {
        Some(Dim::Known(h)) if *h == k => {}
        Some(Dim::Known(h)) => {
            return Err(reject!(
                "the Reshape '{label}' between the norm and the quantizer changes the last dim ({h} to {k}): quantization blocks would straddle rows"
            ))
        }
        _ => {
            return Err(reject!(
                "the last dim of the normed value '{}' is not known statically, so the Reshape '{label}' to the quantizer's {k} is not provably a flattening of rows",
                g.value_name(y)
            ))
        }
    }
    let shape = flat_reshape(g, r, k).map_err(|why| {
        reject!(
            "the Reshape '{label}' between the norm and the quantizer is not read through: {}",
            why.0
        )
    })?;
    let &[n, _] = &shape[..] else {
        return Err(reject!(
            "the Reshape '{label}' between the norm and the quantizer makes {shape:?}: only a flattening to [rows, {k}] is read into the fused op"
        ));
    };
    if n != -1 {
        let rows = shape_y.as_ref().and_then(|s| {
            let (_, lead) = s.split_last()?;
            lead.iter().try_fold(1i64, |acc, d| match d {
                Dim::Known(v) => acc.checked_mul(*v),
                _ => None,
            })
        });
        if rows != Some(n) {
            let rows = rows.map_or("not known statically".to_string(), |r| r.to_string());
            return Err(reject!(
                "the Reshape '{label}' between the norm and the quantizer makes {n} rows, which the normed value's leading dims do not provably give (their product is {rows})"
            ));
        }
    }
    if g.is_graph_output(y) {
        return Err(reject!(
            "the normed value '{}' is a graph output as well as flattened by '{label}' (the fused op writes only the flattened rows)",
            g.value_name(y)
        ));
    }
    let mut shapes = Vec::new();
    for &(c, _) in g.consumers(y).iter().filter(|(c, _)| *c != r) {
        if is_op(g, c, ONNX_DOMAIN, "Shape") {
            shapes.push(c);
            continue;
        }
        return Err(reject!(
            "the normed value '{}' is also read by {} '{}' besides its flattening Reshape '{label}' (the fused op writes only the flattened rows; of other readers only a Shape is re-read from the norm's input)",
            g.value_name(y),
            g.op_type(c),
            g.node_label(c)
        ));
    }
    Ok(shapes)
}
