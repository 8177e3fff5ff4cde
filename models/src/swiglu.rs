//! The SwiGLU activation `act(gate, up)` in each [`SwigluSpelling`], and gate/up taken from one
//! fused `[.., 2I]` tensor by `Slice`s.

use crate::builder::{attr_f, GraphBuilder, Tensor};
use crate::config::{DecoderConfig, SwigluSpelling};
use crate::norm::MS_DOMAIN;

/// gate and up from the fused `gu [.., 2I]` by two last-axis `Slice`s (constant starts/ends/
/// axes/steps inputs, as torch exports `x[..., a:b:c]`): halves (`gu[..., :I]`, `gu[..., I:]`)
/// or, with `interleaved`, even and odd elements (`gu[..., 0::2]`, `gu[..., 1::2]`). Named `p.*`.
pub fn slice_gate_up(
    b: &mut GraphBuilder,
    gu: &Tensor,
    inter: usize,
    interleaved: bool,
    p: &str,
) -> (Tensor, Tensor) {
    let i = inter as i64;
    // (start, end, step) of gate and up; torch writes INT64_MAX for an open end.
    let ranges = if interleaved {
        [(0, i64::MAX, 2), (1, i64::MAX, 2)]
    } else {
        [(0, i, 1), (i, i64::MAX, 1)]
    };
    let axes = b.const_i64(&format!("{p}.slice_axes"), &[-1]);
    let [gate, up] = [("gate", ranges[0]), ("up", ranges[1])].map(|(what, (s, e, st))| {
        let starts = b.const_i64(&format!("{p}.{what}_starts"), &[s]);
        let ends = b.const_i64(&format!("{p}.{what}_ends"), &[e]);
        let steps = b.const_i64(&format!("{p}.{what}_steps"), &[st]);
        b.op(
            "Slice",
            &[&gu.name, &starts.name, &ends.name, &axes.name, &steps.name],
            &format!("{p}.{what}"),
            gu.elem,
            gu.with_last(inter),
        )
    });
    (gate, up)
}

/// `act(gate, up)` for two same-shape tensors, named `p.*`. SwiGLU-OAI spellings use the config's
/// α (1.702), limit (7) and β (1); SiLU spellings use α = 1.
pub fn swiglu(
    b: &mut GraphBuilder,
    cfg: &DecoderConfig,
    p: &str,
    gate: &Tensor,
    up: &Tensor,
) -> Tensor {
    let (dt, e, shape) = (cfg.dtype, gate.elem, gate.shape.clone());
    let out = format!("{p}.act");
    match cfg.spelling.swiglu {
        SwigluSpelling::SiluMul => {
            let sg = b.op(
                "Sigmoid",
                &[&gate.name],
                &format!("{p}.sigmoid"),
                e,
                shape.clone(),
            );
            let silu = b.op(
                "Mul",
                &[&gate.name, &sg.name],
                &format!("{p}.silu"),
                e,
                shape.clone(),
            );
            b.op("Mul", &[&silu.name, &up.name], &out, e, shape)
        }
        SwigluSpelling::QuickGelu => {
            b.require_opset(MS_DOMAIN, 1);
            let mut g = b.node(
                "QuickGelu",
                MS_DOMAIN,
                &[&gate.name],
                &[(&format!("{p}.silu"), e, shape.clone())],
                vec![attr_f("alpha", 1.0)],
            );
            let silu = g.remove(0);
            b.op("Mul", &[&silu.name, &up.name], &out, e, shape)
        }
        SwigluSpelling::Swish => {
            b.require_opset("", 24);
            let silu = b.op_attrs(
                "Swish",
                &[&gate.name],
                &format!("{p}.silu"),
                e,
                shape.clone(),
                vec![attr_f("alpha", 1.0)],
            );
            b.op("Mul", &[&silu.name, &up.name], &out, e, shape)
        }
        SwigluSpelling::Swiglu => {
            b.require_opset("", 28);
            b.op_attrs(
                "SwiGLU",
                &[&gate.name, &up.name],
                &out,
                e,
                shape,
                vec![attr_f("alpha", 1.0)],
            )
        }
        SwigluSpelling::OaiClip | SwigluSpelling::OaiMin | SwigluSpelling::OaiQuickGelu => {
            let limit = b.scalar(&format!("{p}.limit"), dt, cfg.swiglu_limit);
            let neg_limit = b.scalar(&format!("{p}.neg_limit"), dt, -cfg.swiglu_limit);
            let g = if cfg.spelling.swiglu == SwigluSpelling::OaiMin {
                b.op(
                    "Min",
                    &[&gate.name, &limit.name],
                    &format!("{p}.gate_clamped"),
                    e,
                    shape.clone(),
                )
            } else {
                // `gate.clamp(max=limit)`: Clip with the min input left out.
                b.op(
                    "Clip",
                    &[&gate.name, "", &limit.name],
                    &format!("{p}.gate_clamped"),
                    e,
                    shape.clone(),
                )
            };
            let u = b.op(
                "Clip",
                &[&up.name, &neg_limit.name, &limit.name],
                &format!("{p}.up_clamped"),
                e,
                shape.clone(),
            );
            let glu = if cfg.spelling.swiglu == SwigluSpelling::OaiQuickGelu {
                b.require_opset(MS_DOMAIN, 1);
                let attrs = vec![attr_f("alpha", cfg.swiglu_alpha)];
                b.node(
                    "QuickGelu",
                    MS_DOMAIN,
                    &[&g.name],
                    &[(&format!("{p}.glu"), e, shape.clone())],
                    attrs,
                )
                .remove(0)
            } else {
                let alpha = b.scalar(&format!("{p}.alpha"), dt, cfg.swiglu_alpha);
                let ga = b.op(
                    "Mul",
                    &[&g.name, &alpha.name],
                    &format!("{p}.gate_alpha"),
                    e,
                    shape.clone(),
                );
                let sg = b.op(
                    "Sigmoid",
                    &[&ga.name],
                    &format!("{p}.sigmoid"),
                    e,
                    shape.clone(),
                );
                b.op(
                    "Mul",
                    &[&g.name, &sg.name],
                    &format!("{p}.glu"),
                    e,
                    shape.clone(),
                )
            };
            let beta = b.scalar(&format!("{p}.beta"), dt, cfg.swiglu_beta);
            let u1 = b.op(
                "Add",
                &[&u.name, &beta.name],
                &format!("{p}.up_plus_beta"),
                e,
                shape.clone(),
            );
            b.op("Mul", &[&u1.name, &glu.name], &out, e, shape)
        }
    }
}
