//! Lines `mxfuse rewrite` prints after its table about what the rewritten model still needs
//! or what the rewrite did not look at.

use crate::onnx_pb::{ModelProto, NodeProto};
use crate::pattern::predicates::dtype::FLOAT8E8M0;
use crate::view::{
    is_quark_mx, is_quark_mx_op, GraphView, ONNX_DOMAIN, QUARK_DOMAIN, QUARK_MX_OPS, TRT_DOMAIN,
    VAI_DOMAIN,
};

/// Lines when the rewritten graph keeps AMD Quark nodes. `MXQuantizeDequantize` /
/// `MXFixNeuron` (the ones the rules refused; one line per spelling): the custom-op library does not register Quark's domain (ORT fails a session
/// that registers a domain twice, and Quark's own library registers it), so the offline model
/// needs the plugin EP, which publishes that op, or Quark's library beside ours. Any other Quark
/// op: only Quark's library. Empty otherwise.
pub fn foreign_note(g: &impl GraphView) -> String {
    let mut out = String::new();
    for &(domain, op) in QUARK_MX_OPS {
        let mx = g
            .nodes()
            .iter()
            .filter(|&&n| g.domain(n) == domain && g.op_type(n) == op)
            .count();
        if mx > 0 {
            out.push_str(&format!(
                "note: {mx} {domain}::{op} node(s) stay unfused: ONNX Runtime \
                 runs the rewritten model with the mxfuse plugin EP, or with AMD Quark's custom-op \
                 library registered beside libmxfuse_ep.so, not with the mxfuse custom-op library alone\n"
            ));
        }
    }
    for domain in [QUARK_DOMAIN, VAI_DOMAIN] {
        let other = g
            .nodes()
            .iter()
            .filter(|&&n| g.domain(n) == domain && !is_quark_mx(g, n))
            .count();
        if other > 0 {
            out.push_str(&format!(
                "note: {other} other {domain} node(s): only AMD Quark's custom-op library runs those\n"
            ));
        }
    }
    let trt = g
        .nodes()
        .iter()
        .filter(|&&n| g.domain(n) == TRT_DOMAIN)
        .count();
    if trt > 0 {
        out.push_str(&format!(
            "note: {trt} {TRT_DOMAIN} node(s) (TensorRT Model Optimizer) stay unfused: ONNX Runtime \
             runs the rewritten model with the mxfuse plugin EP (which publishes \
             TRT_MXFP8DynamicQuantize / TRT_MXFP8DequantizeLinear), not with the mxfuse custom-op \
             library alone\n"
        ));
    }
    out
}

/// A line when the rewritten main graph keeps ONNX `QuantizeLinear` / `DequantizeLinear` nodes
/// with a FLOAT8E8M0 scale (rules `mx_quant_linear` / `mx_dequant` refused them, e.g. an input
/// whose type mxfuse's inference does not know): ONNX Runtime's CPU EP has no kernel for them, so
/// the rewrite does not load with the custom-op library alone (probe 10: it failed with ONNX
/// Runtime's NOT_IMPLEMENTED and nothing said why). The plugin EP, which reads ONNX Runtime's
/// own types, takes them. Empty when there are none.
pub fn e8m0_qdq_note(g: &impl GraphView) -> String {
    let n = g
        .nodes()
        .iter()
        .filter(|&&n| {
            g.domain(n) == ONNX_DOMAIN
                && matches!(g.op_type(n), "QuantizeLinear" | "DequantizeLinear")
                && g.inputs(n)
                    .get(1)
                    .copied()
                    .flatten()
                    .and_then(|s| g.tensor_info(s))
                    .is_some_and(|i| i.elem_type == FLOAT8E8M0)
        })
        .count();
    if n == 0 {
        return String::new();
    }
    format!(
        "note: {n} QuantizeLinear / DequantizeLinear node(s) with a FLOAT8E8M0 scale stay (their \
         refusals are above; --explain lists them): ONNX Runtime's CPU EP has no kernel for them, \
         so the rewritten model loads with the mxfuse plugin EP, not with the custom-op library \
         alone\n"
    )
}

/// A line when MX quantization nodes sit inside control-flow bodies (`If` / `Loop` / `Scan`) or
/// model-local functions: the rules rewrite the main graph only, so those stay as they are
/// (and ONNX Runtime's CPU EP has no E8M0 Q/DQ kernel for them). Counted: `Cast` to
/// FLOAT8E8M0, blocked `QuantizeLinear` / `DequantizeLinear`, AMD Quark's fake-quant op.
/// Empty when there are none.
pub fn nested_mx_note(model: &ModelProto) -> String {
    // The main graph's own nodes are what the rules rewrite: only their bodies count.
    let main: usize = model
        .graph
        .iter()
        .flat_map(|g| &g.node)
        .map(nested_in_attrs)
        .sum();
    let n = main
        + model
            .functions
            .iter()
            .map(|f| count_in(&f.node))
            .sum::<usize>();
    if n == 0 {
        return String::new();
    }
    format!(
        "note: {n} MX / blocked quantization node(s) inside If / Loop / Scan bodies or model \
         functions are not rewritten (mxfuse rewrites the main graph); ONNX Runtime's CPU EP has \
         no kernel for the E8M0-scaled ones there, so run this model on the plugin EP, which ONNX \
         Runtime hands each body and which fuses them there as in the main graph\n"
    )
}

/// MX nodes in the subgraphs of `node`'s attributes (at any depth).
fn nested_in_attrs(node: &NodeProto) -> usize {
    node.attribute
        .iter()
        .flat_map(|a| a.g.iter().chain(&a.graphs))
        .map(|g| count_in(&g.node))
        .sum()
}

/// MX nodes among `nodes` and in their subgraphs.
fn count_in(nodes: &[NodeProto]) -> usize {
    nodes
        .iter()
        .map(|n| is_mx_node(n) as usize + nested_in_attrs(n))
        .sum()
}

/// The newest ONNX IR version ONNX Runtime 1.31 loads.
const ORT_MAX_IR: i64 = 13;

/// A line when the model's IR version is newer than ONNX Runtime 1.31 loads (SwiGLU-28 models:
/// IR 14, opset 28): the rewrite keeps the model's IR version and opset imports, so neither
/// model runs there yet. Empty otherwise.
pub fn ir_note(model: &ModelProto) -> String {
    match model.ir_version {
        Some(v) if v > ORT_MAX_IR => format!(
            "note: the model is ONNX IR version {v}: ONNX Runtime 1.31 loads up to IR {ORT_MAX_IR}, so \
             neither it nor the rewrite runs there (the rewrite keeps the IR version and opsets)\n"
        ),
        _ => String::new(),
    }
}

fn is_mx_node(n: &NodeProto) -> bool {
    let op = n.op_type.as_deref().unwrap_or("");
    let domain = n.domain.as_deref().unwrap_or("");
    let int_attr = |name: &str| {
        n.attribute
            .iter()
            .find(|a| a.name.as_deref() == Some(name))
            .and_then(|a| a.i)
    };
    match (domain, op) {
        _ if is_quark_mx_op(domain, op) => true,
        (TRT_DOMAIN, "TRT_MXFP8DynamicQuantize" | "TRT_MXFP8DequantizeLinear") => true,
        ("" | "ai.onnx", "Cast") => int_attr("to") == Some(i64::from(FLOAT8E8M0)),
        ("" | "ai.onnx", "QuantizeLinear" | "DequantizeLinear") => {
            int_attr("block_size").is_some_and(|b| b > 0)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx_pb::{AttributeProto, FunctionProto, GraphProto};
    use crate::testing::{node_proto, Attr};

    /// An If whose then-branch holds a Cast to E8M0 and a blocked QuantizeLinear, whose
    /// else-branch holds a Loop with a Quark fake-quant, and a function with a blocked
    /// DequantizeLinear: 4 nested MX nodes; the main graph's own Cast does not count.
    #[test]
    fn counts_mx_nodes_in_bodies_and_functions_only() {
        let branch = |nodes: Vec<NodeProto>| GraphProto {
            node: nodes,
            ..Default::default()
        };
        let graph_attr = |name: &str, g: GraphProto| AttributeProto {
            name: Some(name.into()),
            g: Some(g),
            ..Default::default()
        };
        let cast = node_proto("", "Cast", "c", &["a"], &["s"], &[("to", Attr::I(24))]);
        let q = node_proto(
            "",
            "QuantizeLinear",
            "q",
            &["a", "s"],
            &["y"],
            &[("block_size", Attr::I(32))],
        );
        let fq = node_proto(
            QUARK_DOMAIN,
            "MXQuantizeDequantize",
            "f",
            &["a"],
            &["b"],
            &[],
        );
        let per_tensor_q = node_proto("", "QuantizeLinear", "p", &["a", "s"], &["z"], &[]);
        let mut lp = node_proto("", "Loop", "l", &[], &[], &[]);
        lp.attribute
            .push(graph_attr("body", branch(vec![fq, per_tensor_q])));
        let mut iff = node_proto("", "If", "i", &["c"], &["o"], &[]);
        iff.attribute
            .push(graph_attr("then_branch", branch(vec![cast.clone(), q])));
        iff.attribute
            .push(graph_attr("else_branch", branch(vec![lp])));
        let dq = node_proto(
            "",
            "DequantizeLinear",
            "d",
            &["y", "s"],
            &["x"],
            &[("block_size", Attr::I(32))],
        );
        let model = ModelProto {
            graph: Some(branch(vec![cast, iff])),
            functions: vec![FunctionProto {
                node: vec![dq],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(nested_mx_note(&model).starts_with("note: 4 MX / blocked quantization node(s)"));
        assert_eq!(nested_mx_note(&ModelProto::default()), "");
        let ir = |v| ModelProto {
            ir_version: Some(v),
            ..Default::default()
        };
        assert!(ir_note(&ir(14)).contains("IR version 14"));
        assert_eq!(ir_note(&ir(13)), "");
    }
}
