//! `MxDequantize`: the fast kernel against the scalar reference on random tensors of every
//! granularity (bit for bit), and both against an independent f64 oracle on every
//! (value byte, scale byte) pair of both FP8 formats, for every output dtype.

mod common;

use common::Rng;
use half::{bf16, f16};
use kernels::ops::{mx_dequantize, TensorMut, TensorRef};
use kernels::{reference, DType, Element, MxDequantAttrs, ScaleMap, Serial, StdThreads};

/// E4M3FN / E5M2 / E8M0 decoded from the format definitions in f64 (not the codec tables).
fn oracle_value(dtype: DType, b: u8) -> f64 {
    let neg = b & 0x80 != 0;
    let (ebits, mbits, bias) = if dtype == DType::E4M3 {
        (4, 3, 7)
    } else {
        (5, 2, 15)
    };
    let e = ((b & 0x7F) >> mbits) as i32;
    let m = (b & ((1 << mbits) - 1)) as i32;
    let top = (1 << ebits) - 1;
    let v = if dtype == DType::E4M3 && e == top && m == (1 << mbits) - 1 {
        f64::NAN
    } else if dtype == DType::E5M2 && e == top {
        if m == 0 {
            f64::INFINITY
        } else {
            f64::NAN
        }
    } else if e == 0 {
        m as f64 * 2f64.powi(1 - bias - mbits)
    } else {
        (1.0 + m as f64 / (1 << mbits) as f64) * 2f64.powi(e - bias)
    };
    if neg {
        -v
    } else {
        v
    }
}

fn oracle_scale(s: u8) -> f64 {
    if s == 0xFF {
        f64::NAN
    } else {
        2f64.powi(s as i32 - 127)
    }
}

/// The exact product rounded once to the output type.
fn oracle_bits(out: DType, v: f64) -> u32 {
    match out {
        DType::F32 => (v as f32).to_bits(),
        DType::F16 => f16::from_f64(v).to_bits() as u32,
        _ => bf16::from_f64(v).to_bits() as u32,
    }
}

fn same(a: u32, b: u32, out: DType) -> bool {
    let nan = |x: u32| match out {
        DType::F32 => f32::from_bits(x).is_nan(),
        DType::F16 => f16::from_bits(x as u16).is_nan(),
        _ => bf16::from_bits(x as u16).is_nan(),
    };
    a == b || (nan(a) && nan(b))
}

fn run<T: Element>(x: &[u8], xt: DType, s: &[u8], map: &ScaleMap) -> (Vec<T>, Vec<T>) {
    let mut want = vec![T::default(); x.len()];
    reference::mx_dequantize(x, xt, s, map, &mut want).unwrap();
    let mut got = vec![T::default(); x.len()];
    kernels::fast::mx_dequantize(x, xt, s, map, &mut got, &StdThreads::new(3)).unwrap();
    (want, got)
}

fn bits_of<T: Element>(v: &[T]) -> Vec<u32> {
    v.iter().map(|x| x.to_f32().to_bits()).collect()
}

#[test]
fn every_value_and_scale_byte_matches_the_oracle() {
    // x [256 scales, 256 values]: row s holds every value byte, blocked along the last axis
    // with block 256, so element (s, b) = decode(b) · 2^(s − 127).
    let x: Vec<u8> = (0..256 * 256).map(|i| (i % 256) as u8).collect();
    let s: Vec<u8> = (0..=255u8).collect();
    let map = ScaleMap::new(&[256, 256], &[256, 1], -1, 256).unwrap();
    for xt in [DType::E4M3, DType::E5M2] {
        for out in [DType::F32, DType::F16, DType::BF16] {
            let (want, got): (Vec<u32>, Vec<u32>) = match out {
                DType::F32 => {
                    let (w, g) = run::<f32>(&x, xt, &s, &map);
                    (bits_of(&w), bits_of(&g))
                }
                DType::F16 => {
                    let (w, g) = run::<f16>(&x, xt, &s, &map);
                    let b = |v: Vec<f16>| v.iter().map(|h| h.to_bits() as u32).collect();
                    (b(w), b(g))
                }
                _ => {
                    let (w, g) = run::<bf16>(&x, xt, &s, &map);
                    let b = |v: Vec<bf16>| v.iter().map(|h| h.to_bits() as u32).collect();
                    (b(w), b(g))
                }
            };
            if let Some(i) = (0..want.len()).find(|&i| !same(want[i], got[i], out)) {
                panic!(
                    "{xt:?} -> {out:?}: fast differs from reference at value {:#04x} scale {:#04x}: {:#x} vs {:#x}",
                    i % 256,
                    i / 256,
                    got[i],
                    want[i]
                );
            }
            for (i, &w) in want.iter().enumerate() {
                let v = oracle_value(xt, (i % 256) as u8) * oracle_scale((i / 256) as u8);
                let o = oracle_bits(out, v);
                assert!(
                    same(w, o, out),
                    "{xt:?} -> {out:?}: value {:#04x} scale {:#04x}: {w:#x} vs oracle {o:#x}",
                    i % 256,
                    i / 256
                );
            }
        }
    }
    // The E8M0 extremes: 2^-127 · the smallest subnormal stays an exact f32 subnormal,
    // 2^127 · 448 overflows to +Inf, a NaN scale makes even 0 NaN.
    let (w, _) = run::<f32>(&x, DType::E4M3, &s, &map);
    assert_eq!(w[1].to_bits(), (2f64.powi(-136) as f32).to_bits());
    assert_eq!(w[254 * 256 + 0x7E], f32::INFINITY);
    assert!(w[255 * 256].is_nan());
}

#[test]
fn fast_matches_reference_on_every_granularity() {
    let mut rng = Rng::new(7);
    // (x shape, scale shape, axis, block_size)
    let cases: &[(&[usize], &[usize], i64, usize)] = &[
        (&[3, 5, 64], &[3, 5, 2], -1, 32),
        (&[96, 7], &[3, 7], 0, 32),
        (&[7, 96], &[7, 3], 1, 32),
        (&[2, 40, 3], &[2, 2, 3], 1, 32),
        (&[4, 100], &[4, 7], -1, 16),
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
        let x: Vec<u8> = (0..map.len()).map(|_| rng.next_u64() as u8).collect();
        let s: Vec<u8> = (0..map.scale_len())
            .map(|_| 100 + (rng.next_u64() % 60) as u8)
            .collect();
        for xt in [DType::E4M3, DType::E5M2] {
            let (w, g) = run::<f32>(&x, xt, &s, &map);
            assert_eq!(bits_of(&w), bits_of(&g), "{xs:?} axis {axis} block {block}");
            let (wb, gb) = run::<bf16>(&x, xt, &s, &map);
            assert_eq!(bits_of(&wb), bits_of(&gb), "{xs:?} bf16");
            // The element → scale mapping itself, against the ONNX definition.
            if let Some(block) = std::num::NonZeroUsize::new(block) {
                let block = block.get();
                let a = axis.rem_euclid(xs.len() as i64) as usize;
                let inner: usize = xs[a + 1..].iter().product();
                for (e, &v) in w.iter().enumerate().step_by(7) {
                    let d = (e / inner) % xs[a];
                    let o = e / (inner * xs[a]);
                    let si = (o * ss[a] + d / block) * inner + e % inner;
                    let want = (oracle_value(xt, x[e]) * oracle_scale(s[si])) as f32;
                    assert!(v.to_bits() == want.to_bits() || (v.is_nan() && want.is_nan()));
                }
            }
        }
    }
}

#[test]
fn op_api_checks_dtypes_and_shapes() {
    let x = vec![0x38u8; 64];
    let s = [127u8; 2];
    let mut y = vec![0u8; 64 * 4];
    let attrs = MxDequantAttrs {
        axis: -1,
        block_size: 32,
        output_dtype: DType::F32,
    };
    let call =
        |xt: DType, st: DType, ys: &[usize], ss: &[usize], y: &mut [u8], a: &MxDequantAttrs| {
            mx_dequantize(
                TensorRef::new(xt, &[64], &x).unwrap(),
                TensorRef::new(st, ss, &s[..ss.iter().product::<usize>()]).unwrap(),
                TensorMut::new(a.output_dtype, ys, y).unwrap(),
                a,
                &Serial,
            )
        };
    call(DType::E4M3, DType::E8M0, &[64], &[2], &mut y, &attrs).unwrap();
    assert_eq!(f32::from_le_bytes(y[..4].try_into().unwrap()), 1.0);
    assert!(call(DType::E8M0, DType::E8M0, &[64], &[2], &mut y, &attrs).is_err());
    assert!(call(DType::E4M3, DType::E4M3, &[64], &[2], &mut y, &attrs).is_err());
    assert!(call(DType::E4M3, DType::E8M0, &[64], &[1], &mut y, &attrs).is_err());
    let mut short = vec![0u8; 32 * 4];
    assert!(call(DType::E4M3, DType::E8M0, &[32], &[2], &mut short, &attrs).is_err());
    let bad_axis = MxDequantAttrs { axis: 1, ..attrs };
    assert!(call(DType::E4M3, DType::E8M0, &[64], &[2], &mut y, &bad_axis).is_err());
}
