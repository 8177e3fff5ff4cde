//! torch's `nn.Linear` on a `[B, S, K]` activation: `Reshape(x, [-1, K]) → Gemm(transB = 1,
//! bias) | MatMul → Reshape(.., [B, S, N])`. The MX activation's `DequantizeLinear` (or Quark
//! fake-quant) reaches the linear through the first Reshape; the rules read through it when it
//! provably keeps K: `MxMatMul` on the un-reshaped MXFP8 values + scales, then a float Reshape
//! of its output to the linear's output shape.

use graph_rewrites::ir::Graph;
use graph_rewrites::pattern::predicates::dtype::FLOAT;
use graph_rewrites::pattern::predicates::values_i64;
use graph_rewrites::pipeline::RewriteReport;
use graph_rewrites::testing::{op_types, value_names, Attr, ModelBuilder};
use graph_rewrites::view::GraphView;

const K: i64 = 64;
const N: i64 = 16;

/// `x [2, 3, 64]` → standard MXFP8 quantize (OCP floor) → `DequantizeLinear` = `xd`, or with
/// `quark`, Quark's fake-quant of x = `xd`.
fn quantized(quark: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.input("x", FLOAT, &[2, 3, K]);
    if quark {
        b.opset("com.amd.quark", 1);
        b.quark_fake_quant("x", "xd", 32, 2);
        return b;
    }
    b.init_i64("bshape", &[4], &[0, 0, K / 32, 32])
        .mx_quant_floor("x", "bshape", "");
    let dq = [
        ("axis", Attr::I(-1)),
        ("block_size", Attr::I(32)),
        ("output_dtype", Attr::I(FLOAT as i64)),
    ];
    b.node_in("", "DequantizeLinear", &["q", "scale"], &["xd"], &dq);
    b
}

/// How the linear reads the flattened activation.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Linear {
    /// `MatMul(xf, w [K, N])`.
    MatMul,
    /// `Gemm(xf, w [N, K], bias [N], transB = 1)` (torch's addmm).
    Gemm,
}

/// [`quantized`] → `Reshape(xd, flat)` = `xf` → the linear = `yf` → `Reshape(yf, [2, 3, N])` = y.
fn flat_linear(quark: bool, linear: Linear, flat: &[i64]) -> ModelBuilder {
    flat_linear_to(quark, linear, flat, &[2, 3, N])
}

/// [`flat_linear`] with `Reshape(yf, unflat)` = y.
fn flat_linear_to(quark: bool, linear: Linear, flat: &[i64], unflat: &[i64]) -> ModelBuilder {
    let mut b = quantized(quark);
    let known: i64 = unflat.iter().filter(|&&d| d > 0).product();
    let y_dims: Vec<i64> = unflat
        .iter()
        .map(|&d| if d == -1 { 6 * N / known } else { d })
        .collect();
    b.init_i64("flat", &[flat.len() as i64], flat)
        .init_i64("unflat", &[unflat.len() as i64], unflat)
        .node("Reshape", &["xd", "flat"], &["xf"]);
    match linear {
        Linear::MatMul => {
            b.init_f32("w", &[K, N], &weights(K * N))
                .node("MatMul", &["xf", "w"], &["yf"]);
        }
        Linear::Gemm => {
            b.init_f32("w", &[N, K], &weights(K * N))
                .init_f32("bias", &[N], &weights(N))
                .node_in(
                    "",
                    "Gemm",
                    &["xf", "w", "bias"],
                    &["yf"],
                    &[("transB", Attr::I(1))],
                );
        }
    }
    b.node("Reshape", &["yf", "unflat"], &["y"])
        .output("y", FLOAT, &y_dims);
    b
}

fn weights(n: i64) -> Vec<f32> {
    (0..n).map(|i| ((i % 7) as f32 - 3.0) * 0.125).collect()
}

/// Each node as `Op(inputs) -> outputs`, in graph order.
fn snapshot(g: &Graph) -> Vec<String> {
    g.nodes()
        .iter()
        .map(|&n| {
            format!(
                "{}({}) -> {}",
                g.op_type(n),
                value_names(g, g.inputs(n)).join(", "),
                value_names(
                    g,
                    &g.outputs(n).iter().map(|&o| Some(o)).collect::<Vec<_>>()
                )
                .join(", ")
            )
        })
        .collect()
}

fn const_i64(g: &Graph, name: &str) -> Vec<i64> {
    let v = g.value_by_name(name).unwrap_or_else(|| panic!("no {name}"));
    values_i64(&g.const_value(v).expect("constant")).expect("ints")
}

fn notes(report: &RewriteReport) -> Vec<String> {
    report
        .fusions
        .iter()
        .flat_map(|f| f.notes.iter().cloned())
        .collect()
}

/// MatMul and Gemm(transB = 1, bias) readers through `Reshape([-1, K])` (and a constant
/// `[6, K]`): one `MxMatMul` on the MXFP8 values + scales as quantized (`[2, 3, ..]`). When the
/// linear's only reader is a `Reshape` back to exactly that shape (`[2, 3, N]`, or with one -1:
/// torch's `view(B, S, N)`), the `MxMatMul` writes its output directly (no Reshape there and
/// back: each would be a copy in the EP's program); otherwise its `[2, 3, N]` output is
/// reshaped to the linear's `[6, N]` under the linear's output name and the trailing Reshape
/// stays as it is.
#[test]
fn linear_through_a_flattening_reshape_becomes_mxmatmul() {
    for quark in [false, true] {
        for linear in [Linear::MatMul, Linear::Gemm] {
            for flat in [&[-1, K][..], &[6, K]] {
                for unflat in [
                    &[2, 3, N][..],
                    &[-1, 3, N],
                    &[2, -1, N],
                    &[3, 2, N],
                    &[1, 6, N],
                ] {
                    let what = format!("quark={quark} {linear:?} {flat:?} {unflat:?}");
                    let (report, g) = flat_linear_to(quark, linear, flat, unflat).rewrite();
                    assert_eq!(report.counts["mxquant"], 1, "{what}: {report:#?}");
                    assert!(notes(&report).is_empty(), "{what}: {report:#?}");
                    let w_in = match linear {
                        Linear::MatMul => "w",
                        Linear::Gemm => "w, , bias",
                    };
                    let back = unflat[..2]
                        .iter()
                        .zip([2, 3])
                        .all(|(&u, d)| u == d || u == -1);
                    let mm_out = if back { "y" } else { "yf_mx" };
                    let mut want = vec![
                        "MxQuantize(x) -> x_mxfp8, x_mxfp8_scale".to_string(),
                        format!("MxMatMul(x_mxfp8, x_mxfp8_scale, {w_in}) -> {mm_out}"),
                    ];
                    if !back {
                        want.push("Reshape(yf_mx, yf_shape) -> yf".to_string());
                        want.push("Reshape(yf, unflat) -> y".to_string());
                    }
                    assert_eq!(snapshot(&g), want, "{what}");
                    let mm = g.producer(g.value_by_name(mm_out).unwrap()).unwrap().0;
                    let trans_b = matches!(linear, Linear::Gemm) as i64;
                    assert_eq!(
                        format!("{:?}", g.attr(mm, "trans_b")),
                        format!("Some(Int({trans_b}))"),
                        "{what}"
                    );
                    let info = g.tensor_info(g.value_by_name(mm_out).unwrap()).unwrap();
                    assert_eq!(info.elem_type, FLOAT);
                    assert_eq!(
                        format!("{:?}", info.shape),
                        "Some([Known(2), Known(3), Known(16)])",
                        "{what}"
                    );
                    if !back {
                        let mut out_shape = flat.to_vec();
                        *out_shape.last_mut().unwrap() = N;
                        assert_eq!(const_i64(&g, "yf_shape"), out_shape, "{what}");
                    }
                }
            }
        }
    }
}

/// The Reshape back is taken only when the linear's output has no other reader and is no graph
/// output, and when the activation's leading dims are known.
#[test]
fn the_reshape_back_stays_when_the_linear_output_is_read_elsewhere() {
    let mut b = flat_linear(false, Linear::MatMul, &[-1, K]);
    b.output("yf", FLOAT, &[6, N]);
    let (_, g) = b.rewrite();
    assert!(
        snapshot(&g).contains(&"Reshape(yf, unflat) -> y".to_string()),
        "{:#?}",
        snapshot(&g)
    );

    let mut b = flat_linear(false, Linear::MatMul, &[-1, K]);
    b.node("Relu", &["yf"], &["r"]).output("r", FLOAT, &[6, N]);
    let (_, g) = b.rewrite();
    assert!(
        snapshot(&g).contains(&"Reshape(yf, unflat) -> y".to_string()),
        "{:#?}",
        snapshot(&g)
    );
}

/// Two linears (q/k/v-style) through one flattening Reshape: both absorbed, the Reshape goes.
/// A second, non-linear reader of the Reshape keeps it (and the dequantized value) for that
/// reader, with a note; the linear is still absorbed.
#[test]
fn shared_flattening_reshape_and_other_readers() {
    let mut b = flat_linear(false, Linear::Gemm, &[-1, K]);
    b.init_f32("w2", &[K, N], &weights(K * N))
        .node("MatMul", &["xf", "w2"], &["y2"])
        .output("y2", FLOAT, &[6, N]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
    assert!(notes(&report).is_empty(), "{report:#?}");
    let mut ops = op_types(&g);
    ops.sort();
    // The Gemm's Reshape back is gone with its output Reshape; the MatMul's output (a graph
    // output) gets its [6, N] shape back.
    assert_eq!(ops, ["MxMatMul", "MxMatMul", "MxQuantize", "Reshape"]);

    let mut b = flat_linear(false, Linear::Gemm, &[-1, K]);
    b.node("Relu", &["xf"], &["r"]).output("r", FLOAT, &[6, K]);
    let (report, g) = b.rewrite();
    assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
    let notes = notes(&report);
    assert_eq!(notes.len(), 1, "{report:#?}");
    assert!(
        notes[0].contains("Reshape 'Reshape_7' stays for a reader not absorbed")
            && notes[0].contains("Relu"),
        "{notes:?}"
    );
    let snap = snapshot(&g);
    assert!(
        snap.contains(&"MxMatMul(q, scale, w, , bias) -> y".to_string()),
        "{snap:#?}"
    );
    assert!(
        snap.contains(&"MxDequantize(q, scale) -> xd".to_string()),
        "{snap:#?}"
    );
    assert!(
        snap.contains(&"Reshape(xd, flat) -> xf".to_string()),
        "{snap:#?}"
    );
}

/// Reshapes that do not provably keep K are not read through: the linear keeps reading the
/// dequantized value (`MxDequantize` after rule `mx_dequant`), and the note says why.
#[test]
fn reshapes_that_may_change_k_are_refused_with_a_note() {
    let cases: [(&[i64], &str); 4] = [
        (&[-1, 32], "does not end in K = 64"),
        (&[K, -1], "does not end in K = 64"),
        (&[0, 3, K], "has a 0 or a second -1 before K"),
        (&[-1, -1, K], "has a 0 or a second -1 before K"),
    ];
    for (flat, why) in cases {
        let (report, g) = flat_linear(false, Linear::MatMul, flat).rewrite();
        assert_eq!(report.counts["mxquant"], 1, "{report:#?}");
        let notes = notes(&report);
        assert!(notes.iter().any(|n| n.contains(why)), "{flat:?}: {notes:?}");
        assert_eq!(
            op_types(&g),
            ["MxQuantize", "MxDequantize", "Reshape", "MatMul", "Reshape"],
            "{flat:?}"
        );
    }

    // A shape given at run time (a graph input): it could be anything to the rule.
    let mut b = quantized(false);
    b.input(
        "flat_rt",
        graph_rewrites::pattern::predicates::dtype::INT64,
        &[2],
    )
    .init_f32("w", &[K, N], &weights(K * N))
    .node("Reshape", &["xd", "flat_rt"], &["xf"])
    .node("MatMul", &["xf", "w"], &["y"])
    .output("y", FLOAT, &[6, N]);
    let (report, g) = b.rewrite();
    assert!(
        notes(&report)
            .iter()
            .any(|n| n.contains("'flat_rt' is computed at run time")),
        "{report:#?}"
    );
    assert!(op_types(&g).contains(&"MatMul".to_string()));

    // allowzero = 1.
    let mut b = quantized(false);
    b.init_i64("flat", &[2], &[-1, K])
        .init_f32("w", &[K, N], &weights(K * N))
        .node_in(
            "",
            "Reshape",
            &["xd", "flat"],
            &["xf"],
            &[("allowzero", Attr::I(1))],
        )
        .node("MatMul", &["xf", "w"], &["y"])
        .output("y", FLOAT, &[6, N]);
    let (report, g) = b.rewrite();
    assert!(
        notes(&report).iter().any(|n| n.contains("allowzero = 1")),
        "{report:#?}"
    );
    assert!(op_types(&g).contains(&"MatMul".to_string()));
}
