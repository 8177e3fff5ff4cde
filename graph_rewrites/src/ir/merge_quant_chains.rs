//! Merging duplicate MX quantize chains before the rules run.
//!
//! Search pattern => two nodes of the quantize chain's op types with the same op, inputs and
//! attributes (e.g. q, k and v projections each quantizing the one normed activation with its
//! own `Reshape → Abs → ReduceMax → Mul → Cast → QuantizeLinear → DequantizeLinear`, or its own
//! Quark fake-quant; with symbolic dims also its own `Shape → Slice | Gather → Unsqueeze →
//! Concat` block shape) ⇒ one node, its readers moved to the survivor.
//!
//! ONNX Runtime's common-subexpression pass does this before the plugin EP sees a graph, so online
//! the three chains are one and fuse into one quantizer; offline, without this, one chain fused
//! into the norm and the two others stayed separate `MxQuantize` launches. Only the chain's op
//! types are merged (all deterministic, no subgraphs), and only nodes none of whose outputs is a
//! graph output (a graph output keeps its own producer and name) or is read inside a subgraph,
//! and only in a model that quantizes to MX at all (any other model is left exactly as it is). Same op, same input values and
//! the same attributes compute the same outputs, so merging never changes what the model
//! computes.

use std::collections::HashMap;

use super::{Graph, SUBGRAPH_USE_SLOT};
use crate::pattern::predicates::known_dims;
use crate::view::{is_quark_mx, GraphView, NodeId, ValueId, ONNX_DOMAIN, TRT_DOMAIN};

/// The op types of an MX quantize chain (both spellings), which are merged when duplicated.
const CHAIN_OPS: &[(&str, &str)] = &[
    (ONNX_DOMAIN, "Reshape"),
    (ONNX_DOMAIN, "Abs"),
    (ONNX_DOMAIN, "ReduceMax"),
    (ONNX_DOMAIN, "Squeeze"),
    (ONNX_DOMAIN, "Mul"),
    (ONNX_DOMAIN, "Div"),
    (ONNX_DOMAIN, "Cast"),
    (ONNX_DOMAIN, "QuantizeLinear"),
    (ONNX_DOMAIN, "DequantizeLinear"),
    // (and every spelling of Quark's MX fake quant: `QUARK_MX_OPS`)
    // ModelOpt gives each Linear its own input quantizer: q, k and v quantize one activation
    // three times.
    (TRT_DOMAIN, "TRT_MXFP8DynamicQuantize"),
    (TRT_DOMAIN, "TRT_MXFP8DequantizeLinear"),
    // A block shape computed from `Shape(x)` (symbolic dims): each chain computes its own.
    (ONNX_DOMAIN, "Shape"),
    (ONNX_DOMAIN, "Slice"),
    (ONNX_DOMAIN, "Gather"),
    (ONNX_DOMAIN, "Unsqueeze"),
    (ONNX_DOMAIN, "Concat"),
];

/// Merges duplicate quantize-chain nodes (module docs); returns how many were removed.
pub fn merge_duplicate_quant_chains(g: &mut Graph) -> usize {
    // A model without MX quantization is left exactly as it is.
    if !g.nodes().iter().any(|&n| quantizes_mx(g, n)) {
        return 0;
    }
    let mut seen: HashMap<String, NodeId> = HashMap::new();
    let mut merged = 0;
    // Topological order: once a chain's first nodes are merged, the next ones read the same
    // values and are duplicates in turn.
    let order: Vec<NodeId> = g.nodes().into_owned();
    for n in order {
        // A graph output keeps its producer; a value read by name inside a subgraph cannot be
        // rewired (those uses stay bound to the name).
        let pinned = g.outputs(n).iter().any(|&v| {
            g.is_graph_output(v)
                || g.consumers(v)
                    .iter()
                    .any(|&(_, slot)| slot == SUBGRAPH_USE_SLOT)
        });
        let chain_op = CHAIN_OPS.contains(&(g.domain(n), g.op_type(n))) || is_quark_mx(g, n);
        if pinned || !chain_op {
            continue;
        }
        let key = node_key(g, n);
        match seen.get(&key) {
            Some(&first) => {
                let pairs: Vec<(ValueId, ValueId)> = g
                    .outputs(n)
                    .iter()
                    .copied()
                    .zip(g.outputs(first).iter().copied())
                    .collect();
                for (dup, keep) in pairs {
                    g.replace_all_uses(dup, keep);
                }
                g.remove_node(n);
                merged += 1;
            }
            None => {
                seen.insert(key, n);
            }
        }
    }
    if merged > 0 {
        g.dce();
    }
    merged
}

/// An MX quantize: a `Cast` to FLOAT8E8M0, a `QuantizeLinear` with an E8M0 scale, Quark's
/// fake-quant, or TensorRT's dynamic quantizer.
fn quantizes_mx(g: &Graph, n: NodeId) -> bool {
    use crate::pattern::predicates::{dtype::FLOAT8E8M0, scale_is_e8m0};
    match (g.domain(n), g.op_type(n)) {
        (ONNX_DOMAIN, "Cast") => {
            matches!(g.attr(n, "to"), Some(crate::view::AttrValue::Int(t)) if t == FLOAT8E8M0 as i64)
        }
        (ONNX_DOMAIN, "QuantizeLinear") => scale_is_e8m0(g, n),
        (TRT_DOMAIN, "TRT_MXFP8DynamicQuantize") => true,
        _ => is_quark_mx(g, n),
    }
}

/// Small constants (at most this many elements) compare by content: exporters give each chain
/// its own copy of the block shape, the axes and the scale constant.
const SMALL_CONST_ELEMS: usize = 16;

/// Op, domain, input values (by id, small constants by type, shape and bytes; omitted ones as
/// `-`), output count and attributes (sorted by name, with their values) of node `n`.
fn node_key(g: &Graph, n: NodeId) -> String {
    // The size from the declared shape first: a weight (possibly external, megabytes) must not
    // be read just to learn it is not small.
    let small = |v: ValueId| {
        g.is_constant(v)
            && known_dims(g, v)
                .and_then(|d| d.iter().try_fold(1usize, |n, &d| n.checked_mul(d)))
                .is_some_and(|n| n <= SMALL_CONST_ELEMS)
    };
    let input_key = |v: ValueId| match small(v).then(|| g.const_value(v)).flatten() {
        Some(t) => format!("const{}{:?}{:?}", t.elem_type, t.dims, t.raw),
        None => format!("{v:?}"),
    };
    let inputs: Vec<String> = g
        .inputs(n)
        .iter()
        .map(|i| i.map_or("-".to_string(), input_key))
        .collect();
    let mut attrs: Vec<String> = g
        .attr_names(n)
        .into_iter()
        .map(|a| format!("{a}={:?}", g.attr(n, &a)))
        .collect();
    attrs.sort();
    format!(
        "{}::{}({})->{} [{}]",
        g.domain(n),
        g.op_type(n),
        inputs.join(","),
        g.outputs(n).len(),
        attrs.join(";")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::{run_pipeline, PipelineOptions};
    use crate::testing::{op_types, ModelBuilder};

    /// q / k / v each fake-quantize the one activation with their own Quark node (and each
    /// node identical): one quantizer is left, and it fuses into one MxQuantize; the same under
    /// the op's deprecated name `com.vai.quantize::MXFixNeuron`.
    /// A duplicate whose output is a graph output is kept.
    #[test]
    fn duplicate_quark_quantizers_of_one_activation_merge() {
        let mut b = ModelBuilder::new(21);
        b.opset(crate::view::QUARK_DOMAIN, 1)
            .input("x", 1, &[4, 64]);
        for p in ["q", "k", "v"] {
            b.init_f32(&format!("w{p}"), &[64, 16], &vec![0.5; 64 * 16]);
            b.quark_fake_quant("x", &format!("xq_{p}"), 32, -1);
            b.node(
                "MatMul",
                &[&format!("xq_{p}"), &format!("w{p}")],
                &[&format!("y{p}")],
            );
            b.output(&format!("y{p}"), 1, &[4, 16]);
        }
        for (b, op) in [
            (&b, "MXQuantizeDequantize"),
            (&b.fix_neuron(), "MXFixNeuron"),
        ] {
            let mut g = b.graph().unwrap();
            assert_eq!(merge_duplicate_quant_chains(&mut g), 2, "{op}");
            let quark = op_types(&g).iter().filter(|o| *o == op).count();
            assert_eq!(quark, 1, "{op}");
            let report =
                run_pipeline(&mut b.graph().unwrap(), &PipelineOptions::default()).unwrap();
            assert_eq!(report.merged_duplicates, 2, "{op}");
            assert_eq!(report.counts["mxquant"], 1, "{op}: {report:#?}");
        }

        // Without MX quantization nothing is merged, duplicates or not.
        let mut plain = ModelBuilder::new(21);
        plain.input("x", 1, &[4, 64]);
        plain.init_f32("two", &[], &[2.0]);
        for y in ["a", "b"] {
            plain
                .node("Mul", &["x", "two"], &[y])
                .node("Relu", &[y], &[&format!("r{y}")]);
            plain.output(&format!("r{y}"), 1, &[4, 64]);
        }
        assert_eq!(merge_duplicate_quant_chains(&mut plain.graph().unwrap()), 0);

        // The same with one fake-quantized value also a graph output: that node stays.
        b.output("xq_k", 1, &[4, 64]);
        assert_eq!(merge_duplicate_quant_chains(&mut b.graph().unwrap()), 1);
        let mut g = b.fix_neuron().graph().unwrap();
        assert_eq!(merge_duplicate_quant_chains(&mut g), 1);
    }
}
