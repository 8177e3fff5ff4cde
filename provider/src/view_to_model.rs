//! A `ModelProto` from a [`GraphView`]: how the plugin EP's `Compile` hands ORT's fused subgraph
//! to the rewrite pipeline (`graph_rewrites::ir::Graph::from_model` + `run_pipeline`), the same
//! code path the offline CLI runs.
//!
//! Constants become initializers (bytes copied, however large: the pipeline may need them and the
//! copy is dropped once the program is built).

use graph_rewrites::onnx_pb::{
    attribute_proto::AttributeType, tensor_shape_proto::dimension::Value as DimValue,
    tensor_shape_proto::Dimension, type_proto, AttributeProto, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use graph_rewrites::pattern::predicates::dtype as onnx_dtype;
use graph_rewrites::view::{
    AttrValue, ConstTensor, Dim, GraphView, NodeId, TensorInfo, ValueId, ONNX_DOMAIN,
};

use crate::error::{Error, Result};
use crate::ort_graph_view::OrtGraphView;

/// IR version written (ONNX 1.16+ readers; FLOAT8E8M0 needs IR 11).
const IR_VERSION: i64 = 11;

fn tensor_proto(name: &str, t: ConstTensor) -> TensorProto {
    TensorProto {
        name: Some(name.to_string()),
        dims: t.dims,
        data_type: Some(t.elem_type),
        raw_data: Some(t.raw),
        ..Default::default()
    }
}

fn attribute(name: &str, v: AttrValue) -> Option<AttributeProto> {
    let mut a = AttributeProto {
        name: Some(name.to_string()),
        ..Default::default()
    };
    let ty = match v {
        AttrValue::Int(i) => {
            a.i = Some(i);
            AttributeType::Int
        }
        AttrValue::Float(f) => {
            a.f = Some(f);
            AttributeType::Float
        }
        AttrValue::String(s) => {
            a.s = Some(s.into_bytes());
            AttributeType::String
        }
        AttrValue::Ints(v) => {
            a.ints = v;
            AttributeType::Ints
        }
        AttrValue::Floats(v) => {
            a.floats = v;
            AttributeType::Floats
        }
        AttrValue::Strings(v) => {
            a.strings = v.into_iter().map(String::into_bytes).collect();
            AttributeType::Strings
        }
        AttrValue::Tensor(t) => {
            a.t = Some(tensor_proto("", t));
            AttributeType::Tensor
        }
        // Graph / sparse attributes cannot be read back through the ORT API; callers refuse
        // nodes that carry them (they never appear in a fusible site).
        AttrValue::Other => return None,
    };
    a.r#type = Some(ty as i32);
    Some(a)
}

pub(crate) fn value_info(name: &str, info: Option<TensorInfo>) -> ValueInfoProto {
    let r#type = info.filter(|i| i.elem_type != 0).map(|i| TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(i.elem_type),
            shape: i.shape.map(|dims| TensorShapeProto {
                dim: dims
                    .into_iter()
                    .map(|d| Dimension {
                        value: match d {
                            Dim::Known(v) => Some(DimValue::DimValue(v)),
                            Dim::Symbolic(s) => Some(DimValue::DimParam(s)),
                            Dim::Unknown => None,
                        },
                        ..Default::default()
                    })
                    .collect(),
            }),
        })),
        ..Default::default()
    });
    ValueInfoProto {
        name: Some(name.to_string()),
        r#type,
        ..Default::default()
    }
}

/// The block shape of a claimed MXFP8 quantize's `Reshape` whose shape ORT computes outside the
/// claimed nodes: `(name, [0, .., 0, K/32, 32])` for an ONNX `Reshape` of `x` (rank r, last dim K
/// known) whose shape input is neither a constant nor produced in the view. A claimed Reshape
/// only reads such a shape when the quantize's `Concat(Shape(x)[:-1], [K/32, 32])` is also read
/// by something else (ORT merges a Shape(x) the quantize and, say, a linear's output Reshape both
/// compute): the claim checked on the whole graph that it is x's own leading dims then
/// `[K/32, 32]` (`block_shape::check_block_reshape`), which is what this constant says, so the
/// rewrite of the subgraph recognizes the quantize (it never reads the shape: `MxQuantize`
/// absorbs the Reshape). Any other Reshape: `None`.
fn pinned_block_shape(view: &OrtGraphView, n: NodeId) -> Option<(String, ConstTensor)> {
    if view.domain(n) != ONNX_DOMAIN || view.op_type(n) != "Reshape" {
        return None;
    }
    let ins = view.inputs(n);
    let (x, shape) = (
        ins.first().copied().flatten()?,
        ins.get(1).copied().flatten()?,
    );
    if view.producer(shape).is_some() || view.is_constant(shape) {
        return None;
    }
    let dims = view.tensor_info(x)?.shape?;
    let Some(Dim::Known(k)) = dims.last() else {
        return None;
    };
    if *k <= 0 || k % 32 != 0 {
        return None;
    }
    let mut entries = vec![0i64; dims.len() - 1];
    entries.extend([k / 32, 32]);
    let t = ConstTensor {
        elem_type: onnx_dtype::INT64,
        dims: vec![entries.len() as i64],
        raw: entries.iter().flat_map(|e| e.to_le_bytes()).collect(),
    };
    Some((format!("{}/mxfuse_block_shape", view.value_name(shape)), t))
}

/// What a model converted from a view is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `Compile`'s rewrite of a claimed subgraph: everything, constants' bytes included.
    Rewrite,
    /// Type and shape inference over the whole graph in `GetCapability` (`crate::shapes`):
    /// only constants small enough to be shape inputs keep their bytes (the others become
    /// typed graph inputs), a computed value's shape with an unknown dim is left out (the
    /// inference fills it in) and graph-valued attributes, which ORT's attribute API does not
    /// read, are the bodies `Node_GetSubgraphs` gives (`crate::view_subgraphs`), so the
    /// inference's `If` / `Loop` / `Scan` rules type those nodes' outputs as offline.
    Inference,
}

/// Constants of at most this many elements keep their bytes for [`Purpose::Inference`]: what
/// the inference reads of a constant (`graph_rewrites::ir::infer`'s shape inputs).
const INFERENCE_CONST_ELEMS: i64 = 1024;

/// `v`'s type as [`Purpose::Inference`] declares it: a shape with an unknown dim left out (the
/// inference fills a missing shape, not unknown dims).
pub(crate) fn inference_info(view: &OrtGraphView, v: ValueId) -> Option<TensorInfo> {
    let info = view.tensor_info(v);
    if complete(&info) {
        return info;
    }
    info.map(|i| TensorInfo { shape: None, ..i })
}

/// Whether `info` is an element type and a shape with every dim known or named.
pub(crate) fn complete(info: &Option<TensorInfo>) -> bool {
    info.as_ref().is_some_and(|i| {
        i.elem_type != 0
            && i.shape
                .as_ref()
                .is_some_and(|s| s.iter().all(|d| *d != Dim::Unknown))
    })
}

/// The constant `v` as an initializer for `purpose` (`None`: a graph input instead).
fn constant_for(view: &OrtGraphView, v: ValueId, purpose: Purpose) -> Result<Option<ConstTensor>> {
    if purpose == Purpose::Rewrite {
        return view.const_value_unbounded(v);
    }
    let small = view
        .tensor_info(v)
        .and_then(|i| i.shape)
        .and_then(|s| {
            s.iter().try_fold(1i64, |n, d| match d {
                Dim::Known(k) => n.checked_mul(*k),
                _ => None,
            })
        })
        .is_some_and(|n| n <= INFERENCE_CONST_ELEMS);
    Ok(if small { view.const_value(v) } else { None })
}

/// Declares `v`, read but not produced in the view, as an initializer or a graph input.
fn declare_source(
    graph: &mut GraphProto,
    view: &OrtGraphView,
    v: ValueId,
    purpose: Purpose,
) -> Result<()> {
    match constant_for(view, v, purpose)? {
        Some(t) if view.is_constant(v) => {
            graph.initializer.push(tensor_proto(view.value_name(v), t))
        }
        _ => graph
            .input
            .push(value_info(view.value_name(v), view.tensor_info(v))),
    }
    Ok(())
}

/// Converts the whole view for `Compile`'s rewrite ([`Purpose::Rewrite`]).
pub fn model_from_view(view: &OrtGraphView) -> Result<ModelProto> {
    model_for(view, Purpose::Rewrite)
}

/// Converts the whole view. Graph inputs are the non-constant values read but not produced;
/// graph outputs are the view's graph outputs.
pub fn model_for(view: &OrtGraphView, purpose: Purpose) -> Result<ModelProto> {
    let mut graph = GraphProto {
        name: Some("mxfuse_fused".into()),
        ..Default::default()
    };
    let mut seen = std::collections::HashSet::<ValueId>::new();
    let mut opsets = std::collections::BTreeMap::<String, i64>::new();
    for &n in view.nodes().iter() {
        let domain = view.domain(n).to_string();
        if !opsets.contains_key(&domain) {
            let version = view.opset(&domain).ok_or_else(|| {
                Error::invalid(format!("no opset imported for domain {domain:?}"))
            })?;
            opsets.insert(domain.clone(), version);
        }
        let mut attrs = Vec::new();
        for name in view.attr_names(n) {
            let v = view
                .attr(n, &name)
                .ok_or_else(|| Error::Ort(format!("attribute {name} unreadable")))?;
            if purpose == Purpose::Inference && v == AttrValue::Other {
                continue;
            }
            let a = attribute(&name, v).ok_or_else(|| {
                Error::Unsupported(format!(
                    "node {}: graph-valued attribute {name}",
                    view.node_name(n)
                ))
            })?;
            attrs.push(a);
        }
        if purpose == Purpose::Inference {
            attrs.extend(crate::view_subgraphs::subgraph_attributes(view, n));
        }
        let mut inputs = Vec::new();
        // A subgraph's stand-in for a shape computed outside it; the whole graph has its own.
        let pinned = match purpose {
            Purpose::Rewrite => pinned_block_shape(view, n),
            Purpose::Inference => None,
        };
        for (i, input) in view.inputs(n).iter().enumerate() {
            match input {
                None => inputs.push(String::new()),
                Some(_) if i == 1 && pinned.is_some() => {
                    let (name, t) = pinned.clone().expect("checked");
                    inputs.push(name.clone());
                    graph.initializer.push(tensor_proto(&name, t));
                }
                Some(v) => {
                    inputs.push(view.value_name(*v).to_string());
                    if view.producer(*v).is_none() && seen.insert(*v) {
                        declare_source(&mut graph, view, *v, purpose)?;
                    }
                }
            }
        }
        // What the bodies read from this scope is declared too (a value only a branch reads
        // would otherwise be undefined); the inference types the bodies' reads from it.
        if purpose == Purpose::Inference {
            for &v in view.implicit_inputs(n) {
                if view.producer(v).is_none() && seen.insert(v) {
                    declare_source(&mut graph, view, v, purpose)?;
                }
            }
        }
        let outputs = view
            .outputs(n)
            .iter()
            .map(|&v| view.value_name(v).to_string())
            .collect();
        graph.node.push(NodeProto {
            input: inputs,
            output: outputs,
            name: Some(view.node_name(n).to_string()),
            op_type: Some(view.op_type(n).to_string()),
            domain: Some(domain),
            attribute: attrs,
            ..Default::default()
        });
        for &v in view.outputs(n) {
            if view.value_name(v).is_empty() {
                continue; // omitted optional output
            }
            let info = match purpose {
                Purpose::Inference => inference_info(view, v),
                Purpose::Rewrite => view.tensor_info(v),
            };
            let vi = value_info(view.value_name(v), info);
            if view.is_graph_output(v) {
                graph.output.push(vi);
            } else {
                graph.value_info.push(vi);
            }
        }
    }
    Ok(ModelProto {
        ir_version: Some(IR_VERSION),
        opset_import: opsets
            .into_iter()
            .map(|(domain, version)| OperatorSetIdProto {
                domain: Some(domain),
                version: Some(version),
            })
            .collect(),
        producer_name: Some("mxfuse_ep".into()),
        graph: Some(graph),
        ..Default::default()
    })
}
