//! Rewrite time and peak RSS of `mxfuse rewrite` on generated 60-layer decoders whose weights
//! live in external data, at two hidden sizes (same graph, ~30x different weight bytes).
//!
//! Run: `cargo bench -p graph_rewrites --bench rewrite_io` (bench profile). Environment:
//! `MXFUSE_BENCH_LAYERS` (default 60), `MXFUSE_BENCH_RUNS` (default 5), `MXFUSE_BENCH_DIR`
//! (default: the system temp dir), `MXFUSE_BENCH_KEEP` (set: keep the generated models). The
//! weight file is sparse (`set_len`), so even the ~80 GB of the hidden-6144 model cost no disk;
//! the rewrite reads from it only what a rule asks for (const_value caps reads at 64 MiB).
//!
//! Per layer: residual Add → RMSNormalization → MXFP8 quantize (opset-24 standard spelling) →
//! DequantizeLinear → MatMul (attention stand-in), residual Add → RMSNormalization → MXFP8 →
//! DequantizeLinear → MatMul(gate|up) → Split → SiLU·up → MXFP8 → DequantizeLinear → MatMul(down).

use std::path::{Path, PathBuf};
use std::process::Command;

use graph_rewrites::onnx_pb::{
    tensor_proto::DataLocation, tensor_shape_proto, type_proto, GraphProto, ModelProto,
    OperatorSetIdProto, StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use graph_rewrites::testing::{node_proto, Attr};
use prost::Message;

const FLOAT: i32 = 1;
const INT64: i32 = 7;

/// One generated model size.
struct Size {
    label: &'static str,
    hidden: i64,
    inter: i64,
}

const SIZES: [Size; 2] = [
    Size {
        label: "h1024",
        hidden: 1024,
        inter: 2816,
    },
    Size {
        label: "h6144",
        hidden: 6144,
        inter: 16384,
    },
];

/// Builds the model proto; external tensors point into `weights.bin` (offsets returned total).
struct Gen {
    g: GraphProto,
    offset: u64,
}

impl Gen {
    fn node(&mut self, op: &str, inputs: &[&str], outputs: &[&str], attrs: &[(&str, Attr<'_>)]) {
        let name = format!("{op}_{}", self.g.node.len());
        self.g
            .node
            .push(node_proto("", op, &name, inputs, outputs, attrs));
    }

    /// A float weight of `dims` stored externally, 4 KiB aligned.
    fn external(&mut self, name: &str, dims: &[i64]) {
        let len = dims.iter().product::<i64>() as u64 * 4;
        let entry = |k: &str, v: String| StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v),
        };
        self.g.initializer.push(TensorProto {
            name: Some(name.into()),
            dims: dims.to_vec(),
            data_type: Some(FLOAT),
            data_location: Some(DataLocation::External as i32),
            external_data: vec![
                entry("location", "weights.bin".into()),
                entry("offset", self.offset.to_string()),
                entry("length", len.to_string()),
            ],
            ..Default::default()
        });
        self.offset += len.div_ceil(4096) * 4096;
    }

    fn inline(&mut self, name: &str, elem: i32, dims: &[i64], raw: Vec<u8>) {
        self.g.initializer.push(TensorProto {
            name: Some(name.into()),
            dims: dims.to_vec(),
            data_type: Some(elem),
            raw_data: Some(raw),
            ..Default::default()
        });
    }

    /// MXFP8(x) with last dim `k`, standard opset-24 spelling, then DequantizeLinear: returns the
    /// dequantized value name.
    fn mx_qdq(&mut self, x: &str, k: i64, p: &str) -> String {
        let shape = format!("blk_{k}");
        let (xb, ab, amax, amax_s, scale, q, dq) =
            [".xb", ".ab", ".amax", ".amax_s", ".scale", ".q", ".dq"]
                .map(|s| format!("{p}{s}"))
                .into();
        self.node("Reshape", &[x, &shape], &[&xb], &[]);
        self.node("Abs", &[&xb], &[&ab], &[]);
        self.node(
            "ReduceMax",
            &[&ab, "ax_last"],
            &[&amax],
            &[("keepdims", Attr::I(0))],
        );
        self.node("Mul", &[&amax, "inv_2pow_emax"], &[&amax_s], &[]);
        let cast_attrs = [
            ("to", Attr::I(24)),
            ("round_mode", Attr::S("down")),
            ("saturate", Attr::I(1)),
        ];
        self.node("Cast", &[&amax_s], &[&scale], &cast_attrs);
        let q_attrs = [
            ("axis", Attr::I(-1)),
            ("block_size", Attr::I(32)),
            ("output_dtype", Attr::I(17)),
            ("saturate", Attr::I(1)),
        ];
        self.node("QuantizeLinear", &[x, &scale], &[&q], &q_attrs);
        self.node(
            "DequantizeLinear",
            &[&q, &scale],
            &[&dq],
            &[
                ("axis", Attr::I(-1)),
                ("block_size", Attr::I(32)),
                ("output_dtype", Attr::I(FLOAT as i64)),
            ],
        );
        let b = k / 32;
        let infos = [
            (&xb, FLOAT, vec![b, 32]),
            (&ab, FLOAT, vec![b, 32]),
            (&amax, FLOAT, vec![b]),
            (&amax_s, FLOAT, vec![b]),
            (&scale, 24, vec![b]),
            (&q, 17, vec![k]),
            (&dq, FLOAT, vec![k]),
        ];
        for (name, elem, tail) in infos {
            self.g.value_info.push(typed(name, elem, &tail));
        }
        dq
    }
}

/// A value_info of type `elem` and shape `[1, seq, *tail]`, as an exporter with shape
/// inference writes it (the rules need the types of the values they fuse).
fn typed(name: &str, elem: i32, tail: &[i64]) -> ValueInfoProto {
    use tensor_shape_proto::{dimension::Value, Dimension};
    let dims = [Value::DimValue(1), Value::DimParam("seq".into())]
        .into_iter()
        .chain(tail.iter().map(|&d| Value::DimValue(d)));
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            denotation: None,
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .map(|v| Dimension {
                            denotation: None,
                            value: Some(v),
                        })
                        .collect(),
                }),
            })),
        }),
        ..Default::default()
    }
}

/// Writes `dir/model.onnx` and the sparse `dir/weights.bin`; returns the weight bytes.
fn generate(dir: &Path, layers: usize, s: &Size) -> u64 {
    let (h, i) = (s.hidden, s.inter);
    let mut gen = Gen {
        g: GraphProto {
            name: Some(format!("bench_{}", s.label)),
            ..Default::default()
        },
        offset: 0,
    };
    gen.g.input = vec![typed("x", FLOAT, &[h]), typed("residual", FLOAT, &[h])];
    for k in [h, i] {
        let shape: Vec<u8> = [0i64, 0, k / 32, 32]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        gen.inline(&format!("blk_{k}"), INT64, &[4], shape);
    }
    gen.inline("ax_last", INT64, &[1], (-1i64).to_le_bytes().to_vec());
    gen.inline(
        "inv_2pow_emax",
        FLOAT,
        &[],
        (2f32.powi(-8)).to_le_bytes().to_vec(),
    );
    let (mut hid, mut res) = ("x".to_owned(), "residual".to_owned());
    let norm_attrs = || {
        [
            ("axis", Attr::I(-1)),
            ("epsilon", Attr::F(1e-6)),
            ("stash_type", Attr::I(1)),
        ]
    };
    for l in 0..layers {
        let p = |s: &str| format!("l{l}.{s}");
        for w in ["g1", "g2"] {
            gen.external(&p(w), &[h]);
        }
        gen.external(&p("w_o"), &[h, h]);
        gen.external(&p("w_gu"), &[h, 2 * i]);
        gen.external(&p("w_down"), &[i, h]);
        gen.node("Add", &[&hid, &res], &[&p("sum1")], &[]);
        gen.node(
            "RMSNormalization",
            &[&p("sum1"), &p("g1")],
            &[&p("n1")],
            &norm_attrs(),
        );
        let d1 = gen.mx_qdq(&p("n1"), h, &p("q1"));
        gen.node("MatMul", &[&d1, &p("w_o")], &[&p("attn")], &[]);
        gen.node("Add", &[&p("attn"), &p("sum1")], &[&p("sum2")], &[]);
        gen.node(
            "RMSNormalization",
            &[&p("sum2"), &p("g2")],
            &[&p("n2")],
            &norm_attrs(),
        );
        let d2 = gen.mx_qdq(&p("n2"), h, &p("q2"));
        gen.node("MatMul", &[&d2, &p("w_gu")], &[&p("gu")], &[]);
        gen.node(
            "Split",
            &[&p("gu")],
            &[&p("gate"), &p("up")],
            &[("axis", Attr::I(-1)), ("num_outputs", Attr::I(2))],
        );
        gen.node("Sigmoid", &[&p("gate")], &[&p("sig")], &[]);
        gen.node("Mul", &[&p("gate"), &p("sig")], &[&p("silu")], &[]);
        gen.node("Mul", &[&p("silu"), &p("up")], &[&p("act")], &[]);
        let d3 = gen.mx_qdq(&p("act"), i, &p("q3"));
        gen.node("MatMul", &[&d3, &p("w_down")], &[&p("down")], &[]);
        let widths = [
            ("sum1", h),
            ("n1", h),
            ("attn", h),
            ("sum2", h),
            ("n2", h),
            ("gu", 2 * i),
        ]
        .into_iter()
        .chain(["gate", "up", "sig", "silu", "act"].map(|v| (v, i)))
        .chain([("down", h)]);
        for (v, width) in widths {
            gen.g.value_info.push(typed(&p(v), FLOAT, &[width]));
        }
        (hid, res) = (p("down"), p("sum2"));
    }
    gen.node("Add", &[&hid, &res], &["y"], &[]);
    gen.g.output = vec![typed("y", FLOAT, &[h])];
    let model = ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(24),
        }],
        producer_name: Some("mxfuse rewrite_io bench".into()),
        graph: Some(gen.g),
        ..Default::default()
    };
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("model.onnx"), model.encode_to_vec()).unwrap();
    let weights = std::fs::File::create(dir.join("weights.bin")).unwrap();
    weights.set_len(gen.offset).unwrap(); // sparse: no disk, no page cache
    gen.offset
}

/// Parsed `--stats` line and fusion count of one run.
struct Run {
    load: f64,
    rewrite: f64,
    save: f64,
    total: f64,
    rss_mib: f64,
}

fn run_once(exe: &str, dir: &Path) -> (Run, String) {
    let out = Command::new(exe)
        .args([
            "rewrite",
            "model.onnx",
            "-o",
            "out.onnx",
            "--report",
            "report.json",
            "--stats",
        ])
        .current_dir(dir)
        .output()
        .expect("run mxfuse");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "mxfuse failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("stats:"))
        .expect("stats line");
    let field = |key: &str| -> f64 {
        let at = line
            .find(key)
            .unwrap_or_else(|| panic!("no '{key}' in {line}"))
            + key.len();
        line[at..]
            .split_whitespace()
            .next()
            .unwrap()
            .trim_end_matches(',')
            .parse()
            .unwrap()
    };
    let run = Run {
        load: field("load "),
        rewrite: field("rewrite "),
        save: field("save "),
        total: field("total "),
        rss_mib: field("peak RSS "),
    };
    (run, stdout)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes harness flags such as `--bench`; there is nothing to filter.
    let env_num = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (layers, runs) = (
        env_num("MXFUSE_BENCH_LAYERS", 60),
        env_num("MXFUSE_BENCH_RUNS", 5).max(1),
    );
    let root = std::env::var_os("MXFUSE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let root = root.join(format!("mxfuse-bench-rewrite-{}", std::process::id()));
    let exe = env!("CARGO_BIN_EXE_mxfuse");
    println!("rewrite_io: {layers} layers, {runs} runs per size, median of runs (peak RSS: max)");
    println!("| model | weight bytes (external) | nodes in → out | load s | rewrite s | save s | total s | peak RSS MiB |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut baseline: Option<(f64, f64)> = None;
    for s in &SIZES {
        let dir = root.join(s.label);
        let bytes = generate(&dir, layers, s);
        let mut results = Vec::new();
        let mut table = String::new();
        for _ in 0..runs {
            let (r, stdout) = run_once(exe, &dir);
            results.push(r);
            table = stdout;
        }
        let nodes_in = graph_rewrites::io::load_model(&dir.join("model.onnx"))
            .unwrap()
            .graph
            .unwrap()
            .node
            .len();
        let nodes_out = graph_rewrites::io::load_model(&dir.join("out.onnx"))
            .unwrap()
            .graph
            .unwrap()
            .node
            .len();
        let pick = |f: fn(&Run) -> f64| median(results.iter().map(f).collect());
        let rss = results.iter().map(|r| r.rss_mib).fold(0.0, f64::max);
        let total = pick(|r| r.total);
        println!(
            "| {layers}L {} (I={}) | {:.1} GB | {nodes_in} → {nodes_out} | {:.3} | {:.3} | {:.3} | {total:.3} | {rss:.1} |",
            s.label,
            s.inter,
            bytes as f64 / 1e9,
            pick(|r| r.load),
            pick(|r| r.rewrite),
            pick(|r| r.save)
        );
        eprintln!("{}: mxfuse table of the last run:\n{table}", s.label);
        match baseline {
            None => baseline = Some((total, rss)),
            Some((t0, r0)) => println!(
                "ratio {} / {}: time {:.2}x, peak RSS {:.2}x (weights {:.1}x)",
                s.label,
                SIZES[0].label,
                total / t0,
                rss / r0,
                (s.hidden * (s.hidden + 3 * s.inter)) as f64
                    / (SIZES[0].hidden * (SIZES[0].hidden + 3 * SIZES[0].inter)) as f64
            ),
        }
    }
    if std::env::var_os("MXFUSE_BENCH_KEEP").is_some() {
        eprintln!("kept {}", root.display());
    } else {
        let _ = std::fs::remove_dir_all(&root);
    }
}
