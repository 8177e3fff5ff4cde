//! MXFP4 (FLOAT4E2M1 values, FLOAT8E8M0 scales): `MxDequantize` against an independent f64
//! oracle on every (code, scale byte) pair and output dtype, the fast kernel against the
//! reference on every granularity with odd element counts (the padding nibble), the op API's
//! packed byte lengths, and `MxMatMul` with an E2M1 weight against the widened E4M3 weight (the
//! same bits) and an f64 product.

mod common;

use common::Rng;
use half::{bf16, f16};
use kernels::codec::{e2m1_to_e4m3, widened_e4m3};
use kernels::ops::{mx_dequantize, mx_matmul, TensorMut, TensorRef};
use kernels::{
    reference, DType, Element, MxDequantAttrs, MxMatMulAttrs, ScaleMap, Serial, StdThreads,
};

/// E2M1 code → value from the format definition (bias 1, one mantissa bit), not the codec table.
fn oracle_code(c: u8) -> f64 {
    let (e, m) = ((c >> 1) & 3, c & 1);
    let mag = if e == 0 {
        m as f64 / 2.0
    } else {
        (1.0 + m as f64 / 2.0) * 2f64.powi(e as i32 - 1)
    };
    if c & 8 != 0 {
        -mag
    } else {
        mag
    }
}

fn oracle_scale(s: u8) -> f64 {
    if s == 0xFF {
        f64::NAN
    } else {
        2f64.powi(s as i32 - 127)
    }
}

/// Packs codes two per byte, low nibble first; an odd count pads with `pad` in the last high nibble.
fn pack(codes: &[u8], pad: u8) -> Vec<u8> {
    codes
        .chunks(2)
        .map(|p| p[0] | (p.get(1).copied().unwrap_or(pad) << 4))
        .collect()
}

fn run<T: Element>(x: &[u8], s: &[u8], map: &ScaleMap) -> (Vec<T>, Vec<T>) {
    let mut want = vec![T::default(); map.len()];
    reference::mx_dequantize(x, DType::E2M1, s, map, &mut want).unwrap();
    let mut got = vec![T::default(); map.len()];
    kernels::fast::mx_dequantize(x, DType::E2M1, s, map, &mut got, &StdThreads::new(3)).unwrap();
    (want, got)
}

fn bits<T: Element>(v: &[T]) -> Vec<u32> {
    v.iter().map(|x| x.to_f32().to_bits()).collect()
}

#[test]
fn every_code_and_scale_byte_matches_the_oracle() {
    // x [256 scales, 16 codes]: row s holds every code, one block per row.
    let codes: Vec<u8> = (0..256 * 16).map(|i| (i % 16) as u8).collect();
    let x = pack(&codes, 0);
    let s: Vec<u8> = (0..=255u8).collect();
    let map = ScaleMap::new(&[256, 16], &[256, 1], -1, 16).unwrap();
    let check = |got: Vec<u32>, out: DType| {
        for (i, &g) in got.iter().enumerate() {
            let v = oracle_code((i % 16) as u8) * oracle_scale((i / 16) as u8);
            let (want, nan) = match out {
                DType::F32 => ((v as f32).to_bits(), f32::from_bits(g).is_nan()),
                DType::F16 => (
                    f16::from_f64(v).to_bits() as u32,
                    f16::from_bits(g as u16).is_nan(),
                ),
                _ => (
                    bf16::from_f64(v).to_bits() as u32,
                    bf16::from_bits(g as u16).is_nan(),
                ),
            };
            assert!(
                g == want || (nan && v.is_nan()),
                "{out:?}: code {:#x} scale {}: {g:#x} vs oracle {want:#x}",
                i % 16,
                i / 16
            );
        }
    };
    let (w, g) = run::<f32>(&x, &s, &map);
    assert_eq!(bits(&w), bits(&g));
    check(bits(&w), DType::F32);
    let (w, g) = run::<f16>(&x, &s, &map);
    let b16 = |v: &[f16]| v.iter().map(|h| h.to_bits() as u32).collect::<Vec<_>>();
    assert_eq!(b16(&w), b16(&g));
    check(b16(&w), DType::F16);
    let (w, g) = run::<bf16>(&x, &s, &map);
    let bb = |v: &[bf16]| v.iter().map(|h| h.to_bits() as u32).collect::<Vec<_>>();
    assert_eq!(bb(&w), bb(&g));
    check(bb(&w), DType::BF16);
    // Scale byte 0 (2^-127) times 0.5 is the exact f32 subnormal 2^-128; 254 times 6 overflows
    // to Inf; a NaN scale (255) makes even ±0 NaN; -0 stays -0.
    let (w, _) = run::<f32>(&x, &s, &map);
    assert_eq!(w[1].to_bits(), (2f64.powi(-128) as f32).to_bits());
    assert_eq!(w[254 * 16 + 7], f32::INFINITY);
    assert_eq!(w[254 * 16 + 15], f32::NEG_INFINITY);
    assert!(w[255 * 16].is_nan());
    assert_eq!(w[127 * 16 + 8].to_bits(), (-0.0f32).to_bits());
}

#[test]
fn fast_matches_reference_on_every_granularity_with_odd_counts() {
    let mut rng = Rng::new(11);
    // (x shape, scale shape, axis, block_size): odd totals and odd rows (a row that starts
    // mid-byte), K-blocked weights both ways, per-axis and per-tensor.
    let cases: &[(&[usize], &[usize], i64, usize)] = &[
        (&[3, 5, 64], &[3, 5, 2], -1, 32),
        (&[96, 7], &[3, 7], 0, 32),
        (&[7, 96], &[7, 3], 1, 32),
        (&[3, 33], &[3, 2], -1, 32),
        (&[5, 9], &[5, 9], 1, 1),
        (&[7, 11], &[11], 1, 0),
        (&[7, 11], &[7], 0, 0),
        (&[3, 5, 7], &[], 1, 0),
        (&[1], &[1], 0, 0),
        (&[0, 64], &[0, 2], -1, 32),
        (&[999, 33], &[999, 2], -1, 32),
    ];
    for &(xs, ss, axis, block) in cases {
        let map = ScaleMap::new(xs, ss, axis, block).unwrap();
        let codes: Vec<u8> = (0..map.len())
            .map(|_| (rng.next_u64() % 16) as u8)
            .collect();
        // The padding nibble is garbage on purpose: it must not be read.
        let x = pack(&codes, 0xF);
        let s: Vec<u8> = (0..map.scale_len())
            .map(|_| 100 + (rng.next_u64() % 60) as u8)
            .collect();
        let (w, g) = run::<f32>(&x, &s, &map);
        assert_eq!(bits(&w), bits(&g), "{xs:?} axis {axis} block {block}");
        let (wb, gb) = run::<bf16>(&x, &s, &map);
        assert_eq!(bits(&wb), bits(&gb), "{xs:?} bf16");
        for (e, &v) in w.iter().enumerate() {
            let want = (oracle_code(codes[e]) * oracle_scale(s[map.scale_index(e)])) as f32;
            assert_eq!(v.to_bits(), want.to_bits(), "{xs:?} element {e}");
        }
    }
}

#[test]
fn op_api_takes_packed_lengths() {
    // 33 values take 17 bytes; 33 or 34 bytes (one per value) is a clear error.
    let attrs = MxDequantAttrs {
        axis: -1,
        block_size: 32,
        output_dtype: DType::F32,
    };
    let s = [127u8, 128];
    let x = pack(&[2; 33], 0);
    assert_eq!(x.len(), 17);
    let mut y = vec![0u8; 33 * 4];
    mx_dequantize(
        TensorRef::new(DType::E2M1, &[33], &x).unwrap(),
        TensorRef::new(DType::E8M0, &[2], &s).unwrap(),
        TensorMut::new(DType::F32, &[33], &mut y).unwrap(),
        &attrs,
        &Serial,
    )
    .unwrap();
    let y0 = f32::from_le_bytes(y[..4].try_into().unwrap());
    let y32 = f32::from_le_bytes(y[128..132].try_into().unwrap());
    assert_eq!((y0, y32), (1.0, 2.0));
    let err = TensorRef::new(DType::E2M1, &[33], &[0u8; 33]).unwrap_err();
    assert!(err.to_string().contains("17 bytes"), "{err}");
}

/// `MxMatMul` with an FP4 weight: the same bits as the widened E4M3 weight, both layouts, and
/// close to the f64 product of the decoded operands.
#[test]
fn matmul_with_fp4_weight_is_the_widened_fp8_weight() {
    let mut rng = Rng::new(5);
    let (m, k, n) = (3usize, 96usize, 5usize);
    let a: Vec<u8> = (0..m * k).map(|_| (rng.next_u64() % 0x7E) as u8).collect();
    let a_s: Vec<u8> = (0..m * k / 32).map(|i| 120 + i as u8 % 9).collect();
    let codes: Vec<u8> = (0..k * n).map(|_| (rng.next_u64() % 16) as u8).collect();
    let b4 = pack(&codes, 0);
    let b8 = widened_e4m3(&b4, k * n);
    assert_eq!(b8[7], e2m1_to_e4m3(codes[7]));
    let b_s: Vec<u8> = (0..k / 32 * n).map(|i| 118 + i as u8 % 13).collect();
    for trans_b in [false, true] {
        let attrs = MxMatMulAttrs {
            trans_b,
            ..Default::default()
        };
        let b_dims = if trans_b { [n, k] } else { [k, n] };
        let s_dims = if trans_b { [n, k / 32] } else { [k / 32, n] };
        let run = |dt: DType, b: &[u8]| {
            let mut y = vec![0u8; m * n * 4];
            mx_matmul(
                TensorRef::new(DType::E4M3, &[m, k], &a).unwrap(),
                TensorRef::new(DType::E8M0, &[m, k / 32], &a_s).unwrap(),
                TensorRef::new(dt, &b_dims, b).unwrap(),
                Some(TensorRef::new(DType::E8M0, &s_dims, &b_s).unwrap()),
                None,
                TensorMut::new(DType::F32, &[m, n], &mut y).unwrap(),
                &attrs,
                &Serial,
            )
            .unwrap();
            y.chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect::<Vec<_>>()
        };
        let (y4, y8) = (run(DType::E2M1, &b4), run(DType::E4M3, &b8));
        assert_eq!(bits(&y4), bits(&y8), "trans_b {trans_b}");
        for i in 0..m {
            for j in 0..n {
                let (mut acc, mut mag) = (0f64, 0f64);
                for kk in 0..k {
                    let av = kernels::codec::e4m3_to_f32(a[i * k + kk]) as f64
                        * oracle_scale(a_s[i * k / 32 + kk / 32]);
                    let (bi, si) = if trans_b {
                        (j * k + kk, j * k / 32 + kk / 32)
                    } else {
                        (kk * n + j, kk / 32 * n + j)
                    };
                    let t = av * oracle_code(codes[bi]) * oracle_scale(b_s[si]);
                    acc += t;
                    mag += t.abs();
                }
                let got = y4[i * n + j] as f64;
                assert!(
                    // f32 accumulation: a few ulps of the sum of magnitudes.
                    (got - acc).abs() <= 1e-6 * mag,
                    "trans_b {trans_b} ({i}, {j}): {got} vs {acc}"
                );
            }
        }
    }
}
