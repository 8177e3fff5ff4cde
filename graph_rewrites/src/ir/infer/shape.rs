//! Shape arithmetic for type inference: numpy broadcasting, MatMul, Reshape, Slice, axis
//! normalisation. Every function returns `None` for shapes the op would reject (an invalid
//! model), so inference leaves such outputs unknown instead of guessing.

use crate::view::Dim;

/// The dim's value when it is statically known.
pub(super) fn known(d: &Dim) -> Option<i64> {
    match d {
        Dim::Known(v) => Some(*v),
        _ => None,
    }
}

/// Known dims for a list of integers (negative values become unknown dims).
pub(super) fn known_dims(values: &[i64]) -> Vec<Dim> {
    values
        .iter()
        .map(|&v| if v >= 0 { Dim::Known(v) } else { Dim::Unknown })
        .collect()
}

/// Ranks above this are treated as invalid (ONNX sets no limit; real models stay far below).
const MAX_RANK: i64 = 64;

/// `rank` unknown dims: the shape a 1-D shape tensor of known length `rank` describes.
pub(super) fn unknown_dims(rank: &Dim) -> Option<Vec<Dim>> {
    let r = known(rank).filter(|r| (0..=MAX_RANK).contains(r))?;
    Some(vec![Dim::Unknown; r as usize])
}

/// Normalises `axis` (negative counts from the end) against `rank`.
pub(super) fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

/// Normalises a list of axes; `None` when one is out of range or repeated.
pub(super) fn norm_axes(axes: &[i64], rank: usize) -> Option<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let a = norm_axis(a, rank)?;
        if out.contains(&a) {
            return None;
        }
        out.push(a);
    }
    Some(out)
}

/// The product of the dims, when all are known.
pub(super) fn product(dims: &[Dim]) -> Option<i64> {
    dims.iter()
        .try_fold(1i64, |acc, d| known(d).and_then(|v| acc.checked_mul(v)))
}

/// The product of `dims` as a dim: known, a scaled symbol when exactly one dim is symbolic
/// (`[seq, 2]` → `2*seq`), else unknown.
pub(super) fn product_dim(dims: &[Dim]) -> Dim {
    let (mut coef, mut symbol) = (1i64, None);
    for d in dims {
        let factor = match d {
            Dim::Known(v) => *v,
            Dim::Symbolic(s) if symbol.is_none() => {
                let (k, name) = monomial(s);
                symbol = Some(name);
                k
            }
            _ => return Dim::Unknown,
        };
        let Some(c) = coef.checked_mul(factor) else {
            return Dim::Unknown;
        };
        coef = c;
    }
    match symbol {
        None => Dim::Known(coef),
        Some(name) if coef > 0 => scaled_symbol(coef, name),
        Some(_) => Dim::Unknown,
    }
}

/// Two dims that must be equal (Concat's other axes, same-shape inputs): the more informative.
pub(super) fn unify(a: &Dim, b: &Dim) -> Dim {
    match (a, b) {
        (Dim::Known(_), _) => a.clone(),
        (_, Dim::Known(_)) => b.clone(),
        (Dim::Symbolic(_), _) => a.clone(),
        _ => b.clone(),
    }
}

/// One broadcast dim. A known dim > 1 wins over any non-known one (the other must be 1 or the
/// same size for the model to be valid); equal symbols keep the symbol; anything else whose
/// size is not implied becomes unknown. `None`: two different known sizes, neither 1.
fn broadcast_dim(a: &Dim, b: &Dim) -> Option<Dim> {
    Some(match (a, b) {
        (Dim::Known(1), x) | (x, Dim::Known(1)) => x.clone(),
        (Dim::Known(x), Dim::Known(y)) if x == y => a.clone(),
        (Dim::Known(_), Dim::Known(_)) => return None,
        (Dim::Known(_), _) => a.clone(),
        (_, Dim::Known(_)) => b.clone(),
        (Dim::Symbolic(x), Dim::Symbolic(y)) if x == y => a.clone(),
        _ => Dim::Unknown,
    })
}

/// Multidirectional (numpy) broadcasting of two shapes.
pub(super) fn broadcast2(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    let rank = a.len().max(b.len());
    let one = Dim::Known(1);
    (0..rank)
        .map(|i| {
            // Align from the right; missing leading dims act as 1.
            let da = (i + a.len()).checked_sub(rank).map_or(&one, |j| &a[j]);
            let db = (i + b.len()).checked_sub(rank).map_or(&one, |j| &b[j]);
            broadcast_dim(da, db)
        })
        .collect()
}

/// Broadcasting of any number of shapes; `None` when one is unknown or they are incompatible.
pub(super) fn broadcast(shapes: &[Option<Vec<Dim>>]) -> Option<Vec<Dim>> {
    let mut out: Vec<Dim> = Vec::new();
    for s in shapes {
        out = broadcast2(&out, s.as_deref()?)?;
    }
    Some(out)
}

/// `numpy.matmul` shapes: 1-D operands are promoted (and the added dim dropped again), batch
/// dims broadcast.
pub(super) fn matmul(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    if a.is_empty() || b.is_empty() {
        return None; // MatMul takes no scalars
    }
    let (a_rows, a_k) = match a {
        [k] => (None, k),
        [.., m, k] => (Some(m), k),
        [] => return None,
    };
    let (b_k, b_cols) = match b {
        [k] => (k, None),
        [.., k, n] => (k, Some(n)),
        [] => return None,
    };
    if let (Some(x), Some(y)) = (known(a_k), known(b_k)) {
        if x != y {
            return None;
        }
    }
    let batch_a = &a[..a.len().saturating_sub(2)];
    let batch_b = &b[..b.len().saturating_sub(2)];
    let mut out = broadcast2(batch_a, batch_b)?;
    out.extend(a_rows.cloned());
    out.extend(b_cols.cloned());
    Some(out)
}

/// Reshape to `target`, given as element values (constant, or computed from shapes): `0`
/// copies the input dim at the same index (unless `allowzero`), one `-1` takes the remaining
/// size when it can be derived, symbolic and unknown elements become those dims.
pub(super) fn reshape(input: Option<&[Dim]>, target: &[Dim], allowzero: bool) -> Option<Vec<Dim>> {
    let mut out = Vec::with_capacity(target.len());
    let mut copied = vec![false; input.map_or(0, <[Dim]>::len)];
    let mut infer_at = None;
    for (i, t) in target.iter().enumerate() {
        match known(t) {
            Some(0) if !allowzero => match input {
                Some(dims) => {
                    out.push(dims.get(i)?.clone());
                    copied[i] = true;
                }
                None => out.push(Dim::Unknown),
            },
            Some(-1) if infer_at.is_none() => {
                infer_at = Some(i);
                out.push(Dim::Unknown);
            }
            Some(t) if t < 0 => return None, // a second -1, or another negative value
            _ => out.push(t.clone()),
        }
    }
    if let (Some(i), Some(dims)) = (infer_at, input) {
        out[i] = inferred_dim(dims, &copied, &out, i)?;
    }
    Some(out)
}

/// The `-1` dim (at `at`) of a Reshape: input dims not copied by a `0`, divided by the other
/// output dims. Copied dims and equal symbols cancel out (`[batch, seq, 64] → [0, 0, -1, 16]`),
/// and one remaining symbolic dim is the answer when the known sizes match
/// (`[1, seq, 64] → [1, -1, 4, 16]` gives `seq`).
fn inferred_dim(input: &[Dim], copied: &[bool], out: &[Dim], at: usize) -> Option<Dim> {
    let is_copied = |i: usize| copied.get(i).copied().unwrap_or(false);
    let rest = input.iter().enumerate().filter(|(i, _)| !is_copied(*i));
    let others = out
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != at && !is_copied(*i));
    let (mut rest_sym, mut total) = (Vec::new(), 1i64);
    for (_, d) in rest {
        match known(d) {
            Some(v) => total = total.checked_mul(v)?,
            None => rest_sym.push(d),
        }
    }
    let (mut others_sym, mut div) = (Vec::new(), 1i64);
    for (_, d) in others {
        match known(d) {
            Some(v) => div = div.checked_mul(v)?,
            None => others_sym.push(d),
        }
    }
    others_sym.retain(|d| {
        let pos = rest_sym
            .iter()
            .position(|r| matches!(d, Dim::Symbolic(_)) && r == d);
        pos.map(|p| rest_sym.remove(p)).is_none()
    });
    Some(match (rest_sym.as_slice(), others_sym.is_empty()) {
        ([], true) if div != 0 => {
            if total % div != 0 {
                return None; // the sizes do not divide: an invalid Reshape
            }
            Dim::Known(total / div)
        }
        ([Dim::Symbolic(sym)], true) if div != 0 => {
            let (coef, name) = monomial(sym);
            match coef.checked_mul(total) {
                Some(n) if n % div == 0 && n / div > 0 => scaled_symbol(n / div, name),
                _ => Dim::Unknown,
            }
        }
        _ => Dim::Unknown,
    })
}

/// A symbolic dim as `coefficient * name`: `"2*seq"` is (2, "seq"), anything else (1, itself).
/// The spelling is sympy's, which torch's exporters write into `dim_param`.
pub(super) fn monomial(sym: &str) -> (i64, &str) {
    sym.split_once('*')
        .and_then(|(k, name)| Some((k.parse().ok().filter(|&k| k > 0)?, name)))
        .unwrap_or((1, sym))
}

/// `coef * name` as a symbolic dim, spelled like [`monomial`] parses it.
pub(super) fn scaled_symbol(coef: i64, name: &str) -> Dim {
    if coef == 1 {
        Dim::Symbolic(name.to_owned())
    } else {
        Dim::Symbolic(format!("{coef}*{name}"))
    }
}

/// The length of one sliced axis (ONNX Slice clamping rules).
pub(super) fn slice_dim(dim: &Dim, start: i64, end: i64, step: i64) -> Dim {
    let Some(d) = known(dim) else {
        // Unknown size: only the whole axis, forwards, keeps the dim.
        let whole = start == 0 && step == 1 && end >= i32::MAX as i64;
        return if whole { dim.clone() } else { Dim::Unknown };
    };
    if d == 0 || step == 0 {
        // An empty axis stays empty (and `clamp` below needs d > 0); step 0 is invalid.
        return if step == 0 {
            Dim::Unknown
        } else {
            Dim::Known(0)
        };
    }
    // i128: starts, ends and steps may be near the i64 limits.
    let (d, step) = (d as i128, step as i128);
    let wrap = |x: i64| if x < 0 { x as i128 + d } else { x as i128 };
    let (start, end) = (wrap(start), wrap(end));
    let len = if step > 0 {
        let (s, e) = (start.clamp(0, d), end.clamp(0, d));
        (e - s + step - 1).div_euclid(step)
    } else {
        let (s, e) = (start.clamp(0, d - 1), end.clamp(-1, d - 1));
        (s - e - step - 1).div_euclid(-step)
    };
    Dim::Known(len.max(0) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Dim {
        Dim::Symbolic(x.into())
    }

    #[test]
    fn slice_lengths_follow_onnx_clamping() {
        let d = Dim::Known(10);
        assert_eq!(slice_dim(&d, 0, i64::MAX, 1), Dim::Known(10));
        assert_eq!(slice_dim(&d, 2, 8, 3), Dim::Known(2));
        assert_eq!(slice_dim(&d, -3, i64::MAX, 1), Dim::Known(3));
        assert_eq!(slice_dim(&d, -1, i64::MIN, -1), Dim::Known(10));
        assert_eq!(slice_dim(&d, 8, 2, 1), Dim::Known(0));
        assert_eq!(slice_dim(&s("n"), 0, i64::MAX, 1), s("n"));
        assert_eq!(slice_dim(&s("n"), 1, i64::MAX, 1), Dim::Unknown);
    }

    #[test]
    fn broadcast_keeps_equal_symbols_and_known_sizes() {
        let a = vec![s("b"), Dim::Known(1), Dim::Known(8)];
        let b = vec![s("b"), s("t"), Dim::Unknown];
        assert_eq!(
            broadcast2(&a, &b),
            Some(vec![s("b"), s("t"), Dim::Known(8)])
        );
        assert_eq!(broadcast2(&[s("x")], &[s("y")]), Some(vec![Dim::Unknown]));
        assert_eq!(broadcast2(&[Dim::Known(2)], &[Dim::Known(3)]), None);
    }
}
