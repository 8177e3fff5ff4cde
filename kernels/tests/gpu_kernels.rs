//! The GPU kernels against the scalar reference (`kernels::reference`), on fresh random inputs
//! with planted edge blocks (zero, NaN, ±Inf, subnormal, huge, 448·2^k boundaries): q, scales,
//! residual_out and normed bit for bit; GEMM outputs within the f32-accumulation bound.
//!
//! Every test returns early, saying so, when no GPU runtime loads (CI has none); on a GPU
//! machine run `cargo test -p kernels --test gpu_kernels` (docs/gpu.md).

use std::sync::Arc;

use half::{bf16, f16};
use kernels::attrs::{Activation, InvForm, SwiGluLayout, SwishForm};
use kernels::codec::{NanPolicy, QuantConfig, ScaleRule};
use kernels::gpu::runtime::pod::Pod;
use kernels::gpu::{
    DeviceBuffer, GpuBias, GpuEpilogue, GpuError, GpuMatB, GpuRuntime, NormBuffers, SwiGluBuffers,
};
use kernels::reference;
use kernels::slices::{MatB, NormOutputs, SwiGluInput};
use kernels::{AddRmsNormAttrs, DType, Element, KernelError, ScaleMap, SwiGluAttrs};

#[path = "gpu_kernels/gather.rs"]
mod gather;
#[path = "gpu_kernels/grouped.rs"]
mod grouped;
#[path = "gpu_kernels/prefill.rs"]
mod prefill;

fn gpu() -> Option<Arc<GpuRuntime>> {
    match GpuRuntime::shared() {
        Ok(Some(rt)) => Some(rt),
        Ok(None) => {
            eprintln!("skipped: no GPU runtime on this machine");
            None
        }
        Err(e) => panic!("a GPU runtime is present but failed to load: {e}"),
    }
}

/// xorshift64* with a rough normal from the sum of four uniforms (enough for test data).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    fn normal(&mut self) -> f32 {
        (0..4).map(|_| self.uniform()).sum::<f32>() * 1.7 - 3.4
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Random rows of `k` with an edge block planted in each of the first rows.
fn edge_rows<T: Element>(rng: &mut Rng, rows: usize, k: usize, nonfinite: bool) -> Vec<T> {
    let mut x: Vec<f32> = (0..rows * k)
        .map(|_| rng.normal() * 2f32.powi(rng.below(16) as i32 - 8))
        .collect();
    let big = if T::DTYPE == kernels::DType::F16 {
        6.0e4
    } else {
        3.0e38
    };
    let tiny = if T::DTYPE == kernels::DType::F16 {
        3.0e-8
    } else {
        1.0e-39
    };
    let specials = [0.0, -0.0, tiny, big, 448.0, 447.0, 1.75, 1.757_812_5, 1.0];
    for r in 0..rows.min(14) {
        let start = r * k + rng.below(k / 32) * 32;
        let block = &mut x[start..start + 32];
        match r % 7 {
            0 => block.fill(0.0),
            1 if nonfinite => block[rng.below(32)] = f32::NAN,
            2 if nonfinite => {
                block[rng.below(32)] = if r % 2 == 0 {
                    f32::INFINITY
                } else {
                    f32::NEG_INFINITY
                }
            }
            3 => block.iter_mut().for_each(|v| *v *= tiny),
            4 => block
                .iter_mut()
                .for_each(|v| *v = specials[rng.below(specials.len())]),
            5 => block.iter_mut().for_each(|v| *v *= big / 8.0),
            _ => {}
        }
    }
    x.into_iter().map(T::from_f32).collect()
}

fn upload<T: Pod>(rt: &Arc<GpuRuntime>, v: &[T]) -> DeviceBuffer {
    rt.upload(v).expect("upload")
}

/// A device buffer of `n` elements filled with a poison pattern, so unwritten outputs show.
fn poisoned<T: Pod>(rt: &Arc<GpuRuntime>, n: usize) -> DeviceBuffer {
    let bytes = vec![0xA5u8; n * std::mem::size_of::<T>()];
    upload(rt, &bytes)
}

fn download<T: Pod + Default>(buf: &DeviceBuffer, n: usize) -> Vec<T> {
    let mut v = vec![T::default(); n];
    buf.download(&mut v).expect("download");
    v
}

/// MX weights `w [n, k]` + `ws [n, k/32]` on the device in both layouts the GEMMs take:
/// (w, ws) as given (`trans_b`) and transposed to `[k, n]` + `[k/32, n]`.
fn upload_mx_layouts(
    rt: &Arc<GpuRuntime>,
    w: &[u8],
    ws: &[u8],
    n: usize,
    k: usize,
) -> (DeviceBuffer, DeviceBuffer, DeviceBuffer, DeviceBuffer) {
    let wt: Vec<u8> = (0..k * n).map(|i| w[(i % n) * k + i / n]).collect();
    let wst: Vec<u8> = (0..k / 32 * n)
        .map(|i| ws[(i % n) * (k / 32) + i / n])
        .collect();
    (
        upload(rt, w),
        upload(rt, ws),
        upload(rt, &wt),
        upload(rt, &wst),
    )
}

/// One MX GEMM launch on pre-quantized A (`aq`, `asc` on the device), no epilogue, f32 out:
/// the accumulator as the kernel rounds it to f32.
fn matmul_f32(
    rt: &Arc<GpuRuntime>,
    dims: (usize, usize, usize),
    aq: &DeviceBuffer,
    asc: &DeviceBuffer,
    b: &GpuMatB,
) -> Vec<f32> {
    matmul_out(rt, dims, aq, asc, b, kernels::DType::F32)
}

/// `MxMatMul` of pre-quantized activations into a poisoned `[m, n]` output of `out` (whose
/// element type is `O`), no epilogue; the output downloaded.
fn matmul_out<O: Pod + Default>(
    rt: &Arc<GpuRuntime>,
    (m, k, n): (usize, usize, usize),
    aq: &DeviceBuffer,
    asc: &DeviceBuffer,
    b: &GpuMatB,
    out: kernels::DType,
) -> Vec<O> {
    let dy = poisoned::<O>(rt, m * n);
    rt.mx_matmul(
        m,
        k,
        n,
        aq.ptr(),
        asc.ptr(),
        b,
        dy.ptr(),
        out,
        &GpuEpilogue::NONE,
        0,
    )
    .expect("launch");
    download::<O>(&dy, m * n)
}

fn same_bits<T: Element>(a: &[T], b: &[T]) -> usize {
    a.iter()
        .zip(b)
        .filter(|(x, y)| {
            let (x, y) = (x.to_f32(), y.to_f32());
            !(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
        })
        .count()
}

fn mismatches(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).filter(|(x, y)| x != y).count()
}

const CONFIGS: [QuantConfig; 6] = [
    QuantConfig {
        scale_rule: ScaleRule::Floor,
        nan_policy: NanPolicy::Propagate,
    },
    QuantConfig {
        scale_rule: ScaleRule::Rceil,
        nan_policy: NanPolicy::Propagate,
    },
    QuantConfig {
        scale_rule: ScaleRule::Floor,
        nan_policy: NanPolicy::Ignore,
    },
    QuantConfig {
        scale_rule: ScaleRule::Rceil,
        nan_policy: NanPolicy::Ignore,
    },
    // A float16 graph's floor rule (amax·2^-8 rounded to float16 first).
    QuantConfig {
        scale_rule: ScaleRule::FloorF16,
        nan_policy: NanPolicy::Propagate,
    },
    QuantConfig {
        scale_rule: ScaleRule::FloorF16,
        nan_policy: NanPolicy::Ignore,
    },
];

fn quantize_case<T: Element + Pod>(
    rt: &Arc<GpuRuntime>,
    rng: &mut Rng,
    rows: usize,
    k: usize,
    cfg: QuantConfig,
) {
    let x = edge_rows::<T>(rng, rows, k, true);
    let (mut q, mut s) = (vec![0u8; rows * k], vec![0u8; rows * k / 32]);
    reference::mx_quantize(&x, k, &mut q, &mut s, cfg).expect("reference");
    let (dx, dq, ds) = (
        upload(rt, &x),
        poisoned::<u8>(rt, q.len()),
        poisoned::<u8>(rt, s.len()),
    );
    rt.mx_quantize(T::DTYPE, x.len(), k, dx.ptr(), dq.ptr(), ds.ptr(), &cfg, 0)
        .expect("launch");
    let (gq, gs) = (download::<u8>(&dq, q.len()), download::<u8>(&ds, s.len()));
    assert_eq!(
        mismatches(&gq, &q),
        0,
        "{:?} q, {cfg:?}, {rows}x{k}",
        T::DTYPE
    );
    assert_eq!(
        mismatches(&gs, &s),
        0,
        "{:?} scales, {cfg:?}, {rows}x{k}",
        T::DTYPE
    );
}

fn dequantize_case<T: Element + Pod>(
    rt: &Arc<GpuRuntime>,
    xt: DType,
    x: &[u8],
    s: &[u8],
    map: &ScaleMap,
) -> usize {
    // x holds `map.len()` values: one per byte, or two per byte for E2M1.
    let x = &x[..xt.byte_len(map.len()).unwrap()];
    let mut want = vec![T::default(); map.len()];
    reference::mx_dequantize(x, xt, s, map, &mut want).expect("reference");
    let (xb, sb, yb) = (upload(rt, x), upload(rt, s), poisoned::<T>(rt, map.len()));
    rt.mx_dequantize(xt, T::DTYPE, map, xb.ptr(), sb.ptr(), yb.ptr(), 0)
        .expect("launch");
    rt.synchronize().expect("sync");
    same_bits(&download::<T>(&yb, map.len()), &want)
}

/// Every (value byte, scale byte) pair of E4M3 and E5M2 into f32 / f16 / bf16 (NaN, ±Inf,
/// 2^-127 · subnormals, 2^127 · 448 → Inf), every E2M1 code with every scale byte (packed
/// two per byte), then random tensors blocked along a middle axis, along axis 0 with a short
/// last block, per-axis (an odd count: E2M1's padding nibble) and per-tensor.
#[test]
fn gpu_dequantize_matches_reference_bit_for_bit() {
    let Some(rt) = gpu() else { return };
    let x: Vec<u8> = (0..256 * 256).map(|i| (i % 256) as u8).collect();
    let s: Vec<u8> = (0..=255u8).collect();
    let all = ScaleMap::new(&[256, 256], &[256, 1], -1, 256).unwrap();
    let mut rng = Rng(0x5eed);
    let cases: [(&[usize], &[usize], i64, usize); 4] = [
        (&[3, 40, 96], &[3, 2, 96], 1, 32),
        (&[100, 48], &[4, 48], 0, 32),
        (&[7, 33], &[33], 1, 0),
        (&[5, 64], &[], 1, 0),
    ];
    for xt in [DType::E4M3, DType::E5M2, DType::E2M1] {
        let mut bad = dequantize_case::<f32>(&rt, xt, &x, &s, &all)
            + dequantize_case::<f16>(&rt, xt, &x, &s, &all)
            + dequantize_case::<bf16>(&rt, xt, &x, &s, &all);
        for &(xs, ss, axis, block) in &cases {
            let map = ScaleMap::new(xs, ss, axis, block).unwrap();
            let xr: Vec<u8> = (0..map.len()).map(|_| rng.next() as u8).collect();
            let sr: Vec<u8> = (0..map.scale_len())
                .map(|_| 100 + rng.below(60) as u8)
                .collect();
            bad += dequantize_case::<f32>(&rt, xt, &xr, &sr, &map)
                + dequantize_case::<bf16>(&rt, xt, &xr, &sr, &map);
        }
        assert_eq!(bad, 0, "{xt:?}: {bad} elements differ from the reference");
    }
}

/// `MxQuantizeLinear` of `x` on the GPU against the reference; returns the bytes that differ.
fn quantize_linear_case<T: Element + Pod>(
    rt: &Arc<GpuRuntime>,
    yt: DType,
    saturate: bool,
    x: &[T],
    s: &[u8],
    map: &ScaleMap,
) -> usize {
    let mut want = vec![0u8; x.len()];
    reference::mx_quantize_linear(x, s, map, yt, saturate, &mut want).expect("reference");
    let (xb, sb, yb) = (upload(rt, x), upload(rt, s), poisoned::<u8>(rt, x.len()));
    rt.mx_quantize_linear(T::DTYPE, yt, saturate, map, xb.ptr(), sb.ptr(), yb.ptr(), 0)
        .expect("launch");
    rt.synchronize().expect("sync");
    mismatches(&download::<u8>(&yb, x.len()), &want)
}

/// Every E8M0 byte (row s of x [256, 64] reads scale byte s) × planted edge values (±0, NaN,
/// ±Inf, f32 subnormals, 448/464/57344/61440 and FP8 ties), then random tensors of every
/// granularity; E4M3FN and E5M2, saturate 1 and 0, f32/f16/bf16.
#[test]
fn gpu_quantize_linear_matches_reference_bit_for_bit() {
    let Some(rt) = gpu() else { return };
    let mut rng = Rng(0x0a11_5ca1e);
    let specials = [
        0.0,
        -0.0,
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-40,
        1e-45,
        448.0,
        464.0,
        464.01,
        57344.0,
        61440.0,
        61439.0,
        1.0625,
        1.125,
        2e-3,
        3e38,
        -3e38,
    ];
    let row = |rng: &mut Rng| -> Vec<f32> {
        let mut v: Vec<f32> = (0..64)
            .map(|_| rng.normal() * 2f32.powi(rng.below(60) as i32 - 30))
            .collect();
        v[..specials.len()].copy_from_slice(&specials);
        v
    };
    let x: Vec<f32> = (0..256).flat_map(|_| row(&mut rng)).collect();
    let s: Vec<u8> = (0..=255u8).collect();
    let all = ScaleMap::new(&[256, 64], &[256, 1], -1, 64).unwrap();
    let cases: [(&[usize], &[usize], i64, usize); 4] = [
        (&[3, 40, 96], &[3, 2, 96], 1, 32),
        (&[100, 48], &[4, 48], 0, 32),
        (&[7, 33], &[33], 1, 0),
        (&[5, 64], &[], 1, 0),
    ];
    for yt in [DType::E4M3, DType::E5M2] {
        for saturate in [true, false] {
            let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
            let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
            let mut bad = quantize_linear_case(&rt, yt, saturate, &x, &s, &all)
                + quantize_linear_case(&rt, yt, saturate, &xh, &s, &all)
                + quantize_linear_case(&rt, yt, saturate, &xb, &s, &all);
            for &(xs, ss, axis, block) in &cases {
                let map = ScaleMap::new(xs, ss, axis, block).unwrap();
                let xr: Vec<f32> = (0..map.len()).map(|_| rng.normal() * 64.0).collect();
                let sr: Vec<u8> = (0..map.scale_len())
                    .map(|_| 110 + rng.below(30) as u8)
                    .collect();
                bad += quantize_linear_case(&rt, yt, saturate, &xr, &sr, &map);
            }
            assert_eq!(
                bad, 0,
                "{yt:?} saturate {saturate}: {bad} bytes differ from the reference"
            );
        }
    }
}

#[test]
fn gpu_quantize_matches_reference_bit_for_bit() {
    let Some(rt) = gpu() else { return };
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    for cfg in CONFIGS {
        quantize_case::<bf16>(&rt, &mut rng, 37, 2048, cfg);
        quantize_case::<f16>(&rt, &mut rng, 37, 2048, cfg);
        quantize_case::<f32>(&rt, &mut rng, 37, 2048, cfg);
    }
    // >= 2^21 elements: the 8-elements-per-lane kernels.
    quantize_case::<bf16>(&rt, &mut rng, 2048, 1024, CONFIGS[1]);
    quantize_case::<f32>(&rt, &mut rng, 2048, 1024, CONFIGS[2]);
}

fn norm_case<T: Element + Pod, G: Element + Pod>(
    rt: &Arc<GpuRuntime>,
    rng: &mut Rng,
    rows: usize,
    h: usize,
    residual: bool,
    attrs: &AddRmsNormAttrs,
) {
    let x = edge_rows::<T>(rng, rows, h, false);
    let r: Vec<T> = (0..rows * h).map(|_| T::from_f32(rng.normal())).collect();
    let gamma: Vec<G> = (0..h).map(|_| G::from_f32(rng.normal() * 0.1)).collect();
    let (mut q, mut s) = (vec![0u8; rows * h], vec![0u8; rows * h / 32]);
    let (mut ro, mut no) = (vec![T::default(); rows * h], vec![T::default(); rows * h]);
    let out = NormOutputs {
        q: &mut q,
        scales: &mut s,
        residual_out: Some(&mut ro),
        normed: Some(&mut no),
    };
    reference::add_rms_norm_mx_quant(&x, residual.then_some(&r[..]), &gamma, h, attrs, out)
        .expect("reference");
    let (dx, dr, dg) = (upload(rt, &x), upload(rt, &r), upload(rt, &gamma));
    let (dq, ds) = (poisoned::<u8>(rt, q.len()), poisoned::<u8>(rt, s.len()));
    let (dro, dno) = (poisoned::<T>(rt, ro.len()), poisoned::<T>(rt, no.len()));
    let bufs = NormBuffers {
        x: dx.ptr(),
        residual: residual.then(|| dr.ptr()),
        gamma: dg.ptr(),
        q: dq.ptr(),
        scales: ds.ptr(),
        residual_out: Some(dro.ptr()),
        normed: Some(dno.ptr()),
    };
    rt.add_rmsnorm_mxquant(T::DTYPE, G::DTYPE, rows, h, &bufs, attrs, 1, 0)
        .expect("launch");
    let what = format!(
        "{:?}/{:?} {rows}x{h} residual={residual} {attrs:?}",
        T::DTYPE,
        G::DTYPE
    );
    assert_eq!(
        same_bits(&download::<T>(&dro, ro.len()), &ro),
        0,
        "residual_out {what}"
    );
    assert_eq!(
        same_bits(&download::<T>(&dno, no.len()), &no),
        0,
        "normed {what}"
    );
    assert_eq!(mismatches(&download::<u8>(&dq, q.len()), &q), 0, "q {what}");
    assert_eq!(
        mismatches(&download::<u8>(&ds, s.len()), &s),
        0,
        "scales {what}"
    );
}

#[test]
fn gpu_add_rmsnorm_mxquant_matches_reference_bit_for_bit() {
    let Some(rt) = gpu() else { return };
    let mut rng = Rng(0x0BAD_5EED_0000_0001);
    let gemma = AddRmsNormAttrs {
        gemma: true,
        ..Default::default()
    };
    let variants = [
        gemma,
        AddRmsNormAttrs {
            quant: CONFIGS[1],
            ..Default::default()
        },
        AddRmsNormAttrs {
            gamma_in_f32: false,
            inv_form: InvForm::Div,
            quant: CONFIGS[2],
            ..Default::default()
        },
        AddRmsNormAttrs {
            gemma: true,
            gamma_in_f32: false,
            round_sum: false,
            quant: CONFIGS[3],
            ..Default::default()
        },
    ];
    for attrs in &variants {
        norm_case::<bf16, bf16>(&rt, &mut rng, 9, 6144, true, attrs);
        norm_case::<bf16, f32>(&rt, &mut rng, 3, 2048, false, attrs);
        norm_case::<f16, f16>(&rt, &mut rng, 5, 4096, true, attrs);
        norm_case::<f32, f32>(&rt, &mut rng, 4, 1024, true, attrs);
    }
    // Wide rows (2 and 4 chunks per lane) and many rows (the 2-chunks-per-lane, 384-lane blocks of large M).
    norm_case::<bf16, bf16>(&rt, &mut rng, 2, 16384, true, &gemma);
    norm_case::<bf16, bf16>(&rt, &mut rng, 2, 32768, true, &gemma);
    norm_case::<bf16, bf16>(&rt, &mut rng, 300, 6144, true, &gemma);
}

fn swiglu_case<T: Element + Pod>(
    rt: &Arc<GpuRuntime>,
    rng: &mut Rng,
    rows: usize,
    i: usize,
    attrs: &SwiGluAttrs,
) {
    let g = edge_rows::<T>(rng, rows, i, true);
    swiglu_case_with(rt, rng, rows, i, attrs, g);
}

/// One `SwiGluMxQuant` launch on gate values `g` (`rows` × `i`) and random up values, against
/// the reference bit for bit.
fn swiglu_case_with<T: Element + Pod>(
    rt: &Arc<GpuRuntime>,
    rng: &mut Rng,
    rows: usize,
    i: usize,
    attrs: &SwiGluAttrs,
    g: Vec<T>,
) {
    let u: Vec<T> = (0..rows * i)
        .map(|_| T::from_f32(rng.normal() * 4.0))
        .collect();
    let fused: Vec<T> = match attrs.layout {
        SwiGluLayout::Separate => Vec::new(),
        SwiGluLayout::SplitHalves => (0..rows)
            .flat_map(|r| {
                g[r * i..(r + 1) * i]
                    .iter()
                    .chain(&u[r * i..(r + 1) * i])
                    .copied()
                    .collect::<Vec<_>>()
            })
            .collect(),
        SwiGluLayout::Interleaved => g.iter().zip(&u).flat_map(|(a, b)| [*a, *b]).collect(),
    };
    let input = if attrs.layout == SwiGluLayout::Separate {
        SwiGluInput::Separate { gate: &g, up: &u }
    } else {
        SwiGluInput::Fused(&fused)
    };
    let (mut q, mut s) = (vec![0u8; rows * i], vec![0u8; rows * i / 32]);
    reference::swiglu_mx_quant(input, i, attrs, &mut q, &mut s).expect("reference");
    let (dg, du, df) = (
        upload(rt, &g),
        upload(rt, &u),
        upload(rt, if fused.is_empty() { &g } else { &fused }),
    );
    let (dq, ds) = (poisoned::<u8>(rt, q.len()), poisoned::<u8>(rt, s.len()));
    let bufs = if attrs.layout == SwiGluLayout::Separate {
        SwiGluBuffers::Separate {
            gate: dg.ptr(),
            up: du.ptr(),
        }
    } else {
        SwiGluBuffers::Fused { gate_up: df.ptr() }
    };
    rt.swiglu_mxquant(T::DTYPE, rows, i, bufs, dq.ptr(), ds.ptr(), attrs, 0)
        .expect("launch");
    let what = format!("{:?} {rows}x{i} {attrs:?}", T::DTYPE);
    assert_eq!(mismatches(&download::<u8>(&dq, q.len()), &q), 0, "q {what}");
    assert_eq!(
        mismatches(&download::<u8>(&ds, s.len()), &s),
        0,
        "scales {what}"
    );
}

#[test]
fn gpu_swiglu_mxquant_matches_reference_bit_for_bit() {
    let Some(rt) = gpu() else { return };
    let mut rng = Rng(0x5EED_0000_0000_0777);
    let oai = SwiGluAttrs {
        activation: Activation::Oai,
        alpha: 1.702,
        ..Default::default()
    };
    for layout in [
        SwiGluLayout::Separate,
        SwiGluLayout::SplitHalves,
        SwiGluLayout::Interleaved,
    ] {
        for attrs in [
            SwiGluAttrs { layout, ..oai },
            SwiGluAttrs {
                layout,
                fp32_activation: true,
                quant: CONFIGS[1],
                ..oai
            },
            SwiGluAttrs {
                layout,
                quant: CONFIGS[2],
                ..Default::default()
            },
            SwiGluAttrs {
                layout,
                alpha: 1.702,
                swish_form: SwishForm::SingleOp,
                quant: CONFIGS[3],
                ..Default::default()
            },
        ] {
            swiglu_case::<bf16>(&rt, &mut rng, 19, 768, &attrs);
            // 49152 outputs: the H200 table's 1-per-lane, 512-lane tier.
            swiglu_case::<bf16>(&rt, &mut rng, 64, 768, &attrs);
            swiglu_case::<f16>(&rt, &mut rng, 7, 256, &attrs);
            swiglu_case::<f32>(&rt, &mut rng, 5, 512, &attrs);
        }
    }
    // The 8-elements-per-lane kernel (H200 table: from 2^18 outputs): with the pinned logistic
    // (512 rows), and the certified fast one for the bf16-rounded (from 2^20 outputs) and the
    // fp32 activation (from 2^22). On sm_90 the two rounded cases take the table kernel instead
    // (from 2^12 outputs; MXFUSE_GPU_SWIGLU_TABLE=0 keeps this kernel); check.py covers both.
    for (rows, fp32_activation) in [(512, false), (2731, false), (5462, true)] {
        swiglu_case::<bf16>(
            &rt,
            &mut rng,
            rows,
            768,
            &SwiGluAttrs {
                layout: SwiGluLayout::SplitHalves,
                fp32_activation,
                ..oai
            },
        );
    }
}

/// The table kernel (`mx_swiglu_quant_bf16_e8_a{0,1}_table`), the runtime's default for bf16,
/// rounded activation, unrolled swish from the device's `table_from` outputs on (2^12 on the
/// H200), bit for bit: SiLU and OAI, every layout, a partial last chunk (171 × 768, 1366 × 96),
/// a grid smaller than the chunks (2048 rows: blocks loop), gate columns at and past the table's
/// ends (|z| >= 88.5, ±Inf, huge values, 2^-8) and NaN gates (in a block of their own, so the
/// NaN-propagating scale rule does not hide the others).
#[test]
fn gpu_swiglu_table_kernel_is_the_default_and_bit_exact() {
    let Some(rt) = gpu() else { return };
    let mut rng = Rng(0x5EED_0000_0000_7AB1);
    let silu = SwiGluAttrs {
        layout: SwiGluLayout::SplitHalves,
        ..Default::default()
    };
    let oai = SwiGluAttrs {
        activation: Activation::Oai,
        alpha: 1.702,
        ..silu
    };
    // z = r(g · r(alpha)) at and past the table's ends: 88.5 = HI, ±Inf, the largest bf16 below
    // and above, the smallest entry 2^-8 and below it; OAI clamps positive gates at the limit.
    let big = [
        88.5,
        -88.5,
        88.0,
        -88.0,
        89.0,
        -89.0,
        100.0,
        -100.0,
        52.0,
        -52.0,
        1.0e4,
        -1.0e4,
        3.0e38,
        -3.0e38,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.003_906_25,
        -0.003_906_25,
        0.003,
        -0.0,
    ];
    let nan = [f32::NAN, -f32::NAN, 1.0, -1.0];
    let plant = |rng: &mut Rng, rows: usize, i: usize| -> Vec<bf16> {
        let mut g = edge_rows::<bf16>(rng, rows, i, true);
        for r in 0..rows {
            // Block 0 column 3, the last column of the row, and block 1 column 40 (NaNs).
            g[r * i + 3] = bf16::from_f32(big[r % big.len()]);
            g[r * i + i - 1] = bf16::from_f32(big[(r + 7) % big.len()]);
            if i > 64 {
                g[r * i + 40] = bf16::from_f32(nan[r % nan.len()]);
            }
        }
        g
    };
    let layouts = [
        SwiGluLayout::Separate,
        SwiGluLayout::SplitHalves,
        SwiGluLayout::Interleaved,
    ];
    let wide_oai = SwiGluAttrs {
        limit: 1000.0,
        quant: CONFIGS[2],
        ..oai
    };
    let mut cases = Vec::new();
    for layout in layouts {
        for base in [silu, oai, wide_oai] {
            cases.push((192, 768, SwiGluAttrs { layout, ..base }));
        }
    }
    for base in [silu, oai] {
        cases.push((
            171,
            768,
            SwiGluAttrs {
                quant: CONFIGS[1],
                ..base
            },
        ));
        cases.push((
            1366,
            96,
            SwiGluAttrs {
                quant: CONFIGS[3],
                ..base
            },
        ));
        cases.push((2048, 768, base));
    }
    cases.push((
        2048,
        768,
        SwiGluAttrs {
            alpha: -1.0,
            ..silu
        },
    ));
    cases.push((
        192,
        768,
        SwiGluAttrs {
            alpha: 3.0e38,
            ..silu
        },
    ));
    let table_on = rt.device().arch == "sm_90"
        && !std::env::var("MXFUSE_GPU_SWIGLU_TABLE").is_ok_and(|v| v == "0" || v == "off");
    for (rows, i, attrs) in cases {
        if table_on {
            assert!(
                rt.swiglu_takes_table_kernel(DType::BF16, rows, i, &attrs),
                "{rows}x{i} {attrs:?}"
            );
        }
        let g = plant(&mut rng, rows, i);
        swiglu_case_with::<bf16>(&rt, &mut rng, rows, i, &attrs, g);
    }
    // Below the threshold (2^12 outputs on the H200) and where the preconditions fail the
    // default kernels serve (no trap).
    let refused = [
        (4, 768, oai),
        (192, 768, SwiGluAttrs { limit: 0.0, ..oai }),
        (192, 768, SwiGluAttrs { alpha: 0.0, ..silu }),
        (
            192,
            768,
            SwiGluAttrs {
                alpha: f32::INFINITY,
                ..silu
            },
        ),
        (
            192,
            768,
            SwiGluAttrs {
                swish_form: SwishForm::SingleOp,
                ..silu
            },
        ),
        (
            192,
            768,
            SwiGluAttrs {
                fp32_activation: true,
                ..oai
            },
        ),
    ];
    for (rows, i, attrs) in refused {
        assert!(!rt.swiglu_takes_table_kernel(DType::BF16, rows, i, &attrs));
        let g = plant(&mut rng, rows, i);
        swiglu_case_with::<bf16>(&rt, &mut rng, rows, i, &attrs, g);
    }
}

/// Relative Frobenius error of `got` against the f64-accumulated reference.
fn rel_err<O: Element>(got: &[O], want: &[O]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (f64::from(g.to_f32()), f64::from(w.to_f32()));
        num += (g - w) * (g - w);
        den += w * w;
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// E4M3 weights `[n, k]` without NaN codes and E8M0 scales near 1.
fn random_mx_weights(rng: &mut Rng, n: usize, k: usize) -> (Vec<u8>, Vec<u8>) {
    let w: Vec<u8> = (0..n * k)
        .map(|_| match rng.below(256) as u8 {
            b if b & 0x7F == 0x7F => 0x38,
            b => b,
        })
        .collect();
    let ws: Vec<u8> = (0..n * k / 32).map(|_| 118 + rng.below(10) as u8).collect();
    (w, ws)
}

/// Random MXFP8 activations `[m, k]` (values, scales) from bf16 normals.
fn random_activations(rng: &mut Rng, m: usize, k: usize) -> (Vec<u8>, Vec<u8>) {
    let a: Vec<bf16> = (0..m * k).map(|_| bf16::from_f32(rng.normal())).collect();
    let (mut aq, mut asc) = (vec![0u8; m * k], vec![0u8; m * k / 32]);
    reference::mx_quantize(&a, k, &mut aq, &mut asc, QuantConfig::default()).expect("reference");
    (aq, asc)
}

/// Random bf16 activations `[m, k]`, their MXFP8 quantization (values, scales) and the reference
/// GEMM against `[n, k]` weights `(w, ws)`.
#[allow(clippy::type_complexity)]
fn reference_gemm_case(
    rng: &mut Rng,
    m: usize,
    k: usize,
    n: usize,
    w: &[u8],
    ws: &[u8],
) -> (Vec<bf16>, Vec<u8>, Vec<u8>, Vec<f32>) {
    let a: Vec<bf16> = (0..m * k).map(|_| bf16::from_f32(rng.normal())).collect();
    let (mut aq, mut asc) = (vec![0u8; m * k], vec![0u8; m * k / 32]);
    reference::mx_quantize(&a, k, &mut aq, &mut asc, QuantConfig::default()).expect("reference");
    let mut want = vec![0f32; m * n];
    reference::mx_matmul(
        &aq,
        &asc,
        m,
        k,
        n,
        MatB::Mx { q: w, scales: ws },
        true,
        &mut want,
        &kernels::Epilogue::NONE,
    )
    .expect("reference");
    (a, aq, asc, want)
}

#[test]
fn gpu_mx_matmul_matches_reference_within_accumulation_bound() {
    let Some(rt) = gpu() else { return };
    let mut rng = Rng(0x6E44_0000_0000_0042);
    for (n, k) in [(256, 768), (100, 256)] {
        let (w, ws) = random_mx_weights(&mut rng, n, k);
        let (dw, dws, dwt, dwst) = upload_mx_layouts(&rt, &w, &ws, n, k);
        for m in [1usize, 5, 8, 13, 16, 21] {
            let (a, aq, asc, want) = reference_gemm_case(&mut rng, m, k, n, &w, &ws);
            let (da, daq, das) = (upload(&rt, &a), upload(&rt, &aq), upload(&rt, &asc));
            let b_nk = GpuMatB::Mx {
                q: dw.ptr(),
                scales: dws.ptr(),
                trans_b: true,
            };
            let b_kn = GpuMatB::Mx {
                q: dwt.ptr(),
                scales: dwst.ptr(),
                trans_b: false,
            };
            for b in [b_nk, b_kn] {
                let err = rel_err(&matmul_f32(&rt, (m, k, n), &daq, &das, &b), &want);
                assert!(err < 1e-5, "m={m} n={n} k={k} {b:?}: rel err {err}");
            }
            // Quantizing A inside the GEMM computes exactly what quantize + GEMM computes.
            let (wq, wsc) = (poisoned::<u8>(&rt, m * k), poisoned::<u8>(&rt, m * k / 32));
            let (y1, y2) = (poisoned::<bf16>(&rt, m * n), poisoned::<bf16>(&rt, m * n));
            rt.mx_matmul_quantizing_a(
                kernels::DType::BF16,
                m,
                k,
                n,
                da.ptr(),
                &QuantConfig::default(),
                (wq.ptr(), wsc.ptr()),
                &b_nk,
                y1.ptr(),
                kernels::DType::BF16,
                &GpuEpilogue::NONE,
                0,
            )
            .expect("launch");
            rt.mx_matmul(
                m,
                k,
                n,
                daq.ptr(),
                das.ptr(),
                &b_nk,
                y2.ptr(),
                kernels::DType::BF16,
                &GpuEpilogue::NONE,
                0,
            )
            .expect("launch");
            let (g1, g2) = (download::<bf16>(&y1, m * n), download::<bf16>(&y2, m * n));
            assert_eq!(same_bits(&g1, &g2), 0, "in-GEMM quant m={m} k={k}");
            let want_bf: Vec<bf16> = want.iter().map(|v| bf16::from_f32(*v)).collect();
            assert!(rel_err(&g1, &want_bf) < 4e-3);
        }
    }
}

/// Relative error over the outputs both sides compute as numbers; `None` when the NaN positions
/// differ (a NaN weight scale makes its whole output column NaN on both).
fn rel_err_nan_aware(got: &[f32], want: &[f32]) -> Option<f64> {
    if got.iter().zip(want).any(|(g, w)| g.is_nan() != w.is_nan()) {
        return None;
    }
    let (g, w): (Vec<f32>, Vec<f32>) = got
        .iter()
        .zip(want)
        .filter(|(_, w)| !w.is_nan())
        .map(|(g, w)| (*g, *w))
        .unzip();
    Some(rel_err(&g, &w))
}

#[test]
fn gpu_mx_matmul_fragment_packed_matches_reference_and_unpacked() {
    let Some(rt) = gpu() else { return };
    let mut rng = Rng(0x6E44_0000_0000_F4A6);
    for (n, k) in [(100usize, 256usize), (256, 768)] {
        if !rt.frag_gemm_available(k) {
            eprintln!("skipped: no fragment-packed GEMM on this device for K = {k}");
            return;
        }
        let (w, mut ws) = random_mx_weights(&mut rng, n, k);
        // The E8M0 edge codes (the kernel's exact decode path): 2^-127 in row 3, NaN in row 17.
        ws[3 * (k / 32) + 1] = 0;
        ws[17 * (k / 32) + k / 64] = 255;
        let (wf, wsf) = kernels::gpu::pack_frag_weights(&w, &ws, n, k).expect("pack");
        let (dwf, dwsf, dw, dws) = (
            upload(&rt, &wf),
            upload(&rt, &wsf),
            upload(&rt, &w),
            upload(&rt, &ws),
        );
        let frag = GpuMatB::MxFrag {
            q: dwf.ptr(),
            scales: dwsf.ptr(),
            f16_shift: None,
        };
        let plain = GpuMatB::Mx {
            q: dw.ptr(),
            scales: dws.ptr(),
            trans_b: true,
        };
        for m in [1usize, 3, 8, 9, 16, 21] {
            let (_, aq, asc, want) = reference_gemm_case(&mut rng, m, k, n, &w, &ws);
            let (daq, das) = (upload(&rt, &aq), upload(&rt, &asc));
            let run = |b: &GpuMatB| matmul_f32(&rt, (m, k, n), &daq, &das, b);
            let (got, unpacked) = (run(&frag), run(&plain));
            let err = rel_err_nan_aware(&got, &want);
            assert!(
                err.is_some_and(|e| e < 1e-5),
                "frag vs reference m={m} n={n} k={k}: {err:?}"
            );
            let err = rel_err_nan_aware(&got, &unpacked);
            assert!(
                err.is_some_and(|e| e < 1e-5),
                "frag vs unpacked m={m} n={n} k={k}: {err:?}"
            );
            // bf16 out takes the two-tile `_t2` loop (N = 100: 7 tiles, one pair half empty), at
            // 9-16 rows on two 8-row tiles (these shapes have no measured row and their pairs keep
            // `_fs`'s warps a block): the same K split and sums as the f32 kernel, rounded once.
            if m <= 16 {
                let got16: Vec<bf16> =
                    matmul_out(&rt, (m, k, n), &daq, &das, &frag, kernels::DType::BF16);
                let want16: Vec<bf16> = got.iter().map(|&v| bf16::from_f32(v)).collect();
                assert_eq!(
                    same_bits(&got16, &want16),
                    0,
                    "frag bf16 (`_t2` / `_fs`) vs f32 rounded m={m} n={n} k={k}"
                );
            }
        }
    }
}

/// The mixed grid of the two-tile loop (`_t2h`, issue 6 follow-up 36: the first SMs-many tile
/// pairs a block each, then a block for each tile left, whose 4 warps run 8 K ranges) where the
/// runtime takes it, bf16 output at M <= 8 with 1-1.5 tile pairs an SM: every output written,
/// within the accumulation bound of the reference, the same bits on a repeat launch; a ragged
/// last tile (8 columns) and an odd tile count, so the last block is a single.
#[test]
fn gpu_mixed_grid_gemm_matches_reference() {
    let Some(rt) = gpu() else { return };
    let n = 16 * (2 * rt.multiprocessors() + rt.multiprocessors() / 2 + 1) - 8;
    runtime_frag_gemm_matches_reference(
        &rt,
        "mixed grid",
        1536,
        n,
        0x6E44_0000_0036_0001,
        &[1, 5, 8],
        false,
    );
}

/// The 16-row one-group loop `_g1c` (issue 6 follow-up 38: the runtime's kernel at 9-16 rows, K =
/// 768, where the tiles fill every SM in one wave; weights converted before the PDL wait) through
/// the runtime: every output written, within the accumulation bound of the reference (bf16 and
/// f32 outputs), the same bits on a repeat launch; a ragged last tile (8 columns).
#[test]
fn gpu_one_group_16_row_gemm_matches_reference() {
    let Some(rt) = gpu() else { return };
    let n = 16 * (2 * rt.multiprocessors() + 3) - 8;
    runtime_frag_gemm_matches_reference(
        &rt,
        "16-row one-group loop",
        768,
        n,
        0x6E44_0000_0038_0001,
        &[9, 13, 16],
        true,
    );
}

/// Cluster splits the device cannot hold at once (issue 6 follow-up 47): 1024 x 6144 has 32 tile
/// pairs, for which the rule sizes `_t2` at w8 s4 (32 clusters of 4), more than the H200 holds at
/// once (30), so the runtime halves the split (launch.rs fit_clusters); 512 x 6144 at 12 rows does
/// the same with bf16 output (`_t2` w8 s4 on two 8-row tiles: 16 pairs x 2 = 32 clusters), and
/// with f32 output through the m16 kernel. Through the runtime: within the
/// reference's bound, every output written, the same bits twice.
#[test]
fn gpu_cluster_split_that_fits_matches_reference() {
    let Some(rt) = gpu() else { return };
    runtime_frag_gemm_matches_reference(
        &rt,
        "1024 x 6144 pairs",
        6144,
        1024,
        0x6E44_0000_0047_0001,
        &[1, 8],
        false,
    );
    runtime_frag_gemm_matches_reference(
        &rt,
        "512 x 6144, 12 rows",
        6144,
        512,
        0x6E44_0000_0047_0002,
        &[12],
        true,
    );
}

/// The runtime's fragment GEMM (its own kernel choice) on `n x k` packed random MX weights at
/// each of `ms` rows: the same bits on a repeat launch, every output written (the buffer starts
/// poisoned), within the accumulation bound of the reference with bf16 output (4e-3) and, with
/// `f32_out`, with f32 output too (1e-5).
fn runtime_frag_gemm_matches_reference(
    rt: &Arc<GpuRuntime>,
    what: &str,
    k: usize,
    n: usize,
    seed: u64,
    ms: &[usize],
    f32_out: bool,
) {
    if !rt.frag_gemm_available(k) {
        eprintln!("skipped: no fragment-packed GEMM on this device");
        return;
    }
    let mut rng = Rng(seed);
    let (w, ws) = random_mx_weights(&mut rng, n, k);
    let (wf, wsf) = kernels::gpu::pack_frag_weights(&w, &ws, n, k).expect("pack");
    let (dwf, dwsf) = (upload(rt, &wf), upload(rt, &wsf));
    let frag = GpuMatB::MxFrag {
        q: dwf.ptr(),
        scales: dwsf.ptr(),
        f16_shift: None,
    };
    for &m in ms {
        let (_, aq, asc, want) = reference_gemm_case(&mut rng, m, k, n, &w, &ws);
        let (daq, das) = (upload(rt, &aq), upload(rt, &asc));
        let run =
            || -> Vec<bf16> { matmul_out(rt, (m, k, n), &daq, &das, &frag, kernels::DType::BF16) };
        let (got, again) = (run(), run());
        assert_eq!(same_bits(&got, &again), 0, "repeat launch m={m} n={n}");
        assert!(
            got.iter().all(|v| v.to_bits() != 0xA5A5),
            "an output left unwritten (poison) m={m} n={n}"
        );
        let got32: Vec<f32> = got.iter().map(|v| v.to_f32()).collect();
        let err = rel_err(&got32, &want);
        assert!(err < 4e-3, "{what} vs reference m={m} n={n}: {err}");
        if f32_out {
            let got_f32: Vec<f32> =
                matmul_out(rt, (m, k, n), &daq, &das, &frag, kernels::DType::F32);
            assert!(
                got_f32.iter().all(|v| v.to_bits() != 0xA5A5_A5A5),
                "an f32 output left unwritten (poison) m={m} n={n}"
            );
            let err = rel_err(&got_f32, &want);
            assert!(
                err < 1e-5,
                "{what}, f32 out, vs reference m={m} n={n}: {err}"
            );
        }
    }
}

/// The epilogue (bias, alpha, beta) on every GPU GEMM family: each output equals the same
/// kernel's f32 accumulator (the launch without an epilogue) put through the documented f32
/// arithmetic `round_T(fl(alpha·acc) + fl(beta·c))` bit for bit (`kernels::Epilogue` on the
/// host), for each bias broadcast, bf16 / f16 / f32 outputs and a NaN in C.
#[test]
fn gpu_mx_matmul_epilogue_is_the_documented_arithmetic() {
    let Some(rt) = gpu() else { return };
    let mut rng = Rng(0x6E44_0000_0000_B1A5);
    let (n, k) = (100usize, 256usize);
    let (w, ws) = random_mx_weights(&mut rng, n, k);
    let (dw, dws, dwt, dwst) = upload_mx_layouts(&rt, &w, &ws, n, k);
    let mut bs: Vec<(&str, GpuMatB)> = vec![
        (
            "nk",
            GpuMatB::Mx {
                q: dw.ptr(),
                scales: dws.ptr(),
                trans_b: true,
            },
        ),
        (
            "kn",
            GpuMatB::Mx {
                q: dwt.ptr(),
                scales: dwst.ptr(),
                trans_b: false,
            },
        ),
    ];
    let packed = rt
        .frag_gemm_available(k)
        .then(|| kernels::gpu::pack_frag_weights(&w, &ws, n, k).expect("pack"));
    let frag_bufs = packed.map(|(wf, wsf)| (upload(&rt, &wf), upload(&rt, &wsf)));
    if let Some((dwf, dwsf)) = &frag_bufs {
        bs.push((
            "frag",
            GpuMatB::MxFrag {
                q: dwf.ptr(),
                scales: dwsf.ptr(),
                f16_shift: None,
            },
        ));
    }
    fn check<O: Element + Pod>(
        rt: &Arc<GpuRuntime>,
        rng: &mut Rng,
        (m, k, n): (usize, usize, usize),
        (daq, das, da): (&DeviceBuffer, &DeviceBuffer, &DeviceBuffer),
        (name, b): (&str, &GpuMatB),
        acc: &[f32],
    ) {
        for shape in [vec![n], vec![1, n], vec![], vec![m, n], vec![m, 1]] {
            for (alpha, beta, nan) in [(1.0f32, 1.0f32, false), (0.5, -3.0, true)] {
                let len: usize = shape.iter().product();
                let mut c: Vec<O> = (0..len).map(|_| O::from_f32(rng.normal() * 4.0)).collect();
                if nan {
                    c[len / 2] = O::from_f32(f32::NAN);
                }
                let host = kernels::Epilogue::new(alpha, beta, Some((&c[..], &shape[..])), m, n)
                    .expect("bias shape");
                let want: Vec<O> = acc
                    .iter()
                    .enumerate()
                    .map(|(i, &a)| O::from_f32(host.apply(i / n, i % n, a)))
                    .collect();
                let (rows, cols) =
                    kernels::epilogue::broadcast_dims(&shape, m, n).expect("bias shape");
                let dc = upload(rt, &c);
                let ep = GpuEpilogue {
                    alpha,
                    beta,
                    bias: Some(GpuBias {
                        ptr: dc.ptr(),
                        rows,
                        cols,
                    }),
                };
                let dy = poisoned::<O>(rt, m * n);
                rt.mx_matmul(m, k, n, daq.ptr(), das.ptr(), b, dy.ptr(), O::DTYPE, &ep, 0)
                    .expect("launch");
                let got = download::<O>(&dy, m * n);
                let ctx = format!("{name} {:?} m={m} {shape:?} {alpha} {beta}", O::DTYPE);
                assert_eq!(same_bits(&got, &want), 0, "{ctx}");
                if matches!(b, GpuMatB::Mx { trans_b: true, .. }) && O::DTYPE != kernels::DType::F32
                {
                    // The in-GEMM quantizing path applies the same epilogue.
                    let (wq, wsc) = (poisoned::<u8>(rt, m * k), poisoned::<u8>(rt, m * k / 32));
                    let dy2 = poisoned::<O>(rt, m * n);
                    rt.mx_matmul_quantizing_a(
                        kernels::DType::BF16,
                        m,
                        k,
                        n,
                        da.ptr(),
                        &QuantConfig::default(),
                        (wq.ptr(), wsc.ptr()),
                        b,
                        dy2.ptr(),
                        O::DTYPE,
                        &ep,
                        0,
                    )
                    .expect("launch");
                    assert_eq!(
                        same_bits(&download::<O>(&dy2, m * n), &want),
                        0,
                        "in-GEMM {ctx}"
                    );
                }
            }
        }
    }
    for m in [1usize, 8, 13] {
        let (a, aq, asc, _) = reference_gemm_case(&mut rng, m, k, n, &w, &ws);
        let (da, daq, das) = (upload(&rt, &a), upload(&rt, &aq), upload(&rt, &asc));
        for (name, b) in &bs {
            let acc = matmul_f32(&rt, (m, k, n), &daq, &das, b);
            let io = (&daq, &das, &da);
            check::<f32>(&rt, &mut rng, (m, k, n), io, (name, b), &acc);
            check::<bf16>(&rt, &mut rng, (m, k, n), io, (name, b), &acc);
            check::<f16>(&rt, &mut rng, (m, k, n), io, (name, b), &acc);
        }
    }
    // A bias that does not broadcast is an error, not a launch.
    let dc = upload(&rt, &[0f32; 8]);
    let (daq, das) = (upload(&rt, &[0u8; 256]), upload(&rt, &[127u8; 8]));
    let bad = GpuEpilogue {
        bias: Some(GpuBias {
            ptr: dc.ptr(),
            rows: 1,
            cols: 7,
        }),
        ..GpuEpilogue::NONE
    };
    let err = rt
        .mx_matmul(
            1,
            k,
            n,
            daq.ptr(),
            das.ptr(),
            &bs[0].1,
            dc.ptr(),
            kernels::DType::F32,
            &bad,
            0,
        )
        .unwrap_err();
    assert!(format!("{err}").contains("does not broadcast"), "{err}");
}

#[test]
fn gpu_launchers_reject_bad_inputs_with_errors() {
    let Some(rt) = gpu() else { return };
    let buf = rt.alloc(1 << 16).expect("alloc");
    let p = buf.ptr();
    let bufs = NormBuffers {
        x: p,
        residual: None,
        gamma: p,
        q: p,
        scales: p,
        residual_out: None,
        normed: None,
    };
    let ar = AddRmsNormAttrs {
        allreduce: true,
        ..Default::default()
    };
    let err = rt.add_rmsnorm_mxquant(
        kernels::DType::BF16,
        kernels::DType::BF16,
        1,
        64,
        &bufs,
        &ar,
        2,
        0,
    );
    assert!(
        matches!(err, Err(GpuError::Kernel(KernelError::Unsupported(_)))),
        "{err:?}"
    );
    let err = rt.add_rmsnorm_mxquant(
        kernels::DType::BF16,
        kernels::DType::BF16,
        1,
        48,
        &bufs,
        &ar,
        1,
        0,
    );
    assert!(
        matches!(err, Err(GpuError::Kernel(KernelError::Shape(_)))),
        "{err:?}"
    );
    let err = rt.mx_quantize(
        kernels::DType::BF16,
        4 << 20,
        64,
        p + 2,
        p,
        p,
        &QuantConfig::default(),
        0,
    );
    assert!(
        matches!(err, Err(GpuError::Kernel(KernelError::Buffer(_)))),
        "{err:?}"
    );
    let err = rt.mx_quantize(
        kernels::DType::E4M3,
        64,
        64,
        p,
        p,
        p,
        &QuantConfig::default(),
        0,
    );
    assert!(
        matches!(err, Err(GpuError::Kernel(KernelError::DType(_)))),
        "{err:?}"
    );
}

/// Prints where the runtime looks for the sm_90 code objects under `MXFUSE_KERNEL_CACHE`, one
/// line `<module> <file name>` per module of `kernels::gpu::sources::MODULES`, and writes each
/// module's program text to `$MXFUSE_MODULE_DUMP/<module>.cu` when that is set, so that code
/// objects compiled without a GPU (bench/gpu/offline_compile.py --pack) can be put there:
/// `cargo test -p kernels --test gpu_kernels -- --ignored --nocapture kernel_cache_name`.
#[test]
#[ignore = "prints file names; not a check"]
fn kernel_cache_name() {
    use kernels::gpu::runtime::{cache_file_name, cuda_compile_options};
    use kernels::gpu::sources::{module_text, MODULES};
    let dump = std::env::var_os("MXFUSE_MODULE_DUMP").map(std::path::PathBuf::from);
    for m in &MODULES {
        let source = module_text(m);
        let name = cache_file_name(&source, "sm_90", &cuda_compile_options("sm_90"));
        assert!(name.starts_with("mxfuse-sm_90-"));
        if let Some(dir) = &dump {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(format!("{}.cu", m.name)), &source).unwrap();
        }
        println!("{} {name}", m.name);
    }
}
