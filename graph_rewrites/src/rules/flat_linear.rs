//! The MX consumers' reading through a flattening `Reshape` (shared by every MX-activation rule
//! and `mx_weight_matmul` through [`super::mx_consumers`]; no rule of its own). [`flat_reshape`]
//! also proves `add_rmsnorm_mxquant`'s MoE spelling `norm → Reshape([-1, H]) → quantize`.
//!
//! Through a flattening `Reshape` (torch.export's `nn.Linear` on `[B, S, K]`:
//! `view(-1, K) → addmm | mm → view(B, S, N)`):
//!
//! ```text
//! deq(x) [B, S, K] ─ Reshape([-1, K]) ─ Gemm(·, W, C, transB = 1) | MatMul(·, W) = y [B·S, N]
//!   ⇒  MxMatMul(q, scale, W [, C]) = y_mx [B, S, N] ─ Reshape([-1, N]) = y
//! ```
//!
//! read when the Reshape provably keeps K ([`flat_reshape`]): MxMatMul flattens a's leading dims
//! into M, so the rows, their order and each dot product are the same. When the linear's only
//! reader is a Reshape back to exactly `[B, S, N]` ([`reshape_back`]: constant, a's leading dims
//! known), that Reshape goes too and `MxMatMul` writes its output directly (no
//! `Reshape([-1, N])` and back, each a copy in the plugin EP's program). The reshape is on the
//! float output, not on q / scale: ONNX Runtime 1.31's CPU EP has no FLOAT8E8M0 `Reshape`, so an
//! offline rewrite with one would not load. The plugin EP's programs run that Reshape
//! (`provider::ops::reshape`).

use crate::onnx_pb::{tensor_proto::DataLocation, TensorProto};
use crate::pattern::predicates::{attr_int, dtype};
use crate::pattern::{Emit, NodeSpec, Reject};
use crate::reject;
use crate::view::{Dim, GraphView, NodeId, ValueId, ONNX_DOMAIN};

use super::mx_consumers::{matmul_use, weight_n, MatMulUse};

/// `Reshape(deq(a), shape)` that keeps the last axis K, read by an absorbed MatMul: MxMatMul
/// flattens a's leading dims into M whatever they are, so `MatMul(Reshape(deq(a), [.., K]), W)`
/// is `Reshape(MxMatMul(a_q, a_scale, W), [.., N])` — the same rows in the same order (row-major,
/// K kept), each the same dot products; a Gemm's bias broadcasts over the same M rows.
#[derive(Clone, Debug)]
pub struct Flat {
    /// The activation's Reshape (removed with the fusion when only absorbed MatMuls read it).
    pub reshape: NodeId,
    /// The Reshape's constant shape with its last entry (K) replaced by the weight's N: the
    /// shape of the MatMul's output.
    pub out_shape: Vec<i64>,
    /// The MatMul's only reader when it is a `Reshape` back to the activation's leading dims and
    /// N ([`reshape_back`]), with its output: it goes with the fusion and `MxMatMul` writes that
    /// output directly (no Reshape there and back).
    pub back: Option<(NodeId, ValueId)>,
}

/// What [`read_through`] found behind a `Reshape` of the dequantized activation.
pub(crate) struct ReadThrough {
    /// The MatMuls / Gemms reading the Reshape's output that are absorbed (each with its
    /// [`Flat`]).
    pub uses: Vec<MatMulUse>,
    /// Why the Reshape (or one of its readers) is left out, for the fusion's notes.
    pub kept: Vec<String>,
    /// Only absorbed readers read the Reshape: it goes with the fusion.
    pub absorbed: bool,
}

/// Splits the readers of `Reshape(deq, shape)` (node `r`; `k`, `act_dtype` as
/// `mx_consumers::split_readers`) into MatMuls it can absorb and reasons for the rest. The
/// Reshape goes with the fusion when nothing else reads it, and otherwise stays for its other
/// readers — then it is itself a reader of `deq` left out.
pub(crate) fn read_through(g: &dyn GraphView, r: NodeId, k: i64, act_dtype: i32) -> ReadThrough {
    let label = g.node_label(r);
    let shape = match flat_reshape(g, r, k) {
        Ok(s) => s,
        Err(why) => {
            return ReadThrough {
                uses: Vec::new(),
                kept: vec![format!("Reshape '{label}' is not read through: {}", why.0)],
                absorbed: false,
            }
        }
    };
    let flat_out = g.outputs(r)[0];
    let mut inner_kept = Vec::new();
    if g.is_graph_output(flat_out) {
        inner_kept.push(format!("'{}' is a graph output", g.value_name(flat_out)));
    }
    let mut inner: Vec<MatMulUse> = Vec::new();
    for &(rr, _) in g.consumers(flat_out).iter() {
        if inner.iter().any(|u| u.node == rr) {
            continue;
        }
        let u = matmul_use(g, rr, flat_out, k, act_dtype).and_then(|mut u| {
            let n = match weight_n(g, &u.weight, u.trans_b) {
                Some(Dim::Known(n)) => n,
                other => {
                    return Err(reject!(
                    "{} '{}' has weight N {other:?}, not a known dim (the output Reshape needs it)",
                    g.op_type(rr),
                    g.node_label(rr)
                ))
                }
            };
            let mut out_shape = shape.clone();
            if let Some(last) = out_shape.last_mut() {
                *last = n;
            }
            let back = g
                .inputs(r)
                .first()
                .copied()
                .flatten()
                .and_then(|a| reshape_back(g, u.out, a, n));
            u.flat = Some(Flat {
                reshape: r,
                out_shape,
                back,
            });
            Ok(u)
        });
        match u {
            Ok(u) => inner.push(u),
            Err(why) => inner_kept.push(why.0),
        }
    }
    inner_kept.dedup();
    let absorbed = inner_kept.is_empty() && !inner.is_empty();
    let kept = if absorbed {
        Vec::new()
    } else if inner_kept.is_empty() {
        // Read by nothing: it stays, reading the dequantized value (the engine would refuse a
        // fusion that removed what it reads).
        vec![format!("Reshape '{label}' has no reader to absorb")]
    } else {
        inner_kept
            .into_iter()
            .map(|why| format!("Reshape '{label}' stays for a reader not absorbed: {why}"))
            .collect()
    };
    ReadThrough {
        uses: inner,
        kept,
        absorbed,
    }
}

/// The constant shape of `Reshape(deq(a), shape)` (node `r`) when it provably keeps the last
/// axis K: `allowzero = 0`, a constant int64 shape whose last entry is K, every other entry
/// positive or a single -1 (no 0, which copies an input dim). Row-major values then keep their
/// rows and the blocks of 32 along K stay whole. Not checked here because it holds already: the
/// fusion's output Reshape is of the MatMul's output type, which is the activation's (a MatMul's
/// A and Y share one type; `matmul_use`), so the model's opset already lets this Reshape of the
/// activation read and write that type (bfloat16 needs opset 13, as its MatMul does).
pub(crate) fn flat_reshape(g: &dyn GraphView, r: NodeId, k: i64) -> Result<Vec<i64>, Reject> {
    if attr_int(g.attr(r, "allowzero"), 0) != Some(0) {
        return Err(reject!("allowzero = 1"));
    }
    let Some(s) = g.inputs(r).get(1).copied().flatten() else {
        return Err(reject!("no shape input"));
    };
    let t = g.const_value(s).filter(|t| t.elem_type == dtype::INT64);
    let Some(shape) = t.as_ref().and_then(crate::pattern::predicates::values_i64) else {
        return Err(reject!(
            "its shape '{}' is computed at run time (only a constant [.., {k}] keeps K provably)",
            g.value_name(s)
        ));
    };
    let Some((&last, lead)) = shape.split_last() else {
        return Err(reject!("its shape is empty"));
    };
    if last != k {
        return Err(reject!(
            "its shape {shape:?} does not end in K = {k} (the last axis would change)"
        ));
    }
    if lead.iter().any(|&d| d == 0 || d < -1) || lead.iter().filter(|&&d| d == -1).count() > 1 {
        return Err(reject!(
            "its shape {shape:?} has a 0 or a second -1 before K (only positive dims and one -1 are read through)"
        ));
    }
    Ok(shape)
}

/// The `Reshape` (and its output) that is the only reader of a flattened MatMul's output `y`
/// (`[M, N]`, M the product of the activation `a`'s leading dims) and provably gives it back
/// exactly the shape `MxMatMul` writes, `a`'s leading dims + N — the export spelling `view(-1, K)
/// → mm → view(B, S, N)`: `y` is no graph output and has no other reader; `allowzero = 0`; a
/// constant int64 shape of `a`'s rank whose every entry is that dim or -1 (at most one; no 0,
/// which would copy a dim of `y`); `a`'s leading dims all known and positive (so a -1 can only
/// be inferred as that dim). `None` otherwise (the output Reshape then stays, as before).
fn reshape_back(g: &dyn GraphView, y: ValueId, a: ValueId, n: i64) -> Option<(NodeId, ValueId)> {
    if g.is_graph_output(y) {
        return None;
    }
    let readers = g.consumers(y);
    let &[(r2, 0)] = readers.as_ref() else {
        return None;
    };
    if g.domain(r2) != ONNX_DOMAIN
        || g.op_type(r2) != "Reshape"
        || attr_int(g.attr(r2, "allowzero"), 0) != Some(0)
    {
        return None;
    }
    let s = g.inputs(r2).get(1).copied().flatten()?;
    let t = g.const_value(s).filter(|t| t.elem_type == dtype::INT64)?;
    let target = crate::pattern::predicates::values_i64(&t)?;
    let a_shape = g.tensor_info(a)?.shape?;
    let (_, lead) = a_shape.split_last()?;
    let mut want = lead
        .iter()
        .map(|d| match d {
            Dim::Known(v) if *v >= 1 => Some(*v),
            _ => None,
        })
        .collect::<Option<Vec<i64>>>()?;
    want.push(n);
    let minus_ones = target.iter().filter(|&&d| d == -1).count();
    let same = target.len() == want.len()
        && minus_ones <= 1
        && target.iter().zip(&want).all(|(&t, &w)| t == w || t == -1);
    same.then(|| (r2, g.outputs(r2)[0]))
}

/// Emits the `MxMatMul` `spec` of `u`, absorbed through the activation's Reshape `flat`, with
/// an ONNX `Reshape` of its output back to the MatMul's output shape (`q` is the activation the
/// `MxMatMul` reads).
pub(crate) fn emit_unflattened(
    e: &mut Emit<'_>,
    spec: NodeSpec,
    u: &MatMulUse,
    flat: &Flat,
    q: ValueId,
) -> Result<(), String> {
    // Through the activation's Reshape: MxMatMul reads a as it is ([.., K]) and writes
    // [.., N]; an ONNX Reshape to the MatMul's output shape gives `out` its name back — unless
    // the MatMul's only reader reshaped it back to [.., N]: MxMatMul then writes that output.
    if let Some((_, back)) = flat.back {
        e.add(spec.output(back))?;
        return Ok(());
    }
    let g = e.graph();
    let a_shape = g.tensor_info(q).and_then(|i| i.shape);
    let base = g.value_name(u.out).to_string();
    let shape = a_shape.map(|mut s| {
        if let (Some(last), Some(&n)) = (s.last_mut(), flat.out_shape.last()) {
            *last = Dim::Known(n);
        }
        s
    });
    let unflat = e.value(
        &format!("{base}_mx"),
        Some(crate::view::TensorInfo {
            elem_type: u.out_dtype,
            shape,
        }),
    );
    e.add(spec.output(unflat))?;
    let raw: Vec<u8> = flat
        .out_shape
        .iter()
        .flat_map(|d| d.to_le_bytes())
        .collect();
    let t = TensorProto {
        name: Some(format!("{base}_shape")),
        data_type: Some(dtype::INT64),
        dims: vec![flat.out_shape.len() as i64],
        raw_data: Some(raw),
        data_location: Some(DataLocation::Default as i32),
        ..Default::default()
    };
    let shape = e.initializer(&format!("{base}_shape"), t);
    let reshape = NodeSpec {
        domain: ONNX_DOMAIN.into(),
        op_type: "Reshape".into(),
        ..Default::default()
    };
    e.add(reshape.input(unflat).input(shape).output(u.out))?;
    Ok(())
}
