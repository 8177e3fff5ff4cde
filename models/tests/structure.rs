//! Structural tests of the generated graphs (no Python needed): each spelling emits the ops the
//! rules must match, wired the way real exporters wire them.

use std::collections::HashMap;

use graph_rewrites::onnx_pb::{GraphProto, ModelProto, NodeProto};
use models::{
    expected_fusions, model_proto, AddOrder, DType, DecoderConfig, Error, GateUpForm, NormSpelling,
    QuantSpelling, SwigluSpelling, WeightForm,
};

fn graph(m: &ModelProto) -> &GraphProto {
    m.graph.as_ref().expect("model has a graph")
}

fn ops(m: &ModelProto, op: &str) -> Vec<NodeProto> {
    graph(m)
        .node
        .iter()
        .filter(|n| n.op_type.as_deref() == Some(op))
        .cloned()
        .collect()
}

fn consumers<'a>(m: &'a ModelProto, tensor: &str) -> Vec<&'a NodeProto> {
    graph(m)
        .node
        .iter()
        .filter(|n| n.input.iter().any(|i| i == tensor))
        .collect()
}

fn producer<'a>(m: &'a ModelProto, tensor: &str) -> Option<&'a NodeProto> {
    graph(m)
        .node
        .iter()
        .find(|n| n.output.iter().any(|o| o == tensor))
}

fn op_of(n: &NodeProto) -> &str {
    n.op_type.as_deref().unwrap_or("")
}

fn attr_str(n: &NodeProto, name: &str) -> Option<String> {
    n.attribute
        .iter()
        .find(|a| a.name.as_deref() == Some(name))
        .and_then(|a| a.s.as_ref())
        .map(|s| String::from_utf8_lossy(s).into_owned())
}

fn tiny(edit: impl FnOnce(&mut DecoderConfig)) -> ModelProto {
    let mut c = DecoderConfig::tiny();
    edit(&mut c);
    model_proto(&c).expect("build")
}

#[test]
fn standard_floor_quant_feeds_qkv_from_one_quantization() {
    let m = tiny(|_| {});
    let c = expected_fusions(&DecoderConfig::tiny());
    let sites = c.add_rmsnorm_mxquant + c.swiglu_mxquant_matmul + c.standalone_mxquant;
    assert_eq!(ops(&m, "QuantizeLinear").len(), sites);
    let e8m0_casts: Vec<_> = ops(&m, "Cast")
        .into_iter()
        .filter(|n| attr_str(n, "round_mode").is_some())
        .collect();
    assert_eq!(e8m0_casts.len(), sites);
    assert!(e8m0_casts
        .iter()
        .all(|n| attr_str(n, "round_mode").as_deref() == Some("down")));
    // The first input norm's dequantized output feeds exactly the q, k and v MatMuls.
    let dq = "model.layers.0.self_attn.qkv_in.dq";
    let users: Vec<_> = consumers(&m, dq)
        .iter()
        .map(|n| op_of(n).to_string())
        .collect();
    assert_eq!(users, ["MatMul", "MatMul", "MatMul"]);
    // The Mul feeding the E8M0 cast multiplies by 2^-8.
    let cast = producer(&m, "model.layers.0.self_attn.qkv_in.scale").expect("scale cast");
    assert_eq!(op_of(producer(&m, &cast.input[0]).expect("mul")), "Mul");
}

#[test]
fn rceil_spellings_round_up() {
    for (q, op) in [
        (QuantSpelling::StdRceilMul, "Mul"),
        (QuantSpelling::StdRceilDiv, "Div"),
    ] {
        let m = tiny(|c| c.spelling.quant = q);
        let cast = producer(&m, "model.layers.0.mlp.in.scale").expect("scale cast");
        assert_eq!(attr_str(cast, "round_mode").as_deref(), Some("up"));
        assert_eq!(op_of(producer(&m, &cast.input[0]).expect("scaling op")), op);
    }
}

#[test]
fn first_layer_has_no_residual_add_and_later_norms_do() {
    let m = tiny(|_| {});
    // Decomposed norm: the first one reads the graph input directly.
    let first_sq = producer(&m, "model.layers.0.input_layernorm.x_f32")
        .or_else(|| producer(&m, "model.layers.0.input_layernorm.sq"))
        .expect("first norm");
    assert!(first_sq.input.iter().any(|i| i == "hidden_states"));
    let add =
        producer(&m, "model.layers.0.post_attention_layernorm.residual_sum").expect("residual add");
    assert_eq!(op_of(add), "Add");
    assert_eq!(add.input[0], "hidden_states", "residual first");
    let m = tiny(|c| c.spelling.add_order = AddOrder::BranchFirst);
    let add =
        producer(&m, "model.layers.0.post_attention_layernorm.residual_sum").expect("residual add");
    assert_eq!(add.input[1], "hidden_states", "branch first");
}

#[test]
fn skip_simplified_chains_residual_through_output_3() {
    let m = tiny(|c| c.spelling.norm = NormSpelling::SkipSimplified);
    assert_eq!(
        ops(&m, "SimplifiedLayerNormalization").len(),
        1,
        "first layer"
    );
    let skips = ops(&m, "SkipSimplifiedLayerNormalization");
    assert_eq!(skips.len(), 4);
    for w in skips.windows(2) {
        assert_eq!(w[0].output.len(), 4);
        assert!(w[0].output[1].is_empty() && w[0].output[2].is_empty());
        assert!(
            w[1].input.contains(&w[0].output[3]),
            "next Skip reads the residual sum"
        );
    }
    assert!(skips
        .iter()
        .all(|n| n.domain.as_deref() == Some("com.microsoft")));
}

#[test]
fn allreduce_sits_before_every_residual_add() {
    let mut cfg = DecoderConfig::tiny();
    cfg.spelling.allreduce = true;
    let m = model_proto(&cfg).expect("build");
    let ars = ops(&m, "AllReduce");
    assert_eq!(ars.len(), expected_fusions(&cfg).allreduce);
    assert_eq!(
        ars.len(),
        2 * cfg.n_layers + 1,
        "embedding + after every o_proj and down_proj"
    );
    for ar in &ars {
        assert_eq!(ar.input.len(), 1);
        let users = consumers(&m, &ar.output[0]);
        assert!(
            users
                .iter()
                .all(|n| matches!(op_of(n), "Add" | "Cast" | "Pow" | "Mul")),
            "AllReduce feeds the residual add / first norm, not {:?}",
            users.iter().map(|n| op_of(n)).collect::<Vec<_>>()
        );
    }
}

#[test]
fn moe_router_reads_the_float_norm_output() {
    let m = tiny(|c| {
        c.n_experts = 3;
        c.shared_expert = true;
    });
    let router = producer(&m, "model.layers.1.moe.router_logits").expect("router MatMul");
    assert_eq!(
        router.input[0],
        "model.layers.1.post_attention_layernorm.out"
    );
    let dq = "model.layers.1.mlp.in.dq";
    let users = consumers(&m, dq);
    assert_eq!(users.len(), 4, "3 experts + shared expert gate_up MatMuls");
    assert!(users.iter().all(|n| op_of(n) == "MatMul"));
    let mut c = DecoderConfig::tiny();
    c.n_experts = 3;
    c.shared_expert = true;
    assert_eq!(expected_fusions(&c).swiglu_mxquant_matmul, 1 + 4);
}

#[test]
fn swiglu_spellings_emit_their_ops() {
    let cases: [(SwigluSpelling, &[&str]); 7] = [
        (SwigluSpelling::SiluMul, &["Sigmoid"]),
        (SwigluSpelling::OaiClip, &["Clip", "Sigmoid"]),
        (SwigluSpelling::OaiMin, &["Min", "Clip", "Sigmoid"]),
        (SwigluSpelling::QuickGelu, &["QuickGelu"]),
        (SwigluSpelling::OaiQuickGelu, &["QuickGelu", "Clip"]),
        (SwigluSpelling::Swish, &["Swish"]),
        (SwigluSpelling::Swiglu, &["SwiGLU"]),
    ];
    for (s, want) in cases {
        let m = tiny(|c| c.spelling.swiglu = s);
        for op in want {
            assert!(!ops(&m, op).is_empty(), "{s:?} has no {op}");
        }
        // The activation output feeds the down-projection quantization.
        let act = "model.layers.0.mlp.act";
        assert!(
            consumers(&m, act).iter().any(|n| op_of(n) == "Reshape"),
            "{s:?}"
        );
    }
    let m = tiny(|c| c.spelling.swiglu = SwigluSpelling::OaiClip);
    let clip = producer(&m, "model.layers.0.mlp.gate_clamped").expect("gate clip");
    assert_eq!(clip.input[1], "", "gate clamp has no min");
}

#[test]
fn gate_up_forms() {
    let m = tiny(|c| c.spelling.gate_up = GateUpForm::FusedSplit);
    assert_eq!(ops(&m, "Split").len(), 2);
    let m = tiny(|c| c.spelling.gate_up = GateUpForm::TwoMatmuls);
    assert!(ops(&m, "Split").is_empty());
    assert_eq!(ops(&m, "MatMul").len(), 2 * (4 + 3));
}

#[test]
fn weight_forms() {
    let m = tiny(|c| c.spelling.weights = WeightForm::StdMx);
    let inits: HashMap<_, _> = graph(&m)
        .initializer
        .iter()
        .map(|t| (t.name.clone().unwrap_or_default(), t.clone()))
        .collect();
    let q = &inits["model.layers.0.mlp.down_proj.weight.e4m3"];
    let s = &inits["model.layers.0.mlp.down_proj.weight.e8m0"];
    assert_eq!((q.dims.clone(), q.data_type), (vec![64, 128], Some(17)));
    assert_eq!((s.dims.clone(), s.data_type), (vec![2, 128], Some(24)));
    assert!(
        s.raw_data
            .as_ref()
            .expect("scales")
            .iter()
            .all(|&b| (100..=127).contains(&b)),
        "plausible scales"
    );
    let m = tiny(|c| {
        c.spelling.weights = WeightForm::Quark;
        c.spelling.quant = QuantSpelling::Quark;
    });
    assert_eq!(
        ops(&m, "MXQuantizeDequantize").len(),
        12 + 8,
        "12 weights + 8 activations"
    );
    assert!(ops(&m, "QuantizeLinear").is_empty());
}

#[test]
fn opsets_follow_the_ops_used() {
    let opset = |m: &ModelProto, d: &str| {
        m.opset_import
            .iter()
            .find(|o| o.domain.as_deref() == Some(d))
            .and_then(|o| o.version)
    };
    assert_eq!(
        opset(&tiny(|c| c.spelling.quant = QuantSpelling::None), ""),
        Some(18)
    );
    assert_eq!(opset(&tiny(|_| {}), ""), Some(24));
    assert_eq!(
        opset(&tiny(|c| c.spelling.swiglu = SwigluSpelling::Swiglu), ""),
        Some(28)
    );
    let m = tiny(|c| c.spelling.quant = QuantSpelling::Quark);
    assert_eq!(opset(&m, "com.amd.quark"), Some(1));
    assert_eq!(opset(&m, "com.microsoft"), None);
}

#[test]
fn dtypes_propagate_and_seeds_are_deterministic() {
    for (d, elem) in [(DType::F32, 1), (DType::F16, 10), (DType::Bf16, 16)] {
        let m = tiny(|c| c.dtype = d);
        let g = graph(&m);
        let ty = |vi: &graph_rewrites::onnx_pb::ValueInfoProto| match &vi
            .r#type
            .as_ref()
            .and_then(|t| t.value.clone())
        {
            Some(graph_rewrites::onnx_pb::type_proto::Value::TensorType(t)) => t.elem_type,
            _ => None,
        };
        assert_eq!(ty(&g.input[0]), Some(elem));
        assert_eq!(ty(&g.output[0]), Some(elem));
    }
    assert_eq!(tiny(|_| {}), tiny(|_| {}));
    assert_ne!(tiny(|_| {}), tiny(|c| c.seed = 1));
}

#[test]
fn bad_configs_are_errors_not_panics() {
    let bad = |edit: fn(&mut DecoderConfig)| {
        let mut c = DecoderConfig::tiny();
        edit(&mut c);
        matches!(model_proto(&c), Err(Error::InvalidConfig(_)))
    };
    assert!(bad(|c| c.hidden = 100));
    assert!(bad(|c| c.intermediate = 0));
    assert!(bad(|c| c.n_layers = 0));
    assert!(bad(|c| c.n_kv_heads = 3));
    assert!(bad(|c| c.rms_eps = 0.0));
    assert!(bad(|c| c.seq = Some(0)));
    assert!(bad(|c| {
        c.dtype = DType::Bf16;
        c.spelling.quant = QuantSpelling::Quark;
    }));
    assert!(bad(|c| *c = DecoderConfig {
        storage: models::WeightStorage::Inline,
        ..DecoderConfig::m3_tp4()
    }));
}
