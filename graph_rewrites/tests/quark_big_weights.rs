//! Quark fake-quantized weights above other constants' 64 MiB (`ir::CONST_VALUE_MAX_BYTES`): the
//! Quark weight cap (`ir::QUARK_WEIGHT_MAX_BYTES`, 4 GiB; setting `quark_weight_max_mib`) lets
//! the rules read, quantize and check them, as a real MoE layer's stacked experts need. One
//! ~68 MiB stack, built once per test (the Python tests run the same through the plugin EP and
//! the CLI with external data: tests/python/test_quark_big_experts.py).

use graph_rewrites::pattern::predicates::dtype::{FLOAT, INT64};
use graph_rewrites::pipeline::{run_pipeline, PipelineOptions};
use graph_rewrites::testing::{op_types, ModelBuilder};
use graph_rewrites::view::GraphView;
use kernels::codec::{e4m3_to_f32, e8m0::e8m0_to_f32};
use kernels::reference::quark_mx::{quark_mx_block, IntRounding, QuarkElement};

/// `[E, N, K]` f32 experts of 68 MiB: over 64 MiB.
const DIMS: [usize; 3] = [17, 1024, 1024];

/// Element `i` of the experts: blocks of magnitudes 2^-4 .. 2^4, a zero block in each row.
fn value(i: usize) -> f32 {
    if i / 32 % 32 == 7 {
        return 0.0;
    }
    ((i * 37 % 101) as f32 - 50.0) * 0.013 * (1u32 << (i / 1024 % 9)) as f32 / 16.0
}

/// `wsel = Gather(MXQuantizeDequantize(w, axis 2), ids)`, `w` holding `vals`.
fn model(vals: &[f32]) -> ModelBuilder {
    let mut b = ModelBuilder::new(24);
    b.opset("com.amd.quark", 1);
    b.input("ids", INT64, &[3]);
    let d: Vec<i64> = DIMS.iter().map(|&d| d as i64).collect();
    b.init_f32("w", &d, vals);
    b.quark_fake_quant("w", "wf", 32, 2);
    b.node("Gather", &["wf", "ids"], &["wsel"]);
    b.output("wsel", FLOAT, &[3, DIMS[1] as i64, DIMS[2] as i64]);
    b
}

fn rewrite(
    vals: &[f32],
    settings: &[(&str, &str)],
) -> (Vec<String>, Vec<String>, graph_rewrites::ir::Graph) {
    let mut g = model(vals).graph().expect("test graph loads");
    let opts = PipelineOptions {
        settings: settings
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let report = run_pipeline(&mut g, &opts).expect("pipeline runs");
    let why = report
        .rejections
        .iter()
        .filter(|r| r.rule == "mx_gather_dequant")
        .map(|r| r.reason.clone())
        .collect();
    (why, op_types(&g), g)
}

/// Fused: one `MxGatherDequantize` of stored E4M3 values and E8M0 scales that are Quark's
/// fake-quantized experts (checked on the first, a middle and the last expert's blocks).
#[test]
fn a_quark_expert_stack_over_64_mib_is_fused() {
    let vals: Vec<f32> = (0..DIMS.iter().product()).map(value).collect();
    let (why, ops, g) = rewrite(&vals, &[]);
    assert_eq!(ops, ["MxGatherDequantize"], "{why:?}");
    let read = |name: &str| {
        let v = g.value_by_name(name).expect(name);
        g.const_value(v).expect(name).raw
    };
    let (q, s) = (read("w_mxfp8"), read("w_mxfp8_scale"));
    assert_eq!((q.len(), s.len()), (vals.len(), vals.len() / 32));
    let mut want = [0f32; 32];
    for block in [0, 7, 1000, vals.len() / 64, vals.len() / 32 - 1] {
        let x = &vals[block * 32..block * 32 + 32];
        quark_mx_block(x, &mut want, QuarkElement::Fp8E4M3, IntRounding::HalfEven);
        for (j, &w) in want.iter().enumerate() {
            let got = e4m3_to_f32(q[block * 32 + j]) * e8m0_to_f32(s[block]);
            assert_eq!(got, w, "block {block} element {j}");
        }
    }
}

/// Refused with the reason: over a lower cap (setting `quark_weight_max_mib`), or inexact (an
/// Inf in the last expert: the check reads the whole stack to find it). The fake quant then
/// stays rule `mxquant`'s (`MxQuantize` at run time).
#[test]
fn a_big_quark_expert_stack_refused_says_why() {
    let mut vals: Vec<f32> = (0..DIMS.iter().product()).map(value).collect();
    let (why, ops, _) = rewrite(&vals, &[("quark_weight_max_mib", "64")]);
    assert!(
        why.iter()
            .any(|r| r.contains("'w' is 68 MiB, over the 64 MiB")),
        "{why:?}"
    );
    assert_eq!(ops, ["MxQuantize", "MxGatherDequantize"]);
    let last = vals.len() - 5; // element [16, 1023, 1019]: its block starts at 992
    vals[last] = f32::INFINITY;
    let (why, ops, _) = rewrite(&vals, &[]);
    assert!(
        why.iter().any(
            |r| r.contains("not exactly an MXFP8 weight: element [16, 1023, 992]")
                && r.contains("holds an Inf")
        ),
        "{why:?}"
    );
    assert_eq!(ops, ["MxQuantize", "MxGatherDequantize"]);
}
