//! Differential tests: every fast kernel (AVX2 when available, and forced portable) against the
//! scalar reference on fresh random inputs with edge blocks mixed in. Bit-exact except MxMatMul.

mod common;

use common::Rng;
use half::{bf16, f16};
use kernels::attrs::{Activation, AddRmsNormAttrs, InvForm, SwiGluAttrs, SwiGluLayout, SwishForm};
use kernels::codec::{NanPolicy, QuantConfig, ScaleRule};
use kernels::fast::with_portable;
use kernels::slices::{MatB, NormOutputs, SwiGluInput};
use kernels::{fast, reference, Element, Epilogue, Serial, StdThreads};

const NONE: Epilogue = Epilogue::NONE;

fn configs() -> Vec<QuantConfig> {
    let mut v = Vec::new();
    for scale_rule in [ScaleRule::Floor, ScaleRule::Rceil, ScaleRule::FloorF16] {
        for nan_policy in [NanPolicy::Propagate, NanPolicy::Ignore] {
            v.push(QuantConfig {
                scale_rule,
                nan_policy,
            });
        }
    }
    v
}

/// Runs `f` on the detected ISA and again forced portable.
fn both_isas(f: impl Fn()) {
    f();
    with_portable(&f);
}

fn to_t<T: Element>(v: &[f32]) -> Vec<T> {
    v.iter().map(|&x| T::from_f32(x)).collect()
}

fn sprinkle_non_finite(v: &mut [f32], rng: &mut Rng) {
    for _ in 0..3 {
        let i = (rng.next_u64() % v.len() as u64) as usize;
        v[i] = match rng.next_u64() % 3 {
            0 => f32::NAN,
            1 => f32::INFINITY,
            _ => f32::NEG_INFINITY,
        };
    }
}

fn quantize_case<T: fast::FastElement>(seed: u64) {
    let mut rng = Rng::new(seed);
    let (rows, k) = (7, 256);
    let mut xf = rng.mixed_row(rows * k);
    sprinkle_non_finite(&mut xf, &mut rng);
    let x: Vec<T> = to_t(&xf);
    for cfg in configs() {
        let (mut q0, mut s0) = (vec![0u8; rows * k], vec![0u8; rows * k / 32]);
        reference::mx_quantize(&x, k, &mut q0, &mut s0, cfg).unwrap();
        both_isas(|| {
            let (mut q1, mut s1) = (vec![0u8; rows * k], vec![0u8; rows * k / 32]);
            fast::mx_quantize(&x, k, &mut q1, &mut s1, cfg, &StdThreads::new(3)).unwrap();
            assert_eq!(s1, s0, "scales {cfg:?}");
            assert_eq!(q1, q0, "values {cfg:?}");
        });
    }
}

#[test]
fn quantize_matches_reference_all_dtypes() {
    for seed in 0..4 {
        quantize_case::<f32>(seed);
        quantize_case::<f16>(seed);
        quantize_case::<bf16>(seed);
    }
}

fn norm_attr_variants() -> Vec<AddRmsNormAttrs> {
    let mut v = Vec::new();
    for (i, inv_form) in [InvForm::Rsqrt, InvForm::RecipMul, InvForm::Div]
        .into_iter()
        .enumerate()
    {
        for gemma in [false, true] {
            for gamma_in_f32 in [true, false] {
                v.push(AddRmsNormAttrs {
                    epsilon: 1e-6,
                    gemma,
                    gamma_in_f32,
                    inv_form,
                    round_sum: i % 2 == 0,
                    allreduce: false,
                    flatten_rows: false,
                    quant: configs()[(i + gemma as usize) % 4],
                });
            }
        }
    }
    v
}

fn norm_case<T: fast::FastElement>(seed: u64, with_residual: bool) {
    let mut rng = Rng::new(seed);
    let (rows, h) = (5, 384);
    let mut xf: Vec<f32> = (0..rows * h).map(|_| rng.normal(3.0)).collect();
    let mut resf: Vec<f32> = (0..rows * h).map(|_| rng.normal(10.0)).collect();
    let mut gammaf: Vec<f32> = (0..h).map(|_| rng.normal(0.5)).collect();
    if seed % 2 == 1 {
        xf[h + 7] = f32::NAN; // one row with a NaN
                              // NaN payloads with all mantissa bits set (bf16 0x7FFF / 0xFFFF: rounding them must not
                              // carry), and Inf + -Inf = the default NaN, each in its own row.
        xf[2 * h + 40] = f32::from_bits(0x7FFF_0000);
        resf[3 * h + 41] = f32::from_bits(0xFFFF_0000);
        (xf[4 * h + 42], resf[4 * h + 42]) = (f32::INFINITY, f32::NEG_INFINITY);
    }
    if seed == 3 {
        gammaf[100] = f32::NAN; // every row's pass 2 takes the NaN-aware rounding
    }
    let x: Vec<T> = to_t(&xf);
    let res: Vec<T> = to_t(&resf);
    let gamma: Vec<T> = to_t(&gammaf);
    let residual = with_residual.then_some(&res[..]);
    for attrs in norm_attr_variants() {
        // Without the optional outputs the kernel takes other store/rounding paths.
        let run = |fast_path: bool, outputs: bool| {
            let (mut q, mut s) = (vec![0u8; rows * h], vec![0u8; rows * h / 32]);
            let (mut ro, mut nm) = (vec![T::default(); rows * h], vec![T::default(); rows * h]);
            let out = NormOutputs {
                q: &mut q,
                scales: &mut s,
                residual_out: outputs.then_some(&mut ro[..]),
                normed: outputs.then_some(&mut nm[..]),
            };
            if fast_path {
                fast::add_rms_norm_mx_quant(
                    &x,
                    residual,
                    &gamma,
                    h,
                    &attrs,
                    out,
                    &StdThreads::new(2),
                )
                .unwrap();
            } else {
                reference::add_rms_norm_mx_quant(&x, residual, &gamma, h, &attrs, out).unwrap();
            }
            let bits = |v: &[T]| v.iter().map(|e| e.to_f32().to_bits()).collect::<Vec<_>>();
            (q, s, bits(&ro), bits(&nm))
        };
        for outputs in [true, false] {
            let want = run(false, outputs);
            both_isas(|| {
                assert!(
                    run(true, outputs) == want,
                    "{attrs:?} {} outputs {outputs}",
                    std::any::type_name::<T>()
                )
            });
        }
    }
}

/// bf16 rows with an f32 weight whose NaN has low payload bits (0x7FFF_FFFF): the normed
/// value must round to a bf16 NaN, not carry into the sign (the NaN-free rounding shortcut
/// must not be taken for such rows).
#[test]
fn norm_bf16_rows_with_f32_nan_payload_weight() {
    let mut rng = Rng::new(5);
    let (rows, h) = (3, 256);
    let x: Vec<bf16> = to_t(&(0..rows * h).map(|_| rng.normal(3.0)).collect::<Vec<_>>());
    let mut gamma: Vec<f32> = (0..h).map(|_| rng.normal(0.5)).collect();
    gamma[33] = f32::from_bits(0x7FFF_FFFF);
    for attrs in norm_attr_variants() {
        let run = |fast_path: bool| {
            let (mut q, mut s) = (vec![0u8; rows * h], vec![0u8; rows * h / 32]);
            let mut nm = vec![bf16::ZERO; rows * h];
            let out = NormOutputs {
                q: &mut q,
                scales: &mut s,
                residual_out: None,
                normed: Some(&mut nm[..]),
            };
            if fast_path {
                fast::add_rms_norm_mx_quant(&x, None, &gamma, h, &attrs, out, &Serial).unwrap();
            } else {
                reference::add_rms_norm_mx_quant(&x, None, &gamma, h, &attrs, out).unwrap();
            }
            (q, s, nm.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
        };
        let want = run(false);
        both_isas(|| assert!(run(true) == want, "{attrs:?}"));
    }
}

#[test]
fn norm_matches_reference_all_variants() {
    for seed in 0..4 {
        for with_residual in [true, false] {
            norm_case::<f32>(seed, with_residual);
            norm_case::<f16>(seed, with_residual);
            norm_case::<bf16>(seed, with_residual);
        }
    }
}

fn swiglu_variants() -> Vec<SwiGluAttrs> {
    let mut v = Vec::new();
    for layout in [
        SwiGluLayout::Separate,
        SwiGluLayout::SplitHalves,
        SwiGluLayout::Interleaved,
    ] {
        for activation in [Activation::Silu, Activation::Oai] {
            for (alpha, swish_form) in [
                (1.0, SwishForm::Unrolled),
                (1.702, SwishForm::Unrolled),
                (1.702, SwishForm::SingleOp),
            ] {
                for fp32_activation in [false, true] {
                    v.push(SwiGluAttrs {
                        layout,
                        activation,
                        alpha,
                        limit: 7.0,
                        beta: 1.0,
                        fp32_activation,
                        swish_form,
                        quant: configs()[v.len() % 4],
                    });
                }
            }
        }
    }
    v
}

fn swiglu_case<T: fast::FastElement>(seed: u64) {
    let mut rng = Rng::new(seed);
    let (rows, i) = (3, 288); // 9 blocks: one 8-block group + one single block
    let mut gu: Vec<f32> = (0..rows * 2 * i).map(|_| rng.normal(4.0)).collect();
    gu[5] = 120.0; // beyond exp range
    gu[9] = -120.0;
    if seed == 1 {
        gu[17] = f32::NAN;
    }
    let gu: Vec<T> = to_t(&gu);
    let (gate, up) = gu.split_at(rows * i);
    for attrs in swiglu_variants() {
        let input = match attrs.layout {
            SwiGluLayout::Separate => SwiGluInput::Separate { gate, up },
            _ => SwiGluInput::Fused(&gu),
        };
        let (mut q0, mut s0) = (vec![0u8; rows * i], vec![0u8; rows * i / 32]);
        reference::swiglu_mx_quant(input, i, &attrs, &mut q0, &mut s0).unwrap();
        both_isas(|| {
            let (mut q1, mut s1) = (vec![0u8; rows * i], vec![0u8; rows * i / 32]);
            fast::swiglu_mx_quant(input, i, &attrs, &mut q1, &mut s1, &Serial).unwrap();
            assert_eq!((&s1, &q1), (&s0, &q0), "{attrs:?}");
        });
    }
}

#[test]
fn swiglu_matches_reference_all_variants() {
    for seed in 0..2 {
        swiglu_case::<f32>(seed);
        swiglu_case::<f16>(seed);
        swiglu_case::<bf16>(seed);
    }
}

/// Fast GEMM output within the f32-accumulation error bound of the f64 reference.
fn check_close(got: &[f32], want: &[f32], bound: &[f32]) {
    for (i, ((g, w), b)) in got.iter().zip(want).zip(bound).enumerate() {
        assert!(
            (g - w).abs() <= *b || (g.is_nan() && w.is_nan()),
            "y[{i}] = {g}, reference {w}, bound {b}"
        );
    }
}

#[test]
fn matmul_matches_reference_within_accumulation_bound() {
    let mut rng = Rng::new(11);
    // K = 1056 runs past four 256-wide K tiles into a 32-wide last one; M ≤ 2 takes the
    // in-register [N, K] GEMV path; n = 70 / 71 / 130 leave partial 4-column [N, K] units and
    // partial 16-column [K, N] stripes (n = 300: a partial second 256-column unit); M = 7 / 16
    // cover 6-row [K, N] blocks plus a remainder; M = 17 / 65: the AVX-512 BF16 row groups of 8
    // plus one row, and the tiled bf16 path beyond them.
    for (k, m, n) in [
        (128, 1, 70),
        (128, 2, 71),
        (128, 3, 71),
        (128, 4, 70),
        (128, 5, 70),
        (128, 17, 70),
        (1056, 6, 70),
        (128, 7, 130),
        (64, 3, 300),
        (1056, 16, 71),
        (128, 65, 70),
    ] {
        let x: Vec<f32> = (0..m * k).map(|_| rng.normal(2.0)).collect();
        let (mut a_q, mut a_s) = (vec![0u8; m * k], vec![0u8; m * k / 32]);
        let cfg = QuantConfig {
            scale_rule: ScaleRule::Rceil,
            nan_policy: NanPolicy::Ignore,
        };
        reference::mx_quantize(&x, k, &mut a_q, &mut a_s, cfg).unwrap();
        let wf: Vec<f32> = (0..k * n).map(|_| rng.normal(0.1)).collect();
        let (mut w_q, mut w_s) = (vec![0u8; k * n], vec![0u8; k * n / 32]);
        reference::mx_quantize(&wf, k, &mut w_q, &mut w_s, cfg).unwrap(); // [N, K]
                                                                          // Blocks off the f16 decode route: a NaN byte (column 2) and scale 247 with small
                                                                          // values (column 1, block 3), so outputs stay finite where they should.
        w_q[2 * k + 5] = 0x7F;
        for kk in 96..128 {
            w_q[k + kk] = 0x08 | if kk % 2 == 0 { 0x80 } else { 0 };
        }
        w_s[k / 32 + 3] = 247;
        // The same weights as [K, N] with [K/32, N] scales.
        let mut wt_q = vec![0u8; k * n];
        let mut wt_s = vec![0u8; k * n / 32];
        for nn in 0..n {
            for kk in 0..k {
                wt_q[kk * n + nn] = w_q[nn * k + kk];
            }
            for kb in 0..k / 32 {
                wt_s[kb * n + nn] = w_s[nn * (k / 32) + kb];
            }
        }
        let wbf: Vec<bf16> = to_t(&wf);
        let wbf_t: Vec<bf16> = (0..k * n).map(|i| wbf[(i % n) * k + i / n]).collect();
        let wf16_t: Vec<f16> = wbf_t.iter().map(|v| f16::from_f32(v.to_f32())).collect();
        let cases: Vec<(MatB, bool)> = vec![
            (MatB::F32(&wf), true),
            (MatB::F16(&wf16_t), false),
            (
                MatB::Mx {
                    q: &w_q,
                    scales: &w_s,
                },
                true,
            ),
            (
                MatB::Mx {
                    q: &wt_q,
                    scales: &wt_s,
                },
                false,
            ),
            (MatB::BF16(&wbf), true),
            (MatB::BF16(&wbf_t), false),
        ];
        for (b, trans_b) in cases {
            let mut want = vec![0f32; m * n];
            reference::mx_matmul(&a_q, &a_s, m, k, n, b, trans_b, &mut want, &NONE).unwrap();
            // |error| ≤ k·2^-23·Σ|a·b| (f32 accumulation) — Σ|a·b| from the |A|·|B| product.
            let abs_a: Vec<u8> = a_q.iter().map(|v| v & 0x7F).collect();
            let mut bound = vec![0f32; m * n];
            let abs_b = match b {
                MatB::Mx { q, .. } => q.iter().map(|v| v & 0x7F).collect::<Vec<_>>(),
                _ => Vec::new(),
            };
            let b_abs = match b {
                MatB::Mx { scales, .. } => MatB::Mx { q: &abs_b, scales },
                MatB::BF16(_) => b, // bf16 weights are small and centred: use |b| ≤ max
                other => other,
            };
            reference::mx_matmul(&abs_a, &a_s, m, k, n, b_abs, trans_b, &mut bound, &NONE).unwrap();
            let bound: Vec<f32> = bound
                .iter()
                .map(|v| v.abs() * k as f32 * 2f32.powi(-22) + 1e-6)
                .collect();
            // AVX-512 BF16 where the CPU has it (M > 4), AVX2 only, and portable.
            let check = || {
                let mut got = vec![0f32; m * n];
                fast::mx_matmul(
                    &a_q,
                    &a_s,
                    m,
                    k,
                    n,
                    b,
                    trans_b,
                    &mut got,
                    &NONE,
                    &StdThreads::new(2),
                )
                .unwrap();
                if matches!(b, MatB::Mx { .. }) {
                    check_close(&got, &want, &bound);
                } else {
                    let loose: Vec<f32> = want.iter().map(|v| v.abs() * 1e-4 + 1e-3).collect();
                    check_close(&got, &want, &loose);
                }
                // Quantize-inside-the-GEMM equals quantize → GEMM bit for bit.
                let mut fused = vec![0f32; m * n];
                fast::mx_matmul_quantize_a(
                    &x, m, k, n, b, trans_b, cfg, &mut fused, &NONE, &Serial,
                )
                .unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&fused), bits(&got));
            };
            // Detected (AVX-512 BF16 where the CPU has it), AVX2 only, and portable.
            both_isas(check);
            fast::with_avx2_only(check);
        }
    }
}

#[test]
fn bad_shapes_are_errors() {
    let x = vec![0f32; 40];
    let (mut q, mut s) = (vec![0u8; 40], vec![0u8; 1]);
    let cfg = QuantConfig::default();
    assert!(fast::mx_quantize(&x, 40, &mut q, &mut s, cfg, &Serial).is_err());
    assert!(reference::mx_quantize(&x, 40, &mut q, &mut s, cfg).is_err());
    let x = vec![0f32; 64];
    let (mut q, mut s) = (vec![0u8; 63], vec![0u8; 2]);
    assert!(fast::mx_quantize(&x, 64, &mut q, &mut s, cfg, &Serial).is_err());
    let gamma = vec![0f32; 32];
    let (mut q, mut s) = (vec![0u8; 64], vec![0u8; 2]);
    let out = NormOutputs {
        q: &mut q,
        scales: &mut s,
        residual_out: None,
        normed: None,
    };
    assert!(fast::add_rms_norm_mx_quant(
        &x,
        None,
        &gamma,
        64,
        &AddRmsNormAttrs::default(),
        out,
        &Serial
    )
    .is_err());
    let (mut q, mut s) = (vec![0u8; 32], vec![0u8; 1]);
    let sw = SwiGluAttrs::default(); // layout separate
    assert!(
        fast::swiglu_mx_quant(SwiGluInput::Fused(&x), 32, &sw, &mut q, &mut s, &Serial).is_err()
    );
    let mut y = vec![0f32; 4];
    assert!(fast::mx_matmul(
        &[0u8; 64],
        &[0u8; 2],
        1,
        64,
        4,
        MatB::F32(&[0f32; 255]),
        false,
        &mut y,
        &NONE,
        &Serial
    )
    .is_err());
}

/// Hand-made edge blocks, each 32 wide, through every rule/policy/dtype.
fn edge_blocks() -> Vec<f32> {
    let ramp =
        |amax: f32| -> Vec<f32> { (0..32).map(|j| amax * (j as f32 - 15.5) / 15.5).collect() };
    let mut blocks: Vec<Vec<f32>> = vec![
        vec![0.0; 32],
        vec![-0.0; 32],
        (0..32)
            .map(|j| if j % 2 == 0 { 0.0 } else { -0.0 })
            .collect(),
        (0..32)
            .map(|j| f32::from_bits(j * 7919) * if j % 3 == 0 { -1.0 } else { 1.0 })
            .collect(), // f32 subnormals
        ramp(1.7578125),
        ramp(1.75),
        ramp(1.99),
        ramp(448.0),
        ramp(464.0),
        ramp(f32::MAX),
        ramp(f32::from_bits(0x0400_0000)), // amax with exponent 8: fl(amax·2^-8) subnormal
        ramp(f32::from_bits(0x047F_FFFF)),
        vec![f32::NAN; 32],
    ];
    for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut b = ramp(3.0);
        b[7] = special;
        blocks.push(b);
    }
    let mut both = ramp(1.0);
    both[1] = f32::NAN;
    both[2] = f32::NEG_INFINITY;
    blocks.push(both);
    blocks.concat()
}

/// Rows of 64 (single-block path) and of 256 (8-block groups: the first group is all finite
/// edge blocks, the second holds the NaN/Inf blocks and takes the per-block fallback).
fn edge_case<T: fast::FastElement>() {
    let all: Vec<T> = to_t(&edge_blocks());
    for k in [64, 256] {
        let x = &all[..all.len() / k * k];
        for cfg in configs() {
            let (mut q0, mut s0) = (vec![0u8; x.len()], vec![0u8; x.len() / 32]);
            reference::mx_quantize(x, k, &mut q0, &mut s0, cfg).unwrap();
            both_isas(|| {
                let (mut q1, mut s1) = (vec![0u8; x.len()], vec![0u8; x.len() / 32]);
                fast::mx_quantize(x, k, &mut q1, &mut s1, cfg, &Serial).unwrap();
                assert_eq!(
                    (&s1, &q1),
                    (&s0, &q0),
                    "k {k} {cfg:?} {}",
                    std::any::type_name::<T>()
                );
            });
        }
    }
}

#[test]
fn edge_blocks_match_reference() {
    edge_case::<f32>();
    edge_case::<f16>();
    edge_case::<bf16>();
}

/// Tiny scales whose products would be f32 denormals: the AVX-512 BF16 path (denormals flushed)
/// must not run, so the result equals the AVX2-only one bit for bit, and the reference within
/// the accumulation bound.
#[test]
fn matmul_with_denormal_products_avoids_bf16_dot() {
    let (m, k, n) = (6, 64, 8);
    let mut rng = Rng::new(3);
    let a_q: Vec<u8> = (0..m * k)
        .map(|_| (rng.normal(40.0).abs() as u8) & 0x7E)
        .collect();
    let b_q: Vec<u8> = (0..n * k)
        .map(|_| (rng.normal(40.0).abs() as u8) | 0x80)
        .collect();
    // 2^(20-127) · 2^(100-127) with E4M3 magnitudes down to 2^-9: products near 2^-152.
    let (a_s, b_s) = (vec![20u8; m * k / 32], vec![100u8; n * k / 32]);
    let b = MatB::Mx {
        q: &b_q,
        scales: &b_s,
    };
    let mut want = vec![0f32; m * n];
    reference::mx_matmul(&a_q, &a_s, m, k, n, b, true, &mut want, &NONE).unwrap();
    let run = || {
        let mut got = vec![0f32; m * n];
        fast::mx_matmul(&a_q, &a_s, m, k, n, b, true, &mut got, &NONE, &Serial).unwrap();
        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    };
    let (detected, avx2_only) = (fast::with_avx512_bf16(run), fast::with_avx2_only(run));
    assert_eq!(detected, avx2_only);
    for (g, w) in detected.iter().zip(&want) {
        let g = f32::from_bits(*g);
        assert!((g - w).abs() <= w.abs() * 1e-5, "{g} vs {w}");
    }
    assert!(
        want.iter().any(|w| *w != 0.0),
        "the products must not all underflow"
    );
}

/// The fused norm through the detected path (AVX-512 where the CPU has it), forced AVX2 and
/// the reference: all three bit-identical (q, scales, residual_out, normed).
fn norm_three_ways<T: fast::FastElement, G: fast::FastElement>(
    x: &[T],
    residual: Option<&[T]>,
    gamma: &[G],
    h: usize,
    attrs: &AddRmsNormAttrs,
    outputs: bool,
) {
    let rows = x.len() / h;
    let run = |which: u8| {
        let (mut q, mut s) = (vec![0u8; rows * h], vec![0u8; rows * h / 32]);
        let (mut ro, mut nm) = (vec![T::default(); rows * h], vec![T::default(); rows * h]);
        let out = NormOutputs {
            q: &mut q,
            scales: &mut s,
            residual_out: outputs.then_some(&mut ro[..]),
            normed: outputs.then_some(&mut nm[..]),
        };
        let par = StdThreads::new(2);
        match which {
            0 => reference::add_rms_norm_mx_quant(x, residual, gamma, h, attrs, out),
            1 => fast::with_avx512_bf16(|| {
                fast::add_rms_norm_mx_quant(x, residual, gamma, h, attrs, out, &par)
            }),
            _ => fast::with_avx2_only(|| {
                fast::add_rms_norm_mx_quant(x, residual, gamma, h, attrs, out, &par)
            }),
        }
        .unwrap();
        let bits = |v: &[T]| v.iter().map(|e| e.to_f32().to_bits()).collect::<Vec<_>>();
        (q, s, bits(&ro), bits(&nm))
    };
    let want = run(0);
    let ctx = format!(
        "{attrs:?} {} h {h} outputs {outputs} residual {}",
        std::any::type_name::<T>(),
        residual.is_some()
    );
    assert!(run(1) == want, "detected path: {ctx}");
    assert!(run(2) == want, "AVX2 path: {ctx}");
}

/// Random rows (NaN / ±Inf / payload NaNs in some rows, a NaN weight for another) at row
/// lengths with full and partial 16-block groups, every attribute variant, with and without
/// residual and optional outputs: the AVX-512 norm path equals the AVX2 path and the reference.
fn wide_norm_case<T: fast::FastElement>(seed: u64, h: usize) {
    let mut rng = Rng::new(seed);
    let rows = 5;
    let mut xf: Vec<f32> = (0..rows * h).map(|_| rng.normal(3.0)).collect();
    let mut resf: Vec<f32> = (0..rows * h).map(|_| rng.normal(10.0)).collect();
    let mut gammaf: Vec<f32> = (0..h).map(|_| rng.normal(0.5)).collect();
    // Zero and tiny weights: zero blocks and E4M3-subnormal lanes inside normal blocks.
    for j in 0..h / 16 {
        let i = (rng.next_u64() % h as u64) as usize;
        gammaf[i] = if j % 2 == 0 { 0.0 } else { 1e-6 };
    }
    gammaf[..32.min(h)].fill(0.0);
    if seed % 2 == 1 {
        xf[h + 7] = f32::NAN;
        xf[2 * h + 40] = f32::from_bits(0x7FFF_0000);
        resf[3 * h + 41] = f32::from_bits(0xFFFF_0000);
        (xf[4 * h + 42], resf[4 * h + 42]) = (f32::INFINITY, f32::NEG_INFINITY);
    }
    if seed % 3 == 2 && seed.is_multiple_of(2) {
        // Not in rows that are NaN already: which of two NaN operands a product keeps is not
        // pinned (the compiler may swap them), so the normed NaN bits could differ.
        gammaf[h - 3] = f32::NAN;
    }
    let (x, res, gamma): (Vec<T>, Vec<T>, Vec<T>) = (to_t(&xf), to_t(&resf), to_t(&gammaf));
    let gamma32: Vec<f32> = gammaf.clone();
    for attrs in norm_attr_variants() {
        for residual in [Some(&res[..]), None] {
            for outputs in [true, false] {
                norm_three_ways(&x, residual, &gamma, h, &attrs, outputs);
            }
        }
        norm_three_ways(&x, Some(&res[..]), &gamma32, h, &attrs, true);
    }
}

#[test]
fn wide_norm_matches_avx2_and_reference() {
    for (seed, h) in [(0, 32), (1, 96), (2, 384), (3, 512), (4, 544), (5, 1056)] {
        wide_norm_case::<f32>(seed, h);
        wide_norm_case::<f16>(seed, h);
        wide_norm_case::<bf16>(seed, h);
    }
}

/// Every edge block of `edge_blocks` as the normed values themselves: rows of ±1 (mean square
/// exactly 1, epsilon 0, so 1/d = 1) times weights that are the edge values, through both
/// scale rules and NaN policies, f32 / f16 / bf16, weights in T and in f32.
fn wide_norm_edge_case<T: fast::FastElement>() {
    let edges = edge_blocks();
    // Two groups of 16 blocks and a partial one: finite groups and groups with NaN/Inf blocks.
    let h = edges.len().div_ceil(32) * 32 + 16 * 32;
    let mut gammaf: Vec<f32> = edges.iter().chain(edges.iter()).copied().take(h).collect();
    gammaf.resize(h, 0.5);
    let finite_gamma: Vec<f32> = gammaf
        .iter()
        .map(|v| if v.is_finite() { *v } else { 2.0 })
        .collect();
    let rows = 3;
    let xf: Vec<f32> = (0..rows * h)
        .map(|i| if (i * 7) % 5 < 2 { -1.0 } else { 1.0 })
        .collect();
    let x: Vec<T> = to_t(&xf);
    let zeros: Vec<T> = vec![T::default(); rows * h];
    for quant in configs() {
        for gamma_in_f32 in [true, false] {
            let attrs = AddRmsNormAttrs {
                epsilon: 0.0,
                gemma: false,
                gamma_in_f32,
                inv_form: InvForm::Rsqrt,
                round_sum: true,
                allreduce: false,
                flatten_rows: false,
                quant,
            };
            for g in [&gammaf, &finite_gamma] {
                let gt: Vec<T> = to_t(g);
                norm_three_ways(&x, None, &gt, h, &attrs, true);
                norm_three_ways(&x, Some(&zeros[..]), &gt, h, &attrs, false);
                norm_three_ways(&x, None, &g[..], h, &attrs, false);
            }
        }
    }
}

#[test]
fn wide_norm_edge_blocks_match_avx2_and_reference() {
    wide_norm_edge_case::<f32>();
    wide_norm_edge_case::<f16>();
    wide_norm_edge_case::<bf16>();
}

/// The normed values of `wide_norm_edge_case` really are the edge values (the test above would
/// otherwise not reach the 448 / subnormal / saturation cases), and on a CPU with the AVX-512
/// norm it is the path that runs.
#[test]
fn wide_norm_edge_rows_reach_the_edge_values() {
    let g: Vec<f32> = edge_blocks();
    let h = g.len();
    let x = vec![1f32; h];
    let attrs = AddRmsNormAttrs {
        epsilon: 0.0,
        gemma: false,
        ..Default::default()
    };
    let (mut q, mut s, mut nm) = (vec![0u8; h], vec![0u8; h / 32], vec![0f32; h]);
    let out = NormOutputs {
        q: &mut q,
        scales: &mut s,
        residual_out: None,
        normed: Some(&mut nm),
    };
    reference::add_rms_norm_mx_quant(&x, None, &g, h, &attrs, out).unwrap();
    let same = nm
        .iter()
        .zip(&g)
        .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
    assert!(same, "normed != weights");
    eprintln!("AVX-512 norm path on this CPU: {}", fast::avx512_norm());
}
