//! Property tests on fresh random inputs each run: any f32 bit pattern (NaN, ±Inf, subnormals
//! included) through the fast quantizer and the fast fused norm equals the scalar reference.

use half::bf16;
use kernels::attrs::AddRmsNormAttrs;
use kernels::codec::{NanPolicy, QuantConfig, ScaleRule};
use kernels::slices::NormOutputs;
use kernels::{fast, reference, Serial};
use proptest::prelude::*;

fn config(rule: bool, ignore: bool) -> QuantConfig {
    QuantConfig {
        scale_rule: if rule {
            ScaleRule::Rceil
        } else {
            ScaleRule::Floor
        },
        nan_policy: if ignore {
            NanPolicy::Ignore
        } else {
            NanPolicy::Propagate
        },
    }
}

/// Bit patterns biased towards interesting exponents: half arbitrary, half moderate values.
fn element() -> impl Strategy<Value = f32> {
    prop_oneof![any::<u32>().prop_map(f32::from_bits), (-1e4f32..1e4f32)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn quantize_fast_equals_reference(
        blocks in 1usize..12,
        seed_vals in proptest::collection::vec(element(), 32 * 12),
        rule in any::<bool>(),
        ignore in any::<bool>(),
    ) {
        let x: Vec<bf16> = seed_vals[..32 * blocks].iter().map(|&v| bf16::from_f32(v)).collect();
        let cfg = config(rule, ignore);
        let (mut q0, mut s0) = (vec![0u8; x.len()], vec![0u8; blocks]);
        reference::mx_quantize(&x, x.len(), &mut q0, &mut s0, cfg).unwrap();
        let (mut q1, mut s1) = (vec![0u8; x.len()], vec![0u8; blocks]);
        fast::mx_quantize(&x, x.len(), &mut q1, &mut s1, cfg, &Serial).unwrap();
        prop_assert_eq!((s1, q1), (s0, q0));
        let xf: Vec<f32> = seed_vals[..32 * blocks].to_vec();
        let (mut q0, mut s0) = (vec![0u8; xf.len()], vec![0u8; blocks]);
        reference::mx_quantize(&xf, xf.len(), &mut q0, &mut s0, cfg).unwrap();
        let (mut q1, mut s1) = (vec![0u8; xf.len()], vec![0u8; blocks]);
        fast::mx_quantize(&xf, xf.len(), &mut q1, &mut s1, cfg, &Serial).unwrap();
        prop_assert_eq!((s1, q1), (s0, q0));
    }

    #[test]
    fn norm_fast_equals_reference(
        vals in proptest::collection::vec(-50f32..50f32, 3 * 288),
        gemma in any::<bool>(),
        round_sum in any::<bool>(),
        rule in any::<bool>(),
    ) {
        let h = 288; // 9 blocks: one 8-block group and a single block
        let x: Vec<bf16> = vals[..2 * h].iter().map(|&v| bf16::from_f32(v)).collect();
        let r: Vec<bf16> = vals[h..3 * h].iter().map(|&v| bf16::from_f32(v * 0.5)).collect();
        let g: Vec<f32> = vals[2 * h..].iter().map(|v| v * 0.01).collect();
        let attrs = AddRmsNormAttrs { gemma, round_sum, quant: config(rule, false), ..Default::default() };
        let run = |fast_path: bool| {
            let (mut q, mut s) = (vec![0u8; 2 * h], vec![0u8; 2 * h / 32]);
            let mut nm = vec![bf16::ZERO; 2 * h];
            let out = NormOutputs { q: &mut q, scales: &mut s, residual_out: None, normed: Some(&mut nm) };
            if fast_path {
                fast::add_rms_norm_mx_quant(&x, Some(&r), &g, h, &attrs, out, &Serial).unwrap();
            } else {
                reference::add_rms_norm_mx_quant(&x, Some(&r), &g, h, &attrs, out).unwrap();
            }
            (q, s, nm.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
        };
        prop_assert_eq!(run(true), run(false));
    }
}
