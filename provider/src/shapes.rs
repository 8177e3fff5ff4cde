//! Dims ONNX Runtime's shape inference leaves unknown on the graph `GetCapability` sees, filled
//! in by the offline rewrite's own inference, so the EP claims what `mxfuse rewrite` fuses.
//!
//! Why: ORT's inference does not read a shape computed at run time. A decoder layer's MoE output
//! goes back to x's shape through `Reshape(out, Shape(x))` (or TorchScript's `Concat` of
//! `Gather(Shape(h), i)`), which ORT types `[?, ?, ?]`, so a model without `value_info` had the
//! next layer's residual sum `x + back` typed `[?, ?, 64]`. Rule `add_rmsnorm_mxquant` then
//! refused the next layer's norm on the EP (its operands are not provably of the sum's shape:
//! x is `[batch, seq, 64]`), while offline `graph_rewrites::ir::infer`, which tracks the values of
//! `Shape → Gather → Concat` computations, types both `[batch, seq, 64]` and fuses it: the two
//! paths differed in what fused (and so in float order).
//!
//! What [`refinements`] does: the same inference, run on a copy of the view's structure
//! ([`Purpose::Inference`]: small constants only, the dims ORT left unknown taken out), and
//! for each value ORT typed with an unknown part, the dims ORT left unknown taken from that
//! inference where it gives a tensor of the same rank. A dim ORT knows or names is never
//! changed, and a rank that disagrees keeps ORT's type. Soundness is the offline rewrite's: the
//! rules read the same facts as offline, where that inference is all there is.
//!
//! The EP applies these in `GetCapability` and keeps them by value name for `Compile`, whose
//! claimed subgraph alone no longer holds the `Shape` that proves them (its rewrite would refuse
//! the site it was handed). Where neither inference proves a shape, the rules still refuse with
//! the reason, which the VERBOSE log names.

use std::collections::HashMap;

use graph_rewrites::ir::Graph;
use graph_rewrites::view::{Dim, GraphView, TensorInfo};

use crate::error::{Error, Result};
use crate::ort_graph_view::OrtGraphView;
use crate::view_to_model::{complete, model_for, Purpose};

/// By value name, the types of the view's computed values that the offline inference makes more
/// precise (see the module docs); empty when ORT typed every computed value completely.
pub fn refinements(view: &OrtGraphView) -> Result<HashMap<String, TensorInfo>> {
    let partial: Vec<_> = view
        .nodes()
        .iter()
        .flat_map(|&n| view.outputs(n).iter().copied())
        .filter(|&v| !view.value_name(v).is_empty() && !complete(&view.tensor_info(v)))
        .collect();
    if partial.is_empty() {
        return Ok(HashMap::new());
    }
    let model = model_for(view, Purpose::Inference)?;
    let ours = Graph::from_model(model, None).map_err(|e| Error::invalid(e.to_string()))?;
    let mut refined = HashMap::new();
    for v in partial {
        let name = view.value_name(v);
        let Some(inferred) = ours.value_by_name(name).and_then(|x| ours.tensor_info(x)) else {
            continue;
        };
        if let Some(info) = fill(view.tensor_info(v), inferred) {
            refined.insert(name.to_string(), info);
        }
    }
    Ok(refined)
}

/// ORT's type `ort` with its unknown parts taken from `inferred`, when that changes anything.
fn fill(ort: Option<TensorInfo>, inferred: TensorInfo) -> Option<TensorInfo> {
    let Some(ort) = ort else {
        return Some(inferred).filter(|i| i.elem_type != 0 || i.shape.is_some());
    };
    let elem_type = match ort.elem_type {
        0 => inferred.elem_type,
        t => t,
    };
    let shape = match (&ort.shape, inferred.shape) {
        (None, s) => s,
        (Some(a), Some(b)) if a.len() == b.len() => Some(
            a.iter()
                .zip(b)
                .map(|(a, b)| match a {
                    Dim::Unknown => b,
                    known => known.clone(),
                })
                .collect(),
        ),
        (a, _) => a.clone(),
    };
    let refined = TensorInfo { elem_type, shape };
    (refined != ort).then_some(refined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use graph_rewrites::pattern::predicates::dtype::FLOAT;

    fn info(shape: Option<Vec<Dim>>) -> TensorInfo {
        TensorInfo {
            elem_type: FLOAT,
            shape,
        }
    }

    #[test]
    fn fill_takes_only_what_ort_left_unknown() {
        let sym = |s: &str| Dim::Symbolic(s.into());
        let ours = info(Some(vec![sym("batch"), sym("seq"), Dim::Known(64)]));
        // ORT's [?, ?, 64]: the two unknown dims are filled.
        let ort = info(Some(vec![Dim::Unknown, Dim::Unknown, Dim::Known(64)]));
        assert_eq!(fill(Some(ort), ours.clone()), Some(ours.clone()));
        // A dim ORT knows or names is kept, even where ours differs.
        let ort = info(Some(vec![sym("b"), Dim::Unknown, Dim::Known(32)]));
        assert_eq!(
            fill(Some(ort), ours.clone()),
            Some(info(Some(vec![sym("b"), sym("seq"), Dim::Known(32)])))
        );
        // Another rank: ORT's type stays.
        let ort = info(Some(vec![Dim::Unknown, Dim::Known(64)]));
        assert_eq!(fill(Some(ort), ours.clone()), None);
        // No shape, or no type at all: ours.
        assert_eq!(fill(Some(info(None)), ours.clone()), Some(ours.clone()));
        assert_eq!(fill(None, ours.clone()), Some(ours.clone()));
        // Nothing gained.
        assert_eq!(fill(Some(ours.clone()), ours.clone()), None);
        assert_eq!(fill(None, TensorInfo::default()), None);
    }
}
