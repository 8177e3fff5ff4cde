//! `Resize`: X's type; per resized axis (`axes`, opset 18+, else every axis) the size given by
//! a constant or shape-computed `sizes` input, else `floor(dim * scale)` from a constant
//! `scales` input (opset 10: input 1; 11+: input 2 — `sizes` is input 3; an empty tensor
//! stands for an absent one). A size that is not established stays unknown, the rank is kept:
//! * scales or sizes that are not constant;
//! * `coordinate_transformation_mode = tf_crop_and_resize` (the size also depends on `roi`);
//! * a product whose floor is not the same in f32 (ONNX Runtime) and f64 arithmetic;
//! * `keep_aspect_ratio_policy` `not_larger` / `not_smaller` (opset 18+) on a dim that is not
//!   known, or where the rounding of `scale * dim` is a tie.
//!
//! Scales or sizes whose count is not the number of resized axes give no shape.

use super::node::{info, Node};
use super::shape::{known, norm_axes};
use crate::view::{AttrValue, Dim, GraphView, TensorInfo};

pub(super) fn resize(c: &Node) -> Vec<TensorInfo> {
    let shape = c.shape(0).and_then(|s| resized(c, s));
    vec![info(c.elem(0), shape)]
}

fn resized(c: &Node, mut s: Vec<Dim>) -> Option<Vec<Dim>> {
    let opset = c.opset();
    let axes = match c.g.attr(c.n, "axes").filter(|_| opset >= 18) {
        None => (0..s.len()).collect(),
        Some(AttrValue::Ints(a)) => norm_axes(&a, s.len())?,
        Some(_) => return None,
    };
    let (scales_slot, sizes_slot) = if opset < 11 { (1, None) } else { (2, Some(3)) };
    if let Some(slot) = sizes_slot.filter(|&slot| c.given(slot)) {
        let Some(sizes) = c.int_values(slot) else {
            return Some(unknown_at(s, &axes));
        };
        if sizes.len() != axes.len() {
            return None;
        }
        let policy = if opset >= 18 {
            c.string("keep_aspect_ratio_policy", "stretch")?
        } else {
            "stretch".to_owned()
        };
        if policy != "stretch" {
            return Some(keep_aspect(s, &axes, &sizes, &policy));
        }
        for (&a, size) in axes.iter().zip(sizes) {
            s[a] = match size {
                Dim::Known(v) if v < 0 => Dim::Unknown,
                d => d,
            };
        }
        return Some(s);
    }
    let crop = c.string("coordinate_transformation_mode", "half_pixel")? == "tf_crop_and_resize";
    let scales = c.const_f64s(scales_slot).filter(|_| c.given(scales_slot));
    let Some(scales) = scales.filter(|_| !crop) else {
        return Some(unknown_at(s, &axes));
    };
    if scales.len() != axes.len() {
        return None;
    }
    for (&a, scale) in axes.iter().zip(scales) {
        s[a] = scaled(&s[a], scale);
    }
    Some(s)
}

fn unknown_at(mut s: Vec<Dim>, axes: &[usize]) -> Vec<Dim> {
    axes.iter().for_each(|&a| s[a] = Dim::Unknown);
    s
}

/// `floor(dim * scale)`; a scale of 1 keeps any dim.
fn scaled(d: &Dim, scale: f64) -> Dim {
    if scale == 1.0 {
        return d.clone();
    }
    let Some(v) = known(d).filter(|_| scale.is_finite() && scale > 0.0) else {
        return Dim::Unknown;
    };
    let wide = (v as f64 * scale).floor();
    let narrow = f64::from((v as f32 * scale as f32).floor());
    if wide == narrow && wide < (1u64 << 53) as f64 {
        Dim::Known(wide as i64)
    } else {
        Dim::Unknown
    }
}

/// Sizes under `not_larger` / `not_smaller`: one scale for all the axes, the smallest /
/// largest of `size / dim`, and each axis `round(scale * dim)`.
fn keep_aspect(s: Vec<Dim>, axes: &[usize], sizes: &[Dim], policy: &str) -> Vec<Dim> {
    let ratios: Option<Vec<f64>> = axes
        .iter()
        .zip(sizes)
        .map(|(&a, size)| {
            let (d, size) = (known(&s[a])?, known(size)?);
            (d > 0 && size >= 0).then(|| size as f64 / d as f64)
        })
        .collect();
    let scale = ratios.and_then(|r| match policy {
        "not_larger" => r.into_iter().reduce(f64::min),
        "not_smaller" => r.into_iter().reduce(f64::max),
        _ => None,
    });
    let Some(scale) = scale else {
        return unknown_at(s, axes);
    };
    let mut out = s;
    for &a in axes {
        out[a] = match known(&out[a]) {
            Some(d) => {
                let x = scale * d as f64;
                // A tie (or close to one) could round either way in the runtime's arithmetic.
                if (x - x.floor() - 0.5).abs() < 1e-6 || x >= (1u64 << 53) as f64 {
                    Dim::Unknown
                } else {
                    Dim::Known(x.round() as i64)
                }
            }
            None => Dim::Unknown,
        };
    }
    out
}
