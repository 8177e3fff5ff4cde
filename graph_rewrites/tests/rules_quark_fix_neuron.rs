//! AMD Quark's deprecated op name `com.vai.quantize::MXFixNeuron` (older Quark releases and
//! `quark.onnx.tools.convert_custom_ops` write it) is `com.amd.quark::MXQuantizeDequantize` under
//! another name: every rule takes it identically. `ModelBuilder::rewrite` already checks both
//! spellings for every built Quark model of the other test files; here: the committed Quark
//! exports and fixtures, the spelling-specific paths (the op identity, the CLI's note, shape
//! inference, the quantize count) and a few explicit fusions of the alias.

use graph_rewrites::cli::notes::foreign_note;
use graph_rewrites::io::load_model;
use graph_rewrites::pattern::predicates::dtype::{BFLOAT16, FLOAT};
use graph_rewrites::pattern::OpId;
use graph_rewrites::summary::count_quantize_ops;
use graph_rewrites::testing::{
    as_fix_neuron, fixture_files, op_types, rewrite_both_quark_spellings, Attr, ModelBuilder,
};
use graph_rewrites::view::{is_quark_mx, GraphView, QUARK_MX_OPS, VAI_DOMAIN};

/// The Quark exports and fixtures (the real decoder layer, the MiniMax-M3 dynamo export, the
/// sample MLP, the models crate's Quark decoders) fuse, refuse and stay alike in both spellings.
#[test]
fn every_committed_quark_model_rewrites_alike_under_mxfixneuron() {
    let mut seen = 0;
    for path in fixture_files(&["", "samples", "real"]) {
        let model = load_model(&path).unwrap();
        let quark = model.graph.as_ref().is_some_and(|g| {
            g.node
                .iter()
                .any(|n| n.domain() == "com.amd.quark" && n.op_type() == "MXQuantizeDequantize")
        });
        if !quark {
            continue;
        }
        let (report, _) = rewrite_both_quark_spellings(&model, path.parent());
        let fused: usize = report.counts.values().sum();
        assert!(fused > 0, "{}: {report:#?}", path.display());
        seen += 1;
    }
    assert!(seen >= 5, "{seen} Quark models found");
}

/// The pattern op id takes every spelling, and the rules look for the alias's outputs.
#[test]
fn the_quark_op_id_accepts_both_spellings() {
    let id = OpId::quark_mx();
    assert_eq!(id.spellings().collect::<Vec<_>>(), QUARK_MX_OPS);
    for (domain, op) in QUARK_MX_OPS {
        let mut b = ModelBuilder::new(21);
        b.opset(domain, 1)
            .input("x", FLOAT, &[4, 64])
            .node_in(domain, op, &["x"], &["y"], &[])
            .output("y", FLOAT, &[4, 64]);
        let g = b.graph().unwrap();
        let n = g.nodes()[0];
        assert!(id.accepts(&g, n) && is_quark_mx(&g, n), "{domain}::{op}");
    }
    let roots: Vec<_> = graph_rewrites::rules::registry()
        .iter()
        .flat_map(|r| r.root_ops())
        .collect();
    assert!(roots.contains(&(VAI_DOMAIN, "MXFixNeuron")), "{roots:?}");
    // Another op of the Vitis domain is not Quark's MX fake quant.
    let mut b = ModelBuilder::new(21);
    b.opset(VAI_DOMAIN, 1)
        .input("x", FLOAT, &[4, 64])
        .node_in(VAI_DOMAIN, "BFPFixNeuron", &["x"], &["y"], &[])
        .output("y", FLOAT, &[4, 64]);
    let g = b.graph().unwrap();
    assert!(!id.accepts(&g, g.nodes()[0]) && !is_quark_mx(&g, g.nodes()[0]));
}

/// `x ─ MXFixNeuron(axis -1) ─ MatMul(W)`: rule `mxquant` takes the alias as it takes Quark's
/// op (MxQuantize + MxMatMul), and the quantize count sees it.
#[test]
fn an_mxfixneuron_activation_feeding_a_matmul_fuses() {
    let mut b = ModelBuilder::new(21);
    b.opset("com.amd.quark", 1).input("x", FLOAT, &[4, 64]);
    b.init_f32("w", &[64, 16], &vec![0.5; 64 * 16]);
    b.quark_fake_quant("x", "xq", 32, -1)
        .node("MatMul", &["xq", "w"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    let alias = b.fix_neuron();
    let g = alias.graph().unwrap();
    assert_eq!(op_types(&g), ["MXFixNeuron", "MatMul"]);
    assert_eq!(count_quantize_ops(&g), 1);
    let (report, g) = b.rewrite_both_quark_spellings();
    assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
    assert_eq!(report.quantize_ops.before, 1);
    assert_eq!(op_types(&g), ["MxQuantize", "MxMatMul"]);
}

/// Quark weight-only under the alias: `MatMul(x, MXFixNeuron(W, axis 0))` reads W quantized at
/// rewrite time (rule `mx_weight_matmul`); the weight quantizer is not an activation quantizer.
#[test]
fn an_mxfixneuron_weight_becomes_a_weight_only_mxmatmul() {
    let mut b = ModelBuilder::new(24);
    b.opset("com.amd.quark", 1).input("x", FLOAT, &[4, 64]);
    let vals: Vec<f32> = (0..64 * 16)
        .map(|i| (i % 19) as f32 * 0.125 - 1.0)
        .collect();
    b.init_f32("w", &[64, 16], &vals);
    b.quark_fake_quant("w", "wf", 32, 0)
        .node("MatMul", &["x", "wf"], &["y"])
        .output("y", FLOAT, &[4, 16]);
    assert_eq!(count_quantize_ops(&b.fix_neuron().graph().unwrap()), 0);
    let (report, g) = b.fix_neuron().rewrite();
    assert_eq!(report.counts["mx_weight_matmul"], 1, "{report:#?}");
    assert_eq!(op_types(&g), ["MxMatMul"]);
}

/// Stacked experts `Gather(MXFixNeuron(W [E, N, K], axis 2), ids)` (rule `mx_gather_dequant`).
#[test]
fn mxfixneuron_experts_gathered_become_one_gather_dequantize() {
    let (e, n, k) = (4, 16, 64);
    let vals: Vec<f32> = (0..e * n * k)
        .map(|i| ((i * 7 % 23) as f32 - 11.0) * 0.0625)
        .collect();
    for after in [false, true] {
        let mut b = ModelBuilder::new(21);
        b.opset("com.amd.quark", 1).input("ids", 7, &[3]);
        b.init_f32("w", &[e, n, k], &vals);
        if after {
            b.node_in(
                "",
                "Gather",
                &["w", "ids"],
                &["wg"],
                &[("axis", Attr::I(0))],
            )
            .quark_fake_quant("wg", "y", 32, 2);
        } else {
            b.quark_fake_quant("w", "wf", 32, 2).node_in(
                "",
                "Gather",
                &["wf", "ids"],
                &["y"],
                &[("axis", Attr::I(0))],
            );
        }
        b.output("y", FLOAT, &[3, n, k]);
        let (report, g) = b.fix_neuron().rewrite();
        assert_eq!(
            report.counts["mx_gather_dequant"], 1,
            "{after}: {report:#?}"
        );
        assert_eq!(op_types(&g), ["MxGatherDequantize"], "{after}");
    }
}

/// An MXFixNeuron no rule takes (axis 1 of a `[B, S, H]` activation, as Quark exports put on
/// activations that feed no MatMul) stays, its output type is inferred through it, and the
/// rewrite names it with what runs it.
#[test]
fn an_mxfixneuron_left_unfused_is_inferred_and_named() {
    let mut b = ModelBuilder::new(21);
    b.opset("com.amd.quark", 1)
        .input("x", BFLOAT16, &[2, 40, 64]);
    b.quark_fake_quant("x", "xq", 32, 1)
        .node("Relu", &["xq"], &["y"])
        .output("y", BFLOAT16, &[-1, -1, -1]);
    let (report, g) = b.fix_neuron().rewrite();
    assert_eq!(report.counts.values().sum::<usize>(), 0, "{report:#?}");
    assert_eq!(op_types(&g), ["MXFixNeuron", "Relu"]);
    let xq = g.value_by_name("xq").unwrap();
    assert_eq!(g.tensor_info(xq).unwrap().elem_type, BFLOAT16);
    let note = foreign_note(&g);
    assert!(
        note.contains("note: 1 com.vai.quantize::MXFixNeuron node(s) stay unfused")
            && note.contains("mxfuse plugin EP")
            && !note.contains("other"),
        "{note}"
    );
    // Another Vitis op: only Quark's library runs it.
    let mut b = ModelBuilder::new(21);
    b.opset(VAI_DOMAIN, 1)
        .input("x", FLOAT, &[4, 64])
        .node_in(VAI_DOMAIN, "BFPFixNeuron", &["x"], &["y"], &[])
        .output("y", FLOAT, &[4, 64]);
    let note = foreign_note(&b.graph().unwrap());
    assert_eq!(
        note,
        "note: 1 other com.vai.quantize node(s): only AMD Quark's custom-op library runs those\n"
    );
}

/// `as_fix_neuron` respells nodes in subgraphs too and swaps the opset import.
#[test]
fn as_fix_neuron_respells_bodies_and_the_import() {
    let mut body = ModelBuilder::new(21);
    body.quark_fake_quant("x", "xq", 32, -1);
    let mut b = ModelBuilder::new(21);
    b.opset("com.amd.quark", 1).input("c", 9, &[]);
    b.node("If", &["c"], &["y"])
        .graph_attr("then_branch", body.body())
        .graph_attr("else_branch", body.body());
    let m = as_fix_neuron(b.model());
    let imports: Vec<&str> = m.opset_import.iter().map(|o| o.domain()).collect();
    assert_eq!(imports, ["", VAI_DOMAIN]);
    let iff = &m.graph.as_ref().unwrap().node[0];
    for a in &iff.attribute {
        let n = &a.g.as_ref().unwrap().node[0];
        assert_eq!((n.domain(), n.op_type()), (VAI_DOMAIN, "MXFixNeuron"));
    }
}
