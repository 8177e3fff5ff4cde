//! The opset-27 ops of linear-attention decoders (Gated DeltaNet as in Qwen3.5, Mamba-style
//! layers): `LinearAttention` and `CausalConvWithState`. The shapes are what ONNX's own
//! inference gives; the recurrent state outputs take `past_state`'s type when it is given.

use super::node::{info, Node};
use super::shape::known;
use crate::view::{Dim, TensorInfo};

/// `output [B, T, q_num_heads · d_v]` in the query's type, `present_state [B, kv_num_heads,
/// d_k, d_v]`, from the packed `[B, T, H·D]` query / key / value (d_k, d_v: the key's and
/// value's last dims over `kv_num_heads`). Head counts that are absent, not positive or do not
/// divide those dims leave the sizes that need them unknown.
pub(super) fn linear_attention(c: &Node) -> Vec<TensorInfo> {
    let q_heads = c.int("q_num_heads", 0).filter(|&h| h > 0);
    let kv_heads = c.int("kv_num_heads", 0).filter(|&h| h > 0);
    let per_head = |slot: usize| -> Option<i64> {
        let last = known(c.shape(slot)?.last()?)?;
        let h = kv_heads?;
        (last % h == 0).then_some(last / h)
    };
    let (d_k, d_v) = (per_head(1), per_head(2));
    let lead = c.shape(0).and_then(|q| match q.as_slice() {
        [b, t, _] => Some((b.clone(), t.clone())),
        _ => None,
    });
    let sized = |v: Option<i64>| v.map_or(Dim::Unknown, Dim::Known);
    let width = q_heads.zip(d_v).and_then(|(h, d)| h.checked_mul(d));
    let output = lead
        .as_ref()
        .map(|(b, t)| vec![b.clone(), t.clone(), sized(width)]);
    let state = lead.map(|(b, _)| vec![b, sized(kv_heads), sized(d_k), sized(d_v)]);
    let q = c.elem(0);
    vec![info(q, output), state_type(c, 3, info(q, state))]
}

/// `output`: the input's type and shape; `present_state [B, C, k - 1]` for a depthwise weight
/// `[C, 1, k]` (the last k - 1 positions).
pub(super) fn causal_conv(c: &Node) -> Vec<TensorInfo> {
    let x = c.info(0);
    let carry = c
        .shape(1)
        .and_then(|w| known(w.last()?))
        .filter(|&k| k >= 1)
        .map_or(Dim::Unknown, |k| Dim::Known(k - 1));
    let state = x.shape.as_ref().and_then(|s| match s.as_slice() {
        [b, ch, _] => Some(vec![b.clone(), ch.clone(), carry]),
        _ => None,
    });
    let state = state_type(c, 3, info(x.elem_type, state));
    vec![x, state]
}

/// The present state: `past_state` (input `slot`) when given, completed from `computed`.
fn state_type(c: &Node, slot: usize, computed: TensorInfo) -> TensorInfo {
    if c.input(slot).is_none() {
        return computed;
    }
    let mut past = Some(c.info(slot));
    super::merge(&mut past, computed);
    past.unwrap_or_default()
}
