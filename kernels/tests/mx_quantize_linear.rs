//! `MxQuantizeLinear`: the reference against an independent oracle (the exact quotient in f64,
//! rounded once to the nearest FP8 value, ties to even) for every scale byte × a list of value
//! classes (signed zeros, f32 subnormals, FP8 subnormals and ties, 448/464/57344/61440 both ways,
//! ±Inf, ±NaN) × E4M3FN/E5M2 × saturate × f32/f16/bf16; the fast kernel against the reference
//! bit for bit on the same values (one scale per element and per 32-block, so the vector encoder
//! runs too) and on random tensors of every granularity; the op API's dtype and shape errors.

mod common;

use common::Rng;
use half::{bf16, f16};
use kernels::ops::{mx_quantize_linear, TensorMut, TensorRef};
use kernels::{reference, DType, Element, MxQuantLinearAttrs, ScaleMap, Serial, StdThreads};

/// An FP8 byte decoded from the format definition in f64 (not the codec tables).
fn decode(dtype: DType, b: u8) -> f64 {
    let (mbits, bias) = if dtype == DType::E4M3 {
        (3, 7)
    } else {
        (2, 15)
    };
    let e = ((b & 0x7F) >> mbits) as i32;
    let m = (b & ((1 << mbits) - 1)) as f64;
    let mag = if e == 0 {
        m * 2f64.powi(1 - bias - mbits)
    } else {
        (1.0 + m / (1 << mbits) as f64) * 2f64.powi(e - bias)
    };
    if b & 0x80 != 0 {
        -mag
    } else {
        mag
    }
}

/// The oracle: x / 2^(s − 127) exactly (f64 holds it: 24 significant bits, exponent within
/// ±400), then the nearest FP8 value with ties to the even byte; out of range: the largest
/// finite value (saturate), else NaN (E4M3FN, beyond the 464 tie) or ±Inf (E5M2, from the
/// 61440 tie on). A NaN scale gives +NaN unless x is NaN (then x's sign), as x86 division does.
fn oracle(dtype: DType, x: f32, s: u8, saturate: bool) -> u8 {
    let (max_byte, nan, inf_from) = if dtype == DType::E4M3 {
        (0x7Eu8, 0x7Fu8, None)
    } else {
        (0x7Bu8, 0x7Eu8, Some(61440.0))
    };
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    if x.is_nan() {
        return sign | nan;
    }
    if s == 0xFF {
        return nan;
    }
    let r = x as f64 / 2f64.powi(s as i32 - 127);
    let mag = r.abs();
    let max = decode(dtype, max_byte);
    if mag > max {
        if saturate {
            return sign | max_byte;
        }
        match inf_from {
            Some(t) if mag >= t => return sign | 0x7C,
            None if mag > 464.0 => return sign | nan,
            _ => {}
        }
    }
    let mut best = 0u8;
    for b in 0..=max_byte {
        let (d, db) = (
            (decode(dtype, b) - mag).abs(),
            (decode(dtype, best) - mag).abs(),
        );
        if d < db || (d == db && b % 2 == 0) {
            best = b;
        }
    }
    sign | best
}

/// Value classes: specials, f32 subnormals, FP8 boundaries at the unit scale (so that scale
/// byte 127 hits them exactly) and a spread of binades, both signs.
fn value_classes() -> Vec<f32> {
    let mut v = vec![
        0.0,
        f32::from_bits(1),
        1e-40,
        f32::MIN_POSITIVE,
        2f32.powi(-10), // E4M3 tie between 0 and 2^-9
        3.0 * 2f32.powi(-11),
        2f32.powi(-9),
        2f32.powi(-17), // E5M2 tie between 0 and 2^-16
        3.0 * 2f32.powi(-18),
        1.0,
        1.0625, // E4M3 tie between 1 and 1.125 (even: 1)
        1.1875, // tie between 1.125 and 1.25 (even: 1.25)
        1.125,  // E5M2 tie between 1 and 1.25
        1.375,
        448.0,
        456.0,
        464.0,
        464.01,
        480.0,
        57344.0,
        61439.0,
        61440.0,
        65536.0,
        1e30,
        f32::MAX,
        f32::INFINITY,
        f32::NAN,
    ];
    for e in (-140..=127).step_by(11) {
        v.push(1.7 * 2f32.powi(e));
    }
    let neg: Vec<f32> = v.iter().map(|x| -x).collect();
    v.extend(neg);
    v
}

fn run_both<T: Element + kernels::fast::FastElement>(
    x: &[T],
    s: &[u8],
    map: &ScaleMap,
    dtype: DType,
    saturate: bool,
) -> (Vec<u8>, Vec<u8>) {
    let mut want = vec![0u8; x.len()];
    reference::mx_quantize_linear(x, s, map, dtype, saturate, &mut want).unwrap();
    let mut got = vec![0u8; x.len()];
    let par = StdThreads::new(3);
    kernels::fast::mx_quantize_linear(x, s, map, dtype, saturate, &mut got, &par).unwrap();
    (want, got)
}

fn check_all_classes<T: Element + kernels::fast::FastElement>() {
    let classes = value_classes();
    // Every class against every scale byte, both with one scale per element (block 1) and
    // with the classes repeated in 32-blocks (one scale per block: the vector encoder's path).
    let n = classes.len();
    let x: Vec<T> = (0..256 * n).map(|i| T::from_f32(classes[i % n])).collect();
    let per_elem: Vec<u8> = (0..256 * n).map(|i| (i / n) as u8).collect();
    let map1 = ScaleMap::new(&[256 * n], &[256 * n], 0, 1).unwrap();
    let blocks = (256 * n).div_ceil(32);
    let map32 = ScaleMap::new(&[256 * n], &[blocks], 0, 32).unwrap();
    let per_block: Vec<u8> = (0..blocks).map(|b| (b * 7 % 256) as u8).collect();
    for dtype in [DType::E4M3, DType::E5M2] {
        for saturate in [true, false] {
            let (want, got) = run_both(&x, &per_elem, &map1, dtype, saturate);
            assert_eq!(want, got, "{:?} {dtype:?} sat {saturate}: fast", T::DTYPE);
            for (i, (&w, v)) in want.iter().zip(&x).enumerate() {
                let o = oracle(dtype, v.to_f32(), per_elem[i], saturate);
                assert_eq!(
                    w,
                    o,
                    "{:?} -> {dtype:?} sat {saturate}: x {:e} scale byte {}",
                    T::DTYPE,
                    v.to_f32(),
                    per_elem[i]
                );
            }
            let (want, got) = run_both(&x, &per_block, &map32, dtype, saturate);
            assert_eq!(want, got, "{:?} {dtype:?} sat {saturate}: blocks", T::DTYPE);
            for (i, (&w, v)) in want.iter().zip(&x).enumerate() {
                assert_eq!(w, oracle(dtype, v.to_f32(), per_block[i / 32], saturate));
            }
        }
    }
}

#[test]
fn every_scale_byte_and_value_class_matches_the_oracle() {
    check_all_classes::<f32>();
    check_all_classes::<f16>();
    check_all_classes::<bf16>();
}

#[test]
fn documented_edges() {
    let q = |x: f32, s: u8, dt: DType, sat: bool| {
        let mut y = [0u8];
        let map = ScaleMap::new(&[1], &[], 0, 0).unwrap();
        reference::mx_quantize_linear(&[x], &[s], &map, dt, sat, &mut y).unwrap();
        y[0]
    };
    // Scale byte 0 is 2^-127: 1.0 / 2^-127 = 2^127 saturates (or is NaN / Inf).
    assert_eq!(q(1.0, 0, DType::E4M3, true), 0x7E);
    assert_eq!(q(1.0, 0, DType::E4M3, false), 0x7F);
    assert_eq!(q(-1.0, 0, DType::E5M2, false), 0xFC);
    // 4.0 / 2^-127 = 2^129 overflows f32 to Inf on the way: the same bytes.
    assert_eq!(q(4.0, 0, DType::E5M2, true), 0x7B);
    // Scale byte 254 is 2^127: f32::MAX / 2^127 = 2 - 2^-23 rounds to 2 (E4M3 0x40).
    assert_eq!(q(f32::MAX, 254, DType::E4M3, true), 0x40);
    // A NaN scale: +NaN, or x's NaN with its sign.
    assert_eq!(q(-3.0, 255, DType::E4M3, true), 0x7F);
    assert_eq!(q(-f32::NAN, 255, DType::E4M3, true), 0xFF);
    assert_eq!(q(0.0, 255, DType::E5M2, true), 0x7E);
    // Scale 2^3: 3584 / 8 = 448; 3712 / 8 = 464 ties to 448; 3840 / 8 = 480.
    assert_eq!(q(3712.0, 130, DType::E4M3, false), 0x7E);
    assert_eq!(q(3840.0, 130, DType::E4M3, false), 0x7F);
    assert_eq!(q(3840.0, 130, DType::E4M3, true), 0x7E);
}

#[test]
fn fast_matches_reference_on_every_granularity() {
    let mut rng = Rng::new(11);
    // (x shape, scale shape, axis, block_size)
    let cases: &[(&[usize], &[usize], i64, usize)] = &[
        (&[3, 5, 64], &[3, 5, 2], -1, 32),
        (&[96, 7], &[3, 7], 0, 32),
        (&[7, 96], &[7, 3], 1, 32),
        (&[2, 40, 3], &[2, 2, 3], 1, 32),
        (&[4, 100], &[4, 7], -1, 16),
        (&[4, 600], &[4, 2], -1, 300),
        (&[5, 9], &[5, 9], 1, 1),
        (&[6, 11], &[11], 1, 0),
        (&[6, 11], &[6], 0, 0),
        (&[2, 3, 4], &[], 1, 0),
        (&[2, 3, 4], &[1], 1, 0),
        (&[0, 64], &[0, 2], -1, 32),
        (&[1000, 64], &[1000, 2], -1, 32),
        (&[512, 96], &[16, 96], 0, 32),
    ];
    for &(xs, ss, axis, block) in cases {
        let map = ScaleMap::new(xs, ss, axis, block).unwrap();
        let x = rng.mixed_row(map.len());
        let s: Vec<u8> = (0..map.scale_len())
            .map(|_| match rng.next_u64() % 20 {
                0 => 0xFF,
                1 => 0,
                2 => 254,
                _ => 100 + (rng.next_u64() % 50) as u8,
            })
            .collect();
        let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
        let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        for dt in [DType::E4M3, DType::E5M2] {
            for sat in [true, false] {
                let ctx = format!("{xs:?} axis {axis} block {block} {dt:?} sat {sat}");
                let (w, g) = run_both(&x, &s, &map, dt, sat);
                assert_eq!(w, g, "{ctx}");
                let (w, g) = run_both(&xb, &s, &map, dt, sat);
                assert_eq!(w, g, "{ctx} bf16");
                let (w, g) = run_both(&xh, &s, &map, dt, sat);
                assert_eq!(w, g, "{ctx} f16");
            }
        }
    }
}

#[test]
fn op_api_checks_dtypes_and_shapes() {
    let x: Vec<u8> = (0..64).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let s = [127u8, 128];
    let attrs = MxQuantLinearAttrs {
        axis: -1,
        block_size: 32,
        output_dtype: DType::E4M3,
        saturate: true,
    };
    let call = |xt: DType, st: DType, yt: DType, ss: &[usize], a: &MxQuantLinearAttrs| {
        let xs = [64 * 4 / xt.size()];
        let mut y = vec![0u8; xs[0] * yt.size()];
        mx_quantize_linear(
            TensorRef::new(xt, &xs, &x).unwrap(),
            TensorRef::new(st, ss, &s[..ss.iter().product::<usize>()]).unwrap(),
            TensorMut::new(yt, &xs, &mut y).unwrap(),
            a,
            &Serial,
        )
        .map(|()| y)
    };
    let y = call(DType::F32, DType::E8M0, DType::E4M3, &[2], &attrs).unwrap();
    // 1.0 / 2^0 = 1.0 (0x38); 33.0 / 2^1 = 16.5 rounds to 16 (0x58).
    assert_eq!((y[1], y[33]), (0x38, 0x58));
    let e5 = MxQuantLinearAttrs {
        output_dtype: DType::E5M2,
        ..attrs
    };
    assert_eq!(
        call(DType::F32, DType::E8M0, DType::E5M2, &[2], &e5).unwrap()[1],
        0x3C
    );
    let err = |r: kernels::Result<Vec<u8>>| r.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err(call(DType::E4M3, DType::E8M0, DType::E4M3, &[2], &attrs)).contains("x must be"));
    assert!(err(call(DType::F32, DType::E4M3, DType::E4M3, &[2], &attrs)).contains("scale"));
    assert!(err(call(DType::F32, DType::E8M0, DType::E5M2, &[2], &attrs)).contains("y must be"));
    assert!(err(call(DType::F32, DType::E8M0, DType::E4M3, &[1], &attrs)).contains("shape"));
    let bad_axis = MxQuantLinearAttrs { axis: 1, ..attrs };
    assert!(call(DType::F32, DType::E8M0, DType::E4M3, &[2], &bad_axis).is_err());
    // y of another shape than x.
    let mut y = vec![0u8; 32];
    let r = mx_quantize_linear(
        TensorRef::new(DType::F32, &[64], &x).unwrap(),
        TensorRef::new(DType::E8M0, &[2], &s).unwrap(),
        TensorMut::new(DType::E4M3, &[32], &mut y).unwrap(),
        &attrs,
        &Serial,
    );
    assert!(r.is_err());
}
