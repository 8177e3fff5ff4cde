//! Element values of small integer tensors computed from shapes, so that Reshape, Expand, Range
//! and ConstantOfShape targets built at run time (`Shape → Gather → Concat`, what torch's
//! exporters emit for dynamic dims) still give static or symbolic shapes.
//!
//! Only 0-D and 1-D int32 / int64 tensors of at most [`MAX_ELEMS`] elements are tracked; an
//! element is `Known` (any integer, negatives included), `Symbolic` (a named dim read by
//! `Shape`) or `Unknown`.

use super::node::Node;
use super::shape::{known, monomial, norm_axis, scaled_symbol};
use crate::pattern::predicates::dtype;
use crate::view::{Dim, GraphView, TensorInfo};

/// The longest tracked list: enough for any shape vector.
const MAX_ELEMS: usize = 64;

/// The element values of node `c`'s first output, when its op is a shape computation whose
/// inputs are known. `out` is the output's (already inferred) type.
pub(super) fn output_values(c: &Node, out: &TensorInfo) -> Option<Vec<Dim>> {
    if !matches!(out.elem_type, dtype::INT64 | dtype::INT32) {
        return None;
    }
    let rank = out.shape.as_ref()?.len();
    if rank > 1 || !c.g.domain(c.n).is_empty() {
        return None;
    }
    let vals = match c.g.op_type(c.n) {
        "Shape" => shape_values(c)?,
        // Element values pass through unchanged.
        "Identity" | "Cast" | "Squeeze" | "Unsqueeze" | "Reshape" | "Flatten" => c.int_values(0)?,
        "Gather" => gather(c)?,
        "Concat" => {
            let parts: Option<Vec<Vec<Dim>>> =
                (0..c.input_count()).map(|s| c.int_values(s)).collect();
            parts?.concat()
        }
        "Slice" => slice(c)?,
        op @ ("Add" | "Sub" | "Mul" | "Div") => arithmetic(c, op)?,
        _ => return None,
    };
    (vals.len() <= MAX_ELEMS).then_some(vals)
}

fn shape_values(c: &Node) -> Option<Vec<Dim>> {
    let s = c.shape(0)?;
    let r = s.len() as i64;
    let clamp = |x: i64| (if x < 0 { x.saturating_add(r) } else { x }).clamp(0, r) as usize;
    let start = clamp(c.int("start", 0)?);
    let end = clamp(c.int("end", r)?);
    Some(s.get(start..end.max(start))?.to_vec())
}

/// `Gather(values, indices)` on a 1-D value list.
fn gather(c: &Node) -> Option<Vec<Dim>> {
    let data = c.int_values(0)?;
    if c.shape(0)?.len() != 1 || norm_axis(c.int("axis", 0)?, 1)? != 0 {
        return None;
    }
    c.known_ints(1)?
        .into_iter()
        .map(|i| {
            let i = if i < 0 { i + data.len() as i64 } else { i };
            data.get(usize::try_from(i).ok()?).cloned()
        })
        .collect()
}

/// `Slice` of a 1-D value list with constant bounds.
fn slice(c: &Node) -> Option<Vec<Dim>> {
    let data = c.int_values(0)?;
    let one = |slot: usize, default: i64| -> Option<i64> {
        match c.input(slot) {
            None => Some(default),
            Some(_) => match c.known_ints(slot)?.as_slice() {
                [v] => Some(*v),
                _ => None,
            },
        }
    };
    if norm_axis(one(3, 0)?, 1)? != 0 {
        return None;
    }
    let (start, end, step) = (one(1, 0)?, one(2, i64::MAX)?, one(4, 1)?);
    let n = data.len() as i64;
    let wrap = |x: i64| if x < 0 { x.saturating_add(n) } else { x };
    let mut out = Vec::new();
    if step > 0 {
        let (mut i, e) = (wrap(start).clamp(0, n), wrap(end).clamp(0, n));
        while i < e {
            out.push(data[i as usize].clone());
            i = i.saturating_add(step);
        }
    } else if step < 0 && n > 0 {
        let (mut i, e) = (wrap(start).clamp(0, n - 1), wrap(end).clamp(-1, n - 1));
        while i > e {
            out.push(data[i as usize].clone());
            i = i.saturating_add(step);
        }
    } else if step == 0 {
        return None;
    }
    Some(out)
}

/// Elementwise integer arithmetic, a scalar broadcasting against a list. Symbolic elements
/// survive only the identities (`+ 0`, `- 0`, `* 1`, `/ 1`).
fn arithmetic(c: &Node, op: &str) -> Option<Vec<Dim>> {
    let (a, b) = (c.int_values(0)?, c.int_values(1)?);
    let len = match (a.len(), b.len()) {
        (x, y) if x == y => x,
        (1, y) => y,
        (x, 1) => x,
        _ => return None,
    };
    let at = |v: &[Dim], i: usize| v[if v.len() == 1 { 0 } else { i }].clone();
    Some(
        (0..len)
            .map(|i| element(op, at(&a, i), at(&b, i)))
            .collect(),
    )
}

fn element(op: &str, a: Dim, b: Dim) -> Dim {
    let (x, y) = (known(&a), known(&b));
    if let (Some(x), Some(y)) = (x, y) {
        let v = match op {
            "Add" => x.checked_add(y),
            "Sub" => x.checked_sub(y),
            "Mul" => x.checked_mul(y),
            // Integer Div truncates toward zero, like Rust's.
            _ => x.checked_div(y),
        };
        return v.map_or(Dim::Unknown, Dim::Known);
    }
    match (op, x, y) {
        ("Add", Some(0), _) | ("Mul", Some(1), _) => b,
        ("Add" | "Sub", _, Some(0)) | ("Mul" | "Div", _, Some(1)) => a,
        // `k * seq`, spelled like torch's exporters do ("2*seq").
        ("Mul", Some(k), _) if k > 0 => scale(&b, k),
        ("Mul", _, Some(k)) if k > 0 => scale(&a, k),
        _ => Dim::Unknown,
    }
}

fn scale(d: &Dim, k: i64) -> Dim {
    let Dim::Symbolic(s) = d else {
        return Dim::Unknown;
    };
    let (coef, name) = monomial(s);
    coef.checked_mul(k)
        .map_or(Dim::Unknown, |c| scaled_symbol(c, name))
}
