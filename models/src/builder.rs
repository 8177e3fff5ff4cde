//! A tiny ONNX graph builder over the `graph_rewrites::onnx_pb` prost types: inputs, initializers
//! (from data or deterministic random), nodes with attributes, outputs, value_info with shapes and
//! opset imports. Every node output gets a value_info, so consumers of the generated models (the
//! rewrite rules) see shapes such as K without running shape inference.

use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;

use graph_rewrites::onnx_pb::{
    attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto, type_proto,
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};

use crate::config::DType;
use crate::data::{encode_floats, Rng};

/// One dimension of a tensor shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    Fixed(usize),
    Sym(String),
}

impl From<usize> for Dim {
    fn from(v: usize) -> Self {
        Dim::Fixed(v)
    }
}

/// A named tensor of the graph with its element type (ONNX `DataType` code) and shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    pub name: String,
    pub elem: i32,
    pub shape: Vec<Dim>,
}

impl Tensor {
    /// The same shape with the last dimension replaced.
    pub fn with_last(&self, last: usize) -> Vec<Dim> {
        let mut s = self.shape.clone();
        if let Some(d) = s.last_mut() {
            *d = Dim::Fixed(last);
        }
        s
    }

    /// The last dimension when it is fixed.
    pub fn last_dim(&self) -> Option<usize> {
        match self.shape.last() {
            Some(Dim::Fixed(v)) => Some(*v),
            _ => None,
        }
    }
}

/// ONNX element type code of a float dtype.
pub fn elem_of(d: DType) -> i32 {
    match d {
        DType::F32 => DataType::Float as i32,
        DType::F16 => DataType::Float16 as i32,
        DType::Bf16 => DataType::Bfloat16 as i32,
    }
}

/// Bytes per element of the element types the builders use.
pub fn elem_size(elem: i32) -> usize {
    match DataType::try_from(elem) {
        Ok(DataType::Float | DataType::Int32) => 4,
        Ok(DataType::Float16 | DataType::Bfloat16) => 2,
        Ok(DataType::Int64 | DataType::Double) => 8,
        _ => 1,
    }
}

/// Makes an initializer's bytes on demand.
pub type MakeBytes = Rc<dyn Fn() -> Vec<u8>>;

/// Bytes of an initializer.
#[derive(Clone)]
pub enum Payload {
    Bytes(Vec<u8>),
    /// `len` zero bytes never materialised (sparse "fake weights"): external storage sizes its
    /// file with `set_len`, inline storage writes the zeros.
    Zeros(usize),
    /// `len` bytes generated only when the model is written, so writing a large random-weight
    /// model holds one weight in memory at a time.
    Lazy {
        len: usize,
        make: MakeBytes,
    },
}

impl Payload {
    pub fn len(&self) -> usize {
        match self {
            Payload::Bytes(b) => b.len(),
            Payload::Zeros(n) | Payload::Lazy { len: n, .. } => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes (generating or zero-filling them as needed).
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Payload::Bytes(b) => b,
            Payload::Zeros(n) => vec![0; n],
            Payload::Lazy { make, .. } => make(),
        }
    }
}

impl PartialEq for Payload {
    /// Lazy payloads are equal when they are the same generator.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Payload::Bytes(a), Payload::Bytes(b)) => a == b,
            (Payload::Zeros(a), Payload::Zeros(b)) => a == b,
            (Payload::Lazy { len: a, make: f }, Payload::Lazy { len: b, make: g }) => {
                a == b && Rc::ptr_eq(f, g)
            }
            _ => false,
        }
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Payload::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            Payload::Zeros(n) => write!(f, "Zeros({n})"),
            Payload::Lazy { len, .. } => write!(f, "Lazy({len} bytes)"),
        }
    }
}

/// An initializer: its proto without data, plus the bytes to store inline or externally.
#[derive(Clone, Debug)]
pub struct Initializer {
    pub proto: TensorProto,
    pub payload: Payload,
}

/// A built model whose initializers still have to be placed (inline or external).
#[derive(Clone, Debug)]
pub struct BuiltModel {
    /// The model; its graph has no initializers yet.
    pub model: ModelProto,
    pub initializers: Vec<Initializer>,
}

/// Integer attribute.
pub fn attr_i(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

/// Float attribute.
pub fn attr_f(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(v),
        ..Default::default()
    }
}

/// String attribute.
pub fn attr_s(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(v.as_bytes().to_vec()),
        ..Default::default()
    }
}

/// Builds one graph; see the module doc.
pub struct GraphBuilder {
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    value_info: Vec<ValueInfoProto>,
    initializers: Vec<Initializer>,
    opsets: BTreeMap<String, i64>,
    used_names: HashSet<String>,
    seed: u64,
    fake_weights: bool,
}

fn value_info(t: &Tensor) -> ValueInfoProto {
    let dim = t
        .shape
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            value: Some(match d {
                Dim::Fixed(v) => tensor_shape_proto::dimension::Value::DimValue(*v as i64),
                Dim::Sym(s) => tensor_shape_proto::dimension::Value::DimParam(s.clone()),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(t.name.clone()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(t.elem),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

impl GraphBuilder {
    /// `fake_weights`: random weights become unmaterialised zeros ([`Payload::Zeros`]).
    pub fn new(seed: u64, fake_weights: bool) -> Self {
        let mut opsets = BTreeMap::new();
        // Opset 18: `Split(num_outputs)` and `ReduceMean`/`ReduceMax` with an `axes` input.
        opsets.insert(String::new(), 18);
        Self {
            nodes: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            value_info: Vec::new(),
            initializers: Vec::new(),
            opsets,
            used_names: HashSet::new(),
            seed,
            fake_weights,
        }
    }

    /// Raises the imported opset of `domain` to at least `version`.
    pub fn require_opset(&mut self, domain: &str, version: i64) {
        let v = self.opsets.entry(domain.to_string()).or_insert(version);
        *v = (*v).max(version);
    }

    /// `base`, or `base_2`, `base_3`, … if already taken: tensor and node names stay unique.
    pub fn unique(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut i = 2;
        while !self.used_names.insert(name.clone()) {
            name = format!("{base}_{i}");
            i += 1;
        }
        name
    }

    pub fn add_input(&mut self, name: &str, elem: i32, shape: Vec<Dim>) -> Tensor {
        let t = Tensor {
            name: self.unique(name),
            elem,
            shape,
        };
        self.inputs.push(value_info(&t));
        t
    }

    /// Declares `t` a graph output (its value_info moves from `value_info` to `output`).
    pub fn add_output(&mut self, t: &Tensor) {
        self.value_info
            .retain(|v| v.name.as_deref() != Some(t.name.as_str()));
        self.outputs.push(value_info(t));
    }

    /// An initializer from bytes.
    pub fn add_initializer(
        &mut self,
        name: &str,
        elem: i32,
        dims: &[usize],
        payload: Payload,
    ) -> Tensor {
        let name = self.unique(name);
        let proto = TensorProto {
            name: Some(name.clone()),
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: Some(elem),
            ..Default::default()
        };
        self.initializers.push(Initializer { proto, payload });
        Tensor {
            name,
            elem,
            shape: dims.iter().map(|&d| Dim::Fixed(d)).collect(),
        }
    }

    /// A small float constant of `dtype` (never faked: it carries semantics like eps or α).
    pub fn const_float(
        &mut self,
        name: &str,
        dtype: DType,
        dims: &[usize],
        values: &[f32],
    ) -> Tensor {
        let bytes = encode_floats(dtype, values);
        self.add_initializer(name, elem_of(dtype), dims, Payload::Bytes(bytes))
    }

    /// A scalar float constant of `dtype`.
    pub fn scalar(&mut self, name: &str, dtype: DType, v: f32) -> Tensor {
        self.const_float(name, dtype, &[], &[v])
    }

    /// An int64 constant (shapes, axes).
    pub fn const_i64(&mut self, name: &str, values: &[i64]) -> Tensor {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_initializer(
            name,
            DataType::Int64 as i32,
            &[values.len()],
            Payload::Bytes(bytes),
        )
    }

    /// The random source of the weight keyed `key`: a function of the model seed and the key only
    /// (FNV-1a of the key), so a weight's values do not depend on which other weights exist or in
    /// which order they are made, and two spellings of one model share their weights.
    pub fn weight_rng(&self, key: &str) -> Rng {
        let fnv = key.bytes().fold(0xCBF2_9CE4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
        });
        Rng::new(Rng::new(self.seed ^ fnv).next_u64())
    }

    /// True when weights are not materialised (sparse fake-weight mode).
    pub fn fake_weights(&self) -> bool {
        self.fake_weights
    }

    /// A random Normal(mean, std) weight of `dtype` keyed by its name (see
    /// [`GraphBuilder::weight_rng`]), or unmaterialised zeros in fake-weight mode.
    pub fn random_weight(
        &mut self,
        name: &str,
        dtype: DType,
        dims: &[usize],
        mean: f32,
        std: f32,
    ) -> Tensor {
        self.random_weight_keyed(name, name, dtype, dims, mean, std)
    }

    /// [`GraphBuilder::random_weight`] drawing from the source of `key` instead of `name`.
    pub fn random_weight_keyed(
        &mut self,
        name: &str,
        key: &str,
        dtype: DType,
        dims: &[usize],
        mean: f32,
        std: f32,
    ) -> Tensor {
        let len: usize = dims.iter().product();
        let elem = elem_of(dtype);
        let payload = if self.fake_weights {
            Payload::Zeros(len * elem_size(elem))
        } else {
            let rng = self.weight_rng(key);
            let make = move || encode_floats(dtype, &rng.clone().normals(len, mean, std));
            Payload::Lazy {
                len: len * elem_size(elem),
                make: Rc::new(make),
            }
        };
        self.add_initializer(name, elem, dims, payload)
    }

    /// Adds a node. `outputs` are (name hint, element type, shape); an empty hint makes an
    /// absent optional output (`""`), which is not returned. The node is named after its first
    /// output. Returns the present outputs in order.
    pub fn node(
        &mut self,
        op: &str,
        domain: &str,
        inputs: &[&str],
        outputs: &[(&str, i32, Vec<Dim>)],
        attrs: Vec<AttributeProto>,
    ) -> Vec<Tensor> {
        let mut made = Vec::new();
        let mut names = Vec::new();
        for (hint, elem, shape) in outputs {
            if hint.is_empty() {
                names.push(String::new());
                continue;
            }
            let t = Tensor {
                name: self.unique(hint),
                elem: *elem,
                shape: shape.clone(),
            };
            self.value_info.push(value_info(&t));
            names.push(t.name.clone());
            made.push(t);
        }
        let node_name = self.unique(&format!(
            "{}/{op}",
            names.iter().find(|n| !n.is_empty()).map_or(op, |n| n)
        ));
        self.nodes.push(NodeProto {
            name: Some(node_name),
            op_type: Some(op.into()),
            domain: if domain.is_empty() {
                None
            } else {
                Some(domain.into())
            },
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: names,
            attribute: attrs,
            ..Default::default()
        });
        made
    }

    /// A single-output node in the default domain whose output has `elem` and `shape`.
    pub fn op(
        &mut self,
        op: &str,
        inputs: &[&str],
        out: &str,
        elem: i32,
        shape: Vec<Dim>,
    ) -> Tensor {
        self.op_attrs(op, inputs, out, elem, shape, Vec::new())
    }

    /// [`GraphBuilder::op`] with attributes.
    pub fn op_attrs(
        &mut self,
        op: &str,
        inputs: &[&str],
        out: &str,
        elem: i32,
        shape: Vec<Dim>,
        attrs: Vec<AttributeProto>,
    ) -> Tensor {
        let mut outs = self.node(op, "", inputs, &[(out, elem, shape)], attrs);
        outs.remove(0)
    }

    /// Finishes the model: IR version from the default-domain opset, producer metadata.
    pub fn finish(self, graph_name: &str, doc: &str) -> BuiltModel {
        let opset = self.opsets.get("").copied().unwrap_or(18);
        let graph = GraphProto {
            name: Some(graph_name.into()),
            doc_string: Some(doc.into()),
            node: self.nodes,
            input: self.inputs,
            output: self.outputs,
            value_info: self.value_info,
            ..Default::default()
        };
        let model = ModelProto {
            ir_version: Some(ir_version_for(opset)),
            producer_name: Some("mxfuse-models".into()),
            producer_version: Some(env!("CARGO_PKG_VERSION").into()),
            opset_import: self
                .opsets
                .into_iter()
                .map(|(domain, version)| OperatorSetIdProto {
                    domain: Some(domain),
                    version: Some(version),
                })
                .collect(),
            graph: Some(graph),
            ..Default::default()
        };
        BuiltModel {
            model,
            initializers: self.initializers,
        }
    }
}

/// The IR version that introduced `opset` (onnx's VERSION_TABLE), never below 8: FLOAT8 types
/// need IR 9, FLOAT8E8M0 needs IR 11, which opsets 23/24 bring along.
fn ir_version_for(opset: i64) -> i64 {
    match opset {
        ..=18 => 8,
        19..=20 => 9,
        21..=22 => 10,
        23 => 11,
        24 => 11,
        25..=27 => 13,
        _ => 14,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_and_absent_outputs() {
        let mut b = GraphBuilder::new(0, false);
        let x = b.add_input(
            "x",
            elem_of(DType::F32),
            vec![Dim::Sym("n".into()), 4.into()],
        );
        let outs = b.node(
            "SkipSimplifiedLayerNormalization",
            "com.microsoft",
            &[&x.name, &x.name],
            &[
                ("y", x.elem, x.shape.clone()),
                ("", 0, vec![]),
                ("x", x.elem, x.shape.clone()),
            ],
            vec![attr_f("epsilon", 1e-6)],
        );
        assert_eq!(outs.len(), 2);
        assert_eq!(outs[1].name, "x_2", "taken name gets a suffix");
        b.add_output(&outs[0]);
        let m = b.finish("g", "").model;
        let g = m.graph.expect("graph");
        assert_eq!(
            g.node[0].output,
            vec!["y".to_string(), String::new(), "x_2".into()]
        );
        assert_eq!(
            g.value_info.len(),
            1,
            "graph outputs are not repeated in value_info"
        );
        assert_eq!(m.ir_version, Some(8));
    }

    #[test]
    fn fake_weights_are_not_materialised() {
        let mut b = GraphBuilder::new(0, true);
        b.random_weight("w", DType::Bf16, &[64, 32], 0.0, 1.0);
        let m = b.finish("g", "");
        assert_eq!(m.initializers[0].payload, Payload::Zeros(64 * 32 * 2));
    }
}
