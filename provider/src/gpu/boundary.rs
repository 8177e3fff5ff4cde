//! Which claimed groups a device placement must leave to ORT because of the tensors that would
//! cross between host and device memory at their edges.
//!
//! On a device placement whose tensors ORT allocates in device memory (the GPU device; not the
//! host-staged `device=gpu` of a CPU device) ORT inserts `MemcpyFromHost` / `MemcpyToHost` nodes
//! where a value passes between one of ORT's CPU nodes and one of our fused nodes (graph inputs
//! and outputs, and initializers, are copied by ORT's own feed / fetch code). ONNX Runtime 1.31's
//! schema of those two ops does not list `float8e8m0` (nor `float4e2m1`): a session whose
//! claimed node reads an E8M0 scale computed by a CPU node — e.g. the standalone
//! `QuantizeLinear` / `DequantizeLinear` of an MXFP8 quantizer whose scale formula the rules
//! refused (an RCEIL scale computed in float16) — failed at creation with ORT's "Type
//! 'tensor(float8e8m0)' of input parameter ... of operator (MemcpyFromHost) ... is invalid",
//! whatever our kernels can do. [`uncopyable_edge`] finds such a group; [`copyable_groups`]
//! leaves it to ORT's CPU EP where that has a kernel for it (a `com.mxfuse` node of an offline
//! rewrite), repeating until no claimed group has one (an unclaimed group's E8M0 outputs become
//! host values for the groups reading them), and otherwise has `Compile` fail the session saying
//! why.

use std::collections::HashSet;

use graph_rewrites::pattern::predicates::dtype;
use graph_rewrites::view::{is_quark_mx, GraphView, NodeId, ValueId, MXFUSE_DOMAIN};

/// Element types ORT 1.31's Memcpy schema rejects (found by building the session).
const NOT_COPYABLE: [i32; 2] = [dtype::FLOAT8E8M0, dtype::FLOAT4E2M1];

fn not_copyable(view: &dyn GraphView, v: ValueId) -> bool {
    view.tensor_info(v)
        .is_some_and(|i| NOT_COPYABLE.contains(&i.elem_type))
}

/// Why ORT could not copy a value at `group`'s edge between host and device memory: an input
/// of an element type its Memcpy ops lack that a node ORT keeps (not in `claimed`, the nodes of
/// every group the EP claims) computes, or such an output that a node ORT keeps reads. `None`
/// when every edge can be copied (values between two claimed groups stay in device memory).
pub fn uncopyable_edge(
    view: &dyn GraphView,
    group: &[NodeId],
    claimed: &HashSet<NodeId>,
) -> Option<String> {
    for &n in group {
        for &v in view.inputs(n).iter().flatten() {
            let Some((p, _)) = view.producer(v) else {
                continue; // a graph input or initializer: ORT copies those itself
            };
            if !claimed.contains(&p) && not_copyable(view, v) {
                return Some(format!(
                    "{} reads the {} tensor '{}' that {} (left to ORT's CPU EP) computes",
                    view.node_label(n),
                    type_name(view, v),
                    view.value_name(v),
                    view.node_label(p),
                ));
            }
        }
        for &v in view.outputs(n) {
            let outside = view
                .consumers(v)
                .iter()
                .find(|(c, _)| !claimed.contains(c))
                .map(|&(c, _)| c);
            if let Some(c) = outside.filter(|_| not_copyable(view, v)) {
                return Some(format!(
                    "{} (left to ORT's CPU EP) reads the {} tensor '{}' that {} computes",
                    view.node_label(c),
                    type_name(view, v),
                    view.value_name(v),
                    view.node_label(n),
                ));
            }
        }
    }
    None
}

fn type_name(view: &dyn GraphView, v: ValueId) -> &'static str {
    view.tensor_info(v)
        .map(|i| dtype::name(i.elem_type))
        .unwrap_or("?")
}

/// The groups a device placement claims: `groups` less those with an [`uncopyable_edge`]
/// (repeated until none has one), each such group left to ORT's CPU EP described to `refused`.
/// That works where the EP publishes a kernel for every node of the group (`com.mxfuse`,
/// Quark's op). A group with a standard node (an E8M0 `QuantizeLinear` / `DequantizeLinear`,
/// which ORT's CPU EP cannot run) can run nowhere: it stays claimed and the second value says
/// why and what to do, for `Compile` to fail the session with (a `GetCapability` error is only
/// logged by ORT, which then fails with "Provider type for DequantizeLinear node ... is not set").
pub fn copyable_groups(
    view: &dyn GraphView,
    mut groups: Vec<Vec<NodeId>>,
    refused: &dyn Fn(&str),
) -> (Vec<Vec<NodeId>>, Option<String>) {
    loop {
        let claimed: HashSet<NodeId> = groups.iter().flatten().copied().collect();
        let Some((i, why)) = groups
            .iter()
            .enumerate()
            .find_map(|(i, g)| uncopyable_edge(view, g, &claimed).map(|why| (i, why)))
        else {
            return (groups, None);
        };
        let why = format!(
            "{why}, and ONNX Runtime 1.31 cannot copy that type between host and device memory \
             (its MemcpyFromHost / MemcpyToHost have no float8e8m0 / float4e2m1)"
        );
        if let Some(&n) = groups[i].iter().find(|&&n| !has_published_kernel(view, n)) {
            let fatal = format!(
                "{} on the device placement: {why}; ORT's CPU EP has no kernel for this {} \
                 either. Run this model on the CPU device",
                view.node_label(n),
                view.op_type(n)
            );
            return (groups, Some(fatal));
        }
        let g = groups.remove(i);
        refused(&format!(
            "mxfuse: {} left to ORT's CPU EP (the kernel the EP publishes) on the device \
             placement: {why}",
            group_label(view, &g)
        ));
    }
}

/// Whether ORT's CPU EP runs `n` with a kernel the EP publishes (`com.mxfuse`, Quark's MX op in
/// any spelling).
fn has_published_kernel(view: &dyn GraphView, n: NodeId) -> bool {
    view.domain(n) == MXFUSE_DOMAIN || is_quark_mx(view, n)
}

/// A group as messages name it: its node, or its first node and how many more.
fn group_label(view: &dyn GraphView, g: &[NodeId]) -> String {
    match g {
        [] => "no node".into(),
        [n] => view.node_label(*n),
        [n, rest @ ..] => format!("{} and {} more node(s)", view.node_label(*n), rest.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use graph_rewrites::pattern::predicates::dtype::{FLOAT, FLOAT8E4M3FN};
    use graph_rewrites::testing::{first_node, ModelBuilder};
    use std::cell::RefCell;

    /// `s = Cast(sf)` (E8M0, a CPU node) read by a dequantize of `domain` (`""` or
    /// `com.mxfuse`) of `q`; the E8M0 graph input `s_in` read by a second one.
    fn scale_from_a_cpu_node(domain: &str, op: &str) -> graph_rewrites::ir::Graph {
        let mut b = ModelBuilder::new(24);
        b.opset(MXFUSE_DOMAIN, 1)
            .input("q", FLOAT8E4M3FN, &[64, 4])
            .input("sf", FLOAT, &[2, 4])
            .input("s_in", dtype::FLOAT8E8M0, &[2, 4])
            .value_info("s", dtype::FLOAT8E8M0, &[2, 4])
            .node_in("", "Cast", &["sf"], &["s"], &[])
            .node_in(domain, op, &["q", "s"], &["y"], &[])
            .node_in(domain, op, &["q", "s_in"], &["y2"], &[])
            .output("y", FLOAT, &[64, 4])
            .output("y2", FLOAT, &[64, 4]);
        b.graph().unwrap()
    }

    fn run(g: &graph_rewrites::ir::Graph, op: &str) -> (usize, Option<String>, Vec<String>) {
        let dq = g
            .nodes()
            .iter()
            .copied()
            .filter(|&n| g.op_type(n) == op)
            .collect::<Vec<_>>();
        let lines = RefCell::new(Vec::new());
        let log = |l: &str| lines.borrow_mut().push(l.to_string());
        let (groups, fatal) = copyable_groups(g, dq.iter().map(|&n| vec![n]).collect(), &log);
        (groups.len(), fatal, lines.into_inner())
    }

    /// A com.mxfuse node reading an E8M0 tensor a CPU node computes is left to ORT (its CPU EP
    /// runs the kernel the EP publishes), saying why; one reading an E8M0 graph input stays.
    #[test]
    fn a_published_op_reading_a_host_e8m0_tensor_is_left_to_ort() {
        let g = scale_from_a_cpu_node(MXFUSE_DOMAIN, "MxDequantize");
        let (left, fatal, lines) = run(&g, "MxDequantize");
        assert_eq!((left, fatal), (1, None), "{lines:#?}");
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(
            lines[0].contains("MxDequantize_1 left to ORT's CPU EP")
                && lines[0].contains("reads the float8e8m0 tensor 's' that Cast_0"),
            "{lines:#?}"
        );
        let cast = [first_node(&g, "Cast")];
        let alone = cast.iter().copied().collect();
        assert!(uncopyable_edge(&g, &cast, &alone).is_some());
        // Its reader claimed too: the scale stays in device memory.
        let both = g.nodes().iter().copied().collect();
        assert!(uncopyable_edge(&g, &cast, &both).is_none());
    }

    /// A standard DequantizeLinear there can run nowhere: it stays claimed and the reason (for
    /// `Compile`'s session error) names it and says to use the CPU device.
    #[test]
    fn a_standard_op_reading_a_host_e8m0_tensor_is_a_session_error() {
        let g = scale_from_a_cpu_node("", "DequantizeLinear");
        let (left, fatal, lines) = run(&g, "DequantizeLinear");
        assert_eq!(left, 2, "{lines:#?}");
        let fatal = fatal.expect("a reason");
        assert!(
            fatal.starts_with("DequantizeLinear_1 on the device placement")
                && fatal.contains("no kernel for this DequantizeLinear")
                && fatal.contains("Run this model on the CPU device"),
            "{fatal}"
        );
    }

    /// The other direction: a claimed node's E8M0 output that one of ORT's nodes reads.
    #[test]
    fn an_e8m0_output_a_cpu_node_reads_is_an_uncopyable_edge() {
        let mut b = ModelBuilder::new(24);
        b.opset(MXFUSE_DOMAIN, 1)
            .input("x", FLOAT, &[4, 64])
            .value_info("s", dtype::FLOAT8E8M0, &[4, 2])
            .node_in(MXFUSE_DOMAIN, "MxQuantize", &["x"], &["q", "s"], &[])
            .node("Identity", &["s"], &["s_out"])
            .output("q", FLOAT8E4M3FN, &[4, 64])
            .output("s_out", dtype::FLOAT8E8M0, &[4, 2]);
        let g = b.graph().unwrap();
        let lines = RefCell::new(Vec::new());
        let log = |l: &str| lines.borrow_mut().push(l.to_string());
        let (groups, fatal) = copyable_groups(&g, vec![vec![first_node(&g, "MxQuantize")]], &log);
        assert!(
            groups.is_empty() && fatal.is_none(),
            "{:#?}",
            lines.borrow()
        );
        let lines = lines.into_inner();
        assert!(
            lines.len() == 1
                && lines[0]
                    .contains("Identity_1 (left to ORT's CPU EP) reads the float8e8m0 tensor 's'"),
            "{lines:#?}"
        );
    }
}
