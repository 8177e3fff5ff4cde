//! The MLP half of a layer: a dense SwiGLU MLP, or an MoE block of expert MLPs combined by a float
//! router that reads the normed (unquantized) tensor.

use crate::builder::{attr_i, GraphBuilder, Tensor};
use crate::config::{DecoderConfig, GateUpForm};
use crate::mx_quant::{matmul, matmul_weight, quantize_activation};
use crate::swiglu::{slice_gate_up, swiglu};

/// The fused `[.., 2I]` gate/up projection `a · W_gate_up`.
fn gate_up_matmul(
    b: &mut GraphBuilder,
    cfg: &DecoderConfig,
    p: &str,
    a: &Tensor,
    inter: usize,
) -> Tensor {
    let (dt, sp, h) = (cfg.dtype, cfg.spelling, cfg.hidden);
    let w = matmul_weight(
        b,
        dt,
        sp.weights,
        &format!("{p}.gate_up_proj.weight"),
        h,
        2 * inter,
    );
    matmul(b, a, &w, 2 * inter, &format!("{p}.gate_up"))
}

/// One SwiGLU MLP reading the (quantized) activation `a`: gate/up MatMul(s) → act → quant →
/// down MatMul. Returns the `[.., H]` output.
pub fn expert_mlp(
    b: &mut GraphBuilder,
    cfg: &DecoderConfig,
    p: &str,
    a: &Tensor,
    inter: usize,
) -> Tensor {
    let (dt, sp, h) = (cfg.dtype, cfg.spelling, cfg.hidden);
    let (gate, up) = match sp.gate_up {
        GateUpForm::FusedSplit => {
            let gu = gate_up_matmul(b, cfg, p, a, inter);
            let half = gu.with_last(inter);
            let outs = b.node(
                "Split",
                "",
                &[&gu.name],
                &[
                    (&format!("{p}.gate"), gu.elem, half.clone()),
                    (&format!("{p}.up"), gu.elem, half),
                ],
                vec![attr_i("axis", -1), attr_i("num_outputs", 2)],
            );
            (outs[0].clone(), outs[1].clone())
        }
        GateUpForm::FusedSlices | GateUpForm::Interleaved => {
            let gu = gate_up_matmul(b, cfg, p, a, inter);
            let interleaved = sp.gate_up == GateUpForm::Interleaved;
            slice_gate_up(b, &gu, inter, interleaved, p)
        }
        GateUpForm::TwoMatmuls => {
            let wg = matmul_weight(
                b,
                dt,
                sp.weights,
                &format!("{p}.gate_proj.weight"),
                h,
                inter,
            );
            let wu = matmul_weight(b, dt, sp.weights, &format!("{p}.up_proj.weight"), h, inter);
            (
                matmul(b, a, &wg, inter, &format!("{p}.gate")),
                matmul(b, a, &wu, inter, &format!("{p}.up")),
            )
        }
    };
    let act = swiglu(b, cfg, p, &gate, &up);
    let aq = quantize_activation(b, dt, sp.quant, &act, &format!("{p}.down_in"));
    let wd = matmul_weight(
        b,
        dt,
        sp.weights,
        &format!("{p}.down_proj.weight"),
        inter,
        h,
    );
    matmul(b, &aq, &wd, h, &format!("{p}.down"))
}

/// MoE block: router `MatMul(normed, W_r) → Sigmoid` (float: the normed tensor, not its
/// quantization), every expert evaluated on the one quantized activation and weighted by its
/// router probability, plus an optional shared expert, summed. (A dense stand-in for top-k
/// routing: same fusable patterns, no data-dependent control flow.) Needs `cfg.n_experts ≥ 1`, as
/// [`DecoderConfig::is_moe_layer`] guarantees.
pub fn moe(
    b: &mut GraphBuilder,
    cfg: &DecoderConfig,
    p: &str,
    normed: &Tensor,
    a: &Tensor,
) -> Tensor {
    let (dt, h, e) = (cfg.dtype, cfg.hidden, cfg.n_experts);
    let wr = b.random_weight(
        &format!("{p}.router.weight"),
        dt,
        &[h, e],
        0.0,
        1.0 / (h as f32).sqrt(),
    );
    let logits = matmul(b, normed, &wr, e, &format!("{p}.router_logits"));
    let probs = b.op(
        "Sigmoid",
        &[&logits.name],
        &format!("{p}.router_probs"),
        logits.elem,
        logits.shape.clone(),
    );
    let one = probs.with_last(1);
    let weights: Vec<Tensor> = if e == 1 {
        vec![probs]
    } else {
        let outs: Vec<(String, i32, _)> = (0..e)
            .map(|i| {
                (
                    format!("{p}.experts.{i}.route_weight"),
                    probs.elem,
                    one.clone(),
                )
            })
            .collect();
        let outs: Vec<(&str, i32, _)> = outs
            .iter()
            .map(|(n, el, s)| (n.as_str(), *el, s.clone()))
            .collect();
        b.node(
            "Split",
            "",
            &[&probs.name],
            &outs,
            vec![attr_i("axis", -1), attr_i("num_outputs", e as i64)],
        )
    };
    let mut terms = Vec::new();
    for (i, w) in weights.iter().enumerate() {
        let y = expert_mlp(b, cfg, &format!("{p}.experts.{i}"), a, cfg.moe_intermediate);
        terms.push(b.op(
            "Mul",
            &[&y.name, &w.name],
            &format!("{p}.experts.{i}.weighted"),
            y.elem,
            y.shape.clone(),
        ));
    }
    if cfg.shared_expert {
        terms.push(expert_mlp(
            b,
            cfg,
            &format!("{p}.shared_expert"),
            a,
            cfg.moe_intermediate,
        ));
    }
    let names: Vec<&str> = terms.iter().map(|t| t.name.as_str()).collect();
    b.op(
        "Sum",
        &names,
        &format!("{p}.out"),
        normed.elem,
        normed.shape.clone(),
    )
}
