//! Residual `Add` + RMSNorm in each [`NormSpelling`] / [`GammaForm`].

use graph_rewrites::onnx_pb::tensor_proto::DataType;

use crate::builder::{attr_f, attr_i, elem_of, GraphBuilder, Tensor};
use crate::config::{AddOrder, DType, DecoderConfig, GammaForm, NormSpelling};

/// Domain of ORT's contrib ops.
pub const MS_DOMAIN: &str = "com.microsoft";

/// What a residual-add + norm produces.
#[derive(Clone, Debug)]
pub struct NormOut {
    /// The normalized tensor (model dtype).
    pub normed: Tensor,
    /// The residual stream after this point: the `Add` sum, or the input itself without residual.
    pub residual: Tensor,
}

/// The γ tensor the norm multiplies by, in `dtype`: random around 1 (plain) or 0 (Gemma, before
/// the `+1`), with the `Add(w, 1)` node for [`GammaForm::GemmaAddOne`] and
/// `Add(Cast(w), 1)` of a w `stored` in the model dtype for [`GammaForm::GemmaCastAddOne`].
fn gamma(
    b: &mut GraphBuilder,
    form: GammaForm,
    (dtype, stored): (DType, DType),
    hidden: usize,
    name: &str,
) -> Tensor {
    match form {
        GammaForm::Plain => b.random_weight(name, dtype, &[hidden], 1.0, 0.1),
        GammaForm::GemmaFolded => {
            b.random_weight_keyed(&format!("{name}_plus_1"), name, dtype, &[hidden], 1.0, 0.1)
        }
        GammaForm::GemmaAddOne => {
            let w = b.random_weight(name, dtype, &[hidden], 0.0, 0.1);
            let one = b.scalar(&format!("{name}.one"), dtype, 1.0);
            b.op(
                "Add",
                &[&w.name, &one.name],
                &format!("{name}.plus_1"),
                w.elem,
                w.shape.clone(),
            )
        }
        GammaForm::GemmaCastAddOne => {
            let w = b.random_weight(name, stored, &[hidden], 0.0, 0.1);
            let to = elem_of(dtype);
            let wc = b.op_attrs(
                "Cast",
                &[&w.name],
                &format!("{name}.cast"),
                to,
                w.shape.clone(),
                vec![attr_i("to", i64::from(to))],
            );
            // torch writes the Python constant first: `1.0 + w`.
            let one = b.scalar(&format!("{name}.one"), dtype, 1.0);
            b.op(
                "Add",
                &[&one.name, &wc.name],
                &format!("{name}.plus_1"),
                to,
                w.shape.clone(),
            )
        }
    }
}

/// `[residual Add] → RMSNorm` of the branch output `x` (already all-reduced), named `prefix`.
/// `residual: None` is a first layer: no Add, the residual stream continues as `x`.
pub fn add_rms_norm(
    b: &mut GraphBuilder,
    cfg: &DecoderConfig,
    prefix: &str,
    x: &Tensor,
    residual: Option<&Tensor>,
) -> NormOut {
    let sp = cfg.spelling;
    let eps = cfg.rms_eps;
    if let (NormSpelling::SkipSimplified, Some(res)) = (sp.norm, residual) {
        b.require_opset(MS_DOMAIN, 1);
        let g = gamma(
            b,
            sp.gamma,
            (cfg.dtype, cfg.dtype),
            cfg.hidden,
            &format!("{prefix}.weight"),
        );
        let (first, second) = ordered(sp.add_order, res, x);
        let outs = b.node(
            "SkipSimplifiedLayerNormalization",
            MS_DOMAIN,
            &[&first.name, &second.name, &g.name],
            &[
                (&format!("{prefix}.out"), x.elem, x.shape.clone()),
                ("", 0, vec![]),
                ("", 0, vec![]),
                (&format!("{prefix}.residual_sum"), x.elem, x.shape.clone()),
            ],
            vec![attr_f("epsilon", eps)],
        );
        return NormOut {
            normed: outs[0].clone(),
            residual: outs[1].clone(),
        };
    }
    let s = match residual {
        Some(res) => {
            let (first, second) = ordered(sp.add_order, res, x);
            b.op(
                "Add",
                &[&first.name, &second.name],
                &format!("{prefix}.residual_sum"),
                x.elem,
                x.shape.clone(),
            )
        }
        None => x.clone(),
    };
    let normed = match sp.norm {
        NormSpelling::RmsNormalization
        | NormSpelling::Simplified
        | NormSpelling::SkipSimplified => {
            let op = if sp.norm == NormSpelling::RmsNormalization {
                b.require_opset("", 23);
                "RMSNormalization"
            } else {
                // SkipSimplified without a residual lands here too, as in ORT GenAI's first layer.
                "SimplifiedLayerNormalization"
            };
            let g = gamma(
                b,
                sp.gamma,
                (cfg.dtype, cfg.dtype),
                cfg.hidden,
                &format!("{prefix}.weight"),
            );
            b.op_attrs(
                op,
                &[&s.name, &g.name],
                &format!("{prefix}.out"),
                s.elem,
                s.shape.clone(),
                vec![
                    attr_i("axis", -1),
                    attr_f("epsilon", eps),
                    attr_i("stash_type", 1),
                ],
            )
        }
        _ => decomposed(b, cfg, prefix, &s),
    };
    NormOut {
        normed,
        residual: s,
    }
}

/// Operands of a residual Add in the configured order.
fn ordered<'a>(order: AddOrder, residual: &'a Tensor, x: &'a Tensor) -> (&'a Tensor, &'a Tensor) {
    match order {
        AddOrder::ResidualFirst => (residual, x),
        AddOrder::BranchFirst => (x, residual),
    }
}

/// `[Cast f32] → Pow(x,2)|Mul(x,x) → ReduceMean → Add(eps) → Sqrt → Reciprocal+Mul | Div → γ`.
/// With casts (f16/bf16 and `norm_f32_casts`), plain γ is applied after the cast back in the model
/// dtype as `Mul(w, n)` (HF Llama), Gemma γ in fp32 as `Mul(n, 1+w)` before it (Gemma).
fn decomposed(b: &mut GraphBuilder, cfg: &DecoderConfig, p: &str, s: &Tensor) -> Tensor {
    let sp = cfg.spelling;
    let casts = sp.norm_f32_casts && cfg.dtype != DType::F32;
    let cdt = if casts { DType::F32 } else { cfg.dtype };
    let ce = elem_of(cdt);
    let f32e = DataType::Float as i32;
    let shape = s.shape.clone();
    let x = if casts {
        b.op_attrs(
            "Cast",
            &[&s.name],
            &format!("{p}.x_f32"),
            f32e,
            shape.clone(),
            vec![attr_i("to", i64::from(f32e))],
        )
    } else {
        s.clone()
    };
    let sq = match sp.norm {
        NormSpelling::PowRecip | NormSpelling::PowDiv => {
            let two = b.scalar(&format!("{p}.two"), cdt, 2.0);
            b.op(
                "Pow",
                &[&x.name, &two.name],
                &format!("{p}.sq"),
                ce,
                shape.clone(),
            )
        }
        _ => b.op(
            "Mul",
            &[&x.name, &x.name],
            &format!("{p}.sq"),
            ce,
            shape.clone(),
        ),
    };
    let axes = b.const_i64(&format!("{p}.axes"), &[-1]);
    let mean_shape = x.with_last(1);
    let ms = b.op_attrs(
        "ReduceMean",
        &[&sq.name, &axes.name],
        &format!("{p}.mean_sq"),
        ce,
        mean_shape.clone(),
        vec![attr_i("keepdims", 1)],
    );
    let eps = b.scalar(&format!("{p}.eps"), cdt, cfg.rms_eps);
    let ve = b.op(
        "Add",
        &[&ms.name, &eps.name],
        &format!("{p}.var_eps"),
        ce,
        mean_shape.clone(),
    );
    let sd = b.op(
        "Sqrt",
        &[&ve.name],
        &format!("{p}.std"),
        ce,
        mean_shape.clone(),
    );
    let n = match sp.norm {
        NormSpelling::PowRecip | NormSpelling::MulRecip => {
            let r = b.op(
                "Reciprocal",
                &[&sd.name],
                &format!("{p}.inv_std"),
                ce,
                mean_shape,
            );
            b.op(
                "Mul",
                &[&x.name, &r.name],
                &format!("{p}.normalized"),
                ce,
                shape.clone(),
            )
        }
        _ => b.op(
            "Div",
            &[&x.name, &sd.name],
            &format!("{p}.normalized"),
            ce,
            shape.clone(),
        ),
    };
    let out = format!("{p}.out");
    let cast_back = |b: &mut GraphBuilder, t: &Tensor, name: &str| {
        b.op_attrs(
            "Cast",
            &[&t.name],
            name,
            s.elem,
            shape.clone(),
            vec![attr_i("to", i64::from(s.elem))],
        )
    };
    // γ in `(dtype, stored)` as [`gamma`] takes them; every branch reads the same `{p}.weight`.
    let weight = |b: &mut GraphBuilder, dtypes: (DType, DType)| {
        gamma(b, sp.gamma, dtypes, cfg.hidden, &format!("{p}.weight"))
    };
    match (sp.gamma, casts) {
        (GammaForm::Plain, true) => {
            let nt = cast_back(b, &n, &format!("{p}.normalized_cast"));
            let g = weight(b, (cfg.dtype, cfg.dtype));
            b.op("Mul", &[&g.name, &nt.name], &out, s.elem, shape.clone())
        }
        (GammaForm::Plain, false) => {
            let g = weight(b, (cdt, cfg.dtype));
            b.op("Mul", &[&g.name, &n.name], &out, s.elem, shape.clone())
        }
        (_, true) => {
            let g = weight(b, (DType::F32, cfg.dtype));
            let y = b.op(
                "Mul",
                &[&n.name, &g.name],
                &format!("{p}.scaled_f32"),
                f32e,
                shape.clone(),
            );
            cast_back(b, &y, &out)
        }
        (_, false) => {
            let g = weight(b, (cdt, cfg.dtype));
            b.op("Mul", &[&n.name, &g.name], &out, s.elem, shape.clone())
        }
    }
}
