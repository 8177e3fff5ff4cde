//! The dtype-tagged op-level API: results equal the typed reference, and every malformed call is
//! an error (dtype, shape, alignment, K % 32), never a panic.

mod common;

use half::bf16;
use kernels::attrs::{AddRmsNormAttrs, MxMatMulAttrs, MxQuantAttrs, SwiGluAttrs};
use kernels::ops::{self, NormTensors, SwiGluTensors, TensorMut, TensorRef};
use kernels::slices::{MatB, NormOutputs, SwiGluInput};
use kernels::{reference, DType, Serial, StdThreads};

/// f32 buffer holding `v`'s bytes (f32-aligned storage reinterpreted as bytes).
fn bytes_of<T: Copy>(v: &[T]) -> Vec<u8> {
    let n = std::mem::size_of_val(v);
    // SAFETY: reading the bytes of plain floats.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, n) }.to_vec()
}

/// A byte buffer aligned for 4-byte elements (u32 storage).
fn aligned(n: usize) -> Vec<u32> {
    vec![0u32; n.div_ceil(4)]
}

fn as_bytes_mut(v: &mut [u32], n: usize) -> &mut [u8] {
    // SAFETY: u32 storage viewed as its first n bytes.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, n) }
}

#[test]
fn norm_op_equals_typed_reference() {
    let mut rng = common::Rng::new(3);
    let (rows, h) = (3usize, 128usize);
    let x: Vec<bf16> = (0..rows * h)
        .map(|_| bf16::from_f32(rng.normal(2.0)))
        .collect();
    let r: Vec<bf16> = (0..rows * h)
        .map(|_| bf16::from_f32(rng.normal(2.0)))
        .collect();
    let g: Vec<f32> = (0..h).map(|_| rng.normal(0.3)).collect();
    let attrs = AddRmsNormAttrs::from_pairs([("gemma", "1"), ("scale_rule", "rceil")]).unwrap();
    let (xs, gs) = ([rows, h], [h]);
    let (xb, rb, gb) = (bytes_of(&x), bytes_of(&r), bytes_of(&g));
    let (mut q, mut s, mut ro) = (
        vec![0u8; rows * h],
        vec![0u8; rows * h / 32],
        aligned(rows * h * 2),
    );
    let ss = [rows, h / 32];
    ops::add_rms_norm_mx_quant(
        TensorRef::new(DType::BF16, &xs, &xb).unwrap(),
        Some(TensorRef::new(DType::BF16, &xs, &rb).unwrap()),
        TensorRef::new(DType::F32, &gs, &gb).unwrap(),
        NormTensors {
            q: TensorMut::new(DType::E4M3, &xs, &mut q).unwrap(),
            scale: TensorMut::new(DType::E8M0, &ss, &mut s).unwrap(),
            residual_out: Some(
                TensorMut::new(DType::BF16, &xs, as_bytes_mut(&mut ro, rows * h * 2)).unwrap(),
            ),
            normed: None,
        },
        &attrs,
        &StdThreads::new(2),
    )
    .unwrap();
    let (mut q0, mut s0, mut ro0) = (
        vec![0u8; rows * h],
        vec![0u8; rows * h / 32],
        vec![bf16::ZERO; rows * h],
    );
    let out = NormOutputs {
        q: &mut q0,
        scales: &mut s0,
        residual_out: Some(&mut ro0),
        normed: None,
    };
    reference::add_rms_norm_mx_quant(&x, Some(&r), &g, h, &attrs, out).unwrap();
    assert_eq!((q, s), (q0, s0));
    assert_eq!(as_bytes_mut(&mut ro, rows * h * 2).to_vec(), bytes_of(&ro0));
}

#[test]
fn quantize_swiglu_matmul_ops_run() {
    let x: Vec<f32> = (0..2 * 64).map(|i| (i as f32 - 60.0) * 0.1).collect();
    let xb = bytes_of(&x);
    let (mut q, mut s) = (vec![0u8; 128], vec![0u8; 4]);
    ops::mx_quantize(
        TensorRef::new(DType::F32, &[2, 64], &xb).unwrap(),
        TensorMut::new(DType::E4M3, &[2, 64], &mut q).unwrap(),
        TensorMut::new(DType::E8M0, &[2, 2], &mut s).unwrap(),
        &MxQuantAttrs::default(),
        &Serial,
    )
    .unwrap();
    let (mut q0, mut s0) = (vec![0u8; 128], vec![0u8; 4]);
    reference::mx_quantize(&x, 64, &mut q0, &mut s0, Default::default()).unwrap();
    assert_eq!((&q, &s), (&q0, &s0));

    // SwiGLU split halves: [2, 64] → [2, 32].
    let attrs = SwiGluAttrs::from_pairs([
        ("layout", "split_halves"),
        ("activation", "oai"),
        ("alpha", "1.702"),
    ])
    .unwrap();
    let (mut aq, mut as_) = (vec![0u8; 64], vec![0u8; 2]);
    ops::swiglu_mx_quant(
        SwiGluTensors::Fused(TensorRef::new(DType::F32, &[2, 64], &xb).unwrap()),
        TensorMut::new(DType::E4M3, &[2, 32], &mut aq).unwrap(),
        TensorMut::new(DType::E8M0, &[2, 1], &mut as_).unwrap(),
        &attrs,
        &Serial,
    )
    .unwrap();
    let (mut aq0, mut as0) = (vec![0u8; 64], vec![0u8; 2]);
    reference::swiglu_mx_quant(SwiGluInput::Fused(&x), 32, &attrs, &mut aq0, &mut as0).unwrap();
    assert_eq!((&aq, &as_), (&aq0, &as0));

    // MxMatMul with MXFP8 weights [N, K] = [2, 64] (the quantized x), y bf16 [2, 2].
    let mut y = aligned(8);
    let mm = MxMatMulAttrs::from_pairs([("trans_b", "1"), ("output_dtype", "16")]).unwrap();
    ops::mx_matmul(
        TensorRef::new(DType::E4M3, &[2, 64], &q).unwrap(),
        TensorRef::new(DType::E8M0, &[2, 2], &s).unwrap(),
        TensorRef::new(DType::E4M3, &[2, 64], &q).unwrap(),
        Some(TensorRef::new(DType::E8M0, &[2, 2], &s).unwrap()),
        None,
        TensorMut::new(DType::BF16, &[2, 2], as_bytes_mut(&mut y, 8)).unwrap(),
        &mm,
        &Serial,
    )
    .unwrap();
    let mut y0 = vec![bf16::ZERO; 4];
    reference::mx_matmul(
        &q,
        &s,
        2,
        64,
        2,
        MatB::Mx { q: &q, scales: &s },
        true,
        &mut y0,
        &kernels::Epilogue::NONE,
    )
    .unwrap();
    let got: Vec<f32> = as_bytes_mut(&mut y, 8)
        .chunks(2)
        .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    for (g, w) in got.iter().zip(&y0) {
        assert!(
            (g - w.to_f32()).abs() <= w.to_f32().abs() * 1e-2,
            "{g} vs {w}"
        );
    }
}

#[test]
fn malformed_calls_are_errors() {
    let x = vec![0u8; 2 * 40 * 4];
    let (mut q, mut s) = (vec![0u8; 80], vec![0u8; 2]);
    let attrs = MxQuantAttrs::default();
    // Byte count that does not match the shape.
    assert!(TensorRef::new(DType::F32, &[2, 41], &x).is_err());
    // K = 40 is not a multiple of 32.
    let r = ops::mx_quantize(
        TensorRef::new(DType::F32, &[2, 40], &x).unwrap(),
        TensorMut::new(DType::E4M3, &[2, 40], &mut q).unwrap(),
        TensorMut::new(DType::E8M0, &[2, 1], &mut s[..2]).unwrap(),
        &attrs,
        &Serial,
    );
    assert!(r.is_err());
    // Wrong output dtype.
    let x = vec![0u8; 64 * 4];
    let (mut q, mut s) = (vec![0u8; 64], vec![0u8; 2]);
    let r = ops::mx_quantize(
        TensorRef::new(DType::F32, &[64], &x).unwrap(),
        TensorMut::new(DType::E8M0, &[64], &mut q).unwrap(),
        TensorMut::new(DType::E8M0, &[2], &mut s).unwrap(),
        &attrs,
        &Serial,
    );
    assert!(r.is_err());
    // Misaligned f32 buffer.
    let storage = [0u32; 17];
    // SAFETY: viewing u32 storage as bytes, offset by one to break alignment.
    let bytes = unsafe { std::slice::from_raw_parts((storage.as_ptr() as *const u8).add(1), 64) };
    let t = TensorRef::new(DType::F32, &[16], bytes).unwrap();
    assert!(t.view::<f32>().is_err());
    // MatMul K mismatch and a float b with a b_scale.
    let (aq, asc) = (vec![0u8; 64], vec![0u8; 2]);
    let b = vec![0u8; 32 * 4 * 4];
    let mut y = vec![0u8; 16];
    let r = ops::mx_matmul(
        TensorRef::new(DType::E4M3, &[1, 64], &aq).unwrap(),
        TensorRef::new(DType::E8M0, &[1, 2], &asc).unwrap(),
        TensorRef::new(DType::F32, &[32, 4], &b).unwrap(),
        None,
        None,
        TensorMut::new(DType::F32, &[1, 4], &mut y).unwrap(),
        &MxMatMulAttrs::default(),
        &Serial,
    );
    assert!(r.is_err());
    // Layout attribute and inputs disagree.
    let g = vec![0u8; 64 * 4];
    let (mut q, mut s) = (vec![0u8; 64], vec![0u8; 2]);
    let r = ops::swiglu_mx_quant(
        SwiGluTensors::Separate {
            gate: TensorRef::new(DType::F32, &[64], &g).unwrap(),
            up: TensorRef::new(DType::F32, &[64], &g).unwrap(),
        },
        TensorMut::new(DType::E4M3, &[64], &mut q).unwrap(),
        TensorMut::new(DType::E8M0, &[2], &mut s).unwrap(),
        &SwiGluAttrs::from_pairs([("layout", "interleaved")]).unwrap(),
        &Serial,
    );
    assert!(r.is_err());
}
