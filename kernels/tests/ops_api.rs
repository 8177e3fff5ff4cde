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

/// Runs the norm op on f32 `x` of shape `xs` (with a residual of zeros) into outputs of shape
/// `rows_shape` (q, normed) and `scale_shape`; residual_out keeps `xs`. Returns (q, scale,
/// residual_out, normed) bytes.
fn norm_into(
    x: &[f32],
    xs: &[usize],
    rows_shape: &[usize],
    scale_shape: &[usize],
    attrs: &AddRmsNormAttrs,
) -> kernels::Result<[Vec<u8>; 4]> {
    let n = x.len();
    let h = xs[xs.len() - 1];
    let zeros = vec![0f32; n];
    let g: Vec<f32> = (0..h).map(|i| 0.5 + i as f32 / h as f32).collect();
    let (xb, rb, gb) = (bytes_of(x), bytes_of(&zeros), bytes_of(&g));
    let (mut q, mut s, mut ro, mut nm) = (
        vec![0u8; n],
        vec![0u8; n / 32],
        aligned(n * 4),
        aligned(n * 4),
    );
    ops::add_rms_norm_mx_quant(
        TensorRef::new(DType::F32, xs, &xb)?,
        Some(TensorRef::new(DType::F32, xs, &rb)?),
        TensorRef::new(DType::F32, &[h], &gb)?,
        NormTensors {
            q: TensorMut::new(DType::E4M3, rows_shape, &mut q)?,
            scale: TensorMut::new(DType::E8M0, scale_shape, &mut s)?,
            residual_out: Some(TensorMut::new(
                DType::F32,
                xs,
                as_bytes_mut(&mut ro, n * 4),
            )?),
            normed: Some(TensorMut::new(
                DType::F32,
                rows_shape,
                as_bytes_mut(&mut nm, n * 4),
            )?),
        },
        attrs,
        &Serial,
    )?;
    Ok([
        q,
        s,
        as_bytes_mut(&mut ro, n * 4).to_vec(),
        as_bytes_mut(&mut nm, n * 4).to_vec(),
    ])
}

/// `flatten_rows = 1` (a MoE block's `Reshape(normed, [-1, H])` read into the op): q, scale and
/// normed are `[rows, H]`, residual_out keeps x's shape, and every byte is the unflattened op's
/// — rows with a zero row, a 448, a subnormal, a NaN and an Inf among them.
#[test]
fn norm_op_flatten_rows_writes_the_same_bytes_as_rows() {
    let (b, s, h) = (2usize, 3usize, 64usize);
    let mut x: Vec<f32> = (0..b * s * h)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.07)
        .collect();
    x[h..2 * h].fill(0.0);
    x[2 * h] = 448.0;
    x[3 * h + 1] = 1e-40;
    x[4 * h + 2] = f32::NAN;
    x[5 * h + 3] = f32::INFINITY;
    let flat = AddRmsNormAttrs::from_pairs([("flatten_rows", "1")]).unwrap();
    assert!(flat.flatten_rows);
    let plain = AddRmsNormAttrs::default();
    let xs = [b, s, h];
    let want = norm_into(&x, &xs, &xs, &[b, s, h / 32], &plain).unwrap();
    let got = norm_into(&x, &xs, &[b * s, h], &[b * s, h / 32], &flat).unwrap();
    assert_eq!(got, want);
    // The shapes follow the attribute: unflattened outputs are refused with it, flat without.
    assert!(norm_into(&x, &xs, &xs, &[b, s, h / 32], &flat).is_err());
    assert!(norm_into(&x, &xs, &[b * s, h], &[b * s, h / 32], &plain).is_err());
    assert_eq!(
        ops::norm_output_shape(&[0, 4, h], true).unwrap(),
        [0, h],
        "an unknown (0) leading dim stays 0 for the provider's -1"
    );
}
