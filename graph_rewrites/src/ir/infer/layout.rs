//! Rules for the ops that move data without computing on it: Reshape, Flatten, Transpose,
//! Unsqueeze, Squeeze, Concat, Split, Slice, Gather, GatherND, Tile, Pad. Their element type is
//! the data input's; only the shape changes.

use super::node::{info, IntList, Node};
use super::shape::{self, known, known_dims, norm_axes, norm_axis, product_dim, unify};
use crate::view::{Dim, TensorInfo};

pub(super) fn reshape(c: &Node) -> Vec<TensorInfo> {
    // Opset 1-4 took the target as an attribute.
    let target = c
        .int_values(1)
        .or_else(|| Some(c.ints("shape")?.into_iter().map(Dim::Known).collect()));
    let allowzero = c.int("allowzero", 0) == Some(1);
    let shape = match target {
        Some(t) => shape::reshape(c.shape(0).as_deref(), &t, allowzero),
        // A computed target: the rank is still its length.
        None => c.shape(1).and_then(|s| shape::unknown_dims(s.first()?)),
    };
    vec![info(c.elem(0), shape)]
}

pub(super) fn flatten(c: &Node) -> Vec<TensorInfo> {
    let shape = c.shape(0).and_then(|s| {
        let axis = c.int("axis", 1)?;
        // Flatten allows axis == rank (everything in the first dim).
        let a = if axis < 0 {
            axis + s.len() as i64
        } else {
            axis
        };
        let a = usize::try_from(a).ok().filter(|&a| a <= s.len())?;
        Some(vec![product_dim(&s[..a]), product_dim(&s[a..])])
    });
    vec![info(c.elem(0), shape)]
}

pub(super) fn transpose(c: &Node) -> Vec<TensorInfo> {
    let shape = c.shape(0).and_then(|s| {
        let perm = c
            .ints("perm")
            .unwrap_or_else(|| (0..s.len() as i64).rev().collect());
        let perm = norm_axes(&perm, s.len()).filter(|p| p.len() == s.len())?;
        Some(perm.iter().map(|&i| s[i].clone()).collect())
    });
    vec![info(c.elem(0), shape)]
}

pub(super) fn unsqueeze(c: &Node) -> Vec<TensorInfo> {
    let shape = match (c.shape(0), c.int_list("axes", 1)) {
        (Some(s), IntList::Given(axes)) => norm_axes(&axes, s.len() + axes.len()).map(|axes| {
            let mut rest = s.into_iter();
            (0..axes.len() + rest.len())
                .map(|i| {
                    if axes.contains(&i) {
                        Dim::Known(1)
                    } else {
                        rest.next().unwrap_or(Dim::Unknown)
                    }
                })
                .collect()
        }),
        _ => None,
    };
    vec![info(c.elem(0), shape)]
}

pub(super) fn squeeze(c: &Node) -> Vec<TensorInfo> {
    let shape = c.shape(0).and_then(|s| {
        let axes = match c.int_list("axes", 1) {
            IntList::Given(a) if !a.is_empty() => norm_axes(&a, s.len())?,
            IntList::NotConstant => return None,
            // No axes: every dim of size 1 goes, which needs every dim known.
            _ => {
                shape::product(&s)?;
                (0..s.len()).filter(|&i| s[i] == Dim::Known(1)).collect()
            }
        };
        if axes.iter().any(|&a| known(&s[a]).is_some_and(|d| d != 1)) {
            return None; // squeezing a dim that is not 1
        }
        Some(
            s.into_iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(i))
                .map(|(_, d)| d)
                .collect(),
        )
    });
    vec![info(c.elem(0), shape)]
}

pub(super) fn concat(c: &Node) -> Vec<TensorInfo> {
    let elem = c.first_elem(0..c.input_count());
    let shapes: Vec<Option<Vec<Dim>>> = (0..c.input_count()).map(|s| c.shape(s)).collect();
    let Some(rank) = shapes.iter().flatten().map(Vec::len).next() else {
        return vec![info(elem, None)];
    };
    let Some(axis) = c.int("axis", 0).and_then(|a| norm_axis(a, rank)) else {
        return vec![info(elem, None)];
    };
    let mut out = vec![Dim::Unknown; rank];
    let mut total = Some(0i64);
    for s in &shapes {
        match s {
            Some(s) if s.len() == rank => {
                for (i, d) in s.iter().enumerate().filter(|(i, _)| *i != axis) {
                    out[i] = unify(&out[i], d);
                }
                total = total
                    .zip(known(&s[axis]))
                    .and_then(|(t, d)| t.checked_add(d));
            }
            Some(_) => return vec![info(elem, None)], // ranks differ: invalid
            None => total = None,
        }
    }
    out[axis] = match (total, shapes.as_slice()) {
        (Some(t), _) => Dim::Known(t),
        (None, [Some(only)]) => only[axis].clone(),
        _ => Dim::Unknown,
    };
    vec![info(elem, Some(out))]
}

pub(super) fn split(c: &Node) -> Vec<TensorInfo> {
    let elem = c.elem(0);
    let n_out = c.output_count();
    let Some(s) = c.shape(0) else {
        return vec![info(elem, None); n_out];
    };
    let Some(axis) = c.int("axis", 0).and_then(|a| norm_axis(a, s.len())) else {
        return vec![info(elem, None); n_out];
    };
    let sizes: Vec<Dim> = match (c.int_list("split", 1), known(&s[axis])) {
        (IntList::Given(v), _) if v.len() == n_out => known_dims(&v),
        (IntList::Absent, Some(d)) if n_out > 0 => {
            // Equal parts; opset 18's num_outputs allows a smaller last part.
            let n = n_out as i64;
            let part = d / n + i64::from(d % n != 0);
            (0..n)
                .map(|i| Dim::Known(if i + 1 < n { part } else { d - part * (n - 1) }))
                .collect()
        }
        _ => vec![Dim::Unknown; n_out],
    };
    sizes
        .into_iter()
        .map(|d| {
            let mut shape = s.clone();
            shape[axis] = d;
            info(elem, Some(shape))
        })
        .collect()
}

pub(super) fn slice(c: &Node) -> Vec<TensorInfo> {
    let elem = c.elem(0);
    let Some(s) = c.shape(0) else {
        return vec![info(elem, None)];
    };
    // Opset 1-9: attributes; opset 10+: inputs (axes and steps optional). `None`: given but
    // not constant.
    let (starts, ends, axes, steps) = if c.opset() < 10 {
        let attr = |name| Some(c.ints(name));
        (c.ints("starts"), c.ints("ends"), attr("axes"), Some(None))
    } else {
        let optional = |slot| match c.input(slot) {
            None => Some(None),
            Some(_) => c.known_ints(slot).map(Some),
        };
        (c.known_ints(1), c.known_ints(2), optional(3), optional(4))
    };
    let count = starts.as_ref().or(ends.as_ref()).map(Vec::len);
    let axes = match (axes, count) {
        (Some(Some(a)), _) => Some(a),
        (Some(None), Some(n)) => Some((0..n as i64).collect()),
        _ => None,
    };
    let Some(axes) = axes.map(|a| norm_axes(&a, s.len())) else {
        // Axes not known: the rank is kept, the sizes are not known.
        return vec![info(elem, Some(vec![Dim::Unknown; s.len()]))];
    };
    let Some(axes) = axes else {
        return vec![info(elem, None)]; // out of range or repeated: invalid
    };
    let mut out = s;
    match (starts, ends, steps) {
        (Some(starts), Some(ends), Some(steps)) => {
            let steps = steps.unwrap_or_else(|| vec![1; axes.len()]);
            if [starts.len(), ends.len(), steps.len()] != [axes.len(); 3] {
                return vec![info(elem, None)];
            }
            for (i, &a) in axes.iter().enumerate() {
                out[a] = shape::slice_dim(&out[a], starts[i], ends[i], steps[i]);
            }
        }
        // Bounds not constant: only the sliced axes lose their size.
        _ => axes.iter().for_each(|&a| out[a] = Dim::Unknown),
    }
    vec![info(elem, Some(out))]
}

pub(super) fn gather(c: &Node) -> Vec<TensorInfo> {
    let shape = c.shape(0).zip(c.shape(1)).and_then(|(data, idx)| {
        let axis = norm_axis(c.int("axis", 0)?, data.len())?;
        let mut out = data[..axis].to_vec();
        out.extend(idx);
        out.extend_from_slice(&data[axis + 1..]);
        Some(out)
    });
    vec![info(c.elem(0), shape)]
}

/// `indices[:-1] + data[batch_dims + k:]` for indices `[..., k]`.
pub(super) fn gather_nd(c: &Node) -> Vec<TensorInfo> {
    let shape = c.shape(0).zip(c.shape(1)).and_then(|(data, idx)| {
        let (k, lead) = idx.split_last()?;
        let from = usize::try_from(c.int("batch_dims", 0)? + known(k)?).ok()?;
        let mut out = lead.to_vec();
        out.extend_from_slice(data.get(from..)?);
        Some(out)
    });
    vec![info(c.elem(0), shape)]
}

/// `Tile(x, repeats)`: each dim times its repeat count (torch's `repeat` / `repeat_interleave`,
/// e.g. a MoE block's `x.repeat_interleave(top_k, dim=0)` in front of the experts' quantizer,
/// probe 10); a count that is not a known non-negative number makes that dim unknown, repeats
/// that are not a constant or a tracked shape leave only the rank.
pub(super) fn tile(c: &Node) -> Vec<TensorInfo> {
    let shape = c.shape(0).map(|s| match c.int_values(1) {
        Some(r) if r.len() == s.len() => s
            .iter()
            .zip(r)
            .map(|(d, k)| match k {
                Dim::Known(1) => d.clone(),
                Dim::Known(k) if k < 0 => Dim::Unknown,
                k => product_dim(&[d.clone(), k]),
            })
            .collect(),
        _ => vec![Dim::Unknown; s.len()],
    });
    vec![info(c.elem(0), shape)]
}

/// `Pad`: each padded axis grows by its begin and end pads (negative pads crop). The pads are
/// attribute `pads` (opset 2-10; `paddings` in opset 1) or input 1 (11+), `[begins..., ends...]`
/// over `axes` (input 3, opset 18+) or every axis. Pads that are not constant leave the padded
/// axes' sizes unknown; a symbolic dim keeps its name only where its pads add up to 0. Pads of
/// the wrong length, or that crop an axis below 0, give no shape (an invalid model).
pub(super) fn pad(c: &Node) -> Vec<TensorInfo> {
    let shape = c.shape(0).and_then(|s| {
        let axes = match c.input(3) {
            None => (0..s.len()).collect(),
            Some(_) => match c.known_ints(3) {
                Some(a) => norm_axes(&a, s.len())?,
                None => return Some(vec![Dim::Unknown; s.len()]),
            },
        };
        let pads = match c.int_list("pads", 1) {
            IntList::Absent => c.ints("paddings"),
            IntList::Given(p) => Some(p),
            IntList::NotConstant => None,
        };
        let mut out = s;
        let Some(pads) = pads else {
            axes.iter().for_each(|&a| out[a] = Dim::Unknown);
            return Some(out);
        };
        if pads.len() != 2 * axes.len() {
            return None;
        }
        for (i, &a) in axes.iter().enumerate() {
            let total = pads[i].checked_add(pads[i + axes.len()])?;
            out[a] = match known(&out[a]) {
                _ if total == 0 => out[a].clone(),
                Some(d) => Dim::Known(d.checked_add(total).filter(|&n| n >= 0)?),
                None => Dim::Unknown,
            };
        }
        Some(out)
    });
    vec![info(c.elem(0), shape)]
}
