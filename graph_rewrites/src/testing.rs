//! A compact model builder for tests (unit tests here, rule fixtures, the provider's tests).
//!
//! ```
//! use graph_rewrites::testing::ModelBuilder;
//! use graph_rewrites::pattern::predicates::dtype::FLOAT;
//! let mut b = ModelBuilder::new(24);
//! b.input("x", FLOAT, &[4, 64]);
//! b.init_f32("c", &[], &[2.0]);
//! b.node("Mul", &["x", "c"], &["y"]);
//! b.output("y", FLOAT, &[4, 64]);
//! let g = b.graph().unwrap();
//! ```
//! Dims: a positive number is a known dim, `-1` an unknown one, `-2` the symbolic "batch".

use std::path::{Path, PathBuf};

use crate::ir::Graph;
use crate::onnx_pb::{
    attribute_proto::AttributeType, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use crate::pipeline::{run_pipeline, PipelineOptions, RewriteReport};
use crate::view::{AttrValue, GraphView, NodeId, ValueId, QUARK_DOMAIN, VAI_DOMAIN};
use crate::Error;

/// Builds a [`ModelProto`] node by node.
pub struct ModelBuilder {
    g: GraphProto,
    opsets: Vec<OperatorSetIdProto>,
}

/// A `ValueInfoProto` for a tensor of `elem_type` with `dims` (see the module docs for dims).
pub fn tensor_info(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            denotation: None,
            value: match d {
                d if d >= 0 => Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                -2 => Some(tensor_shape_proto::dimension::Value::DimParam(
                    "batch".into(),
                )),
                _ => None,
            },
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            denotation: None,
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem_type),
                shape: Some(TensorShapeProto { dim }),
            })),
        }),
        ..Default::default()
    }
}

/// An attribute of any simple kind.
#[derive(Clone, Copy, Debug)]
pub enum Attr<'a> {
    I(i64),
    F(f32),
    S(&'a str),
    Is(&'a [i64]),
}

/// The `AttributeProto` of `a` named `name`.
pub fn attribute(name: &str, a: &Attr<'_>) -> AttributeProto {
    let mut p = AttributeProto {
        name: Some(name.into()),
        ..Default::default()
    };
    match a {
        Attr::I(i) => (p.r#type, p.i) = (Some(AttributeType::Int as i32), Some(*i)),
        Attr::F(f) => (p.r#type, p.f) = (Some(AttributeType::Float as i32), Some(*f)),
        Attr::S(s) => {
            (p.r#type, p.s) = (
                Some(AttributeType::String as i32),
                Some(s.as_bytes().to_vec()),
            )
        }
        Attr::Is(v) => (p.r#type, p.ints) = (Some(AttributeType::Ints as i32), v.to_vec()),
    }
    p
}

/// A `NodeProto` of `domain::op` named `name`, with attributes.
pub fn node_proto(
    domain: &str,
    op: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: &[(&str, Attr<'_>)],
) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: Some(name.into()),
        op_type: Some(op.into()),
        domain: Some(domain.into()),
        attribute: attrs.iter().map(|(n, a)| attribute(n, a)).collect(),
        ..Default::default()
    }
}

impl ModelBuilder {
    /// A model importing the ONNX domain at `opset`.
    pub fn new(opset: i64) -> Self {
        let mut b = ModelBuilder {
            g: GraphProto {
                name: Some("test".into()),
                ..Default::default()
            },
            opsets: vec![],
        };
        b.opset("", opset);
        b
    }

    pub fn opset(&mut self, domain: &str, version: i64) -> &mut Self {
        self.opsets.push(OperatorSetIdProto {
            domain: Some(domain.into()),
            version: Some(version),
        });
        self
    }

    pub fn input(&mut self, name: &str, elem_type: i32, dims: &[i64]) -> &mut Self {
        self.g.input.push(tensor_info(name, elem_type, dims));
        self
    }

    pub fn output(&mut self, name: &str, elem_type: i32, dims: &[i64]) -> &mut Self {
        self.g.output.push(tensor_info(name, elem_type, dims));
        self
    }

    /// Declares the type of an intermediate value.
    pub fn value_info(&mut self, name: &str, elem_type: i32, dims: &[i64]) -> &mut Self {
        self.g.value_info.push(tensor_info(name, elem_type, dims));
        self
    }

    /// An initializer from raw little-endian bytes.
    pub fn init_raw(
        &mut self,
        name: &str,
        elem_type: i32,
        dims: &[i64],
        raw: Vec<u8>,
    ) -> &mut Self {
        self.g.initializer.push(TensorProto {
            name: Some(name.into()),
            data_type: Some(elem_type),
            dims: dims.to_vec(),
            raw_data: Some(raw),
            ..Default::default()
        });
        self
    }

    pub fn init_f32(&mut self, name: &str, dims: &[i64], v: &[f32]) -> &mut Self {
        self.init_raw(
            name,
            1,
            dims,
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        )
    }

    pub fn init_i64(&mut self, name: &str, dims: &[i64], v: &[i64]) -> &mut Self {
        self.init_raw(
            name,
            7,
            dims,
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        )
    }

    /// An ONNX-domain node.
    pub fn node(&mut self, op: &str, inputs: &[&str], outputs: &[&str]) -> &mut Self {
        self.node_in("", op, inputs, outputs, &[])
    }

    /// A node of any domain with attributes. Node names are `"{op}_{index}"`.
    pub fn node_in(
        &mut self,
        domain: &str,
        op: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: &[(&str, Attr<'_>)],
    ) -> &mut Self {
        let name = format!("{op}_{}", self.g.node.len());
        self.g
            .node
            .push(node_proto(domain, op, &name, inputs, outputs, attrs));
        self
    }

    /// The standard MXFP8 quantize of `x` along its last axis with the OCP floor scale rule:
    /// [`ModelBuilder::mx_scale_floor`] = `scale{sfx}`, then `QuantizeLinear(x, scale{sfx})` =
    /// `q{sfx}` (FLOAT8E4M3FN, axis -1, block 32).
    pub fn mx_quant_floor(&mut self, x: &str, shape: &str, sfx: &str) -> &mut Self {
        use crate::pattern::predicates::dtype::FLOAT8E4M3FN;
        let q = [
            ("axis", Attr::I(-1)),
            ("block_size", Attr::I(32)),
            ("output_dtype", Attr::I(FLOAT8E4M3FN as i64)),
        ];
        let scale = format!("scale{sfx}");
        self.mx_scale_floor(x, shape, sfx).node_in(
            "",
            "QuantizeLinear",
            &[x, &scale],
            &[&format!("q{sfx}")],
            &q,
        )
    }

    /// The OCP floor E8M0 scale of `x`'s blocks of 32 along its last axis: `Reshape(x, shape) →
    /// Abs → ReduceMax(axes = [-1], keepdims = 0) → Mul(2^-8) → Cast(FLOAT8E8M0, round_mode =
    /// down)` = `scale{sfx}`. The block shape `shape` is the caller's (a constant or computed);
    /// the intermediates and the constants `axes{sfx}`, `c{sfx}` are named with the suffix `sfx`.
    pub fn mx_scale_floor(&mut self, x: &str, shape: &str, sfx: &str) -> &mut Self {
        use crate::pattern::predicates::dtype::FLOAT8E8M0;
        let v = |s: &str| format!("{s}{sfx}");
        self.init_i64(&v("axes"), &[1], &[-1])
            .init_f32(&v("c"), &[], &[2f32.powi(-8)])
            .node("Reshape", &[x, shape], &[&v("blocks")])
            .node("Abs", &[&v("blocks")], &[&v("ab")])
            .node_in(
                "",
                "ReduceMax",
                &[&v("ab"), &v("axes")],
                &[&v("amax")],
                &[("keepdims", Attr::I(0))],
            )
            .node("Mul", &[&v("amax"), &v("c")], &[&v("s32")])
            .node_in(
                "",
                "Cast",
                &[&v("s32")],
                &[&v("scale")],
                &[
                    ("to", Attr::I(FLOAT8E8M0 as i64)),
                    ("round_mode", Attr::S("down")),
                ],
            )
    }

    /// AMD Quark's MXFP8 fake quant, `com.amd.quark::MXQuantizeDequantize(element_dtype=
    /// fp8_e4m3, block_size, axis)`, of `input` into `output` ([`ModelBuilder::fix_neuron`]
    /// respells it `com.vai.quantize::MXFixNeuron`).
    pub fn quark_fake_quant(
        &mut self,
        input: &str,
        output: &str,
        block_size: i64,
        axis: i64,
    ) -> &mut Self {
        let attrs = [
            ("element_dtype", Attr::S("fp8_e4m3")),
            ("block_size", Attr::I(block_size)),
            ("axis", Attr::I(axis)),
        ];
        self.node_in(
            QUARK_DOMAIN,
            "MXQuantizeDequantize",
            &[input],
            &[output],
            &attrs,
        )
    }

    /// NVIDIA ModelOpt's MXFP8 activation quantize: `trt::TRT_MXFP8DynamicQuantize(input, axis,
    /// block_size, output_dtype = FLOAT8E4M3FN)` = `{output}_q`, `{output}_s` (uint8), then
    /// `trt::TRT_MXFP8DequantizeLinear(…, axis, block_size, output_dtype = out_dtype)` = `output`.
    pub fn trt_mx_qdq(
        &mut self,
        input: &str,
        output: &str,
        (block_size, axis): (i64, i64),
        out_dtype: i32,
    ) -> &mut Self {
        use crate::pattern::predicates::dtype::FLOAT8E4M3FN;
        let (q, s) = (format!("{output}_q"), format!("{output}_s"));
        let q_attrs = [
            ("axis", Attr::I(axis)),
            ("block_size", Attr::I(block_size)),
            ("output_dtype", Attr::I(FLOAT8E4M3FN as i64)),
        ];
        let dq_attrs = [
            ("axis", Attr::I(axis)),
            ("block_size", Attr::I(block_size)),
            ("output_dtype", Attr::I(out_dtype as i64)),
        ];
        self.node_in(
            "trt",
            "TRT_MXFP8DynamicQuantize",
            &[input],
            &[&q, &s],
            &q_attrs,
        )
        .node_in(
            "trt",
            "TRT_MXFP8DequantizeLinear",
            &[&q, &s],
            &[output],
            &dq_attrs,
        )
    }

    /// A ModelOpt MXFP8 weight: E4M3 `values` `dims` and uint8 E8M0 `scales` (`scale_dims`)
    /// initializers `{w}_fp8`, `{w}_scale`, dequantized to `out_dtype` along `axis` by
    /// `trt::TRT_MXFP8DequantizeLinear` = `w`.
    pub fn trt_mx_weight(
        &mut self,
        w: &str,
        (dims, values): (&[i64], Vec<u8>),
        (scale_dims, scales): (&[i64], Vec<u8>),
        axis: i64,
        out_dtype: i32,
    ) -> &mut Self {
        use crate::pattern::predicates::dtype::{FLOAT8E4M3FN, UINT8};
        let (v, s) = (format!("{w}_fp8"), format!("{w}_scale"));
        let attrs = [
            ("axis", Attr::I(axis)),
            ("block_size", Attr::I(32)),
            ("output_dtype", Attr::I(out_dtype as i64)),
        ];
        self.init_raw(&v, FLOAT8E4M3FN, dims, values)
            .init_raw(&s, UINT8, scale_dims, scales)
            .node_in("trt", "TRT_MXFP8DequantizeLinear", &[&v, &s], &[w], &attrs)
    }

    /// Attaches graph attribute `name` (an `If` branch, a `Loop` / `Scan` body) to the node
    /// added last; [`ModelBuilder::body`] of another builder makes one.
    pub fn graph_attr(&mut self, name: &str, body: GraphProto) -> &mut Self {
        if let Some(n) = self.g.node.last_mut() {
            n.attribute.push(AttributeProto {
                name: Some(name.into()),
                r#type: Some(AttributeType::Graph as i32),
                g: Some(body),
                ..Default::default()
            });
        }
        self
    }

    /// The graph built so far, as a subgraph for [`ModelBuilder::graph_attr`].
    pub fn body(&self) -> GraphProto {
        self.g.clone()
    }

    pub fn model(&self) -> ModelProto {
        ModelProto {
            ir_version: Some(10),
            opset_import: self.opsets.clone(),
            producer_name: Some("mxfuse-tests".into()),
            graph: Some(self.g.clone()),
            ..Default::default()
        }
    }

    pub fn graph(&self) -> Result<Graph, Error> {
        Graph::from_model(self.model(), None)
    }

    /// The graph after the default rewrite pipeline, with its report. Panics (a test helper)
    /// when the graph does not load or the pipeline fails.
    ///
    /// A model with a Quark fake quant is rewritten in both of the op's spellings and the two
    /// rewrites are checked alike ([`ModelBuilder::rewrite_both_quark_spellings`]), so every
    /// test of a Quark model checks the deprecated `MXFixNeuron` name too.
    pub fn rewrite(&self) -> (RewriteReport, Graph) {
        if self.has_quark_fake_quant() {
            self.rewrite_both_quark_spellings()
        } else {
            self.rewrite_as_built()
        }
    }

    fn rewrite_as_built(&self) -> (RewriteReport, Graph) {
        rewrite_model(self.model(), None)
    }

    /// Whether the graph (not its subgraphs) has a `com.amd.quark::MXQuantizeDequantize` node.
    fn has_quark_fake_quant(&self) -> bool {
        self.g.node.iter().any(is_quark_fake_quant)
    }

    /// The same model with AMD Quark's MX fake quants under their deprecated Vitis AI name
    /// ([`as_fix_neuron`]).
    pub fn fix_neuron(&self) -> ModelBuilder {
        let m = as_fix_neuron(self.model());
        ModelBuilder {
            g: m.graph.unwrap_or_default(),
            opsets: m.opset_import,
        }
    }

    /// [`rewrite_both_quark_spellings`] of the model as built.
    pub fn rewrite_both_quark_spellings(&self) -> (RewriteReport, Graph) {
        rewrite_both_quark_spellings(&self.model(), None)
    }

    /// Why `rule` refused the builder's graph, asserting it fused nothing.
    pub fn refusal(&self, rule: &str) -> String {
        let (report, _) = self.rewrite();
        assert_eq!(report.counts[rule], 0, "{report:#?}");
        let r = report.rejections.iter().find(|r| r.rule == rule);
        r.unwrap_or_else(|| panic!("no {rule} rejection: {report:#?}"))
            .reason
            .clone()
    }
}

/// `model` with every `com.amd.quark::MXQuantizeDequantize` node (of the graph, its subgraphs
/// and the model's functions) renamed `com.vai.quantize::MXFixNeuron`, Quark's deprecated name for
/// the same op (what `quark.onnx.tools.convert_custom_ops` writes), and the `com.amd.quark` opset
/// import made `com.vai.quantize`'s.
pub fn as_fix_neuron(mut model: ModelProto) -> ModelProto {
    fn respell(nodes: &mut [NodeProto]) {
        for n in nodes {
            if is_quark_fake_quant(n) {
                n.domain = Some(VAI_DOMAIN.into());
                n.op_type = Some("MXFixNeuron".into());
            }
            for a in &mut n.attribute {
                for g in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                    respell(&mut g.node);
                }
            }
        }
    }
    let respell_opsets = |opsets: &mut Vec<OperatorSetIdProto>| {
        for o in opsets {
            if o.domain() == QUARK_DOMAIN {
                o.domain = Some(VAI_DOMAIN.into());
            }
        }
    };
    if let Some(g) = &mut model.graph {
        respell(&mut g.node);
    }
    respell_opsets(&mut model.opset_import);
    for f in &mut model.functions {
        respell(&mut f.node);
        respell_opsets(&mut f.opset_import);
    }
    model
}

fn is_quark_fake_quant(n: &NodeProto) -> bool {
    n.domain() == QUARK_DOMAIN && n.op_type() == "MXQuantizeDequantize"
}

/// `model` (whose external data, if any, lies in `dir`) after the default rewrite pipeline.
fn rewrite_model(model: ModelProto, dir: Option<&Path>) -> (RewriteReport, Graph) {
    let mut g = Graph::from_model(model, dir).expect("test graph loads");
    let report = run_pipeline(&mut g, &PipelineOptions::default()).expect("pipeline runs");
    (report, g)
}

/// Rewrites `model`, which spells AMD Quark's MX fake quant `com.amd.quark::
/// MXQuantizeDequantize`, and its [`as_fix_neuron`] respelling (`com.vai.quantize::
/// MXFixNeuron`), asserting that both rewrite alike: the same fusions, the same refusals, and the
/// same rewritten model once the first is respelled too (fake quants left unfused keep their
/// spelling). Returns the first rewrite. `dir`: where external data lies.
pub fn rewrite_both_quark_spellings(
    model: &ModelProto,
    dir: Option<&Path>,
) -> (RewriteReport, Graph) {
    let graph = model.graph.as_ref();
    assert!(
        graph.is_some_and(|g| g.node.iter().any(is_quark_fake_quant)),
        "the model has no Quark fake quant to respell"
    );
    let (report, g) = rewrite_model(model.clone(), dir);
    let (alias_report, alias_g) = rewrite_model(as_fix_neuron(model.clone()), dir);
    assert_eq!(alias_report.counts, report.counts, "{alias_report:#?}");
    let reasons = |r: &RewriteReport| -> Vec<(String, String, String)> {
        r.rejections
            .iter()
            .map(|r| {
                let reason = r
                    .reason
                    .replace(VAI_DOMAIN, QUARK_DOMAIN)
                    .replace("MXFixNeuron", "MXQuantizeDequantize");
                (r.rule.clone(), r.at.clone(), reason)
            })
            .collect()
    };
    assert_eq!(reasons(&alias_report), reasons(&report));
    assert_eq!(alias_g.to_model(), as_fix_neuron(g.to_model()));
    (report, g)
}

/// A fresh empty directory `mxfuse-{name}-{pid}` under the system temp dir.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mxfuse-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// `models/fixtures`: the committed test models the `models` crate builds.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/fixtures")
}

/// `models/fixtures/samples`: committed copies of the small real models of `../shared/samples`
/// (torch dynamo, AMD Quark, the opset-24 MXFP8 quantizer, ORT GenAI with external data), so a
/// bare checkout tests them too.
pub fn samples_dir() -> PathBuf {
    fixtures_dir().join("samples")
}

/// The `.onnx` files in the `sub_dirs` of [`fixtures_dir`] (`""`: the folder itself), sorted.
pub fn fixture_files(sub_dirs: &[&str]) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = sub_dirs
        .iter()
        .flat_map(|sub| std::fs::read_dir(fixtures_dir().join(sub)).expect("fixtures dir"))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    files.sort();
    files
}

/// The op types of `g`'s nodes, in order.
pub fn op_types(g: &dyn GraphView) -> Vec<String> {
    g.nodes()
        .iter()
        .map(|n| g.op_type(*n).to_string())
        .collect()
}

/// The first node of `op` in `g`; panics (a test helper) when there is none.
pub fn first_node(g: &dyn GraphView, op: &str) -> NodeId {
    let n = g.nodes().iter().copied().find(|n| g.op_type(*n) == op);
    n.unwrap_or_else(|| panic!("no {op} node"))
}

/// Attribute `name` of node `n`; panics (a test helper) when it is missing.
pub fn node_attr(g: &dyn GraphView, n: NodeId, name: &str) -> AttrValue {
    g.attr(n, name)
        .unwrap_or_else(|| panic!("attribute {name} missing"))
}

/// The names of `vs`, `""` for an omitted optional value.
pub fn value_names(g: &dyn GraphView, vs: &[Option<ValueId>]) -> Vec<String> {
    vs.iter()
        .map(|v| v.map_or(String::new(), |v| g.value_name(v).to_string()))
        .collect()
}
