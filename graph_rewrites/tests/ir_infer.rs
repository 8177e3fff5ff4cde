//! Type and shape inference at load (`ir/infer`): per op family, broadcasting with symbolic
//! dims, Reshape 0 / -1, Q/DQ and Quark dtypes, the `com.mxfuse` ops; known types are kept and
//! nothing inferred is written back; models without `value_info` fuse exactly like with it.

use std::path::{Path, PathBuf};

use graph_rewrites::io::load_model;
use graph_rewrites::ir::Graph;
use graph_rewrites::onnx_pb::{tensor_shape_proto, ModelProto, ValueInfoProto};
use graph_rewrites::pattern::predicates::dtype::{
    BFLOAT16, FLOAT, FLOAT16, FLOAT8E4M3FN, FLOAT8E8M0, INT64,
};
use graph_rewrites::pipeline::{run_pipeline, PipelineOptions, RewriteReport};
use graph_rewrites::testing::{fixture_files, tensor_info, Attr, ModelBuilder};
use graph_rewrites::view::{Dim, GraphView, TensorInfo};
use prost::Message;

const UINT8: i32 = 2;
const INT8: i32 = 3;
const BOOL: i32 = 9;

/// Dims from a spec like `"b,8,?,64"`: numbers are known, `?` unknown, names symbolic.
fn dims(spec: &str) -> Vec<Dim> {
    if spec.is_empty() {
        return vec![];
    }
    spec.split(',')
        .map(|d| match d {
            "?" => Dim::Unknown,
            d => d
                .parse()
                .map_or_else(|_| Dim::Symbolic(d.into()), Dim::Known),
        })
        .collect()
}

/// A graph input typed by a dims spec (see [`dims`]).
fn input(name: &str, elem_type: i32, spec: &str) -> ValueInfoProto {
    let mut vi = tensor_info(name, elem_type, &[]);
    let shape = vi
        .r#type
        .as_mut()
        .and_then(|t| match t.value.as_mut() {
            Some(graph_rewrites::onnx_pb::type_proto::Value::TensorType(t)) => t.shape.as_mut(),
            _ => None,
        })
        .expect("tensor_info builds a shaped tensor type");
    shape.dim = dims(spec)
        .into_iter()
        .map(|d| tensor_shape_proto::Dimension {
            denotation: None,
            value: match d {
                Dim::Known(v) => Some(tensor_shape_proto::dimension::Value::DimValue(v)),
                Dim::Symbolic(s) => Some(tensor_shape_proto::dimension::Value::DimParam(s)),
                Dim::Unknown => None,
            },
        })
        .collect();
    vi
}

/// Loads the builder's model with extra symbolically typed inputs `(name, type, spec)`.
fn load(b: &ModelBuilder, inputs: &[(&str, i32, &str)]) -> Graph {
    let mut m = b.model();
    let g = m.graph.as_mut().expect("builder makes a graph");
    for (name, t, spec) in inputs {
        g.input.push(input(name, *t, spec));
    }
    Graph::from_model(m, None).expect("test graph loads")
}

fn info_of(g: &Graph, name: &str) -> Option<TensorInfo> {
    let v = g
        .value_by_name(name)
        .unwrap_or_else(|| panic!("no value '{name}'"));
    g.tensor_info(v)
}

/// Asserts the type and shape `name` reports.
#[track_caller]
fn expect(g: &Graph, name: &str, elem_type: i32, spec: &str) {
    let want = TensorInfo {
        elem_type,
        shape: Some(dims(spec)),
    };
    assert_eq!(info_of(g, name), Some(want), "value '{name}'");
}

/// Unary elementwise ops: the output has the input's type and shape.
const UNARY: [&str; 10] = [
    "Sqrt",
    "Reciprocal",
    "Sigmoid",
    "Abs",
    "Neg",
    "Relu",
    "Tanh",
    "Erf",
    "Exp",
    "Identity",
];

#[test]
fn elementwise_ops_broadcast_with_symbolic_dims() {
    let mut b = ModelBuilder::new(24);
    b.init_f32("two", &[], &[2.0])
        .init_f32("lo", &[], &[-1.0])
        .node("Add", &["x", "y"], &["add"])
        .node("Mul", &["x", "z"], &["mul"])
        .node("Sub", &["y", "w"], &["sub_unequal_symbols"])
        .node("Div", &["x", "two"], &["div"])
        .node("Pow", &["x", "two"], &["pow"])
        .node("Max", &["x", "y", "two"], &["max3"])
        .node("Clip", &["x", "lo", ""], &["clip"])
        .node("Equal", &["x", "y"], &["eq"])
        .node("Where", &["cond", "x", "y"], &["where"])
        .node("Add", &["a23", "a43"], &["incompatible"]);
    for op in UNARY {
        let out = format!("u_{op}");
        b.node(op, &["x"], &[&out]);
    }
    let g = load(
        &b,
        &[
            ("x", FLOAT, "b,s,1,64"),
            ("y", FLOAT, "s,8,1"),
            ("z", FLOAT, "t,64"),
            ("w", FLOAT, "t,1,1"),
            ("cond", BOOL, "s,1,1"),
            ("a23", FLOAT, "2,3"),
            ("a43", FLOAT, "4,3"),
        ],
    );
    expect(&g, "add", FLOAT, "b,s,8,64");
    expect(&g, "mul", FLOAT, "b,s,t,64");
    // s against t: neither is implied, so the dim is unknown; 8 and 1 are known.
    expect(&g, "sub_unequal_symbols", FLOAT, "?,8,1");
    expect(&g, "div", FLOAT, "b,s,1,64");
    expect(&g, "pow", FLOAT, "b,s,1,64");
    expect(&g, "max3", FLOAT, "b,s,8,64");
    expect(&g, "clip", FLOAT, "b,s,1,64");
    expect(&g, "eq", BOOL, "b,s,8,64");
    expect(&g, "where", FLOAT, "b,s,8,64");
    for op in UNARY {
        expect(&g, &format!("u_{op}"), FLOAT, "b,s,1,64");
    }
    // 3 against 4 cannot broadcast: the type is known, the shape is not.
    let bad = info_of(&g, "incompatible").expect("type inferred");
    assert_eq!((bad.elem_type, bad.shape), (FLOAT, None));
}

#[test]
fn cast_castlike_and_pow_keep_the_right_element_type() {
    let mut b = ModelBuilder::new(21);
    b.init_i64("ione", &[], &[1])
        .node_in(
            "",
            "Cast",
            &["x"],
            &["c"],
            &[("to", Attr::I(FLOAT16 as i64))],
        )
        .node("CastLike", &["x", "h"], &["cl"])
        .node("Pow", &["x", "ione"], &["p"]);
    let g = load(&b, &[("x", FLOAT, "b,64"), ("h", BFLOAT16, "1")]);
    expect(&g, "c", FLOAT16, "b,64");
    expect(&g, "cl", BFLOAT16, "b,64");
    expect(&g, "p", FLOAT, "b,64");
}

#[test]
fn matmul_broadcasts_batches_and_gemm_transposes() {
    let mut b = ModelBuilder::new(18);
    b.init_f32("w", &[3, 64, 16], &vec![0.0; 3 * 64 * 16])
        .init_f32("w2", &[64, 16], &vec![0.0; 64 * 16])
        .init_f32("bt", &[16, 8], &vec![0.0; 16 * 8])
        .init_f32("bias", &[16], &[0.0; 16])
        .node("MatMul", &["a", "w"], &["batched"])
        .node("MatMul", &["v", "w2"], &["vec_mat"])
        .node("MatMul", &["m", "v"], &["mat_vec"])
        .node("MatMul", &["m", "w"], &["batched_weight"])
        .node_in(
            "",
            "Gemm",
            &["g", "bt", "bias"],
            &["gemm"],
            &[("transB", Attr::I(1))],
        );
    let g = load(
        &b,
        &[
            ("a", FLOAT16, "2,1,s,64"),
            ("v", FLOAT16, "64"),
            ("m", FLOAT16, "s,64"),
            ("g", FLOAT, "4,8"),
        ],
    );
    expect(&g, "batched", FLOAT16, "2,3,s,16");
    expect(&g, "vec_mat", FLOAT16, "16");
    expect(&g, "mat_vec", FLOAT16, "s");
    expect(&g, "batched_weight", FLOAT16, "3,s,16");
    expect(&g, "gemm", FLOAT, "4,16");
}

#[test]
fn reshape_copies_zeros_and_infers_minus_one() {
    let mut b = ModelBuilder::new(21);
    b.init_i64("heads", &[4], &[0, 0, -1, 16])
        .init_i64("rows", &[2], &[-1, 32])
        .init_i64("flat", &[2], &[-1, 64])
        .init_i64("zero_dim", &[2], &[0, 5])
        .node("Reshape", &["x", "heads"], &["split_heads"])
        .node("Reshape", &["k", "rows"], &["known_rows"])
        .node("Reshape", &["x", "flat"], &["symbolic_rows"])
        .node("Reshape", &["x", "zero_dim"], &["copy_zero"])
        .node_in(
            "",
            "Reshape",
            &["e", "zero_dim"],
            &["allowzero"],
            &[("allowzero", Attr::I(1))],
        )
        .node("Reshape", &["x", "dyn_shape"], &["computed"]);
    let g = load(
        &b,
        &[
            ("x", FLOAT, "b,s,64"),
            ("k", FLOAT, "2,3,64"),
            ("e", FLOAT, "0,7"),
            ("dyn_shape", INT64, "3"),
        ],
    );
    expect(&g, "split_heads", FLOAT, "b,s,4,16");
    expect(&g, "known_rows", FLOAT, "12,32");
    expect(&g, "symbolic_rows", FLOAT, "?,64");
    expect(&g, "copy_zero", FLOAT, "b,5");
    expect(&g, "allowzero", FLOAT, "0,5");
    expect(&g, "computed", FLOAT, "?,?,?");
}

#[test]
fn transpose_unsqueeze_squeeze_in_attribute_and_input_forms() {
    // Opset 11: axes are attributes.
    let mut b = ModelBuilder::new(11);
    b.node_in(
        "",
        "Transpose",
        &["x"],
        &["perm"],
        &[("perm", Attr::Is(&[0, 2, 1]))],
    )
    .node("Transpose", &["x"], &["reversed"])
    .node_in(
        "",
        "Unsqueeze",
        &["x"],
        &["unsq"],
        &[("axes", Attr::Is(&[0, -1]))],
    )
    .node_in(
        "",
        "Squeeze",
        &["one"],
        &["sq"],
        &[("axes", Attr::Is(&[1]))],
    )
    .node("Squeeze", &["ones"], &["sq_all"]);
    let g = load(
        &b,
        &[
            ("x", FLOAT, "b,s,64"),
            ("one", FLOAT, "b,1,64"),
            ("ones", FLOAT, "1,4,1"),
        ],
    );
    expect(&g, "perm", FLOAT, "b,64,s");
    expect(&g, "reversed", FLOAT, "64,s,b");
    expect(&g, "unsq", FLOAT, "1,b,s,64,1");
    expect(&g, "sq", FLOAT, "b,64");
    expect(&g, "sq_all", FLOAT, "4");

    // Opset 13: axes are inputs; a Squeeze without axes over an unknown dim stays unknown.
    let mut b = ModelBuilder::new(13);
    b.init_i64("ax", &[1], &[1])
        .node("Unsqueeze", &["x", "ax"], &["unsq"])
        .node("Squeeze", &["one", "ax"], &["sq"])
        .node("Squeeze", &["x"], &["sq_unknown"]);
    let g = load(&b, &[("x", FLOAT, "b,64"), ("one", FLOAT, "b,1,64")]);
    expect(&g, "unsq", FLOAT, "b,1,64");
    expect(&g, "sq", FLOAT, "b,64");
    let unknown = info_of(&g, "sq_unknown").expect("type inferred");
    assert_eq!((unknown.elem_type, unknown.shape), (FLOAT, None));
}

#[test]
fn concat_and_split_in_every_form() {
    let mut b = ModelBuilder::new(18);
    b.init_i64("sizes", &[2], &[16, 48])
        .node_in(
            "",
            "Concat",
            &["p", "q"],
            &["cat"],
            &[("axis", Attr::I(-1))],
        )
        .node_in(
            "",
            "Concat",
            &["p", "r"],
            &["cat_rows"],
            &[("axis", Attr::I(0))],
        )
        .node_in(
            "",
            "Split",
            &["x"],
            &["x0", "x1", "x2"],
            &[("axis", Attr::I(-1)), ("num_outputs", Attr::I(3))],
        )
        .node_in(
            "",
            "Split",
            &["x", "sizes"],
            &["s0", "s1"],
            &[("axis", Attr::I(1))],
        );
    let g = load(
        &b,
        &[
            ("p", FLOAT, "b,32"),
            ("q", FLOAT, "?,16"),
            ("r", FLOAT, "4,32"),
            ("x", FLOAT, "s,64"),
        ],
    );
    expect(&g, "cat", FLOAT, "b,48");
    expect(&g, "cat_rows", FLOAT, "?,32");
    // 64 into 3 (num_outputs): 22, 22 and the rest.
    expect(&g, "x0", FLOAT, "s,22");
    expect(&g, "x1", FLOAT, "s,22");
    expect(&g, "x2", FLOAT, "s,20");
    expect(&g, "s0", FLOAT, "s,16");
    expect(&g, "s1", FLOAT, "s,48");

    // Opset 11: split sizes as an attribute, or equal parts.
    let mut b = ModelBuilder::new(11);
    b.node_in(
        "",
        "Split",
        &["x"],
        &["a", "c"],
        &[("axis", Attr::I(-1)), ("split", Attr::Is(&[40, 24]))],
    )
    .node("Split", &["h"], &["h0", "h1"]);
    let g = load(&b, &[("x", FLOAT16, "s,64"), ("h", FLOAT16, "8,s")]);
    expect(&g, "a", FLOAT16, "s,40");
    expect(&g, "c", FLOAT16, "s,24");
    expect(&g, "h0", FLOAT16, "4,s");
    expect(&g, "h1", FLOAT16, "4,s");
}

#[test]
fn slice_with_constant_bounds_and_steps() {
    let mut b = ModelBuilder::new(13);
    b.init_i64("starts", &[2], &[0, 1])
        .init_i64("ends", &[2], &[i64::MAX, -1])
        .init_i64("axes", &[2], &[0, -1])
        .init_i64("steps", &[2], &[1, 2])
        .init_i64("rstart", &[1], &[-1])
        .init_i64("rend", &[1], &[i64::MIN])
        .init_i64("rstep", &[1], &[-1])
        .init_i64("last", &[1], &[-1])
        .node(
            "Slice",
            &["x", "starts", "ends", "axes", "steps"],
            &["stepped"],
        )
        .node(
            "Slice",
            &["x", "rstart", "rend", "last", "rstep"],
            &["reversed"],
        )
        .node("Slice", &["x", "dyn", "dyn"], &["dynamic"]);
    let g = load(&b, &[("x", FLOAT, "s,64"), ("dyn", INT64, "1")]);
    // Whole symbolic axis kept; elements 1, 3, ..., 61 of the last.
    expect(&g, "stepped", FLOAT, "s,31");
    expect(&g, "reversed", FLOAT, "s,64");
    expect(&g, "dynamic", FLOAT, "?,?");

    // Opset 9: bounds as attributes.
    let mut b = ModelBuilder::new(9);
    b.node_in(
        "",
        "Slice",
        &["x"],
        &["half"],
        &[
            ("starts", Attr::Is(&[32])),
            ("ends", Attr::Is(&[64])),
            ("axes", Attr::Is(&[1])),
        ],
    );
    let g = load(&b, &[("x", FLOAT, "s,64")]);
    expect(&g, "half", FLOAT, "s,32");
}

#[test]
fn gather_expand_and_reductions() {
    let mut b = ModelBuilder::new(13);
    b.init_f32("table", &[100, 64], &vec![0.0; 6400])
        .init_i64("idx0", &[], &[3])
        .init_i64("target", &[3], &[4, 1, 64])
        .init_i64("last", &[1], &[-1])
        .node("Gather", &["table", "ids"], &["embed"])
        .node_in(
            "",
            "Gather",
            &["x", "idx0"],
            &["picked"],
            &[("axis", Attr::I(1))],
        )
        .node("Expand", &["row", "target"], &["expanded"])
        .node_in(
            "",
            "ReduceMean",
            &["x"],
            &["mean"],
            &[("axes", Attr::Is(&[-1]))],
        )
        .node_in(
            "",
            "ReduceSum",
            &["x", "last"],
            &["sum"],
            &[("keepdims", Attr::I(0))],
        )
        .node("ReduceMax", &["x"], &["max_all"])
        .node("Softmax", &["x"], &["soft"]);
    let g = load(
        &b,
        &[
            ("ids", INT64, "b,s"),
            ("x", FLOAT, "b,s,64"),
            ("row", FLOAT, "s,64"),
        ],
    );
    expect(&g, "embed", FLOAT, "b,s,64");
    expect(&g, "picked", FLOAT, "b,64");
    expect(&g, "expanded", FLOAT, "4,s,64");
    expect(&g, "mean", FLOAT, "b,s,1");
    expect(&g, "sum", FLOAT, "b,s");
    expect(&g, "max_all", FLOAT, "1,1,1");
    expect(&g, "soft", FLOAT, "b,s,64");

    // Opset 18: every Reduce takes axes as an input; noop_with_empty_axes keeps the shape.
    let mut b = ModelBuilder::new(18);
    b.init_i64("last", &[1], &[-1])
        .node_in(
            "",
            "ReduceMax",
            &["x", "last"],
            &["max"],
            &[("keepdims", Attr::I(0))],
        )
        .node_in(
            "",
            "ReduceMean",
            &["x"],
            &["noop"],
            &[("noop_with_empty_axes", Attr::I(1))],
        );
    let g = load(&b, &[("x", BFLOAT16, "b,64")]);
    expect(&g, "max", BFLOAT16, "b");
    expect(&g, "noop", BFLOAT16, "b,64");
}

#[test]
fn norms_and_activations() {
    let mut b = ModelBuilder::new(24);
    b.opset("com.microsoft", 1)
        .init_f32("gamma", &[64], &[1.0; 64])
        .node(
            "LayerNormalization",
            &["x", "gamma"],
            &["ln", "ln_mean", "ln_inv"],
        )
        .node("RMSNormalization", &["x", "gamma"], &["rms"])
        .node(
            "SimplifiedLayerNormalization",
            &["x", "gamma"],
            &["sln", "sln_inv"],
        )
        .node_in(
            "com.microsoft",
            "SkipSimplifiedLayerNormalization",
            &["x", "res", "gamma"],
            &["skip", "skip_mean", "skip_inv", "skip_sum"],
            &[],
        )
        .node_in("com.microsoft", "QuickGelu", &["x"], &["qg"], &[])
        .node("Swish", &["x"], &["swish"]);
    let g = load(&b, &[("x", FLOAT16, "b,s,64"), ("res", FLOAT16, "b,s,64")]);
    expect(&g, "ln", FLOAT16, "b,s,64");
    expect(&g, "ln_mean", FLOAT, "b,s,1");
    expect(&g, "ln_inv", FLOAT, "b,s,1");
    expect(&g, "rms", FLOAT16, "b,s,64");
    expect(&g, "sln", FLOAT16, "b,s,64");
    expect(&g, "sln_inv", FLOAT, "b,s,1");
    expect(&g, "skip", FLOAT16, "b,s,64");
    expect(&g, "skip_sum", FLOAT16, "b,s,64");
    assert_eq!(info_of(&g, "skip_inv").map(|i| i.elem_type), Some(FLOAT));
    expect(&g, "qg", FLOAT16, "b,s,64");
    expect(&g, "swish", FLOAT16, "b,s,64");

    let mut b = ModelBuilder::new(28);
    b.node("SwiGLU", &["gate", "up"], &["act"]);
    let g = load(
        &b,
        &[("gate", BFLOAT16, "s,128"), ("up", BFLOAT16, "s,128")],
    );
    expect(&g, "act", BFLOAT16, "s,128");
}

#[test]
fn quantize_dequantize_types_follow_the_opset_rules() {
    // Opset 24, the MXFP8 standard spelling: blocked, output_dtype on both ops.
    let mut b = ModelBuilder::new(24);
    let blocked = [
        ("axis", Attr::I(-1)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT8E4M3FN as i64)),
    ];
    b.node_in("", "QuantizeLinear", &["x", "e8"], &["q"], &blocked)
        .node_in(
            "",
            "DequantizeLinear",
            &["q", "e8"],
            &["dq_bf16"],
            &[
                ("axis", Attr::I(-1)),
                ("block_size", Attr::I(32)),
                ("output_dtype", Attr::I(BFLOAT16 as i64)),
            ],
        )
        .node("DequantizeLinear", &["q", "e8"], &["dq_scale_type"])
        .node("QuantizeLinear", &["x", "s16", "zp8"], &["q_zp"])
        .node("QuantizeLinear", &["x", "s16"], &["q_default"]);
    let g = load(
        &b,
        &[
            ("x", FLOAT16, "b,64"),
            ("e8", FLOAT8E8M0, "b,2"),
            ("s16", FLOAT16, ""),
            ("zp8", INT8, ""),
        ],
    );
    expect(&g, "q", FLOAT8E4M3FN, "b,64");
    expect(&g, "dq_bf16", BFLOAT16, "b,64");
    expect(&g, "dq_scale_type", FLOAT8E8M0, "b,64");
    expect(&g, "q_zp", INT8, "b,64");
    expect(&g, "q_default", UINT8, "b,64");

    // Opset 19: DequantizeLinear follows the scale's type; opset 13: always float.
    for (opset, want) in [(19, FLOAT16), (13, FLOAT)] {
        let mut b = ModelBuilder::new(opset);
        b.node("DequantizeLinear", &["q", "s16"], &["dq"]);
        let g = load(&b, &[("q", INT8, "8"), ("s16", FLOAT16, "")]);
        expect(&g, "dq", want, "8");
    }
}

#[test]
fn quark_allreduce_shape_and_constant() {
    let mut b = ModelBuilder::new(20);
    b.opset("com.amd.quark", 1)
        .opset("com.microsoft", 1)
        .node_in(
            "com.amd.quark",
            "MXQuantizeDequantize",
            &["x"],
            &["fq"],
            &[
                ("element_dtype", Attr::S("fp8_e4m3")),
                ("axis", Attr::I(-1)),
            ],
        )
        .node_in("com.microsoft", "AllReduce", &["fq"], &["ar"], &[])
        .node("Shape", &["ar"], &["shape"])
        .node_in("", "Shape", &["ar"], &["tail"], &[("start", Attr::I(1))])
        .node_in(
            "",
            "Constant",
            &[],
            &["k"],
            &[("value_ints", Attr::Is(&[1, 2]))],
        );
    let g = load(&b, &[("x", BFLOAT16, "b,s,64")]);
    expect(&g, "fq", BFLOAT16, "b,s,64");
    expect(&g, "ar", BFLOAT16, "b,s,64");
    expect(&g, "shape", INT64, "3");
    expect(&g, "tail", INT64, "2");
    expect(&g, "k", INT64, "2");
}

#[test]
fn mxfuse_ops_follow_docs_ops_md() {
    let mut b = ModelBuilder::new(24);
    b.opset("com.mxfuse", 1)
        .init_f32("w", &[128, 16], &vec![0.0; 128 * 16])
        .init_f32("gamma", &[128], &[1.0; 128])
        .node_in("com.mxfuse", "MxQuantize", &["x"], &["q", "sc"], &[])
        .node_in(
            "com.mxfuse",
            "SwiGluMxQuant",
            &["gate_up"],
            &["aq", "asc"],
            &[("layout", Attr::S("split_halves"))],
        )
        .node_in(
            "com.mxfuse",
            "MxMatMul",
            &["aq", "asc", "w"],
            &["y"],
            &[("output_dtype", Attr::I(FLOAT16 as i64))],
        )
        .node_in(
            "com.mxfuse",
            "AddRmsNormMxQuant",
            &["x", "res", "gamma"],
            &["nq", "nsc", "res_out", "normed"],
            &[],
        );
    let g = load(
        &b,
        &[
            ("x", FLOAT16, "b,128"),
            ("res", FLOAT16, "b,128"),
            ("gate_up", FLOAT16, "b,256"),
        ],
    );
    expect(&g, "q", FLOAT8E4M3FN, "b,128");
    expect(&g, "sc", FLOAT8E8M0, "b,4");
    expect(&g, "aq", FLOAT8E4M3FN, "b,128");
    expect(&g, "asc", FLOAT8E8M0, "b,4");
    expect(&g, "y", FLOAT16, "b,16");
    expect(&g, "nq", FLOAT8E4M3FN, "b,128");
    expect(&g, "nsc", FLOAT8E8M0, "b,4");
    expect(&g, "res_out", FLOAT16, "b,128");
    expect(&g, "normed", FLOAT16, "b,128");
}

/// `flatten_rows = 1` (a MoE block's `Reshape(normed, [-1, H])` read into the op): q, scale and
/// normed are `[rows, H]`, the residual sum keeps x's shape.
#[test]
fn add_rms_norm_flatten_rows_flattens_q_scale_and_normed() {
    let mut b = ModelBuilder::new(24);
    b.opset("com.mxfuse", 1)
        .init_f32("gamma", &[128], &[1.0; 128])
        .node_in(
            "com.mxfuse",
            "AddRmsNormMxQuant",
            &["x", "res", "gamma"],
            &["nq", "nsc", "res_out", "normed"],
            &[("flatten_rows", Attr::I(1))],
        );
    let g = load(&b, &[("x", FLOAT, "b,3,128"), ("res", FLOAT, "b,3,128")]);
    expect(&g, "nq", FLOAT8E4M3FN, "3*b,128");
    expect(&g, "nsc", FLOAT8E8M0, "3*b,4");
    expect(&g, "res_out", FLOAT, "b,3,128");
    expect(&g, "normed", FLOAT, "3*b,128");
}

/// ONNX's opset-23 `Attention` and `RotaryEmbedding` (what torch's dynamo exporter writes at
/// opset ≥ 23, so in standard MX exports), ONNX Runtime's `MultiHeadAttention` / `Attention`
/// (its transformers optimizer's) and the activations the list above lacked: without
/// them a model without value_info had unknown shapes from the attention on, every later
/// fusion was refused offline, and the o_proj quantizer stayed an ONNX `QuantizeLinear` with
/// an E8M0 scale, which ONNX Runtime cannot load (probe 10).
#[test]
fn opset23_attention_rotary_and_other_activations() {
    let mut b = ModelBuilder::new(24);
    let heads = [("q_num_heads", Attr::I(4)), ("kv_num_heads", Attr::I(2))];
    b.node_in("", "Attention", &["q3", "k3", "v3"], &["y3"], &heads)
        .node("Attention", &["q3", "k3", "v3"], &["y3_no_heads"])
        .node(
            "Attention",
            &["q4", "k4", "v4"],
            &["y4", "present_k", "present_v"],
        )
        .node("RotaryEmbedding", &["q3", "cos", "sin", "pos"], &["rot"]);
    for op in [
        "HardSwish",
        "Mish",
        "Celu",
        "ThresholdedRelu",
        "Shrink",
        "Tan",
        "Trilu",
        "Asinh",
        "Hardmax",
        "CumProd",
        "LpNormalization",
        "MeanVarianceNormalization",
    ] {
        b.node(op, &["q3"], &[&format!("{}_out", op.to_lowercase())]);
    }
    // ONNX Runtime's transformers-optimizer spellings, typed as ORT's own inference types them.
    let ms = "com.microsoft";
    b.opset(ms, 1)
        .node_in(
            ms,
            "MultiHeadAttention",
            &["q3", "k3", "v3"],
            &["mha3"],
            &[],
        )
        .node_in(
            ms,
            "MultiHeadAttention",
            &["q3", "k4h", "v4h"],
            &["mha4"],
            &[],
        )
        .init_f32("qkv_w", &[128, 384], &[0.0; 128 * 384])
        .node_in(ms, "Attention", &["q3", "qkv_w"], &["msa"], &[])
        .node_in(
            ms,
            "Attention",
            &["q3", "qkv_w"],
            &["msa_sizes"],
            &[("qkv_hidden_sizes", Attr::Is(&[128, 128, 64]))],
        );
    let g = load(
        &b,
        &[
            ("q3", FLOAT16, "b,s,128"),
            ("k3", FLOAT16, "b,t,64"),
            ("v3", FLOAT16, "b,t,96"),
            ("q4", FLOAT, "b,4,s,32"),
            ("k4", FLOAT, "b,2,t,32"),
            ("v4", FLOAT, "b,2,t,48"),
            ("cos", FLOAT16, "64,16"),
            ("sin", FLOAT16, "64,16"),
            ("pos", INT64, "b,s"),
            ("k4h", FLOAT16, "b,2,t,64"),
            ("v4h", FLOAT16, "b,2,t,48"),
        ],
    );
    // onnx.shape_inference gives the same: [b, s, 4 · 96 / 2], [b, s, ?], [b, 4, s, 48].
    expect(&g, "y3", FLOAT16, "b,s,192");
    expect(&g, "y3_no_heads", FLOAT16, "b,s,?");
    expect(&g, "y4", FLOAT, "b,4,s,48");
    assert_eq!(info_of(&g, "present_k"), None);
    expect(&g, "rot", FLOAT16, "b,s,128");
    for op in [
        "hardswish",
        "mish",
        "celu",
        "thresholdedrelu",
        "shrink",
        "tan",
        "trilu",
        "asinh",
        "hardmax",
        "cumprod",
        "lpnormalization",
        "meanvariancenormalization",
    ] {
        expect(&g, &format!("{op}_out"), FLOAT16, "b,s,128");
    }
    expect(&g, "mha3", FLOAT16, "b,s,96");
    expect(&g, "mha4", FLOAT16, "b,s,96");
    expect(&g, "msa", FLOAT16, "b,s,128");
    expect(&g, "msa_sizes", FLOAT16, "b,s,64");
}

/// `Tile` (torch's `repeat` / `repeat_interleave`, e.g. a MoE block repeating the tokens top-k
/// times in front of the experts' quantizer): each dim times its count.
#[test]
fn tile_multiplies_each_dim() {
    let mut b = ModelBuilder::new(24);
    b.init_i64("reps", &[2], &[4, 1])
        .node("Tile", &["x", "reps"], &["tiled"])
        .init_i64("reps3", &[3], &[1, 2, 1])
        .node("Tile", &["y", "reps3"], &["tiled3"])
        .node("Tile", &["x", "runtime_reps"], &["rank_only"]);
    let g = load(
        &b,
        &[
            ("x", FLOAT16, "t,96"),
            ("y", FLOAT, "b,3,64"),
            ("runtime_reps", INT64, "2"),
        ],
    );
    expect(&g, "tiled", FLOAT16, "4*t,96");
    expect(&g, "tiled3", FLOAT, "b,6,64");
    expect(&g, "rank_only", FLOAT16, "?,?");
}

#[test]
fn known_types_win_and_unknown_ops_stay_unknown() {
    let mut b = ModelBuilder::new(24);
    b.opset("my.domain", 1)
        .node("Sigmoid", &["x"], &["declared"])
        .value_info("declared", FLOAT16, &[7])
        .node("Relu", &["x"], &["partly_declared"])
        .node_in("my.domain", "Mystery", &["x"], &["m"], &[])
        .node("Relu", &["m"], &["after_mystery"]);
    let mut m = b.model();
    // A value_info entry with a type but no shape: the rank is filled in.
    let mut partial = tensor_info("partly_declared", FLOAT, &[]);
    if let Some(graph_rewrites::onnx_pb::type_proto::Value::TensorType(t)) =
        partial.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.shape = None;
    }
    let gp = m.graph.as_mut().expect("graph");
    gp.value_info.push(partial);
    gp.input.push(input("x", FLOAT, "b,64"));
    let g = Graph::from_model(m, None).expect("loads");
    // The declared (contradicting) type is kept as loaded.
    expect(&g, "declared", FLOAT16, "7");
    expect(&g, "partly_declared", FLOAT, "b,64");
    assert_eq!(info_of(&g, "m"), None);
    assert_eq!(info_of(&g, "after_mystery"), None);
}

#[test]
fn inferred_types_are_not_written_back() {
    let mut b = ModelBuilder::new(24);
    b.node("Sigmoid", &["x"], &["s"])
        .node("Mul", &["x", "s"], &["y"])
        .output("y", FLOAT, &[-2, 64]);
    let mut m = b.model();
    m.graph
        .as_mut()
        .expect("graph")
        .input
        .push(input("x", FLOAT, "batch,64"));
    let g = Graph::from_model(m.clone(), None).expect("loads");
    expect(&g, "s", FLOAT, "batch,64");
    assert_eq!(g.to_model().encode_to_vec(), m.encode_to_vec());
}

// ---- end to end: models without value_info fuse like with it -------------------------------

fn rewrite(model: ModelProto, dir: &Path) -> (RewriteReport, Graph) {
    let mut g = Graph::from_model(model, Some(dir)).expect("model loads");
    let report = run_pipeline(&mut g, &PipelineOptions::default()).expect("pipeline runs");
    (report, g)
}

fn without_value_info(mut m: ModelProto) -> ModelProto {
    if let Some(g) = m.graph.as_mut() {
        g.value_info.clear();
    }
    m
}

/// Fusion counts per rule and refusals as (rule, reason), sorted.
type Outcome = (Vec<(String, usize)>, Vec<(String, String)>);

/// What a report says was fused and refused, for comparing two runs.
fn outcome(r: &RewriteReport) -> Outcome {
    let counts = r.counts.iter().map(|(k, v)| (k.clone(), *v)).collect();
    let mut refusals: Vec<_> = r
        .rejections
        .iter()
        .map(|x| (x.rule.clone(), x.reason.clone()))
        .collect();
    refusals.sort();
    (counts, refusals)
}

#[test]
fn fixtures_without_value_info_fuse_exactly_as_with_it() {
    let files = fixture_files(&["", "real"]);
    assert!(files.len() >= 10, "found {} fixtures", files.len());
    let mut fused_total = 0;
    for path in &files {
        let dir = path.parent().expect("has a directory");
        let m = load_model(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (with, typed) = rewrite(m.clone(), dir);
        let (without, bare) = rewrite(without_value_info(m), dir);
        assert_eq!(
            outcome(&without),
            outcome(&with),
            "{}: without value_info {:#?}",
            path.display(),
            without.rejections
        );
        // The same rewritten graph, and the values the rules created are typed the same way
        // (their value_info comes from the types the rules read).
        let (typed, bare) = (typed.to_model(), bare.to_model());
        let (typed, bare) = (typed.graph.expect("graph"), bare.graph.expect("graph"));
        assert_eq!(bare.node, typed.node, "{}", path.display());
        for vi in &bare.value_info {
            assert!(typed.value_info.contains(vi), "{}: {vi:?}", path.display());
        }
        fused_total += with.counts.values().sum::<usize>();
    }
    assert!(fused_total > 20, "the fixtures fuse ({fused_total} sites)");
}

fn quark_sample() -> Option<PathBuf> {
    Some(graph_rewrites::testing::samples_dir().join("tiny_swiglu_mlp_MXFP8E4M3.onnx"))
}

/// AMD Quark's real output: with its `value_info` removed, ONNX shape inference would stop at
/// the first `MXQuantizeDequantize`; ours types the SwiGLU activation and the down_proj output
/// (which the file never typed: the rule used to fall back to the activation's dtype).
#[test]
fn quark_sample_activations_fuse_through_inference() {
    let Some(path) = quark_sample() else {
        return;
    };
    let dir = path.parent().expect("has a directory");
    let m = load_model(&path).expect("sample loads");
    let (with, _) = rewrite(m.clone(), dir);
    let stripped = without_value_info(m);
    let g = Graph::from_model(stripped.clone(), Some(dir)).expect("loads");
    expect(&g, "gate", FLOAT, "1,8,128");
    expect(&g, "act", FLOAT, "1,8,128");
    expect(&g, "act_DequantizeLinear_Output", FLOAT, "1,8,128");
    expect(&g, "y_QuantizeLinear_Input", FLOAT, "1,8,64");
    let (without, _) = rewrite(stripped, dir);
    // x → gate_up_proj and act → down_proj fuse; gu (read by a Split) and y (a graph output)
    // become MxQuantize + MxDequantize; the axis-1 fake quants inside the SwiGLU stay.
    assert_eq!(without.counts["mxquant"], 4, "{without:#?}");
    assert_eq!(without.rejections.len(), 4, "{without:#?}");
    assert_eq!(outcome(&without), outcome(&with));
}

/// Every `value_info` entry the exporters wrote, against what inference derives without it:
/// never a contradiction, and nearly all reproduced in full (the rest are dims only sympy
/// derives, e.g. `seq + 1`, or slices of a symbolic axis).
#[test]
fn inference_agrees_with_exported_value_info() {
    let mut files = fixture_files(&["", "real"]);
    files.extend(quark_sample());
    files.sort();
    let (mut contradictions, mut partial, mut total) = (Vec::new(), Vec::new(), 0);
    for path in &files {
        let dir = path.parent().expect("has a directory");
        let m = load_model(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let declared = Graph::from_model(m.clone(), Some(dir)).expect("loads");
        let g = Graph::from_model(without_value_info(m.clone()), Some(dir)).expect("loads");
        let file = path.file_name().map(|f| f.to_string_lossy().into_owned());
        for vi in &m.graph.as_ref().expect("graph").value_info {
            let name = vi.name.as_deref().unwrap_or("");
            let (Some(v), Some(dv)) = (g.value_by_name(name), declared.value_by_name(name)) else {
                continue;
            };
            if g.producer(v)
                .is_some_and(|(n, _)| g.op_type(n) == "Constant")
            {
                continue; // typed from its value by the IR itself, not by inference
            }
            let (got, want) = (g.tensor_info(v), declared.tensor_info(dv));
            let line = format!("{file:?}: {name}: declared {want:?}, inferred {got:?}");
            total += 1;
            if contradicts(got.as_ref(), want.as_ref()) {
                contradictions.push(line);
            } else if !reproduces(got.as_ref(), want.as_ref()) {
                partial.push(line);
            }
        }
    }
    eprintln!(
        "{total} declared types checked, {} not fully reproduced:\n{}",
        partial.len(),
        partial.join("\n")
    );
    assert!(contradictions.is_empty(), "{}", contradictions.join("\n"));
    assert!(total > 1000, "{total} value_info entries checked");
    assert!(
        partial.len() * 20 < total,
        "{} of {total} declared types not reproduced:\n{}",
        partial.len(),
        partial.join("\n")
    );
}

/// Whether two types disagree where both say something.
fn contradicts(inferred: Option<&TensorInfo>, declared: Option<&TensorInfo>) -> bool {
    let (Some(i), Some(d)) = (inferred, declared) else {
        return false;
    };
    let elem = i.elem_type != 0 && d.elem_type != 0 && i.elem_type != d.elem_type;
    let shape = match (&i.shape, &d.shape) {
        (Some(is), Some(ds)) => {
            is.len() != ds.len()
                || is
                    .iter()
                    .zip(ds)
                    .any(|(a, b)| *a != Dim::Unknown && *b != Dim::Unknown && a != b)
        }
        _ => false,
    };
    elem || shape
}

/// Whether the inferred type says everything the declared one does.
fn reproduces(inferred: Option<&TensorInfo>, declared: Option<&TensorInfo>) -> bool {
    let (Some(i), Some(d)) = (inferred, declared) else {
        return declared.is_none();
    };
    let dims = match (&i.shape, &d.shape) {
        (_, None) => true,
        (Some(is), Some(ds)) => is.iter().zip(ds).all(|(a, b)| *b == Dim::Unknown || a == b),
        (None, Some(_)) => false,
    };
    i.elem_type == d.elem_type && dims
}

/// torch's exporters build Reshape / Expand / Range targets from `Shape` at run time; the
/// element values of such computations are tracked, so the targets stay symbolic.
#[test]
fn shape_computations_give_symbolic_targets() {
    let mut b = ModelBuilder::new(18);
    b.init_i64("zero", &[], &[0])
        .init_i64("one", &[], &[1])
        .init_i64("two", &[1], &[2])
        .init_i64("ax0", &[1], &[0])
        .init_i64("heads", &[2], &[4, 16])
        .init_i64("width", &[1], &[32])
        .init_i64("hidden", &[1], &[64])
        .node("Shape", &["x"], &["shp"])
        .node_in(
            "",
            "Shape",
            &["x"],
            &["seq1"],
            &[("start", Attr::I(1)), ("end", Attr::I(2))],
        )
        .node("Squeeze", &["seq1", "ax0"], &["seq"])
        .node("Range", &["zero", "seq", "one"], &["positions"])
        .node("Gather", &["shp", "zero"], &["batch0"])
        .node("Unsqueeze", &["batch0", "ax0"], &["batch1"])
        .node_in(
            "",
            "Concat",
            &["batch1", "seq1", "heads"],
            &["split_heads_shape"],
            &[("axis", Attr::I(0))],
        )
        .node("Reshape", &["x", "split_heads_shape"], &["split_heads"])
        .node("Mul", &["seq1", "two"], &["seq2"])
        .node_in(
            "",
            "Concat",
            &["batch1", "seq2", "width"],
            &["doubled_shape"],
            &[("axis", Attr::I(0))],
        )
        .node("Reshape", &["x", "doubled_shape"], &["doubled"])
        .node_in(
            "",
            "Concat",
            &["seq1", "hidden"],
            &["rows_shape"],
            &[("axis", Attr::I(0))],
        )
        .node("Expand", &["row", "rows_shape"], &["rows"])
        .node("ConstantOfShape", &["seq1"], &["zeros"]);
    let g = load(&b, &[("x", FLOAT, "b,s,64"), ("row", FLOAT, "1,64")]);
    expect(&g, "shp", INT64, "3");
    expect(&g, "seq", INT64, "");
    expect(&g, "positions", INT64, "s");
    expect(&g, "split_heads", FLOAT, "b,s,4,16");
    expect(&g, "doubled", FLOAT, "b,2*s,32");
    expect(&g, "rows", FLOAT, "s,64");
    expect(&g, "zeros", FLOAT, "s");
}

/// A `-1` over one symbolic dim keeps it, scaled like sympy spells it (MoE token routing).
#[test]
fn reshape_minus_one_scales_a_symbolic_dim() {
    let mut b = ModelBuilder::new(21);
    b.init_i64("flat", &[2], &[-1, 64])
        .init_i64("back", &[3], &[-1, 2, 64])
        .init_i64("heads", &[4], &[1, -1, 4, 16])
        .node("Reshape", &["x", "flat"], &["tokens"])
        .node("Reshape", &["tokens", "back"], &["per_expert"])
        .node("Reshape", &["h", "heads"], &["split_heads"])
        .node("Flatten", &["x"], &["flattened"]);
    let g = load(&b, &[("x", FLOAT, "seq,2,64"), ("h", FLOAT, "1,seq,64")]);
    expect(&g, "tokens", FLOAT, "2*seq,64");
    expect(&g, "per_expert", FLOAT, "seq,2,64");
    expect(&g, "split_heads", FLOAT, "1,seq,4,16");
    expect(&g, "flattened", FLOAT, "seq,128");
}

#[test]
fn attention_and_routing_ops() {
    let mut b = ModelBuilder::new(21);
    b.opset("com.microsoft", 1)
        .init_i64("k", &[1], &[2])
        .node_in(
            "com.microsoft",
            "GroupQueryAttention",
            &["qkv", "", "", "past_k", "past_v"],
            &["attn", "present_k", "present_v"],
            &[("num_heads", Attr::I(4)), ("kv_num_heads", Attr::I(2))],
        )
        .node_in(
            "",
            "TopK",
            &["scores", "k"],
            &["top", "top_idx"],
            &[("axis", Attr::I(-1))],
        )
        .node_in(
            "",
            "GatherND",
            &["experts", "idx"],
            &["picked"],
            &[("batch_dims", Attr::I(0))],
        );
    let g = load(
        &b,
        &[
            ("qkv", FLOAT16, "b,s,128"),
            ("past_k", FLOAT16, "b,2,p,16"),
            ("past_v", FLOAT16, "b,2,p,16"),
            ("scores", FLOAT, "s,8"),
            ("experts", FLOAT, "8,64,32"),
            ("idx", INT64, "t,1"),
        ],
    );
    expect(&g, "attn", FLOAT16, "b,s,64");
    assert_eq!(info_of(&g, "present_k").map(|i| i.elem_type), Some(FLOAT16));
    expect(&g, "top", FLOAT, "s,2");
    expect(&g, "top_idx", INT64, "s,2");
    expect(&g, "picked", FLOAT, "t,64,32");
}

/// A small deterministic generator for the robustness test (xorshift64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Random graphs over every op with a rule, with random (mostly invalid) shapes, attributes and
/// constant inputs, extreme integers included: loading never panics, inference only fills
/// types.
#[test]
fn random_graphs_never_panic() {
    const OPS: &[(&str, &str, usize)] = &[
        ("", "Add", 2),
        ("", "Where", 3),
        ("", "Pow", 2),
        ("", "Cast", 1),
        ("", "CastLike", 2),
        ("", "MatMul", 2),
        ("", "Gemm", 3),
        ("", "Reshape", 2),
        ("", "Flatten", 1),
        ("", "Transpose", 1),
        ("", "Unsqueeze", 2),
        ("", "Squeeze", 2),
        ("", "Concat", 3),
        ("", "Split", 2),
        ("", "Slice", 5),
        ("", "Gather", 2),
        ("", "GatherND", 2),
        ("", "GatherElements", 2),
        ("", "Expand", 2),
        ("", "ReduceMean", 2),
        ("", "ArgMax", 1),
        ("", "LayerNormalization", 2),
        ("", "QuantizeLinear", 3),
        ("", "DequantizeLinear", 3),
        ("", "Shape", 1),
        ("", "ConstantOfShape", 1),
        ("", "Range", 3),
        ("", "TopK", 2),
        ("", "Pad", 4),
        ("", "Einsum", 2),
        ("", "OneHot", 3),
        ("", "Resize", 4),
        ("", "If", 1),
        ("", "Loop", 3),
        ("", "Scan", 2),
        ("", "LinearAttention", 4),
        ("", "CausalConvWithState", 4),
        ("", "TensorScatter", 2),
        ("", "BitCast", 1),
        ("com.microsoft", "GroupQueryAttention", 2),
        ("com.microsoft", "MatMulNBits", 2),
        ("com.microsoft", "SkipSimplifiedLayerNormalization", 3),
        ("com.mxfuse", "MxQuantize", 1),
        ("com.mxfuse", "SwiGluMxQuant", 1),
        ("com.mxfuse", "MxMatMul", 3),
    ];
    const INTS: &[i64] = &[i64::MIN, -3, -2, -1, 0, 1, 2, 3, 32, 64, i64::MAX];
    const ATTRS: &[&str] = &[
        "axis",
        "axes",
        "perm",
        "keepdims",
        "split",
        "num_outputs",
        "to",
        "allowzero",
        "start",
        "end",
        "batch_dims",
        "output_dtype",
        "trans_b",
        "transA",
        "k",
        "num_heads",
        "kv_num_heads",
        "N",
        "stash_type",
        "noop_with_empty_axes",
        "pads",
        "num_scan_inputs",
        "scan_input_axes",
        "scan_output_axes",
        "q_num_heads",
        "equation",
        "keep_aspect_ratio_policy",
        "coordinate_transformation_mode",
    ];
    const EQUATIONS: &[&str] = &[
        "ij,jk->ik",
        "...d,de",
        "ii",
        "a...b...,",
        "->",
        "bsd,de->bsz",
    ];
    const STRINGS: &[&str] = &["not_larger", "not_smaller", "tf_crop_and_resize", ""];
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut typed = 0;
    for _ in 0..300 {
        let mut b = ModelBuilder::new(*rng.pick(&[9, 11, 13, 18, 21, 24]));
        b.opset("com.microsoft", 1).opset("com.mxfuse", 1);
        let mut pool: Vec<String> = Vec::new();
        for i in 0..3 {
            let rank = rng.below(4);
            let dims: Vec<i64> = (0..rank)
                .map(|_| *rng.pick(&[-2, -1, 0, 1, 3, 64]))
                .collect();
            let name = format!("x{i}");
            b.input(&name, *rng.pick(&[FLOAT, FLOAT16, INT64]), &dims);
            pool.push(name);
            let len = rng.below(4);
            let vals: Vec<i64> = (0..len).map(|_| *rng.pick(INTS)).collect();
            let name = format!("c{i}");
            b.init_i64(&name, &[len as i64], &vals);
            pool.push(name);
        }
        for n in 0..8 {
            let (domain, op, arity) = *rng.pick(OPS);
            let inputs: Vec<String> = (0..arity).map(|_| rng.pick(&pool).clone()).collect();
            let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
            let outputs: Vec<String> = (0..1 + rng.below(3)).map(|o| format!("v{n}_{o}")).collect();
            let outputs: Vec<&str> = outputs.iter().map(String::as_str).collect();
            let lists: Vec<Vec<i64>> = (0..3)
                .map(|_| (0..rng.below(4)).map(|_| *rng.pick(INTS)).collect())
                .collect();
            let attrs: Vec<(&str, Attr)> = (0..rng.below(4))
                .map(|i| {
                    let name = *rng.pick(ATTRS);
                    let value = match name {
                        "axes" | "perm" | "split" | "pads" | "scan_input_axes"
                        | "scan_output_axes" => Attr::Is(&lists[i % 3]),
                        "equation" => Attr::S(EQUATIONS[rng.below(EQUATIONS.len())]),
                        "keep_aspect_ratio_policy" | "coordinate_transformation_mode" => {
                            Attr::S(STRINGS[rng.below(STRINGS.len())])
                        }
                        _ => Attr::I(*rng.pick(INTS)),
                    };
                    (name, value)
                })
                .collect();
            // Repeated attribute names make an invalid node; keep the first of each.
            let mut seen = Vec::new();
            let attrs: Vec<(&str, Attr)> = attrs
                .into_iter()
                .filter(|(n, _)| {
                    !seen.contains(n) && {
                        seen.push(*n);
                        true
                    }
                })
                .collect();
            b.node_in(domain, op, &inputs, &outputs, &attrs);
            if matches!(op, "If" | "Loop" | "Scan") {
                // Bodies with random typed and untyped outputs, some naming main-graph values.
                for attr in ["then_branch", "else_branch", "body"] {
                    let outs: Vec<(String, Option<(i32, String)>)> = (0..rng.below(5))
                        .map(|o| {
                            let outer = rng.pick(&pool).clone();
                            let name = if rng.below(2) == 0 {
                                format!("o{o}")
                            } else {
                                outer
                            };
                            let spec = ["", "b,64", "?", "3,s,1"][rng.below(4)].to_string();
                            let t =
                                (rng.below(3) > 0).then(|| (*rng.pick(&[FLOAT, BOOL, 0]), spec));
                            (name, t)
                        })
                        .collect();
                    let outs: Vec<(&str, Option<(i32, &str)>)> = outs
                        .iter()
                        .map(|(n, t)| (n.as_str(), t.as_ref().map(|(t, s)| (*t, s.as_str()))))
                        .collect();
                    let made: Vec<[String; 1]> =
                        (0..outs.len()).map(|o| [format!("o{o}")]).collect();
                    let made: Vec<[&str; 1]> = made.iter().map(|[o]| [o.as_str()]).collect();
                    let nodes: Vec<(&str, &[&str], &[&str])> = made
                        .iter()
                        .map(|o| ("Identity", &["x0"][..], &o[..]))
                        .collect();
                    b.graph_attr(attr, body(&[], &nodes, &outs));
                }
            }
            pool.extend(outputs.iter().map(|s| s.to_string()));
        }
        let g = b.graph().expect("random graph loads");
        for name in pool.iter().filter(|n| n.starts_with('v')) {
            let v = g.value_by_name(name).expect("value exists");
            if let Some(info) = g.tensor_info(v) {
                assert!(info.shape.is_none_or(|s| s.len() <= 1024), "{name}");
                typed += 1;
            }
        }
    }
    // Most random nodes are invalid, but many still get a type: the rules did run.
    assert!(typed > 1000, "{typed} node outputs typed");
}

/// NonZero's output is `[rank(x), ?]` int64 (ONNX). Without it everything downstream of a
/// data-dependent MoE dispatch (`Gather(x, NonZero(Equal(ids, e)))`, torch dynamo's unrolled
/// `where(mask[e])` expert loop) had no rank and its MXFP8 quantizers and linears were refused
/// offline, while the plugin EP fused them with ORT's shapes (new-user probe 7).
#[test]
fn nonzero_dispatch_keeps_the_routed_rows_shape() {
    let mut b = ModelBuilder::new(24);
    b.init_i64("zero", &[], &[0])
        .init_i64("axis0", &[1], &[0])
        .init_i64("blk", &[3], &[0, 2, 32])
        .node("Equal", &["ids", "zero"], &["mask"])
        .node("NonZero", &["mask"], &["nz"])
        .node("Squeeze", &["nz", "axis0"], &["tok"])
        .node("Gather", &["x", "tok"], &["xe"])
        .mx_quant_floor("xe", "blk", "");
    let g = load(&b, &[("x", FLOAT, "t,64"), ("ids", INT64, "t")]);
    expect(&g, "nz", INT64, "1,?");
    expect(&g, "xe", FLOAT, "?,64");
    let mut r = g.clone();
    let report = run_pipeline(&mut r, &PipelineOptions::default()).expect("pipeline");
    assert_eq!(report.counts["mxquant"], 1, "{:?}", report.rejections);
}

#[test]
fn pad_in_input_attribute_and_axes_forms() {
    let mut b = ModelBuilder::new(24);
    b.init_i64("pads", &[6], &[0, 0, 0, 0, 0, 16])
        .init_i64("last", &[1], &[-1])
        .init_i64("p23", &[2], &[2, 3])
        .init_i64("seq_pads", &[6], &[0, 1, 0, 0, 1, 0])
        .init_i64("zero_sum", &[6], &[0, 2, 0, 0, -2, 0])
        .init_i64("crop", &[4], &[0, -1, 0, -1])
        .init_i64("over", &[4], &[0, -9, 0, 0])
        .init_i64("odd", &[3], &[1, 2, 3])
        .init_i64("huge", &[4], &[0, i64::MAX, 0, 1])
        .init_f32("zero", &[], &[0.0])
        .node("Pad", &["x", "pads"], &["padded"])
        .node("Pad", &["x", "pads", "zero"], &["with_value"])
        .node("Pad", &["x", "p23", "", "last"], &["last_only"])
        .node("Pad", &["x", "seq_pads"], &["seq"])
        .node("Pad", &["x", "zero_sum"], &["shifted"])
        .node("Pad", &["x", "dyn"], &["dynamic"])
        .node("Pad", &["x", "p23", "", "dyn_axes"], &["dynamic_axes"])
        .node("Pad", &["m", "crop"], &["cropped"])
        .node("Pad", &["m", "over"], &["over_cropped"])
        .node("Pad", &["x", "odd"], &["odd_pads"])
        .node("Pad", &["m", "huge"], &["overflow"]);
    let g = load(
        &b,
        &[
            ("x", FLOAT16, "b,s,48"),
            ("m", INT64, "4,8"),
            ("dyn", INT64, "6"),
            ("dyn_axes", INT64, "1"),
        ],
    );
    expect(&g, "padded", FLOAT16, "b,s,64");
    expect(&g, "with_value", FLOAT16, "b,s,64");
    expect(&g, "last_only", FLOAT16, "b,s,53");
    // A named dim padded by 2 has no name any more; pads adding up to 0 keep it.
    expect(&g, "seq", FLOAT16, "b,?,48");
    expect(&g, "shifted", FLOAT16, "b,s,48");
    expect(&g, "dynamic", FLOAT16, "?,?,?");
    expect(&g, "dynamic_axes", FLOAT16, "?,?,?");
    expect(&g, "cropped", INT64, "4,6");
    // Cropping below 0, pads of the wrong length, overflowing pads: invalid, no shape.
    for name in ["over_cropped", "odd_pads", "overflow"] {
        assert_eq!(info_of(&g, name).and_then(|i| i.shape), None, "{name}");
    }

    // Opset 2-10: the pads are an attribute.
    let mut b = ModelBuilder::new(10);
    b.node_in(
        "",
        "Pad",
        &["x"],
        &["y"],
        &[("pads", Attr::Is(&[1, 0, 0, 1, 0, 16]))],
    );
    let g = load(&b, &[("x", FLOAT, "4,s,48")]);
    expect(&g, "y", FLOAT, "6,s,64");
}

#[test]
fn einsum_follows_the_equation() {
    let mut b = ModelBuilder::new(24);
    b.init_f32("w", &[48, 64], &vec![0.0; 48 * 64]);
    let mut eq = |equation: &str, ins: &[&str], out: &str| {
        b.node_in(
            "",
            "Einsum",
            ins,
            &[out],
            &[("equation", Attr::S(equation))],
        );
    };
    eq("bsd,de->bse", &["x", "w"], "proj");
    eq("...d,de", &["x", "w"], "implicit");
    eq("bhqd,bhkd->bhqk", &["q", "k"], "scores");
    eq("bsd,de->bsz", &["x", "w"], "bad_label");
    eq("bsd,de->bse", &["x"], "one_operand");
    eq("bsd,de->bse", &["x", "w_wrong"], "bad_sizes");
    b.node_in(
        "",
        "Einsum",
        &["x", "w"],
        &["int_eq"],
        &[("equation", Attr::I(3))],
    );
    b.node("Einsum", &["x", "w"], &["no_eq"]);
    let g = load(
        &b,
        &[
            ("x", BFLOAT16, "b,s,48"),
            ("q", FLOAT, "b,4,s,16"),
            ("k", FLOAT, "b,4,t,16"),
            ("w_wrong", BFLOAT16, "32,64"),
        ],
    );
    expect(&g, "proj", BFLOAT16, "b,s,64");
    expect(&g, "implicit", BFLOAT16, "b,s,64");
    expect(&g, "scores", FLOAT, "b,4,s,t");
    for name in ["bad_label", "one_operand", "bad_sizes", "int_eq", "no_eq"] {
        let i = info_of(&g, name).expect("the element type is inferred");
        assert_eq!((i.elem_type, i.shape), (BFLOAT16, None), "{name}");
    }
}

#[test]
fn one_hot_inserts_the_depth_at_axis() {
    let mut b = ModelBuilder::new(24);
    b.init_i64("eight", &[], &[8])
        .init_i64("zero", &[1], &[0])
        .init_f32("five", &[1], &[5.0])
        .init_i64("dim0", &[], &[0])
        .node("Shape", &["table"], &["table_shape"])
        .node("Gather", &["table_shape", "dim0"], &["vocab"]);
    let mut one_hot = |depth: &str, out: &str, attrs: &[(&str, Attr)]| {
        b.node_in("", "OneHot", &["ids", depth, "vals"], &[out], attrs);
    };
    one_hot("eight", "last", &[]);
    one_hot("eight", "middle", &[("axis", Attr::I(1))]);
    one_hot("eight", "first", &[("axis", Attr::I(-3))]);
    one_hot("five", "float_depth", &[]);
    one_hot("vocab", "named_depth", &[]);
    one_hot("zero", "zero_depth", &[]);
    one_hot("dyn", "dynamic_depth", &[]);
    one_hot("eight", "axis_out_of_range", &[("axis", Attr::I(3))]);
    one_hot("eight", "axis_not_int", &[("axis", Attr::S("1"))]);
    let g = load(
        &b,
        &[
            ("ids", INT64, "b,s"),
            ("vals", FLOAT16, "2"),
            ("table", FLOAT, "v,64"),
            ("dyn", INT64, ""),
        ],
    );
    expect(&g, "last", FLOAT16, "b,s,8");
    expect(&g, "middle", FLOAT16, "b,8,s");
    expect(&g, "first", FLOAT16, "8,b,s");
    expect(&g, "float_depth", FLOAT16, "b,s,5");
    expect(&g, "named_depth", FLOAT16, "b,s,v");
    expect(&g, "zero_depth", FLOAT16, "b,s,?");
    expect(&g, "dynamic_depth", FLOAT16, "b,s,?");
    for name in ["axis_out_of_range", "axis_not_int"] {
        let i = info_of(&g, name).expect("the element type is inferred");
        assert_eq!((i.elem_type, i.shape), (FLOAT16, None), "{name}");
    }
}

#[test]
fn resize_by_sizes_scales_and_axes() {
    let mut b = ModelBuilder::new(19);
    b.init_f32("scales", &[4], &[1.0, 1.0, 2.0, 0.5])
        .init_f32("odd_scales", &[4], &[1.0, 1.0, 1.5, 0.3])
        .init_f32("bad_scales", &[4], &[1.0, 1.0, -2.0, f32::NAN])
        .init_f32("three_scales", &[3], &[1.0, 2.0, 2.0])
        .init_f32("empty", &[0], &[])
        .init_i64("sizes", &[4], &[1, 3, 5, 7])
        .init_i64("hw", &[2], &[5, 7])
        .init_i64("hw_aspect", &[2], &[4, 6]);
    let mut resize = |ins: &[&str], out: &str, attrs: &[(&str, Attr)]| {
        b.node_in("", "Resize", ins, &[out], attrs);
    };
    resize(&["x", "", "scales"], "by_scales", &[]);
    resize(&["x", "", "odd_scales"], "floored", &[]);
    resize(&["x", "", "bad_scales"], "bad_scale_values", &[]);
    resize(&["x", "", "empty", "sizes"], "by_sizes", &[]);
    resize(
        &["x", "", "", "hw"],
        "axes_sizes",
        &[("axes", Attr::Is(&[2, -1]))],
    );
    resize(&["x", "", "dyn"], "dynamic", &[]);
    let crop = [(
        "coordinate_transformation_mode",
        Attr::S("tf_crop_and_resize"),
    )];
    resize(&["x", "roi", "scales"], "cropped", &crop);
    let not_larger = [
        ("axes", Attr::Is(&[2, 3])),
        ("keep_aspect_ratio_policy", Attr::S("not_larger")),
    ];
    resize(&["x", "", "", "hw_aspect"], "not_larger", &not_larger);
    let not_smaller = [
        ("axes", Attr::Is(&[2, 3])),
        ("keep_aspect_ratio_policy", Attr::S("not_smaller")),
    ];
    resize(&["x", "", "", "hw_aspect"], "not_smaller", &not_smaller);
    resize(&["x", "", "three_scales"], "wrong_count", &[]);
    resize(
        &["x", "", "", "hw"],
        "bad_axes",
        &[("axes", Attr::Is(&[2, 2]))],
    );
    let g = load(
        &b,
        &[
            ("x", FLOAT, "b,3,8,8"),
            ("dyn", FLOAT, "4"),
            ("roi", FLOAT, "8"),
        ],
    );
    expect(&g, "by_scales", FLOAT, "b,3,16,4");
    expect(&g, "floored", FLOAT, "b,3,12,2");
    expect(&g, "bad_scale_values", FLOAT, "b,3,?,?");
    expect(&g, "by_sizes", FLOAT, "1,3,5,7");
    expect(&g, "axes_sizes", FLOAT, "b,3,5,7");
    expect(&g, "dynamic", FLOAT, "?,?,?,?");
    expect(&g, "cropped", FLOAT, "?,?,?,?");
    expect(&g, "not_larger", FLOAT, "b,3,4,4");
    expect(&g, "not_smaller", FLOAT, "b,3,6,6");
    for name in ["wrong_count", "bad_axes"] {
        assert_eq!(info_of(&g, name).and_then(|i| i.shape), None, "{name}");
    }

    // Opset 10: the scales are input 1.
    let mut b = ModelBuilder::new(10);
    b.init_f32("scales", &[3], &[1.0, 2.0, 2.0])
        .node("Resize", &["x", "scales"], &["y"]);
    let g = load(&b, &[("x", FLOAT16, "s,4,6")]);
    expect(&g, "y", FLOAT16, "s,8,12");
}

/// A subgraph with `inputs` and `outputs` typed by dims specs (`None`: an output that names its
/// value only, without a type), computing `nodes` (op, inputs, outputs).
fn body(
    inputs: &[(&str, i32, &str)],
    nodes: &[(&str, &[&str], &[&str])],
    outputs: &[(&str, Option<(i32, &str)>)],
) -> graph_rewrites::onnx_pb::GraphProto {
    let mut b = ModelBuilder::new(24);
    for (op, ins, outs) in nodes {
        b.node(op, ins, outs);
    }
    let mut g = b.body();
    g.input = inputs.iter().map(|(n, t, s)| input(n, *t, s)).collect();
    g.output = outputs
        .iter()
        .map(|(n, t)| match t {
            Some((t, s)) => input(n, *t, s),
            None => ValueInfoProto {
                name: Some(n.to_string()),
                ..Default::default()
            },
        })
        .collect();
    g
}

#[test]
fn if_outputs_take_what_both_branches_declare() {
    let then = body(
        &[],
        &[
            ("Identity", &["x"], &["t0"]),
            ("Neg", &["x"], &["t1"]),
            ("Relu", &["x"], &["t2"]),
        ],
        &[
            ("t0", Some((FLOAT16, "b,s,64"))),
            ("t1", Some((FLOAT16, "b,s,64"))),
            ("t2", None),
        ],
    );
    let other = body(
        &[],
        &[("Abs", &["x"], &["e0"]), ("Identity", &["x"], &["e1"])],
        &[
            ("e0", Some((FLOAT16, "b,?,64"))),
            ("e1", Some((FLOAT16, "b,s"))),
            ("x", None),
        ],
    );
    let mut b = ModelBuilder::new(24);
    b.node("If", &["cond"], &["y0", "y1", "y2"])
        .graph_attr("then_branch", then.clone())
        .graph_attr("else_branch", other)
        // Branches with different output counts, and a missing branch: invalid, left unknown.
        .node("If", &["cond"], &["z0", "z1", "z2"])
        .graph_attr("then_branch", then.clone())
        .graph_attr("else_branch", body(&[], &[], &[]))
        .node("If", &["cond"], &["w0"])
        .graph_attr("then_branch", then);
    let g = load(&b, &[("cond", BOOL, ""), ("x", FLOAT16, "b,s,64")]);
    expect(&g, "y0", FLOAT16, "b,?,64");
    // Ranks 3 and 2: the type is known, the shape is not.
    let y1 = info_of(&g, "y1").expect("typed");
    assert_eq!((y1.elem_type, y1.shape), (FLOAT16, None));
    // t2 is untyped and computed in the branch (the inference runs on it); x is the main
    // graph's own value.
    expect(&g, "y2", FLOAT16, "b,s,64");
    for name in ["z0", "z1", "z2", "w0"] {
        assert_eq!(info_of(&g, name), None, "{name}");
    }
}

#[test]
fn loop_states_and_scan_outputs() {
    let step = body(
        &[
            ("i", INT64, ""),
            ("c_in", BOOL, ""),
            ("h_in", FLOAT, "b,64"),
        ],
        &[
            ("Identity", &["c_in"], &["c_out"]),
            ("Add", &["h_in", "h_in"], &["h_out"]),
            ("Relu", &["h_in"], &["row"]),
            ("Concat", &["h_in", "h_in"], &["grown"]),
        ],
        &[
            ("c_out", Some((BOOL, ""))),
            ("h_out", Some((FLOAT, "b,64"))),
            ("grown", Some((FLOAT, "?,64"))),
            ("row", Some((FLOAT, "b,64"))),
        ],
    );
    let mut b = ModelBuilder::new(24);
    b.init_i64("three", &[], &[3])
        .node(
            "Loop",
            &["three", "", "h", "h"],
            &["h_final", "g_final", "rows"],
        )
        .graph_attr("body", step.clone())
        .node(
            "Loop",
            &["three", "keep_going", "h", "h"],
            &["h2", "g2", "rows2"],
        )
        .graph_attr("body", step.clone())
        // The body has fewer outputs than the loop has states: invalid, left unknown.
        .node(
            "Loop",
            &["three", "", "h", "h", "h", "h"],
            &["a", "b", "c", "d"],
        )
        .graph_attr("body", step);
    let g = load(&b, &[("h", FLOAT, "b,64"), ("keep_going", BOOL, "")]);
    expect(&g, "h_final", FLOAT, "b,64");
    // The state that grows: zero iterations give [b, 64], more give [?, 64].
    expect(&g, "g_final", FLOAT, "?,64");
    expect(&g, "rows", FLOAT, "3,b,64");
    expect(&g, "h2", FLOAT, "b,64");
    expect(&g, "rows2", FLOAT, "?,b,64");
    for name in ["a", "b", "c", "d"] {
        assert_eq!(info_of(&g, name), None, "{name}");
    }
}

#[test]
fn scan_outputs_stack_along_their_axes() {
    let step = body(
        &[("acc_in", FLOAT, "64"), ("x_t", FLOAT, "64")],
        &[
            ("Add", &["acc_in", "x_t"], &["acc_out"]),
            ("Neg", &["x_t"], &["y_t"]),
        ],
        &[
            ("acc_out", Some((FLOAT, "64"))),
            ("y_t", Some((FLOAT, "64"))),
        ],
    );
    let mut b = ModelBuilder::new(24);
    let mut scan = |ins: &[&str], outs: &[&str], attrs: &[(&str, Attr)]| {
        b.node_in("", "Scan", ins, outs, attrs)
            .graph_attr("body", step.clone());
    };
    scan(
        &["acc", "xs"],
        &["acc_final", "ys"],
        &[("num_scan_inputs", Attr::I(1))],
    );
    let axes = [
        ("num_scan_inputs", Attr::I(1)),
        ("scan_input_axes", Attr::Is(&[1])),
        ("scan_output_axes", Attr::Is(&[-1])),
    ];
    scan(&["acc", "xs_t"], &["acc2", "ys_t"], &axes);
    scan(&["acc", "xs"], &["no_count", "no_count_ys"], &[]);
    let wrong = [
        ("num_scan_inputs", Attr::I(1)),
        ("scan_output_axes", Attr::Is(&[0, 1])),
    ];
    scan(&["acc", "xs"], &["acc3", "wrong_axes"], &wrong);
    let g = load(
        &b,
        &[
            ("acc", FLOAT, "64"),
            ("xs", FLOAT, "s,64"),
            ("xs_t", FLOAT, "64,t"),
        ],
    );
    expect(&g, "acc_final", FLOAT, "64");
    expect(&g, "ys", FLOAT, "s,64");
    expect(&g, "ys_t", FLOAT, "64,t");
    for name in ["no_count", "no_count_ys"] {
        assert_eq!(info_of(&g, name), None, "{name}");
    }
    expect(&g, "acc3", FLOAT, "64");
    let w = info_of(&g, "wrong_axes").expect("typed");
    assert_eq!((w.elem_type, w.shape), (FLOAT, None));
}

/// Control flow in a model without value_info: the rules fuse what follows it (the If's declared
/// branch shapes carry the norm's hidden size), and the bodies are kept as they are.
#[test]
fn fusions_after_control_flow_see_its_shapes() {
    let branch = |op: &str| {
        body(
            &[],
            &[(op, &["x"], &["out"])],
            &[("out", Some((FLOAT, "b,s,64")))],
        )
    };
    let mut b = ModelBuilder::new(24);
    b.init_i64("blk", &[4], &[0, 0, 2, 32])
        .node("If", &["flag"], &["picked"])
        .graph_attr("then_branch", branch("Identity"))
        .graph_attr("else_branch", branch("Neg"))
        .mx_quant_floor("picked", "blk", "");
    let g = load(&b, &[("flag", BOOL, ""), ("x", FLOAT, "b,s,64")]);
    expect(&g, "picked", FLOAT, "b,s,64");
    let mut r = g.clone();
    let report = run_pipeline(&mut r, &PipelineOptions::default()).expect("pipeline");
    assert_eq!(report.counts["mxquant"], 1, "{:?}", report.rejections);
    let m = r.to_model();
    let iff = m
        .graph
        .as_ref()
        .and_then(|g| g.node.iter().find(|n| n.op_type.as_deref() == Some("If")));
    assert_eq!(
        iff.map(|n| n.attribute.len()),
        Some(2),
        "the If keeps both branches"
    );
}

#[test]
fn opset_24_to_27_decoder_ops() {
    let mut b = ModelBuilder::new(27);
    let heads = [("q_num_heads", Attr::I(4)), ("kv_num_heads", Attr::I(2))];
    b.node_in(
        "",
        "LinearAttention",
        &["q", "k", "v"],
        &["o", "state"],
        &heads,
    )
    .node_in(
        "",
        "LinearAttention",
        &["q16", "k16", "v16", "past"],
        &["o16", "state16"],
        &heads,
    )
    .node_in(
        "",
        "LinearAttention",
        &["q", "k", "v"],
        &["o_bad", "state_bad"],
        &[("q_num_heads", Attr::I(4)), ("kv_num_heads", Attr::I(5))],
    )
    .node("CausalConvWithState", &["x", "w"], &["conv", "carry"])
    .node(
        "CausalConvWithState",
        &["x", "wk", "", "past_conv"],
        &["conv2", "carry2"],
    )
    .node("TensorScatter", &["cache", "update"], &["present"])
    .node_in("", "BitCast", &["q"], &["bits"], &[("to", Attr::I(6))]);
    let g = load(
        &b,
        &[
            ("q", FLOAT, "b,t,64"),
            ("k", FLOAT, "b,t,32"),
            ("v", FLOAT, "b,t,48"),
            ("q16", FLOAT16, "b,t,64"),
            ("k16", FLOAT16, "b,t,32"),
            ("v16", FLOAT16, "b,t,48"),
            ("past", FLOAT, "b,2,16,24"),
            ("x", BFLOAT16, "b,64,t"),
            ("w", BFLOAT16, "64,1,4"),
            ("wk", BFLOAT16, "64,1,k"),
            ("past_conv", BFLOAT16, "b,64,3"),
            ("cache", FLOAT16, "b,8,128,16"),
            ("update", FLOAT16, "b,8,s,16"),
        ],
    );
    // What ONNX's own shape inference gives for the same nodes (onnx 1.23.2).
    expect(&g, "o", FLOAT, "b,t,96");
    expect(&g, "state", FLOAT, "b,2,16,24");
    expect(&g, "o16", FLOAT16, "b,t,96");
    expect(&g, "state16", FLOAT, "b,2,16,24");
    // 32 and 48 do not split into 5 heads.
    expect(&g, "o_bad", FLOAT, "b,t,?");
    expect(&g, "state_bad", FLOAT, "b,5,?,?");
    expect(&g, "conv", BFLOAT16, "b,64,t");
    expect(&g, "carry", BFLOAT16, "b,64,3");
    expect(&g, "carry2", BFLOAT16, "b,64,3");
    expect(&g, "present", FLOAT16, "b,8,128,16");
    expect(&g, "bits", 6, "b,t,64");
}

/// Subgraphs that declare no types for their outputs (or no shapes): the inference runs on the
/// body, its inputs typed from the node's (loop states from their initial values, scan inputs
/// one slice each) and the main-graph values it reads. A state whose type changes from one
/// iteration to the next ends with the dims every iteration agrees on — also where it changes
/// only from the second iteration on (`t` takes `s`'s shape, which grows).
#[test]
fn untyped_bodies_are_inferred() {
    fn untyped(name: &str) -> (&str, Option<(i32, &str)>) {
        (name, None)
    }
    let then_out = [("then_out", Some((FLOAT, "")))];
    let mut then = body(&[], &[("Relu", &["x"], &["then_out"])], &then_out);
    if let Some(graph_rewrites::onnx_pb::type_proto::Value::TensorType(t)) = then.output[0]
        .r#type
        .as_mut()
        .and_then(|t| t.value.as_mut())
    {
        t.shape = None; // FLOAT, rank unknown
    }
    let other = body(
        &[],
        &[("Neg", &["x"], &["else_out"])],
        &[untyped("else_out")],
    );
    let step = body(
        &[("i", INT64, ""), ("c_in", BOOL, "")],
        &[
            ("Identity", &["c_in"], &["c_out"]),
            ("Add", &["h_in", "h_in"], &["h_out"]),
            ("Concat", &["g_in", "g_in"], &["g_out"]),
            ("Concat", &["s_in", "s_in"], &["s_out"]),
            ("Shape", &["s_in"], &["s_shape"]),
            ("Expand", &["t_in", "s_shape"], &["t_out"]),
            ("Relu", &["h_in"], &["row"]),
        ],
        &[
            untyped("c_out"),
            untyped("h_out"),
            untyped("g_out"),
            untyped("s_out"),
            untyped("t_out"),
            untyped("row"),
        ],
    );
    let mut step = step;
    // The state inputs declare names only; Concat's axis is 0.
    for name in ["h_in", "g_in", "s_in", "t_in"] {
        step.input.push(ValueInfoProto {
            name: Some(name.into()),
            ..Default::default()
        });
    }
    for n in &mut step.node {
        if n.op_type.as_deref() == Some("Concat") {
            n.attribute
                .push(graph_rewrites::testing::attribute("axis", &Attr::I(0)));
        }
    }
    let scan_step = body(
        &[("acc_in", FLOAT, "64"), ("x_t", FLOAT, "")],
        &[
            ("Add", &["acc_in", "x_t"], &["acc_out"]),
            ("Neg", &["x_t"], &["y_t"]),
        ],
        &[untyped("acc_out"), untyped("y_t")],
    );
    let mut scan_step = scan_step;
    scan_step.input[1] = ValueInfoProto {
        name: Some("x_t".into()),
        ..Default::default()
    };
    let mut b = ModelBuilder::new(24);
    b.init_i64("three", &[], &[3])
        .node("If", &["cond"], &["picked"])
        .graph_attr("then_branch", then)
        .graph_attr("else_branch", other)
        .node(
            "Loop",
            &["three", "", "h", "h", "s", "s"],
            &["h_final", "g_final", "s_final", "t_final", "rows"],
        )
        .graph_attr("body", step)
        .node_in(
            "",
            "Scan",
            &["acc", "xs"],
            &["acc_final", "ys"],
            &[("num_scan_inputs", Attr::I(1))],
        )
        .graph_attr("body", scan_step);
    let g = load(
        &b,
        &[
            ("cond", BOOL, ""),
            ("x", FLOAT, "b,s,64"),
            ("h", FLOAT, "b,64"),
            ("s", FLOAT, "1"),
            ("acc", FLOAT, "64"),
            ("xs", FLOAT, "n,64"),
        ],
    );
    // The then branch declares FLOAT and no shape, the else branch nothing; both compute
    // [b, s, 64] from x.
    expect(&g, "picked", FLOAT, "b,s,64");
    expect(&g, "h_final", FLOAT, "b,64");
    expect(&g, "g_final", FLOAT, "?,64");
    expect(&g, "s_final", FLOAT, "?");
    expect(&g, "t_final", FLOAT, "?");
    expect(&g, "rows", FLOAT, "3,b,64");
    expect(&g, "acc_final", FLOAT, "64");
    expect(&g, "ys", FLOAT, "n,64");
}
