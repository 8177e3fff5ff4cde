//! `GraphView::const_value` / `is_constant` / `tensor_info` over the IR: typed tensor fields,
//! Constant nodes, overridable initializers, and on-demand external data.

use graph_rewrites::ir::Graph;
use graph_rewrites::onnx_pb::{
    attribute_proto::AttributeType, AttributeProto, NodeProto, StringStringEntryProto, TensorProto,
};
use graph_rewrites::testing::{scratch_dir, ModelBuilder};
use graph_rewrites::view::{Dim, GraphView};

fn constant(out: &str, attr: AttributeProto) -> NodeProto {
    NodeProto {
        output: vec![out.into()],
        name: Some(format!("const_{out}")),
        op_type: Some("Constant".into()),
        attribute: vec![attr],
        ..Default::default()
    }
}

fn attr(name: &str, kind: AttributeType) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(kind as i32),
        ..Default::default()
    }
}

#[test]
fn typed_fields_and_constant_nodes_become_little_endian_bytes() {
    let mut b = ModelBuilder::new(21);
    b.input("x", 1, &[2]);
    b.output("x", 1, &[2]);
    let mut m = b.model();
    let g = m.graph.as_mut().unwrap();
    g.initializer.push(TensorProto {
        name: Some("f".into()),
        data_type: Some(1),
        dims: vec![2],
        float_data: vec![1.5, -2.0],
        ..Default::default()
    });
    g.initializer.push(TensorProto {
        name: Some("h".into()),
        data_type: Some(10), // FLOAT16 in int32_data, one element per entry
        dims: vec![1],
        int32_data: vec![0x3c00],
        ..Default::default()
    });
    g.initializer.push(TensorProto {
        name: Some("bad".into()),
        data_type: Some(1),
        dims: vec![3],
        float_data: vec![1.0],
        ..Default::default()
    });
    let mut ints = attr("value_ints", AttributeType::Ints);
    ints.ints = vec![3, -1];
    let mut fl = attr("value_float", AttributeType::Float);
    fl.f = Some(0.25);
    g.node.push(constant("ci", ints));
    g.node.push(constant("cf", fl));
    let g = Graph::from_model(m, None).unwrap();
    let val = |n: &str| g.value_by_name(n).unwrap();

    let f = g.const_value(val("f")).unwrap();
    assert_eq!(
        f.raw,
        [1.5f32.to_le_bytes(), (-2.0f32).to_le_bytes()].concat()
    );
    assert_eq!(g.const_value(val("h")).unwrap().raw, [0x00, 0x3c]);
    assert!(
        g.const_value(val("bad")).is_none(),
        "too few elements for the dims"
    );
    assert!(g
        .read_initializer(val("bad"))
        .unwrap_err()
        .to_string()
        .contains("need 12"));
    let ci = g.const_value(val("ci")).unwrap();
    assert_eq!((ci.elem_type, ci.dims.as_slice()), (7, &[2i64][..]));
    assert_eq!(ci.raw, [3i64.to_le_bytes(), (-1i64).to_le_bytes()].concat());
    assert_eq!(g.const_value(val("cf")).unwrap().raw, 0.25f32.to_le_bytes());
    assert!(g.is_constant(val("cf")) && !g.is_constant(val("x")));
    let info = g.tensor_info(val("ci")).unwrap();
    assert_eq!(info.shape, Some(vec![Dim::Known(2)]));
}

#[test]
fn an_initializer_that_is_also_a_graph_input_is_not_constant() {
    let mut b = ModelBuilder::new(21);
    b.input("w", 1, &[1]);
    b.init_f32("w", &[1], &[2.0]);
    b.input("x", 1, &[1]);
    b.node("Mul", &["x", "w"], &["y"]);
    b.output("y", 1, &[1]);
    let g = b.graph().unwrap();
    let w = g.value_by_name("w").unwrap();
    assert!(g.is_graph_input(w) && !g.is_constant(w) && g.const_value(w).is_none());
    assert!(
        g.initializer_tensor(w).is_some(),
        "still written back as an initializer"
    );
}

#[test]
fn external_initializers_are_read_only_on_demand() {
    let dir = scratch_dir("ir-consts");
    let bytes: Vec<u8> = (0..64u8).collect();
    std::fs::write(dir.join("w.bin"), &bytes).unwrap();
    let mut b = ModelBuilder::new(21);
    b.input("x", 1, &[4]);
    b.node("Add", &["x", "w"], &["y"]);
    b.output("y", 1, &[4]);
    let mut m = b.model();
    let entry = |k: &str, v: &str| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v.into()),
    };
    m.graph.as_mut().unwrap().initializer.push(TensorProto {
        name: Some("w".into()),
        data_type: Some(1),
        dims: vec![4],
        data_location: Some(1),
        external_data: vec![
            entry("location", "w.bin"),
            entry("offset", "16"),
            entry("length", "16"),
        ],
        ..Default::default()
    });
    let g = Graph::from_model(m.clone(), Some(&dir)).unwrap();
    let w = g.value_by_name("w").unwrap();
    assert!(
        g.initializer_tensor(w).unwrap().raw_data.is_none(),
        "loading does not read data"
    );
    assert!(g.is_constant(w));
    assert_eq!(g.const_value(w).unwrap().raw, bytes[16..32]);
    assert_eq!(
        g.to_model(),
        m,
        "the tensor is written back as external, untouched"
    );
    // Without a directory the bytes cannot be found: constant, but no value.
    let g = Graph::from_model(m, None).unwrap();
    assert!(g.is_constant(w) && g.const_value(w).is_none());
    assert!(g.read_initializer(w).is_err());
    let _ = std::fs::remove_dir_all(dir);
}
