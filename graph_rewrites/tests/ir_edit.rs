//! Arena IR edits: use-def lists after mutations, stable topological order, DCE scope, output
//! renaming, and error cases.

use graph_rewrites::ir::{Graph, NewNode, SUBGRAPH_USE_SLOT};
use graph_rewrites::testing::{op_types, ModelBuilder};
use graph_rewrites::view::{GraphView, NodeId, TensorInfo, ValueId};
use graph_rewrites::Error;

const FLOAT: i32 = 1;

/// x -> Relu(r) -> Abs(a) -> Neg(y, graph output); plus w (initializer) read by Abs? no: Add.
/// Layout: r = Relu(x); a = Add(r, w); y = Neg(a).
fn chain() -> Graph {
    let mut b = ModelBuilder::new(21);
    b.input("x", FLOAT, &[4]);
    b.init_f32("w", &[4], &[1.0, 2.0, 3.0, 4.0]);
    b.node("Relu", &["x"], &["r"]);
    b.node("Add", &["r", "w"], &["a"]);
    b.node("Neg", &["a"], &["y"]);
    b.output("y", FLOAT, &[4]);
    b.value_info("a", FLOAT, &[4]);
    b.graph().unwrap()
}

fn v(g: &Graph, name: &str) -> ValueId {
    g.value_by_name(name)
        .unwrap_or_else(|| panic!("no value {name}"))
}

fn n(g: &Graph, name: &str) -> NodeId {
    g.node_by_name(name)
        .unwrap_or_else(|| panic!("no node {name}"))
}

/// Adds an unnamed `op` node reading `input` and writing `output`.
fn add_unary(g: &mut Graph, op: &str, input: ValueId, output: ValueId) -> NodeId {
    g.add_node(NewNode {
        op_type: op.into(),
        inputs: vec![Some(input)],
        outputs: vec![output],
        ..Default::default()
    })
    .unwrap()
}

/// The names of the `value_info` entries the saved model keeps.
fn value_info_names(g: &Graph) -> Vec<String> {
    g.to_model()
        .graph
        .unwrap()
        .value_info
        .into_iter()
        .map(|v| v.name.unwrap())
        .collect()
}

fn float_info() -> Option<TensorInfo> {
    Some(TensorInfo {
        elem_type: FLOAT,
        shape: None,
    })
}

#[test]
fn use_def_lists_follow_loaded_names() {
    let g = chain();
    let (relu, add) = (n(&g, "Relu_0"), n(&g, "Add_1"));
    assert_eq!(g.producer(v(&g, "r")), Some((relu, 0)));
    assert_eq!(g.consumers(v(&g, "r")).as_ref(), &[(add, 0)]);
    assert_eq!(g.consumers(v(&g, "w")).as_ref(), &[(add, 1)]);
    assert!(g.is_graph_output(v(&g, "y")) && g.is_graph_input(v(&g, "x")));
    assert!(g.is_constant(v(&g, "w")) && !g.is_constant(v(&g, "x")));
    assert_eq!(g.const_value(v(&g, "w")).unwrap().raw.len(), 16);
    assert_eq!(op_types(&g), ["Relu", "Add", "Neg"]);
}

#[test]
fn replacing_a_chain_keeps_use_def_consistent_and_dce_cleans_up() {
    let mut g = chain();
    let (x, a, w) = (v(&g, "x"), v(&g, "a"), v(&g, "w"));
    let fused = g.add_value("fused", float_info());
    let name = g.unique_node_name("Relu_0");
    assert_eq!(name, "Relu_0_1");
    let f = g
        .add_node(NewNode {
            op_type: "Sigmoid".into(),
            name,
            inputs: vec![Some(x)],
            outputs: vec![fused],
            ..NewNode::default()
        })
        .unwrap();
    g.replace_all_uses(a, fused);
    let neg = n(&g, "Neg_2");
    assert_eq!(g.inputs(neg), &[Some(fused)]);
    assert_eq!(g.consumers(fused).as_ref(), &[(neg, 0)]);
    assert!(g.consumers(a).is_empty());
    assert_eq!(g.dce(), 2, "Add and then Relu become dead");
    assert!(g.initializer_tensor(w).is_none(), "w lost its only reader");
    assert!(g.consumers(x).iter().all(|&(c, _)| c == f));
    assert_eq!(op_types(&g), ["Sigmoid", "Neg"]);
    let m = g.to_model();
    let gp = m.graph.unwrap();
    assert!(gp.initializer.is_empty());
    let vi: Vec<_> = gp
        .value_info
        .iter()
        .map(|v| v.name.clone().unwrap())
        .collect();
    assert_eq!(
        vi,
        ["fused"],
        "the dead value's value_info entry is dropped"
    );
}

#[test]
fn dce_leaves_dead_code_that_was_already_in_the_model() {
    let mut b = ModelBuilder::new(21);
    b.input("x", FLOAT, &[4]);
    b.init_f32("unused_w", &[1], &[0.0]);
    b.node("Relu", &["x"], &["dead"]); // no reader from the start
    b.node("Abs", &["x"], &["y"]);
    b.output("y", FLOAT, &[4]);
    let mut g = b.graph().unwrap();
    assert_eq!(g.dce(), 0);
    let m = g.to_model().graph.unwrap();
    assert_eq!(m.node.len(), 2);
    assert_eq!(m.initializer.len(), 1);
}

#[test]
fn stable_topo_sort_keeps_a_legal_order_and_moves_only_what_it_must() {
    // Two independent branches in an unusual but legal order stay as they are.
    let mut b = ModelBuilder::new(21);
    b.input("x", FLOAT, &[4]);
    b.node("Abs", &["x"], &["b1"]);
    b.node("Relu", &["x"], &["a1"]);
    b.node("Add", &["a1", "b1"], &["y"]);
    b.output("y", FLOAT, &[4]);
    let mut g = b.graph().unwrap();
    assert_eq!(op_types(&g), ["Abs", "Relu", "Add"]);
    // A node appended without readers goes last; one whose input comes later moves after it.
    let x = v(&g, "x");
    let y = v(&g, "y");
    let t = g.add_value("t", None);
    add_unary(&mut g, "Neg", y, t);
    let u = g.add_value("u", None);
    add_unary(&mut g, "Exp", x, u);
    g.topo_sort().unwrap();
    assert_eq!(op_types(&g), ["Abs", "Relu", "Add", "Neg", "Exp"]);
}

#[test]
fn new_node_feeding_existing_readers_is_placed_before_them() {
    let mut g = chain();
    let (r, add) = (v(&g, "r"), n(&g, "Add_1"));
    let relu = n(&g, "Relu_0");
    g.remove_node(relu);
    assert_eq!(g.producer(r), None);
    let x = v(&g, "x");
    add_unary(&mut g, "Abs", x, r);
    assert_eq!(op_types(&g), ["Abs", "Add", "Neg"]);
    assert_eq!(g.consumers(r).as_ref(), &[(add, 0)]);
    assert_eq!(value_info_names(&g), ["a"]);
}

#[test]
fn cycles_are_detected_on_load_and_on_sort() {
    let mut b = ModelBuilder::new(21);
    b.input("x", FLOAT, &[4]);
    b.node("Add", &["x", "q"], &["p"]);
    b.node("Relu", &["p"], &["q"]);
    b.output("p", FLOAT, &[4]);
    assert!(matches!(b.graph(), Err(Error::Cycle(_))));

    let mut g = chain();
    let (r, y) = (v(&g, "r"), v(&g, "y"));
    // Relu now reads y, which depends on Relu.
    let relu = n(&g, "Relu_0");
    g.remove_node(relu);
    add_unary(&mut g, "Relu", y, r);
    let err = g.topo_sort().unwrap_err();
    assert!(
        err.to_string().starts_with("graph has a cycle through"),
        "{err}"
    );
}

#[test]
fn replacing_a_graph_output_keeps_the_output_name() {
    let mut g = chain();
    let (a, y) = (v(&g, "a"), v(&g, "y"));
    let z = g.add_value("z", None);
    add_unary(&mut g, "Abs", a, z);
    g.replace_all_uses(y, z);
    assert_eq!(g.value_name(z), "y");
    assert!(g.is_graph_output(z) && !g.is_graph_output(y));
    assert_eq!(g.dce(), 1);
    let m = g.to_model().graph.unwrap();
    assert_eq!(m.output[0].name.as_deref(), Some("y"));
    assert_eq!(m.node.last().unwrap().op_type.as_deref(), Some("Abs"));
    assert_eq!(m.node.last().unwrap().output, ["y"]);
}

#[test]
fn replacing_a_graph_output_by_a_graph_input_adds_an_identity() {
    let mut g = chain();
    let (x, y) = (v(&g, "x"), v(&g, "y"));
    g.replace_all_uses(y, x);
    assert_eq!(g.dce(), 3);
    let m = g.to_model().graph.unwrap();
    assert_eq!(m.output[0].name.as_deref(), Some("y"));
    assert_eq!(m.node.len(), 1);
    assert_eq!(m.node[0].op_type.as_deref(), Some("Identity"));
    assert_eq!(
        (m.node[0].input.as_slice(), m.node[0].output.as_slice()),
        (&["x".to_owned()][..], &["y".to_owned()][..])
    );
}

#[test]
fn add_node_rejects_bad_requests_without_changing_the_graph() {
    let mut g = chain();
    let (x, r) = (v(&g, "x"), v(&g, "r"));
    let fresh = g.add_value("fresh", None);
    let node = |outputs: Vec<ValueId>, domain: &str, name: &str| NewNode {
        domain: domain.into(),
        op_type: "Relu".into(),
        name: name.into(),
        inputs: vec![Some(x)],
        outputs,
        attrs: vec![],
    };
    let msg = |e: Error| e.to_string();
    assert!(msg(g.add_node(node(vec![r], "", "")).unwrap_err()).contains("already defined"));
    assert!(msg(g.add_node(node(vec![x], "", "")).unwrap_err()).contains("already defined"));
    assert!(
        msg(g.add_node(node(vec![fresh], "com.mxfuse", "")).unwrap_err()).contains("not imported")
    );
    assert!(msg(g.add_node(node(vec![fresh], "", "Relu_0")).unwrap_err()).contains("already used"));
    assert!(
        msg(g.add_node(node(vec![ValueId(999)], "", "")).unwrap_err()).contains("does not exist")
    );
    assert_eq!(g.node_count(), 3);
    assert!(g.consumers(x).len() == 1);
    g.ensure_opset("com.mxfuse", 1);
    assert!(g.add_node(node(vec![fresh], "com.mxfuse", "fused")).is_ok());
    assert_eq!(g.opset("com.mxfuse"), Some(1));
}

#[test]
fn fresh_names_never_collide() {
    let mut g = chain();
    let a1 = g.add_value("a", None);
    let a2 = g.add_value("a", None);
    assert_eq!((g.value_name(a1), g.value_name(a2)), ("a_1", "a_2"));
    let t = g.add_initializer("w", Default::default());
    assert_eq!(g.value_name(t), "w_1");
    assert_eq!(
        g.initializer_tensor(t).unwrap().name.as_deref(),
        Some("w_1")
    );
}

#[test]
fn set_node_metadata_replaces_existing_keys() {
    let mut g = chain();
    let relu = n(&g, "Relu_0");
    g.set_node_metadata(relu, "k", "1");
    g.set_node_metadata(relu, "k", "2");
    let m = g.to_model().graph.unwrap();
    let props = &m.node[0].metadata_props;
    assert_eq!(props.len(), 1);
    assert_eq!(props[0].value.as_deref(), Some("2"));
}

#[test]
fn subgraph_reads_count_as_uses_of_the_control_flow_node() {
    use graph_rewrites::onnx_pb::{
        attribute_proto::AttributeType, AttributeProto, GraphProto, NodeProto,
    };
    let mut b = ModelBuilder::new(21);
    b.input("x", FLOAT, &[4]);
    b.input("c", 9, &[]);
    b.node("Relu", &["x"], &["r"]);
    b.node("Abs", &["x"], &["y"]);
    b.output("y", FLOAT, &[4]);
    let mut m = b.model();
    let branch = |op: &str| GraphProto {
        name: Some(op.into()),
        node: vec![NodeProto {
            input: vec!["r".into()],
            output: vec![format!("{op}_out")],
            op_type: Some(op.into()),
            ..Default::default()
        }],
        output: vec![graph_rewrites::testing::tensor_info(
            &format!("{op}_out"),
            FLOAT,
            &[4],
        )],
        ..Default::default()
    };
    let attr = |name: &str, g: GraphProto| AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    };
    let gp = m.graph.as_mut().unwrap();
    gp.node.push(NodeProto {
        input: vec!["c".into()],
        output: vec!["z".into()],
        name: Some("if".into()),
        op_type: Some("If".into()),
        attribute: vec![
            attr("then_branch", branch("Neg")),
            attr("else_branch", branch("Exp")),
        ],
        ..Default::default()
    });
    gp.output
        .push(graph_rewrites::testing::tensor_info("z", FLOAT, &[4]));
    let mut g = Graph::from_model(m.clone(), None).unwrap();
    let (r, iff) = (v(&g, "r"), n(&g, "if"));
    assert_eq!(g.consumers(r).as_ref(), &[(iff, SUBGRAPH_USE_SLOT)]);
    // Names defined inside the branches are taken.
    let fresh = g.add_value("Neg_out", None);
    assert_eq!(g.value_name(fresh), "Neg_out_1");
    let relu = n(&g, "Relu_0");
    g.replace_all_uses(r, v(&g, "x"));
    assert_eq!(g.dce(), 0, "r is still read inside the branches");
    assert!(g.is_alive(relu));
    assert_eq!(Graph::from_model(m.clone(), None).unwrap().to_model(), m);
}

#[test]
fn a_fresh_value_produced_after_the_replacement_takes_the_output_name() {
    let mut g = chain();
    let (a, y) = (v(&g, "a"), v(&g, "y"));
    let z = g.add_value("z", None);
    g.replace_all_uses(y, z);
    add_unary(&mut g, "Abs", a, z);
    g.dce();
    g.topo_sort().unwrap();
    let m = g.to_model().graph.unwrap();
    let ops: Vec<_> = m.node.iter().map(|n| n.op_type.clone().unwrap()).collect();
    assert_eq!(ops, ["Relu", "Add", "Abs"], "no Identity needed");
    assert_eq!(m.node[2].output, ["y"]);
}

#[test]
fn fresh_values_nothing_defines_leave_no_value_info() {
    let mut g = chain();
    g.add_value("abandoned", float_info());
    assert_eq!(value_info_names(&g), ["a"]);
}

#[test]
fn nodes_listed_out_of_order_load_and_are_sorted() {
    let mut b = ModelBuilder::new(21);
    b.input("x", FLOAT, &[4]);
    b.node("Neg", &["r"], &["y"]);
    b.node("Relu", &["x"], &["r"]);
    b.output("y", FLOAT, &[4]);
    let g = b.graph().unwrap();
    assert_eq!(op_types(&g), ["Relu", "Neg"]);
}
