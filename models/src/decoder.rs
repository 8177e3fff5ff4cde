//! A MiniMax-M3-shaped decoder stack:
//!
//! ```text
//! hidden_states [AllReduce] ─┬─ [Add residual] → norm → quant → q/k/v MatMuls → attention stand-in
//!                            │     → quant → o_proj → [AllReduce]
//!                            └─ Add residual → norm → quant → gate/up → SwiGLU → quant → down (dense)
//!                                                   └ router MatMul (float) + experts (MoE)
//!                                  → [AllReduce] → next layer … → final Add + norm → last_hidden
//! ```
//! The attention is a stand-in shaped like GQA (`q ⊙ repeat_kv(k + v)`): enough to consume q/k/v
//! and feed o_proj with the right widths; it is not attention.

use serde::Serialize;

use crate::builder::{elem_of, BuiltModel, Dim, GraphBuilder, Tensor};
use crate::config::{DecoderConfig, QuantSpelling, WeightStorage};
use crate::error::Result;
use crate::mlp::{expert_mlp, moe};
use crate::mx_quant::{matmul, matmul_weight, quantize_activation};
use crate::norm::{add_rms_norm, MS_DOMAIN};

/// How many rewrites of each kind a complete rule set should make on the generated model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FusionCounts {
    /// `[AllReduce] → [Add] → RMSNorm → MXFP8 quantize` sites (2 per layer when quantized; the
    /// final norm is never quantized).
    pub add_rmsnorm_mxquant: usize,
    /// `SwiGLU → MXFP8 quantize → MatMul` sites (one per dense MLP / expert / shared expert).
    pub swiglu_mxquant_matmul: usize,
    /// Quantizations that neither pattern covers (the o_proj input): `MxQuantize` alone.
    pub standalone_mxquant: usize,
    /// `com.microsoft::AllReduce` nodes in the model.
    pub allreduce: usize,
}

/// Expected rewrites for `cfg` (what the builders emit, counted without building).
pub fn expected_fusions(cfg: &DecoderConfig) -> FusionCounts {
    let quantized = cfg.spelling.quant != QuantSpelling::None;
    let mut c = FusionCounts::default();
    for l in 0..cfg.n_layers {
        let mlps = if cfg.is_moe_layer(l) {
            cfg.n_experts + usize::from(cfg.shared_expert)
        } else {
            1
        };
        if quantized {
            c.add_rmsnorm_mxquant += 2;
            c.swiglu_mxquant_matmul += mlps;
            c.standalone_mxquant += 1;
        }
        if cfg.spelling.allreduce {
            c.allreduce += 2;
        }
    }
    if cfg.spelling.allreduce {
        c.allreduce += 1; // on the embedding input of layer 0
    }
    c
}

/// `com.microsoft::AllReduce(x)` when the spelling has all-reduces, else `x`.
fn maybe_allreduce(b: &mut GraphBuilder, cfg: &DecoderConfig, x: Tensor, name: &str) -> Tensor {
    if !cfg.spelling.allreduce {
        return x;
    }
    b.require_opset(MS_DOMAIN, 1);
    b.node(
        "AllReduce",
        MS_DOMAIN,
        &[&x.name],
        &[(name, x.elem, x.shape.clone())],
        vec![],
    )
    .remove(0)
}

/// The GQA-shaped stand-in: `q ⊙ repeat_kv(k + v)` → `[.., n_heads·head_dim]`.
fn attention_stand_in(
    b: &mut GraphBuilder,
    cfg: &DecoderConfig,
    p: &str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
) -> Tensor {
    let (kvh, hd, group) = (cfg.n_kv_heads, cfg.head_dim, cfg.n_heads / cfg.n_kv_heads);
    let kv = b.op(
        "Add",
        &[&k.name, &v.name],
        &format!("{p}.kv"),
        k.elem,
        k.shape.clone(),
    );
    let rep = if group == 1 {
        kv
    } else {
        let lead = &q.shape[..q.shape.len() - 1];
        let heads_shape = b.const_i64(
            &format!("{p}.kv_heads_shape"),
            &[0, 0, kvh as i64, 1, hd as i64],
        );
        let mut s5: Vec<Dim> = lead.to_vec();
        s5.extend([kvh.into(), 1.into(), hd.into()]);
        let kv5 = b.op(
            "Reshape",
            &[&kv.name, &heads_shape.name],
            &format!("{p}.kv_heads"),
            kv.elem,
            s5.clone(),
        );
        let expand_shape = b.const_i64(
            &format!("{p}.repeat_shape"),
            &[1, 1, kvh as i64, group as i64, hd as i64],
        );
        let last = s5.len() - 2;
        s5[last] = group.into();
        let kvr = b.op(
            "Expand",
            &[&kv5.name, &expand_shape.name],
            &format!("{p}.kv_repeated"),
            kv.elem,
            s5,
        );
        let flat = b.const_i64(&format!("{p}.q_shape"), &[0, 0, cfg.q_dim() as i64]);
        b.op(
            "Reshape",
            &[&kvr.name, &flat.name],
            &format!("{p}.kv_flat"),
            kv.elem,
            q.shape.clone(),
        )
    };
    b.op(
        "Mul",
        &[&q.name, &rep.name],
        &format!("{p}.context"),
        q.elem,
        q.shape.clone(),
    )
}

/// Builds the decoder stack `cfg` describes (initializers not yet placed).
pub fn build_decoder(cfg: &DecoderConfig) -> Result<BuiltModel> {
    cfg.validate()?;
    let fake = matches!(cfg.storage, WeightStorage::External { sparse: true });
    let mut b = GraphBuilder::new(cfg.seed, fake);
    let (dt, sp, h) = (cfg.dtype, cfg.spelling, cfg.hidden);
    let dim = |fixed: Option<usize>, sym: &str| fixed.map_or(Dim::Sym(sym.into()), Dim::Fixed);
    let shape = vec![dim(cfg.batch, "batch"), dim(cfg.seq, "seq"), h.into()];
    let x_in = b.add_input("hidden_states", elem_of(dt), shape.clone());
    let mut residual = if sp.first_layer_without_residual {
        None
    } else {
        Some(b.add_input("residual", elem_of(dt), shape))
    };
    let mut branch = maybe_allreduce(&mut b, cfg, x_in, "hidden_states.allreduce");
    for l in 0..cfg.n_layers {
        let p = format!("model.layers.{l}");
        // Attention half.
        let n = add_rms_norm(
            &mut b,
            cfg,
            &format!("{p}.input_layernorm"),
            &branch,
            residual.as_ref(),
        );
        residual = Some(n.residual);
        let a = quantize_activation(
            &mut b,
            dt,
            sp.quant,
            &n.normed,
            &format!("{p}.self_attn.qkv_in"),
        );
        let proj = |b: &mut GraphBuilder, name: &str, width: usize| {
            let w = matmul_weight(
                b,
                dt,
                sp.weights,
                &format!("{p}.self_attn.{name}.weight"),
                h,
                width,
            );
            matmul(b, &a, &w, width, &format!("{p}.self_attn.{name}"))
        };
        let q = proj(&mut b, "q_proj", cfg.q_dim());
        let k = proj(&mut b, "k_proj", cfg.kv_dim());
        let v = proj(&mut b, "v_proj", cfg.kv_dim());
        let ctx = attention_stand_in(&mut b, cfg, &format!("{p}.self_attn"), &q, &k, &v);
        let cq = quantize_activation(&mut b, dt, sp.quant, &ctx, &format!("{p}.self_attn.o_in"));
        let wo = matmul_weight(
            &mut b,
            dt,
            sp.weights,
            &format!("{p}.self_attn.o_proj.weight"),
            cfg.q_dim(),
            h,
        );
        let o = matmul(&mut b, &cq, &wo, h, &format!("{p}.self_attn.o_proj"));
        let o = maybe_allreduce(&mut b, cfg, o, &format!("{p}.self_attn.allreduce"));
        // MLP half.
        let n = add_rms_norm(
            &mut b,
            cfg,
            &format!("{p}.post_attention_layernorm"),
            &o,
            residual.as_ref(),
        );
        residual = Some(n.residual);
        let a = quantize_activation(&mut b, dt, sp.quant, &n.normed, &format!("{p}.mlp.in"));
        let y = if cfg.is_moe_layer(l) {
            moe(&mut b, cfg, &format!("{p}.moe"), &n.normed, &a)
        } else {
            expert_mlp(&mut b, cfg, &format!("{p}.mlp"), &a, cfg.intermediate)
        };
        branch = maybe_allreduce(&mut b, cfg, y, &format!("{p}.mlp.allreduce"));
    }
    let fin = add_rms_norm(&mut b, cfg, "model.norm", &branch, residual.as_ref());
    let out: Tensor = fin.normed;
    b.add_output(&out);
    let doc = format!("mxfuse-models decoder: {cfg:?}");
    Ok(b.finish("mxfuse_decoder", &doc))
}
