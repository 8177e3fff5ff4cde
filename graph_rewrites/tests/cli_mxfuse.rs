//! The `mxfuse` binary: outputs, REPORT.json shape, exit codes and error lines.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use graph_rewrites::pipeline::rule_names;
use graph_rewrites::testing::{scratch_dir, Attr, ModelBuilder};
use prost::Message;

fn mxfuse(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mxfuse"))
        .args(args)
        .output()
        .expect("run mxfuse")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn scratch(test: &str) -> PathBuf {
    scratch_dir(&format!("cli-{test}"))
}

/// A small model no rule can fuse: Relu → Neg, with an initializer and value_info.
fn write_plain_model(path: &Path) {
    let mut b = ModelBuilder::new(21);
    b.input("x", 1, &[-2, 64]);
    b.init_f32("w", &[64], &[0.5; 64]);
    b.node("Add", &["x", "w"], &["a"]);
    b.node("Relu", &["a"], &["y"]);
    b.value_info("a", 1, &[-2, 64]);
    b.output("y", 1, &[-2, 64]);
    std::fs::write(path, b.model().encode_to_vec()).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn rewrite_without_candidates_round_trips_and_reports() {
    let dir = scratch("plain");
    let (input, output, report) = (
        dir.join("in.onnx"),
        dir.join("out.onnx"),
        dir.join("report.json"),
    );
    write_plain_model(&input);
    let o = mxfuse(&[
        "rewrite",
        s(&input),
        "-o",
        s(&output),
        "--report",
        s(&report),
        "--stats",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(&input).unwrap(),
        std::fs::read(&output).unwrap()
    );
    let text = stdout(&o);
    assert!(text.starts_with("rule"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("stats: load")), "{text}");
    assert!(!text.contains("note:"), "{text}");

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["input"], s(&input));
    assert_eq!(json["output"], s(&output));
    let counts = json["counts"].as_object().expect("counts object");
    let mut keys: Vec<&str> = counts.keys().map(String::as_str).collect();
    let mut rules = rule_names();
    keys.sort();
    rules.sort();
    assert_eq!(keys, rules, "every enabled rule is counted");
    assert!(counts.values().all(|n| n == 0));
    assert_eq!(json["fusions"], serde_json::json!([]));
    assert!(json["rejections"].is_array());
    let _ = std::fs::remove_dir_all(dir);
}

/// AMD Quark's sample MLP quantizes some SwiGLU intermediates along axis 1 (the sequence
/// axis): those nodes stay, and the rewrite says what can run the result (the custom-op library
/// does not register Quark's domain).
#[test]
fn rewrite_names_the_quark_nodes_it_leaves() {
    let dir = scratch("quark-left");
    let input = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../models/fixtures/samples/tiny_swiglu_mlp_MXFP8E4M3.onnx");
    let output = dir.join("out.onnx");
    let o = mxfuse(&["rewrite", s(&input), "-o", s(&output)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("note: 4 com.amd.quark::MXQuantizeDequantize node(s) stay unfused")
            && text.contains("mxfuse plugin EP"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// An MX quantizer whose input comes from an op mxfuse's inference does not know (here an
/// unknown domain's; probe 10 met ONNX's opset-23 `Attention` and `com.microsoft::
/// MultiHeadAttention`): `mx_quant_linear` refuses the `QuantizeLinear` (its input type is
/// unknown), and the rewrite says that ONNX Runtime's CPU EP cannot load what it leaves —
/// before, the custom-op session failed with NOT_IMPLEMENTED and nothing said why.
#[test]
fn rewrite_says_when_e8m0_quantize_nodes_stay() {
    use graph_rewrites::pattern::predicates::dtype::FLOAT;
    let dir = scratch("e8m0-left");
    let (input, output) = (dir.join("in.onnx"), dir.join("out.onnx"));
    let mut b = ModelBuilder::new(24);
    b.opset("my.domain", 1)
        .input("x", FLOAT, &[-2, 64])
        .node_in("my.domain", "Mystery", &["x"], &["m"], &[])
        .init_i64("shape", &[3], &[0, 2, 32])
        .mx_quant_floor("m", "shape", "")
        .node_in(
            "",
            "DequantizeLinear",
            &["q", "scale"],
            &["dq"],
            &[
                ("axis", Attr::I(-1)),
                ("block_size", Attr::I(32)),
                ("output_dtype", Attr::I(FLOAT as i64)),
            ],
        )
        .output("dq", FLOAT, &[-2, 64]);
    std::fs::write(&input, b.model().encode_to_vec()).unwrap();
    let o = mxfuse(&["rewrite", s(&input), "-o", s(&output)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains(
            "note: 1 QuantizeLinear / DequantizeLinear node(s) with a FLOAT8E8M0 scale stay"
        ) && text.contains("mxfuse plugin EP"),
        "{text}"
    );
    // Its DequantizeLinear became MxDequantize: only the QuantizeLinear is counted. No such
    // node, no note.
    write_plain_model(&input);
    let o = mxfuse(&["rewrite", s(&input), "-o", s(&output)]);
    assert!(!stdout(&o).contains("FLOAT8E8M0"), "{}", stdout(&o));
    let _ = std::fs::remove_dir_all(dir);
}

/// The output or the report named like a file the rewrite reads (the input's external data,
/// the input itself) is refused before anything is written: both stay as they were.
#[test]
fn outputs_that_would_clobber_inputs_are_refused() {
    let dir = scratch("clobber");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../models/fixtures/samples/ortgenai_llama_tiny_fp32");
    for f in ["model.onnx", "model.onnx.data"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let (input, data) = (dir.join("model.onnx"), dir.join("model.onnx.data"));
    let before = (
        std::fs::read(&input).unwrap(),
        std::fs::read(&data).unwrap(),
    );
    for (out, report, why) in [
        (data.clone(), None, "is the external data file"),
        (
            dir.join("o.onnx"),
            Some(input.clone()),
            "is the input model",
        ),
        (
            dir.join("o.onnx"),
            Some(data.clone()),
            "is the external data file",
        ),
    ] {
        let mut args = vec!["rewrite", s(&input), "-o", s(&out)];
        if let Some(r) = &report {
            args.extend(["--report", s(r)]);
        }
        let o = mxfuse(&args);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains(why), "{}", stderr(&o));
    }
    let after = (
        std::fs::read(&input).unwrap(),
        std::fs::read(&data).unwrap(),
    );
    assert!(before == after, "an input file changed");
    assert!(!dir.join("o.onnx").exists());
    // A report in a directory that does not exist yet is written there.
    let o = mxfuse(&[
        "rewrite",
        s(&input),
        "-o",
        s(&dir.join("o.onnx")),
        "--report",
        s(&dir.join("new/r.json")),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.join("new/r.json").is_file());
    let _ = std::fs::remove_dir_all(dir);
}

/// An unknown `--set` key (a typo) is a usage error, like a bad value, not a silent default;
/// for `inspect` too (it exited 1, as for a bad model, while `rewrite` exited 2).
#[test]
fn unknown_or_bad_settings_exit_2() {
    let dir = scratch("settings");
    let (input, output) = (dir.join("in.onnx"), dir.join("out.onnx"));
    write_plain_model(&input);
    for set in [
        "scale_rul=rceil",
        "scale_rule=ceil",
        "swiglu_fp32_activation=maybe",
    ] {
        let o = mxfuse(&["rewrite", s(&input), "-o", s(&output), "--set", set]);
        assert_eq!(o.status.code(), Some(2), "{set}: {}", stderr(&o));
        assert!(!output.exists(), "{set}");
        let o = mxfuse(&["inspect", s(&input), "--set", set]);
        assert_eq!(o.status.code(), Some(2), "inspect {set}: {}", stderr(&o));
        assert!(stderr(&o).starts_with("error: "), "inspect {set}");
    }
    let o = mxfuse(&["inspect", s(&input), "--set", "scale_rule=rceil"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Every spelling the flag accepts is named in the error (it listed only true / false).
    let o = mxfuse(&[
        "inspect",
        s(&input),
        "--set",
        "swiglu_fp32_activation=maybe",
    ]);
    assert!(
        stderr(&o).contains("(or true / false, on / off, yes / no)"),
        "{}",
        stderr(&o)
    );
    let o = mxfuse(&["inspect", s(&input), "--set", "swiglu_fp32_activation=on"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_inputs_exit_1_with_one_error_line() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bad");
    let out = scratch("bad");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "onnx") {
            continue;
        }
        for args in [
            vec!["rewrite", s(&path), "-o", s(&out.join("o.onnx"))],
            vec!["inspect", s(&path)],
        ] {
            let o = mxfuse(&args);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(1), "{}: {err}", path.display());
            assert!(
                err.starts_with("error: ") && err.lines().count() == 1,
                "{}: {err}",
                path.display()
            );
        }
        checked += 1;
    }
    assert!(checked >= 10);
    assert!(
        !out.join("o.onnx").exists(),
        "nothing is written for bad input"
    );
    let o = mxfuse(&[
        "rewrite",
        "/no/such/model.onnx",
        "-o",
        s(&out.join("o.onnx")),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn usage_errors_exit_2() {
    let dir = scratch("usage");
    let input = dir.join("in.onnx");
    write_plain_model(&input);
    let out = dir.join("o.onnx");
    for args in [
        vec!["rewrite", s(&input)],
        vec!["frobnicate"],
        vec![
            "rewrite",
            s(&input),
            "-o",
            s(&out),
            "--only",
            "no_such_rule",
        ],
        vec![
            "rewrite",
            s(&input),
            "-o",
            s(&out),
            "--set",
            "no_equals_sign",
        ],
    ] {
        let o = mxfuse(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn rules_lists_the_registry_and_help_documents_external_data() {
    let o = mxfuse(&["rules"]);
    assert!(o.status.success());
    let listed: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
    assert_eq!(listed, rule_names());
    let o = mxfuse(&["rewrite", "--help"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("External data"), "{}", stdout(&o));
}

#[test]
fn inspect_prints_histogram_opsets_and_writes_dot_views() {
    let dir = scratch("inspect");
    let input = dir.join("in.onnx");
    write_plain_model(&input);
    let dot = dir.join("dot");
    let o = mxfuse(&["inspect", s(&input), "--dot", s(&dot)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("opsets: ai.onnx=21"), "{text}");
    assert!(
        text.contains("nodes: 2, initializers: 1 (0 external)"),
        "{text}"
    );
    assert!(
        text.contains("      1  Add\n") && text.contains("      1  Relu\n"),
        "{text}"
    );
    assert!(text.contains("candidate sites:"), "{text}");
    assert!(dot.is_dir());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn dot_view_shows_site_nodes_values_and_edges() {
    use graph_rewrites::view::GraphView;
    let mut b = ModelBuilder::new(21);
    b.input("x", 1, &[4, 64]);
    b.init_f32("w", &[64], &[0.5; 64]);
    b.node("Add", &["x", "w"], &["a"]);
    b.node("Relu", &["a"], &["y"]);
    b.output("y", 1, &[4, 64]);
    let g = b.graph().unwrap();
    let add = g.node_by_name("Add_0").unwrap();
    let text = graph_rewrites::cli::dot::site_dot(&g, &[add], "site \"1\"");
    assert!(
        text.starts_with("digraph site {") && text.ends_with("}\n"),
        "{text}"
    );
    assert!(text.contains("label=\"site \\\"1\\\"\""), "{text}");
    assert!(
        text.contains(&format!("n{} [shape=box, label=\"Add_0\\nAdd\"]", add.0)),
        "{text}"
    );
    let w = g.value_by_name("w").unwrap();
    assert!(
        text.contains(&format!(
            "v{} [shape=ellipse, style=dashed, label=\"w\\nfloat[64]\"]",
            w.0
        )),
        "{text}"
    );
    assert!(text.contains(&format!("v{} -> n{}", w.0, add.0)), "{text}");
    let a = g.outputs(add)[0];
    assert!(text.contains(&format!("n{} -> v{}", add.0, a.0)), "{text}");
    assert!(!text.contains("Relu"), "only the site's nodes are drawn");
}

/// `r = Relu(x)`, `wd = DequantizeLinear(wq, ws)` (a constant MXFP8 weight `[64, 16]`, axis 0)
/// and `y = MatMul(x, wd)` (rule `mx_weight_matmul` fuses the last two), the three nodes named
/// `names` (ModelBuilder names them itself; ONNX allows repeated and empty names).
fn write_relu_and_weight_matmul(path: &Path, names: [&str; 3]) {
    use graph_rewrites::pattern::predicates::dtype::{FLOAT, FLOAT8E4M3FN, FLOAT8E8M0};
    let mut b = ModelBuilder::new(24);
    b.input("x", FLOAT, &[4, 64]);
    b.init_raw("wq", FLOAT8E4M3FN, &[64, 16], vec![0x3a; 1024]);
    b.init_raw("ws", FLOAT8E8M0, &[2, 16], vec![120; 32]);
    let dq = [
        ("axis", Attr::I(0)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT as i64)),
    ];
    b.node("Relu", &["x"], &["r"])
        .node_in("", "DequantizeLinear", &["wq", "ws"], &["wd"], &dq)
        .node("MatMul", &["x", "wd"], &["y"])
        .output("r", FLOAT, &[4, 64])
        .output("y", FLOAT, &[4, 16]);
    let mut m = b.model();
    let nodes = &mut m.graph.as_mut().unwrap().node;
    assert_eq!(nodes.len(), 3);
    for (node, name) in nodes.iter_mut().zip(names) {
        node.name = Some(name.into());
    }
    std::fs::write(path, m.encode_to_vec()).unwrap();
}

/// ONNX lets node names repeat (and be empty): a site's view draws the site's own nodes, by id —
/// before, it drew the first node of the graph with the name (here a Relu, not the fused MatMul).
#[test]
fn dot_views_draw_the_sites_nodes_when_names_repeat() {
    let dir = scratch("dot-dup");
    let input = dir.join("in.onnx");
    write_relu_and_weight_matmul(&input, ["dup", "", "dup"]);
    let dot = dir.join("dot");
    let o = mxfuse(&["inspect", s(&input), "--dot", s(&dot)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("mx_weight_matmul  fuse    at 'dup' (2 nodes -> dup/mx_weight_matmul)"),
        "{}",
        stdout(&o)
    );
    let before = std::fs::read_to_string(dot.join("000_mx_weight_matmul_before.dot")).unwrap();
    assert!(before.contains("label=\"dup\\nMatMul\""), "{before}");
    assert!(before.contains("label=\"\\nDequantizeLinear\""), "{before}");
    assert!(!before.contains("Relu"), "{before}");
    let after = std::fs::read_to_string(dot.join("000_mx_weight_matmul_after.dot")).unwrap();
    assert!(after.contains("com.mxfuse::MxMatMul"), "{after}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `inspect` names a fused site after the node the rule was tried at (the one its created nodes
/// are named after, and the EP's log names), not after the first node it removed: it printed
/// `at 'w_dq'`, the weight's DequantizeLinear, for the MatMul `mm`'s fusion (and a decoder's
/// norm fusion "at" its `Pow`, not its QuantizeLinear).
#[test]
fn inspect_names_a_fused_site_after_its_anchor() {
    let dir = scratch("inspect-anchor");
    let input = dir.join("in.onnx");
    write_relu_and_weight_matmul(&input, ["r", "w_dq", "mm"]);
    let o = mxfuse(&["inspect", s(&input)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("mx_weight_matmul  fuse    at 'mm' (2 nodes -> mm/mx_weight_matmul)"),
        "{}",
        stdout(&o)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `n` MXFP8 quantizers of `x{i}` whose block amax is a `ReduceMin` (no rule's spelling:
/// `mxquant` refuses them, the fallbacks `mx_quant_linear` / `mx_dequant` take the Q / DQ), each
/// read by a MatMul of a float weight: `mx_weight_matmul`'s near miss (its weight is not MX).
fn write_reduce_min_quantizers(path: &Path, n: usize) {
    use graph_rewrites::pattern::predicates::dtype::FLOAT;
    let mut b = ModelBuilder::new(24);
    b.init_i64("shape", &[3], &[0, 2, 32])
        .init_f32("w", &[64, 16], &[0.5; 64 * 16]);
    for i in 0..n {
        let v = |s: &str| format!("{s}{i}");
        b.input(&v("x"), FLOAT, &[-2, 64])
            .mx_quant_floor(&v("x"), "shape", &i.to_string())
            .node_in(
                "",
                "DequantizeLinear",
                &[&v("q"), &v("scale")],
                &[&v("dq")],
                &[("axis", Attr::I(-1)), ("block_size", Attr::I(32))],
            )
            .node("MatMul", &[&v("dq"), "w"], &[&v("y")])
            .output(&v("y"), FLOAT, &[-2, 16]);
    }
    let mut m = b.model();
    for node in m.graph.iter_mut().flat_map(|g| &mut g.node) {
        if node.op_type.as_deref() == Some("ReduceMax") {
            node.op_type = Some("ReduceMin".into());
        }
    }
    std::fs::write(path, m.encode_to_vec()).unwrap();
}

/// Near misses (a rule's structure almost matched; only REPORT.json had them, probe 10) are
/// summarised in the text output: rule, node, mismatch, at most 8 lines and "and N more";
/// `--explain` lists them all. Sites another rule fused are not near misses.
#[test]
fn rewrite_prints_near_misses() {
    let dir = scratch("near-miss");
    let (input, output) = (dir.join("in.onnx"), dir.join("out.onnx"));
    write_reduce_min_quantizers(&input, 1);
    let o = mxfuse(&["rewrite", s(&input), "-o", s(&output)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let line = text
        .lines()
        .find(|l| l.starts_with("  mx_weight_matmul at 'MatMul_7': "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("weight"), "{line}");
    assert!(text.contains("\nnear misses ("), "{text}");
    assert!(!text.contains(" more ("), "{text}");

    write_reduce_min_quantizers(&input, 10);
    let o = mxfuse(&["rewrite", s(&input), "-o", s(&output)]);
    let text = stdout(&o);
    let listed = text.lines().filter(|l| l.contains(" at 'MatMul_")).count();
    assert_eq!(listed, 8, "{text}");
    let header = text
        .lines()
        .find(|l| l.starts_with("near misses ("))
        .expect("header");
    let total: usize = header["near misses (".len()..]
        .split(':')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!(total >= 10, "{header}");
    assert!(
        text.contains(&format!("  and {} more (--explain", total - 8)),
        "{text}"
    );
    let o = mxfuse(&["rewrite", s(&input), "-o", s(&output), "--explain"]);
    let text = stdout(&o);
    let listed = text
        .lines()
        .filter(|l| l.starts_with("  ") && l.contains(" at 'MatMul_"))
        .count();
    assert_eq!(listed, total, "{text}");

    // A fully fused model has none: the norm rule's mismatch at a quantizer mxquant fused is
    // not one.
    let mut b = ModelBuilder::new(24);
    b.input("x", 1, &[-2, 64])
        .init_i64("shape", &[3], &[0, 2, 32])
        .mx_quant_floor("x", "shape", "")
        .output("q", 17, &[-2, 64]);
    std::fs::write(&input, b.model().encode_to_vec()).unwrap();
    let o = mxfuse(&["rewrite", s(&input), "-o", s(&output)]);
    assert!(
        stdout(&o).contains("mxquant                    1"),
        "{}",
        stdout(&o)
    );
    assert!(!stdout(&o).contains("near misses"), "{}", stdout(&o));
    let _ = std::fs::remove_dir_all(dir);
}

/// A norm the norm rule almost knows (the squares' `ReduceSum` never divided by H: a sum where
/// RMSNorm has a mean; `Div(ReduceSum, H)` fuses) in front of a quantizer `mxquant` fuses alone: the norm rule's near miss there matched the norm's nodes,
/// which `mxquant` did not take, so it is shown (the user's norm did not fuse, and this says
/// why); until h-left every near miss at a fused node was hidden. The SwiGLU rule's near miss
/// at the same quantizer matched only the quantizer: hidden, as before.
#[test]
fn rewrite_shows_the_near_miss_of_a_norm_whose_quantizer_fused_alone() {
    let dir = scratch("near-miss-norm");
    let (input, output) = (dir.join("in.onnx"), dir.join("out.onnx"));
    let mut b = ModelBuilder::new(24);
    b.input("x", 1, &[-2, 64])
        .init_i64("shape", &[3], &[0, 2, 32])
        .init_i64("norm_axes", &[1], &[-1])
        .init_f32("eps", &[], &[1e-6])
        .init_f32("gamma", &[64], &[1.5; 64])
        .node("Mul", &["x", "x"], &["sq"]);
    b.node_in(
        "",
        "ReduceSum",
        &["sq", "norm_axes"],
        &["ms"],
        &[("keepdims", Attr::I(1))],
    )
    .node("Add", &["ms", "eps"], &["v"])
    .node("Sqrt", &["v"], &["std"])
    .node("Reciprocal", &["std"], &["inv"])
    .node("Mul", &["x", "inv"], &["n"])
    .node("Mul", &["n", "gamma"], &["y"])
    .mx_quant_floor("y", "shape", "")
    .output("q", 17, &[-2, 64]);
    std::fs::write(&input, b.model().encode_to_vec()).unwrap();
    let o = mxfuse(&["rewrite", s(&input), "-o", s(&output)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("mxquant                    1"), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("  add_rmsnorm_mxquant at "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("ReduceSum"), "{line}");
    assert!(!text.contains("  swiglu_mxquant_matmul at "), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}
