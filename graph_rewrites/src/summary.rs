//! Report summaries: separate quantize launches before/after, and fusions per decoder layer
//! (the launch-count table of the vLLM change, for an ONNX graph).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::pattern::predicates::dtype;
use crate::pipeline::{Fusion, Rejection};
use crate::view::{is_quark_mx, GraphView, MXFUSE_DOMAIN, ONNX_DOMAIN, TRT_DOMAIN};

/// Separate activation-quantize ops (each is a kernel launch and a memory pass).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct QuantizeOps {
    pub before: usize,
    pub after: usize,
}

/// What happened in one decoder layer.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LayerSummary {
    /// Layer index as found in node names ("layers.3", "layers/3", "layer_3"), or "other".
    pub layer: String,
    pub fused: BTreeMap<String, usize>,
    pub refused: Vec<Rejection>,
}

/// Counts standalone MX activation quantizers: `QuantizeLinear` with an E8M0 scale, Quark
/// `MXQuantizeDequantize` on anything but a constant (weight quantizers are folded offline in
/// deployment), TensorRT's `TRT_MXFP8DynamicQuantize`, and `com.mxfuse::MxQuantize` /
/// `MxQuantizeLinear`.
pub fn count_quantize_ops(g: &dyn GraphView) -> usize {
    g.nodes()
        .iter()
        .filter(|&&n| match (g.domain(n), g.op_type(n)) {
            (ONNX_DOMAIN, "QuantizeLinear") => g
                .inputs(n)
                .get(1)
                .copied()
                .flatten()
                .and_then(|s| g.tensor_info(s))
                .is_some_and(|i| i.elem_type == dtype::FLOAT8E8M0),
            _ if is_quark_mx(g, n) => g
                .inputs(n)
                .first()
                .copied()
                .flatten()
                .is_some_and(|x| !g.is_constant(x)),
            (MXFUSE_DOMAIN, "MxQuantize" | "MxQuantizeLinear")
            | (TRT_DOMAIN, "TRT_MXFP8DynamicQuantize") => true,
            _ => false,
        })
        .count()
}

/// The decoder layer a node name belongs to, if its name says.
pub fn layer_of(name: &str) -> Option<String> {
    for key in [
        "layers.", "layers/", "layers_", "layer.", "layer_", "layer/",
    ] {
        if let Some(pos) = name.find(key) {
            let digits: String = name[pos + key.len()..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            if !digits.is_empty() {
                return Some(digits);
            }
        }
    }
    None
}

/// Groups fusions (by their first replaced node) and rejections (by anchor) per layer, layers in
/// numeric order, "other" last.
pub fn per_layer(fusions: &[Fusion], rejections: &[Rejection]) -> Vec<LayerSummary> {
    let mut by: BTreeMap<(u64, String), LayerSummary> = BTreeMap::new();
    let key = |name: &str| match layer_of(name) {
        Some(l) => (l.parse::<u64>().unwrap_or(u64::MAX - 1), l),
        None => (u64::MAX, "other".to_string()),
    };
    for f in fusions {
        let k = key(f.replaced.first().map(String::as_str).unwrap_or(""));
        let e = by.entry(k.clone()).or_insert_with(|| LayerSummary {
            layer: k.1.clone(),
            ..Default::default()
        });
        *e.fused.entry(f.rule.clone()).or_default() += 1;
    }
    for r in rejections {
        let k = key(&r.at);
        let e = by.entry(k.clone()).or_insert_with(|| LayerSummary {
            layer: k.1.clone(),
            ..Default::default()
        });
        e.refused.push(r.clone());
    }
    by.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_names_from_common_exporters() {
        assert_eq!(
            layer_of("/model/layers.12/post_attention_layernorm/Mul").as_deref(),
            Some("12")
        );
        assert_eq!(
            layer_of("model.layers.3.mlp.down_proj").as_deref(),
            Some("3")
        );
        assert_eq!(layer_of("layer_7/swiglu"), Some("7".into()));
        assert_eq!(layer_of("lm_head"), None);
    }
}
