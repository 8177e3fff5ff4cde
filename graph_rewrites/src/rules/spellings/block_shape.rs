//! The block `Reshape` of the standard MXFP8 quantize spelling ([`super::mx_quant`]): its shape,
//! a constant or computed from `Shape(x)` (exporters' spelling for symbolic batch / sequence
//! dims), read structurally, checked to keep x's leading dims, and the nodes computing it that go
//! with the fusion.

use crate::pattern::predicates::{attr_int, values_i64};
use crate::pattern::{Match, Reject};
use crate::reject;
use crate::view::{Dim, GraphView, NodeId, ValueId, ONNX_DOMAIN};

use super::mx_quant::BLOCK;

/// The block Reshape must give `[..x's leading dims.., K/32, 32]`: with other leading dims the
/// block amax is not shaped like the scale `QuantizeLinear` needs, and the unfused model fails at
/// run time (onnx.reference: "Invalid shapes for Blocked Quantization") where the fused op,
/// which never reads that shape, would run. Each leading entry is 0 (copy), x's dim there when it
/// is known, or the single -1 (it then resolves to x's dim: the other entries match).
pub(super) fn check_block_reshape(
    g: &dyn GraphView,
    n: NodeId,
    x: ValueId,
    rank: usize,
    k: i64,
) -> Result<(), Reject> {
    check_leading_then(g, n, x, rank, k, "block Reshape", &[k / BLOCK, BLOCK])
}

/// Whether block Reshape `n` flattens x into rows of one block, `[-1, 32]` (a constant,
/// `allowzero` 0): torchao's `to_mx` spelling (`x.reshape(-1, block_size)`, amax per row, the
/// scale viewed back to `[*x.shape[:-1], K // 32]`). With K a multiple of 32 each row of 32 lies
/// inside one row of x, so row r is block r mod K/32 of row r div K/32: the same blocks, in the
/// same order, as `[.., K/32, 32]`; the amax Reshape back to `[..x's leading dims.., K/32]`
/// ([`check_amax_reshape`], which the caller requires) restores the scale's shape.
pub(super) fn is_flat_block_reshape(g: &dyn GraphView, n: NodeId) -> bool {
    let shape = g.inputs(n).get(1).copied().flatten();
    let constant = shape
        .filter(|v| g.is_constant(*v))
        .and_then(|v| g.const_value(v))
        .and_then(|t| values_i64(&t));
    constant.as_deref() == Some(&[-1, BLOCK]) && attr_int(g.attr(n, "allowzero"), 0) == Some(0)
}

/// The amax `Reshape` after `ReduceMax(-1)` (keepdims 1, or 0) must give the scale's
/// `[..x's leading dims.., K/32]`: the same bytes in the same order as `Squeeze(-1)`, read like
/// the block shape.
pub(super) fn check_amax_reshape(
    g: &dyn GraphView,
    n: NodeId,
    x: ValueId,
    rank: usize,
    k: i64,
) -> Result<(), Reject> {
    check_leading_then(g, n, x, rank, k, "block amax Reshape", &[k / BLOCK])
}

/// Reshape `n`'s shape (read by [`shape_entries`]) is x's leading dims (see
/// [`keeps_leading_dims`]) then `tail`, whose first entry (K/32) may also be -1; `allowzero` 0.
fn check_leading_then(
    g: &dyn GraphView,
    n: NodeId,
    x: ValueId,
    rank: usize,
    k: i64,
    what: &str,
    tail: &[i64],
) -> Result<(), Reject> {
    let shape_v = g.inputs(n).get(1).copied().flatten();
    let shape = shape_v.and_then(|v| shape_entries(g, v, x, 0));
    let shape = shape.ok_or_else(|| {
        reject!("{what} shape is not a constant, nor computed from Shape(x) as x's own leading dims then constants (Concat of Shape(x, end=-1) / Slice / Gather+Unsqueeze and a constant)")
    })?;
    let lead = rank.saturating_sub(1);
    let ok = shape.len() == lead + tail.len()
        && shape[lead..]
            .iter()
            .zip(tail)
            .enumerate()
            .all(|(j, (e, want))| e == want || (j == 0 && *e == -1))
        && attr_int(g.attr(n, "allowzero"), 0) == Some(0);
    if !ok {
        return Err(reject!(
            "{what} {shape:?} does not split the last axis ({k}) into {tail:?}"
        ));
    }
    let dims = g.tensor_info(x).and_then(|i| i.shape).unwrap_or_default();
    if keeps_leading_dims(&shape, tail.len(), &dims) {
        Ok(())
    } else {
        Err(reject!(
            "{what} {shape:?} is not shown to keep the leading dims {} of '{}' (each entry 0, x's dim where it is known, or the one -1): with other dims the block amax is not shaped like the scale and the unfused QuantizeLinear fails",
            super::rms_norm::fmt_shape(&Some(dims[..lead.min(dims.len())].to_vec())),
            g.value_name(x)
        ))
    }
}

/// Each leading entry of a Reshape `shape` (all but its last `tail`) keeps x's dim there (`dims`):
/// 0 (copy), x's dim where it is known, or the single -1 when no tail entry is -1 (it then
/// resolves to x's dim: the other entries match).
fn keeps_leading_dims(shape: &[i64], tail: usize, dims: &[Dim]) -> bool {
    let Some(n) = shape.len().checked_sub(tail) else {
        return false;
    };
    let (lead, rest) = shape.split_at(n);
    let minus_ones = lead.iter().filter(|e| **e == -1).count();
    lead.iter()
        .enumerate()
        .all(|(i, e)| match (*e, dims.get(i)) {
            (0, _) => true,
            (-1, _) => minus_ones == 1 && !rest.contains(&-1),
            (e, Some(Dim::Known(d))) => e == *d,
            _ => false,
        })
}

/// K (the last dim of `x`, of rank `rank`) as the block Reshape `n` states it: its shape read
/// as in [`check_block_reshape`] ends in `[K/32, 32]` with a known K/32 > 0 and no leading -1. For an `x` whose last
/// dim is symbolic (exporters' and ORT's symbolic hidden dims): the unfused Reshape fails at run
/// time unless that dim is exactly this K, so the fusion may rely on it. [`check_block_reshape`]
/// then checks the rest of the shape against it.
pub(super) fn block_reshape_k(
    g: &dyn GraphView,
    n: NodeId,
    x: ValueId,
    rank: usize,
) -> Option<i64> {
    let shape = shape_entries(g, g.inputs(n).get(1).copied().flatten()?, x, 0)?;
    // A leading -1 would let the Reshape run with another last dim (the -1 absorbing the
    // difference), the unfused QuantizeLinear then failing on the amax's shape: not pinned.
    if shape.len() != rank + 1 || shape[..rank - 1].contains(&-1) {
        return None;
    }
    match shape[..] {
        [.., kb, b] if b == BLOCK && kb > 0 => kb.checked_mul(BLOCK),
        _ => None,
    }
}

/// The entries of Reshape shape `v` as a constant shape: a constant, or computed from `Shape(x)`
/// the way exporters spell symbolic batch / sequence dims — `Concat(Shape(x, end=-1) |
/// Slice(Shape(x), 0, -1) | Unsqueeze(Gather(Shape(x), i))…, [K/32, 32])`. x's own dim `i` at
/// position `i` reads as 0 (copy: the same value, `allowzero = 0` is checked), at another
/// position as its value when known; anything else gives `None`. Read structurally on the view
/// because ONNX Runtime hands the EP no values (nor an output shape) for such a Reshape, so the
/// EP and the CLI decide alike. `at` is the position of `v`'s first entry in the whole shape.
fn shape_entries(g: &dyn GraphView, v: ValueId, x: ValueId, at: usize) -> Option<Vec<i64>> {
    if g.is_constant(v) {
        return g.const_value(v).and_then(|t| values_i64(&t));
    }
    let (p, _) = g.producer(v)?;
    let x_dims = g.tensor_info(x)?.shape?;
    let r = x_dims.len() as i64;
    let input = |slot: usize| g.inputs(p).get(slot).copied().flatten();
    let konst = |slot: usize| {
        input(slot)
            .and_then(|c| g.const_value(c))
            .and_then(|t| values_i64(&t))
    };
    let is_shape_of_x = |u: ValueId| {
        g.producer(u).is_some_and(|(s, _)| {
            (g.domain(s), g.op_type(s)) == (ONNX_DOMAIN, "Shape")
                && g.inputs(s).first().copied().flatten() == Some(x)
                && attr_int(g.attr(s, "start"), 0) == Some(0)
                && attr_int(g.attr(s, "end"), i64::MAX).is_some_and(|e| e >= r)
        })
    };
    let clamp = |i: i64| (if i < 0 { i + r } else { i }).clamp(0, r);
    // Indices of x's dims the value lists, in order.
    let dims: Vec<i64> = match (g.domain(p), g.op_type(p)) {
        (ONNX_DOMAIN, "Shape") if input(0) == Some(x) => {
            let start = clamp(attr_int(g.attr(p, "start"), 0)?);
            let end = clamp(attr_int(g.attr(p, "end"), r)?);
            (start..end.max(start)).collect()
        }
        (ONNX_DOMAIN, "Slice") if input(0).is_some_and(is_shape_of_x) => {
            let one = |slot: usize, d: i64| match input(slot) {
                None => Some(d),
                Some(_) => match konst(slot)?.as_slice() {
                    [v] => Some(*v),
                    _ => None,
                },
            };
            if !matches!(one(3, 0)?, 0 | -1) || one(4, 1)? != 1 {
                return None;
            }
            let (start, end) = (clamp(one(1, 0)?), clamp(one(2, r)?));
            (start..end.max(start)).collect()
        }
        (ONNX_DOMAIN, "Gather") if input(0).is_some_and(is_shape_of_x) => {
            // The only axis of a 1-D shape vector.
            if !matches!(attr_int(g.attr(p, "axis"), 0)?, 0 | -1) {
                return None;
            }
            let index = |i: i64| {
                let i = if i < 0 { i + r } else { i };
                (0..r).contains(&i).then_some(i)
            };
            konst(1)?.into_iter().map(index).collect::<Option<_>>()?
        }
        (ONNX_DOMAIN, "Unsqueeze") => {
            let axes = konst(1).or_else(|| match g.attr(p, "axes") {
                Some(crate::view::AttrValue::Ints(a)) => Some(a),
                _ => None,
            });
            if !matches!(axes.as_deref(), Some([0 | -1])) {
                return None;
            }
            return shape_entries(g, input(0)?, x, at);
        }
        (ONNX_DOMAIN, "Concat") => {
            // The only axis of a 1-D shape vector.
            if !matches!(attr_int(g.attr(p, "axis"), 0)?, 0 | -1) {
                return None;
            }
            let mut all = Vec::new();
            for u in g.inputs(p).iter() {
                all.extend(shape_entries(g, (*u)?, x, at + all.len())?);
            }
            return Some(all);
        }
        _ => return None,
    };
    let entry = |(j, d): (usize, i64)| match &x_dims[d as usize] {
        _ if d as usize == at + j => Some(0),
        Dim::Known(k) => Some(*k),
        _ => None,
    };
    dims.into_iter().enumerate().map(entry).collect()
}

/// The nodes computing the block Reshape's (and the amax Reshape's) shape at run time (see
/// [`shape_entries`]), to absorb. They read `x`: when x is computed inside the fusion (the norm
/// or SwiGLU output) they must go with it, or ONNX Runtime would get a fused node feeding its own
/// input. A shape computation something else reads too is refused there (left in place when x
/// comes from outside). The two Reshapes may share part of it (`Shape(x)[:-1]`).
pub(super) fn block_shape_nodes(
    m: &Match<'_>,
    reshapes: &[NodeId],
    x: ValueId,
) -> Result<Vec<NodeId>, Reject> {
    let g = m.graph();
    let mut nodes: Vec<NodeId> = Vec::new();
    let mut todo: Vec<ValueId> = reshapes
        .iter()
        .filter_map(|r| g.inputs(*r).get(1).copied().flatten())
        .collect();
    while let Some(v) = todo.pop() {
        if v == x || g.is_constant(v) {
            continue;
        }
        let Some((p, _)) = g.producer(v) else {
            continue;
        };
        if !nodes.contains(&p) {
            nodes.push(p);
            todo.extend(g.inputs(p).iter().flatten());
        }
    }
    let private = nodes.iter().all(|n| {
        g.outputs(*n).iter().all(|v| {
            !g.is_graph_output(*v)
                && g.consumers(*v)
                    .iter()
                    .all(|(c, _)| reshapes.contains(c) || nodes.contains(c))
        })
    });
    match (private, m.produces_inside(x)) {
        (true, _) => Ok(nodes),
        (false, false) => Ok(Vec::new()),
        (false, true) => Err(reject!(
            "the block shape computed from Shape('{}') is read outside the fusion as well: it cannot go with the fusion, and left outside it would read the fused op's own output",
            g.value_name(x)
        )),
    }
}
