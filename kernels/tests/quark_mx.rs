//! AMD Quark's MX fake quantization (`reference::quark_mx`) against independent formulations:
//! element rounding against the nearest point of each format's enumerated value grid (and the
//! E4M3 / E5M2 codecs, the E2M1 table), INT8 rounding modes at every tie, whole blocks against an
//! f64 oracle (scale from log2 of the finite amax) on random and edge blocks, and the E4M3 case
//! against the MXFP8 block quantizer the EP's fp8_e4m3 path uses.

mod common;

use common::Rng;
use kernels::codec::{
    e2m1_to_f32, e4m3_to_f32, e5m2_to_f32, e8m0_to_f32, f32_to_e4m3, f32_to_e5m2, quantize_block,
    NanPolicy, QuantConfig, ScaleRule, BLOCK,
};
use kernels::reference::quark_mx::{
    quark_mx_block, quark_mx_fake_quant, round_to_fp, round_to_int8, FpFormat, IntRounding,
    QuarkElement,
};

const FP: [QuarkElement; 5] = [
    QuarkElement::Fp8E4M3,
    QuarkElement::Fp8E5M2,
    QuarkElement::Fp6E3M2,
    QuarkElement::Fp6E2M3,
    QuarkElement::Fp4E2M1,
];

/// Every non-negative finite value of `f` up to max_norm, ascending, from the bit layout: code
/// `e·2^m + m`, so grid index parity is the mantissa's last bit (ties go to the even index).
fn grid(f: FpFormat) -> Vec<f64> {
    let bias = (1i32 << (f.ebits - 1)) - 1;
    let mut g = Vec::new();
    for e in 0..(1u32 << f.ebits) {
        for m in 0..(1u32 << f.mbits) {
            let frac = m as f64 / (1u32 << f.mbits) as f64;
            let v = if e == 0 {
                frac * 2f64.powi(1 - bias)
            } else {
                (1.0 + frac) * 2f64.powi(e as i32 - bias)
            };
            if v <= f64::from(f.max_norm) {
                g.push(v);
            }
        }
    }
    g
}

/// Round to nearest, ties to the even grid index, saturating: a linear scan.
fn nearest(g: &[f64], x: f32) -> f32 {
    let a = f64::from(x.abs());
    let mut best = 0;
    for (i, &v) in g.iter().enumerate() {
        let (d, db) = ((v - a).abs(), (g[best] - a).abs());
        if d < db || (d == db && i % 2 == 0) {
            best = i;
        }
    }
    (g[best] as f32).copysign(x)
}

/// Probe values for element rounding: grid points, midpoints and their f32 neighbours, values
/// past max_norm, and random values over the whole range.
fn probes(g: &[f64], rng: &mut Rng, top: f64) -> Vec<f32> {
    let mut p = Vec::new();
    let mut w = g.to_vec();
    w.push(top);
    for pair in w.windows(2) {
        for v in [pair[0], (pair[0] + pair[1]) / 2.0] {
            let v = v as f32;
            p.extend([v, f32::from_bits(v.to_bits() + 1), -v]);
            if v > 0.0 {
                p.push(f32::from_bits(v.to_bits() - 1));
            }
        }
    }
    for _ in 0..4000 {
        p.push(((rng.unit() as f64 * 2.0 - 1.0) * top) as f32);
    }
    p.extend([1e-40, -1e-40, f32::MIN_POSITIVE, top as f32, -(top as f32)]);
    p
}

#[test]
fn fp_elements_round_to_the_nearest_even_grid_point_and_saturate() {
    let mut rng = Rng::new(7);
    for el in FP {
        let f = el.fp_format().unwrap();
        let g = grid(f);
        // Quark's elements are |x/scale| < 2^(emax+1).
        let top = 2f64.powi(el.emax() + 1);
        assert_eq!(*g.last().unwrap(), f64::from(f.max_norm), "{el:?}");
        for x in probes(&g, &mut rng, top) {
            let got = round_to_fp(x, f);
            let want = nearest(&g, x);
            assert_eq!(got.to_bits(), want.to_bits(), "{el:?} x={x:e}");
        }
    }
}

#[test]
fn fp8_and_fp4_elements_equal_the_codecs() {
    let mut rng = Rng::new(11);
    let e4 = QuarkElement::Fp8E4M3.fp_format().unwrap();
    let e5 = QuarkElement::Fp8E5M2.fp_format().unwrap();
    let e2 = QuarkElement::Fp4E2M1.fp_format().unwrap();
    let table: Vec<f32> = (0..16).map(e2m1_to_f32).collect();
    for _ in 0..20000 {
        let s = 2f32.powi((rng.next_u64() % 30) as i32 - 20);
        let x = rng.normal(s);
        let x4 = x.clamp(-511.0, 511.0);
        assert_eq!(
            round_to_fp(x4, e4),
            e4m3_to_f32(f32_to_e4m3(x4, true)),
            "{x4}"
        );
        let x5 = (x * 100.0).clamp(-65535.0, 65535.0);
        assert_eq!(
            round_to_fp(x5, e5),
            e5m2_to_f32(f32_to_e5m2(x5, true)),
            "{x5}"
        );
        let x2 = x.clamp(-7.9, 7.9);
        let r = round_to_fp(x2, e2);
        assert!(table.contains(&r), "{x2} -> {r} is not an E2M1 value");
        assert_eq!(r, nearest(&grid(e2), x2), "{x2}");
    }
}

#[test]
fn int8_rounding_modes_at_every_tie() {
    use IntRounding::*;
    // 64·e = k + 0.5 for every k in [-129, 128]: the three modes, and the [-128, 127] clamp.
    for k in -129i32..=128 {
        let t = k as f64 + 0.5;
        let e = (t / 64.0) as f32;
        let away = if t > 0.0 { t.ceil() } else { t.floor() };
        let up = t.ceil();
        let even = if k % 2 == 0 { k as f64 } else { k as f64 + 1.0 };
        for (mode, r) in [(HalfAwayFromZero, away), (HalfUp, up), (HalfEven, even)] {
            let want = (r.clamp(-128.0, 127.0) / 64.0) as f32;
            let got = round_to_int8(e, mode);
            assert_eq!(got, want, "{mode:?} 64e={t}");
        }
    }
    // Not a tie: the sum 0.49999997 + 0.5 rounds to 1 in f32, half-up must still give 0.
    let e = 0.499_999_97f32 / 64.0;
    assert_eq!(round_to_int8(e, HalfUp), 0.0);
    assert_eq!(
        round_to_int8(-1.0 / 64.0 * 0.3, HalfEven).to_bits(),
        (-0.0f32).to_bits()
    );
    assert!(IntRounding::from_mode(3).is_err());
}

/// The whole-block oracle in f64: shared exponent = floor(log2) of the largest finite |x|, or
/// -127 when that is below 2^-126 (Quark reads the f32 exponent field, 0 for subnormals).
fn oracle_block(x: &[f32], el: QuarkElement, mode: IntRounding) -> Vec<f32> {
    let amax = x
        .iter()
        .filter(|v| v.is_finite())
        .fold(0f64, |m, &v| m.max(f64::from(v).abs()));
    let shared = if amax < 2f64.powi(-126) {
        -127
    } else {
        amax.log2().floor() as i32
    };
    let scale = 2f64.powi(shared - el.emax());
    let g = el.fp_format().map(grid);
    x.iter()
        .map(|&v| {
            if !v.is_finite() {
                return v;
            }
            let e = f64::from(v) / scale;
            let q = match &g {
                Some(g) => f64::from(nearest(g, e as f32)),
                None => {
                    let t = e * 64.0;
                    let n = t.floor();
                    let r = match (t - n).partial_cmp(&0.5).unwrap() {
                        std::cmp::Ordering::Less => n,
                        std::cmp::Ordering::Greater => n + 1.0,
                        std::cmp::Ordering::Equal => match mode {
                            IntRounding::HalfUp => n + 1.0,
                            IntRounding::HalfAwayFromZero if t < 0.0 => n,
                            IntRounding::HalfAwayFromZero => n + 1.0,
                            IntRounding::HalfEven if n % 2.0 == 0.0 => n,
                            IntRounding::HalfEven => n + 1.0,
                        },
                    };
                    r.clamp(-128.0, 127.0) / 64.0
                }
            };
            // One rounding of the exact product to f32 = Quark's f32 multiply.
            ((q * scale) as f32).copysign(v)
        })
        .collect()
}

/// Random blocks over the whole f32 range plus every edge block of the brief.
fn test_blocks(rng: &mut Rng) -> Vec<Vec<f32>> {
    let mut blocks = Vec::new();
    for _ in 0..300 {
        let s = 2f32.powi((rng.next_u64() % 250) as i32 - 130);
        blocks.push((0..BLOCK).map(|_| rng.normal(s)).collect());
    }
    let row = rng.mixed_row(BLOCK * 40);
    blocks.extend(row.chunks(BLOCK).map(<[f32]>::to_vec));
    let ramp = |f: &dyn Fn(usize) -> f32| (0..BLOCK).map(f).collect::<Vec<f32>>();
    blocks.push(vec![0.0; BLOCK]);
    blocks.push(ramp(&|i| if i % 2 == 0 { -0.0 } else { 0.0 }));
    // f32 subnormals only (shared exponent field 0, scale 2^-127-emax), and mixed with a normal.
    blocks.push(ramp(&|i| {
        f32::from_bits(i as u32 * 97_001 + 1) * if i % 3 == 0 { -1.0 } else { 1.0 }
    }));
    blocks.push(ramp(&|i| {
        if i == 0 {
            1.5e-38
        } else {
            f32::from_bits(i as u32 * 3 + 1)
        }
    }));
    // Largest f32 magnitudes (scale up to 2^127).
    blocks.push(ramp(&|i| f32::MAX / (i as f32 + 1.0)));
    // Every value a tie or just past max_norm for some element: amax 1.0·2^0 with mantissas
    // that land between the largest grid points after scaling.
    blocks.push(ramp(&|i| 1.0 + i as f32 / 32.0));
    blocks.push(ramp(&|i| -(1.0 + (i as f32 + 0.5) / 32.0)));
    blocks.push(ramp(&|i| 1.9999999 - i as f32 * 1e-7));
    // NaN and Inf mixed in: they pass through and never set the scale.
    let mut special = ramp(&|i| (i as f32 - 15.5) * 0.37);
    special[3] = f32::NAN;
    special[7] = f32::INFINITY;
    special[9] = f32::NEG_INFINITY;
    blocks.push(special);
    blocks.push(ramp(&|i| if i % 2 == 0 { f32::NAN } else { f32::INFINITY }));
    blocks
}

fn assert_same(got: &[f32], want: &[f32], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
        assert!(same, "{what} element {i}: got {g:e}, want {w:e}");
    }
}

#[test]
fn blocks_equal_the_f64_oracle_for_every_element_type() {
    let mut rng = Rng::new(3);
    let blocks = test_blocks(&mut rng);
    for el in QuarkElement::ALL {
        for mode in [
            IntRounding::HalfAwayFromZero,
            IntRounding::HalfUp,
            IntRounding::HalfEven,
        ] {
            if el != QuarkElement::Int8 && mode != IntRounding::HalfEven {
                continue; // FP elements ignore the mode.
            }
            for (b, x) in blocks.iter().enumerate() {
                let mut y = vec![0f32; x.len()];
                quark_mx_block(x, &mut y, el, mode);
                assert_same(
                    &y,
                    &oracle_block(x, el, mode),
                    &format!("{el:?} {mode:?} block {b}"),
                );
                // NaN and Inf pass with their bits.
                for (xv, yv) in x.iter().zip(&y) {
                    if !xv.is_finite() {
                        assert_eq!(xv.to_bits(), yv.to_bits());
                    }
                }
            }
        }
    }
}

#[test]
fn a_partial_last_block_is_quantized_by_its_own_values() {
    let mut rng = Rng::new(5);
    let (len, block) = (75, 32);
    let x: Vec<f32> = (0..3 * len).map(|_| rng.normal(3.0)).collect();
    for el in QuarkElement::ALL {
        let mut y = vec![0f32; x.len()];
        quark_mx_fake_quant(&x, &mut y, len, block, el, IntRounding::HalfEven).unwrap();
        for r in 0..3 {
            let row = &x[r * len..(r + 1) * len];
            // Zero-padded to 96 (Quark's padding) and sliced back gives the same values.
            let mut padded = row.to_vec();
            padded.resize(96, 0.0);
            let mut want = vec![0f32; 96];
            quark_mx_fake_quant(&padded, &mut want, 96, block, el, IntRounding::HalfEven).unwrap();
            assert_same(
                &y[r * len..(r + 1) * len],
                &want[..len],
                &format!("{el:?} row {r}"),
            );
        }
    }
    let mut y = vec![0f32; 4];
    assert!(quark_mx_fake_quant(
        &x[..4],
        &mut y,
        3,
        32,
        QuarkElement::Int8,
        IntRounding::HalfEven
    )
    .is_err());
    assert!(quark_mx_fake_quant(
        &x[..4],
        &mut y,
        4,
        0,
        QuarkElement::Int8,
        IntRounding::HalfEven
    )
    .is_err());
}

#[test]
fn e4m3_equals_the_mxfp8_block_quantizer_on_finite_normal_range_blocks() {
    // The EP's fp8_e4m3 path is MxQuantize (floor rule, NaN ignored) + decode. On blocks whose
    // amax is in E8M0's range and holds no Inf the two definitions are the same function.
    let mut rng = Rng::new(9);
    let cfg = QuantConfig {
        scale_rule: ScaleRule::Floor,
        nan_policy: NanPolicy::Ignore,
    };
    for b in 0..2000 {
        let s = 2f32.powi((rng.next_u64() % 220) as i32 - 110);
        let mut x: Vec<f32> = (0..BLOCK).map(|_| rng.normal(s)).collect();
        if b % 7 == 0 {
            x[b % BLOCK] = f32::NAN;
        }
        let xb: &[f32; BLOCK] = x.as_slice().try_into().unwrap();
        let mut q = [0u8; BLOCK];
        let byte = quantize_block(xb, &mut q, cfg);
        let want: Vec<f32> = q
            .iter()
            .map(|&c| e4m3_to_f32(c) * e8m0_to_f32(byte))
            .collect();
        let mut got = vec![0f32; BLOCK];
        quark_mx_block(&x, &mut got, QuarkElement::Fp8E4M3, IntRounding::HalfEven);
        assert_same(&got, &want, &format!("block {b}"));
    }
}

#[test]
fn element_names_parse_and_unknown_ones_are_refused() {
    for el in QuarkElement::ALL {
        assert_eq!(QuarkElement::parse(el.name()).unwrap(), el);
    }
    let err = QuarkElement::parse("fp4").unwrap_err().to_string();
    assert!(err.contains("\"fp4\"") && err.contains("fp4_e2m1"), "{err}");
}

#[test]
fn element_constants_are_quarks() {
    // Quark's custom_op_mx.cc table (ebits, mbits, emax, max_norm); the oracles above take the
    // formats from the reference, so this pins them independently.
    let want = [
        (QuarkElement::Fp8E5M2, 5, 2, 15, 57344.0),
        (QuarkElement::Fp8E4M3, 4, 3, 8, 448.0),
        (QuarkElement::Fp6E3M2, 3, 2, 4, 28.0),
        (QuarkElement::Fp6E2M3, 2, 3, 2, 7.5),
        (QuarkElement::Fp4E2M1, 2, 1, 2, 6.0),
    ];
    for (el, ebits, mbits, emax, max_norm) in want {
        let f = el.fp_format().unwrap();
        assert_eq!(
            (f.ebits, f.mbits, el.emax(), f.max_norm),
            (ebits, mbits, emax, max_norm)
        );
        // emax is the exponent of max_norm's binade.
        assert_eq!(f64::from(max_norm).log2().floor() as i32, emax, "{el:?}");
    }
    assert_eq!(QuarkElement::Int8.emax(), 0);
    assert!(QuarkElement::Int8.fp_format().is_none());
}
