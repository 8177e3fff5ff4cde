//! Adversarial numerics of `MxMatMul` with a float A against a constant MX weight (weight-only
//! MX: `ops::mx_matmul_float_a`, `ops::mx_matmul_cols_float_a`; docs/ops.md, "Weight-only MX"):
//! the exact bf16 split of f32 / f16 activations (`fast::float_a`) at the edges of f32 (normal
//! minimum, subnormals, near f32::MAX, -0), weight scales from 0 to 255 against activations of
//! every magnitude (so every guard of the AVX-512 BF16 routes is crossed), ±Inf weights (scale
//! 254) against activation values whose low bf16 parts are zero, NaN / Inf activations, M = 0,
//! M on both sides of the split's row limit, threads, FP4 weights, the epilogue and f16 / bf16
//! outputs — each against an f64 oracle of `Σ a · deq(w)` within the f32 accumulation bound
//! `K·2^-22·Σ|a·w|`, IEEE where a product is not finite.

mod common;

use common::{float_values, Rng};
use half::{bf16, f16};
use kernels::codec::{e4m3_to_f32, e8m0_to_f32, widened_e4m3};
use kernels::fast::cols_layout::{pack, MxColWeights};
use kernels::fast::float_a::split;
use kernels::ops::{
    mx_matmul, mx_matmul_cols, mx_matmul_cols_float_a, mx_matmul_float_a, TensorMut, TensorRef,
};
use kernels::slices::MatA;
use kernels::{DType, MxMatMulAttrs, Parallel, Serial, StdThreads};

/// `v` rounded to the activation / output type `dt`, as f32.
fn round_to(dt: DType, v: f32) -> f32 {
    match dt {
        DType::F32 => v,
        DType::F16 => f16::from_f32(v).to_f32(),
        _ => bf16::from_f32(v).to_f32(),
    }
}

/// Values (exact in `dt`) as little-endian `dt` bytes.
fn bytes_of(dt: DType, vals: &[f32]) -> Vec<u8> {
    vals.iter()
        .flat_map(|&v| match dt {
            DType::F32 => v.to_le_bytes().to_vec(),
            DType::F16 => f16::from_f32(v).to_le_bytes().to_vec(),
            _ => bf16::from_f32(v).to_le_bytes().to_vec(),
        })
        .collect()
}

/// One GEMM: A (`m × k`, values exact in `dt`) against `[N, K]` E4M3 values with `[N, K/32]`
/// scales.
struct Gemm {
    dt: DType,
    a: Vec<f32>,
    q: Vec<u8>,
    s: Vec<u8>,
    m: usize,
    k: usize,
    n: usize,
}

impl Gemm {
    fn deq(&self, c: usize, kk: usize) -> f32 {
        e4m3_to_f32(self.q[c * self.k + kk]) * e8m0_to_f32(self.s[c * (self.k / 32) + kk / 32])
    }
}

/// The weight layouts the kernels read.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// `[N, K]` (`trans_b = 1`).
    Nk,
    /// `[K, N]` (`trans_b = 0`).
    Kn,
    /// The column-group prepack of `[N, K]` (the provider's on AVX-512 BF16 CPUs).
    Cols,
}

const LAYOUTS: [Layout; 3] = [Layout::Nk, Layout::Kn, Layout::Cols];

fn transpose(v: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    let mut t = vec![0u8; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = v[r * cols + c];
        }
    }
    t
}

/// An epilogue: alpha, beta and a bias of y's type with its shape.
struct Ep {
    alpha: f32,
    beta: f32,
    bias: Option<(Vec<f32>, Vec<usize>)>,
}

const PLAIN: Ep = Ep {
    alpha: 1.0,
    beta: 1.0,
    bias: None,
};

/// y (as f32 values of dtype `out`) of `g` in `layout`.
fn run(g: &Gemm, layout: Layout, out: DType, ep: &Ep, par: &dyn Parallel) -> Vec<f32> {
    let (m, k, n) = (g.m, g.k, g.n);
    let a = bytes_of(g.dt, &g.a);
    let a_shape = [m, k];
    let a_ref = TensorRef::new(g.dt, &a_shape, &a).unwrap();
    let attrs = MxMatMulAttrs {
        trans_b: !matches!(layout, Layout::Kn),
        output_dtype: out,
        alpha: ep.alpha,
        beta: ep.beta,
    };
    let bias_bytes = ep.bias.as_ref().map(|(c, _)| bytes_of(out, c));
    let bias = ep
        .bias
        .as_ref()
        .zip(bias_bytes.as_ref())
        .map(|((_, shape), b)| TensorRef::new(out, shape, b).unwrap());
    let mut y = vec![0u8; m * n * out.size()];
    let y_shape = [m, n];
    let y_ref = TensorMut::new(out, &y_shape, &mut y).unwrap();
    match layout {
        Layout::Nk => mx_matmul_float_a(
            a_ref,
            TensorRef::new(DType::E4M3, &[n, k], &g.q).unwrap(),
            Some(TensorRef::new(DType::E8M0, &[n, k / 32], &g.s).unwrap()),
            bias,
            y_ref,
            &attrs,
            par,
        ),
        Layout::Kn => {
            let (qt, st) = (transpose(&g.q, n, k), transpose(&g.s, n, k / 32));
            mx_matmul_float_a(
                a_ref,
                TensorRef::new(DType::E4M3, &[k, n], &qt).unwrap(),
                Some(TensorRef::new(DType::E8M0, &[k / 32, n], &st).unwrap()),
                bias,
                y_ref,
                &attrs,
                par,
            )
        }
        Layout::Cols => {
            let (pq, ps) = pack(&g.q, &g.s, n, k);
            let w = MxColWeights {
                q: &pq,
                scales: &ps,
                n,
                k,
            };
            mx_matmul_cols_float_a(a_ref, w, bias, y_ref, &attrs, par)
        }
    }
    .unwrap();
    float_values(out, &y)
}

/// What an output must be.
#[derive(Clone, Copy, Debug)]
enum Want {
    /// A product is not finite: IEEE says NaN or this infinity, whatever the order.
    Exact(f32),
    /// Within `tol` of `v` (before the output's rounding).
    Near { v: f64, tol: f64 },
    /// The sum of |products| overflows f32: an order-dependent overflow, not checked.
    Any,
}

/// The f64 oracle of every output of `g` with epilogue `ep`: `round(fl(alpha·acc) +
/// fl(beta·c))` where acc = Σ a·deq(w) (each product exact in f64).
fn oracle(g: &Gemm, ep: &Ep) -> Vec<Want> {
    let (m, k, n) = (g.m, g.k, g.n);
    let w: Vec<f64> = (0..n * k).map(|i| f64::from(g.deq(i / k, i % k))).collect();
    let bias = |r: usize, c: usize| -> f64 {
        ep.bias.as_ref().map_or(0.0, |(v, shape)| {
            let (rows, cols) = match shape.as_slice() {
                [] | [1] => (1, 1),
                [cols] => (1, *cols),
                [rows, cols] => (*rows, *cols),
                _ => unreachable!(),
            };
            f64::from(v[(r % rows) * cols + c % cols])
        })
    };
    let mut out = Vec::with_capacity(m * n);
    for r in 0..m {
        for c in 0..n {
            let (mut acc, mut abs, mut finite) = (0f64, 0f64, true);
            for kk in 0..k {
                let p = f64::from(g.a[r * k + kk]) * w[c * k + kk];
                acc += p;
                if p.is_finite() {
                    abs += p.abs();
                } else {
                    finite = false;
                }
            }
            let (alpha, beta) = (f64::from(ep.alpha), f64::from(ep.beta));
            let cb = if ep.bias.is_some() {
                beta * bias(r, c)
            } else {
                0.0
            };
            out.push(if abs >= f64::from(f32::MAX) / 2.0 {
                Want::Any
            } else if !finite {
                Want::Exact((alpha * acc + cb) as f32)
            } else {
                let bound = k as f64 * 2f64.powi(-22) * abs;
                let v = alpha * acc + cb;
                // The accumulation bound through alpha, one rounding of each epilogue term and
                // of their sum, and f32's subnormal spacing per add (gradual underflow).
                let tol = alpha.abs() * bound * (1.0 + 2f64.powi(-20))
                    + 2f64.powi(-23) * ((alpha * acc).abs() + cb.abs())
                    + k as f64 * 2f64.powi(-149);
                Want::Near { v, tol }
            });
        }
    }
    out
}

/// Checks y (values of dtype `out`) against the oracle.
fn check(out: DType, got: &[f32], want: &[Want], what: &str) {
    // Half an ulp of the output type, relative, and half its least subnormal.
    let (rel, floor) = match out {
        DType::F32 => (0.0, 0.0),
        DType::F16 => (2f64.powi(-11), 2f64.powi(-25)),
        _ => (2f64.powi(-8), 2f64.powi(-134)),
    };
    assert_eq!(got.len(), want.len());
    for (i, (&g, w)) in got.iter().zip(want).enumerate() {
        let ok = match *w {
            Want::Any => true,
            Want::Exact(v) => {
                (v.is_nan() && g.is_nan()) || round_to(out, v).to_bits() == g.to_bits()
            }
            Want::Near { v, tol } => {
                let same = round_to(out, v as f32).to_bits() == g.to_bits();
                same || (f64::from(g) - v).abs() <= tol * (1.0 + rel) + v.abs() * rel + floor
            }
        };
        if !ok && std::env::var_os("ADV_SOFT").is_some() {
            println!("FAIL {what}: y[{i}] = {g:e}, want {w:?}");
            return;
        }
        assert!(ok, "{what}: y[{i}] = {g:e}, want {w:?}");
    }
}

/// Checks `g` in every layout (serial and on 2 threads: the same bits) against the oracle.
fn check_all(g: &Gemm, out: DType, ep: &Ep, what: &str) {
    let want = oracle(g, ep);
    for layout in LAYOUTS {
        let y = run(g, layout, out, ep, &Serial);
        let label = format!(
            "{what}: {:?} A, {out:?} y, {layout:?}, m {} k {} n {}",
            g.dt, g.m, g.k, g.n
        );
        check(out, &y, &want, &label);
    }
}

/// A random f32 of binary exponent `e` (-149..=127: below -126 a subnormal with its leading bit
/// at 2^e), random sign and random low bits.
fn at_exponent(rng: &mut Rng, e: i32) -> f32 {
    let low = (rng.next_u64() as u32) & 0x007F_FFFF;
    let sign = (rng.next_u64() as u32 & 1) << 31;
    let bits = if e >= -126 {
        ((e + 127) as u32) << 23 | low
    } else {
        let lead = 1u32 << (e + 149);
        lead | (low & (lead - 1))
    };
    f32::from_bits(sign | bits)
}

/// Random E4M3 bytes (no NaN: 0x7F / 0xFF), zeros and subnormals included.
fn e4m3(rng: &mut Rng) -> u8 {
    loop {
        let b = rng.next_u64() as u8;
        if b & 0x7F != 0x7F {
            return b;
        }
    }
}

/// Every finite f32 class: the split's parts are bf16 values (low 16 bits zero) of a's sign
/// that sum to a exactly (no rounding up to Inf near f32::MAX, subnormals, -0), and there are
/// as many parts as the values need (f16 values: two; bf16 values: not split).
#[test]
fn split_is_exact_for_every_class_of_f32() {
    let mut rng = Rng::new(1);
    let mut vals: Vec<f32> = [
        0x0000_0001u32, // least subnormal
        0x0000_8001,    // subnormal with bits in both halves
        0x0000_FFFF,
        0x0001_0000,
        0x007F_FFFF, // largest subnormal
        0x0080_0000, // f32::MIN_POSITIVE
        0x0080_0001, // its next: m, l subnormal
        0x0080_FFFF,
        0x00FF_FFFF,
        0x7F7F_FFFF, // f32::MAX: h must not round up to Inf
        0x7F7F_8000,
        0x7F7F_7FFF,
        0x3F80_0001, // 1 + 2^-23
        0x3F80_8000,
        0x3F80_0100,
        0x3F80_00FF,
    ]
    .iter()
    .flat_map(|&b| [f32::from_bits(b), -f32::from_bits(b)])
    .collect();
    vals.extend([0.0, -0.0]);
    for _ in 0..4000 {
        let bits = rng.next_u64() as u32;
        let v = f32::from_bits(bits);
        if v.is_finite() {
            vals.push(v);
        }
    }
    vals.resize(vals.len().div_ceil(32) * 32, 0.0);
    let k = vals.len();
    let (p, parts) = split(MatA::F32(&vals), 1, k).expect("split");
    assert_eq!(parts, 3);
    for (i, &v) in vals.iter().enumerate() {
        let hml = [p[i], p[k + i], p[2 * k + i]];
        for x in hml {
            assert!(x.is_finite(), "{v:e}: part {x:e}");
            // A part below f32's normal minimum may hold more than 8 significant bits (the
            // routes' normal-value guard sends it to exact f32 products); every other part is
            // a bf16 value.
            assert!(
                x.to_bits() & 0xFFFF == 0 || x.abs() < f32::MIN_POSITIVE,
                "{v:e}: part {x:e} is not a bf16"
            );
            assert!(
                x == 0.0 || x.is_sign_negative() == v.is_sign_negative(),
                "{v:e}"
            );
        }
        let sum: f64 = hml.iter().map(|&x| f64::from(x)).sum();
        assert_eq!(sum, f64::from(v), "{v:e} = {hml:?}");
    }
    // Every finite f16: two parts, the third zero.
    let f16s: Vec<f16> = (0..=u16::MAX)
        .map(f16::from_bits)
        .filter(|h| h.is_finite())
        .collect();
    let mut f16s = f16s;
    f16s.resize(f16s.len().div_ceil(32) * 32, f16::ZERO);
    let k = f16s.len();
    let (p, parts) = split(MatA::F16(&f16s), 1, k).expect("split f16");
    assert_eq!(parts, 2, "f16 values need two bf16 parts");
    for (i, h) in f16s.iter().enumerate() {
        assert_eq!(f64::from(p[i]) + f64::from(p[k + i]), f64::from(h.to_f32()));
    }
    // bf16 values (as F32 or BF16) are not split; neither is A with ±Inf or NaN.
    let b: Vec<bf16> = (0..64).map(|i| bf16::from_f32(i as f32 * 0.37)).collect();
    assert!(split(MatA::BF16(&b), 2, 32).is_none());
    let bf: Vec<f32> = b.iter().map(|x| x.to_f32()).collect();
    assert!(split(MatA::F32(&bf), 2, 32).is_none());
    for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
        let mut a = vec![1.1f32; 64];
        a[40] = bad;
        assert!(split(MatA::F32(&a), 2, 32).is_none());
    }
}

/// Activations of every magnitude (f32 subnormals to near f32::MAX) × weight scale bytes from 0
/// to 254, f32 / f16 / bf16 A, M on both sides of the split's row limit, every layout: the
/// guards of the bf16 routes (normal values and products; scale ≤ 246) send every case that
/// `vdpbf16ps` would flush or overflow to the exact f32 path.
#[test]
fn every_magnitude_against_every_scale() {
    let mut rng = Rng::new(2);
    let (k, n) = (64usize, 20usize);
    let scales = [0u8, 1, 2, 9, 10, 11, 40, 100, 127, 160, 200, 246, 247, 254];
    let exps = [
        -149, -140, -127, -126, -125, -118, -110, -60, 0, 40, 100, 127,
    ];
    for &sc in &scales {
        for &e in &exps {
            for dt in [DType::F32, DType::F16, DType::BF16] {
                if dt == DType::F16 && e > 15 {
                    continue;
                }
                for m in [1usize, 2, 3, 4, 5, 8] {
                    let mut a: Vec<f32> = (0..m * k)
                        .map(|_| round_to(dt, at_exponent(&mut rng, e)))
                        .collect();
                    // A few values of other magnitudes in the same A (mixed exponents).
                    a[0] = round_to(dt, 1.0 + 2f32.powi(-20));
                    a[k - 1] = 0.0;
                    let q: Vec<u8> = (0..n * k).map(|_| e4m3(&mut rng)).collect();
                    // Column blocks at the scale under test and its neighbours.
                    let s: Vec<u8> = (0..n * k / 32)
                        .map(|i| match i % 3 {
                            0 => sc,
                            1 => sc.saturating_add(1).min(254),
                            _ => sc.saturating_sub(1),
                        })
                        .collect();
                    let g = Gemm {
                        dt,
                        a,
                        q,
                        s,
                        m,
                        k,
                        n,
                    };
                    check_all(&g, DType::F32, &PLAIN, &format!("scale {sc}, 2^{e}"));
                }
            }
        }
    }
}

/// A ±Inf weight (E4M3 ≥ 2 at scale 254: deq = 2^128 → Inf) against an activation value that
/// is not 0 but whose low bf16 part(s) are: a · Inf is ±Inf, so y is ±Inf — the split must not
/// add `0 · Inf = NaN` from the zero part. f32 A: a bf16 value (m = l = 0) among values that
/// are not (so A is split), or a subnormal whose high part is zero; f16 A: a value with 8
/// significant bits.
#[test]
fn inf_weight_against_a_value_with_zero_parts() {
    let (k, n) = (64usize, 20usize);
    let mut rng = Rng::new(3);
    for dt in [DType::F32, DType::F16] {
        for special in [1.5f32, -0.75, 3.0e-42] {
            if dt == DType::F16 && special < 1e-30 {
                continue;
            }
            for m in [1usize, 2, 3, 4] {
                let mut a: Vec<f32> = (0..m * k)
                    .map(|_| round_to(dt, 1.0 + rng.unit() * 0.01))
                    .collect();
                // Row 0, k = 3: the special value; the other rows keep a split-worthy value
                // there.
                a[3] = special;
                let q: Vec<u8> = (0..n * k)
                    .map(|_| 0x30 + (rng.next_u64() % 8) as u8)
                    .collect();
                let mut s = vec![120u8; n * k / 32];
                let mut q = q;
                // Column 1, block 0: scale 254, only k = 3 nonzero: 2.0 · 2^127 = Inf.
                s[2] = 254;
                for kk in 0..32 {
                    q[k + kk] = if kk == 3 { 0x40 } else { 0 };
                }
                let g = Gemm {
                    dt,
                    a,
                    q,
                    s,
                    m,
                    k,
                    n,
                };
                assert!(g.deq(1, 3).is_infinite());
                check_all(&g, DType::F32, &PLAIN, &format!("Inf weight × {special:e}"));
            }
        }
    }
}

/// Non-finite A (not split: the exact path) and NaN weights (scale 255, E4M3 0x7F), with zeros
/// in A and W (0 · Inf = NaN), and -0 everywhere: IEEE as the oracle.
#[test]
fn non_finite_a_and_nan_weights() {
    let (k, n) = (64usize, 20usize);
    let mut rng = Rng::new(4);
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for m in [1usize, 2, 4, 9] {
            let mut a: Vec<f32> = (0..m * k).map(|_| round_to(dt, rng.normal(1.0))).collect();
            a[5] = f32::INFINITY;
            if m > 1 {
                a[k + 6] = f32::NEG_INFINITY;
                a[k + 7] = f32::INFINITY;
            }
            a[m * k - 1] = f32::NAN;
            let mut q: Vec<u8> = (0..n * k).map(|_| e4m3(&mut rng)).collect();
            let mut s: Vec<u8> = (0..n * k / 32).map(|i| 118 + (i % 5) as u8).collect();
            q[5] = 0; // column 0, k = 5: 0 · Inf
            q[2 * k + 40] = 0x7F; // column 2: NaN weight
            s[3 * 2 + 1] = 255; // column 3, block 1: NaN scale
            let g = Gemm {
                dt,
                a,
                q,
                s,
                m,
                k,
                n,
            };
            check_all(&g, DType::F32, &PLAIN, "non-finite A");
        }
        // -0 A against a mix of weights, and all-zero weights against a split A.
        let m = 2;
        let a = vec![-0.0f32; m * k];
        let q: Vec<u8> = (0..n * k).map(|_| e4m3(&mut rng)).collect();
        let s = vec![127u8; n * k / 32];
        let g = Gemm {
            dt,
            a,
            q,
            s,
            m,
            k,
            n,
        };
        check_all(&g, DType::F32, &PLAIN, "-0 A");
    }
}

/// f16 / bf16 outputs, a bias of every broadcast shape with alpha / beta, NaN in the bias with
/// beta = 0, for split and unsplit A.
#[test]
fn epilogue_and_rounded_outputs() {
    let (k, n) = (96usize, 18usize);
    let mut rng = Rng::new(5);
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for m in [1usize, 2, 3, 4, 6] {
            let a: Vec<f32> = (0..m * k).map(|_| round_to(dt, rng.normal(1.5))).collect();
            let q: Vec<u8> = (0..n * k).map(|_| e4m3(&mut rng)).collect();
            let s: Vec<u8> = (0..n * k / 32).map(|i| 117 + (i % 4) as u8).collect();
            let g = Gemm {
                dt,
                a,
                q,
                s,
                m,
                k,
                n,
            };
            for out in [DType::F32, DType::F16, DType::BF16] {
                check_all(&g, out, &PLAIN, "plain");
                for shape in [vec![], vec![n], vec![m, 1], vec![m, n]] {
                    let len = shape.iter().product::<usize>();
                    let c: Vec<f32> = (0..len).map(|_| round_to(out, rng.normal(4.0))).collect();
                    let ep = Ep {
                        alpha: 0.75,
                        beta: -1.5,
                        bias: Some((c, shape.clone())),
                    };
                    check_all(&g, out, &ep, &format!("bias {shape:?}"));
                }
                let mut c = vec![1.0f32; n];
                c[2] = f32::NAN;
                let ep = Ep {
                    alpha: 1.0,
                    beta: 0.0,
                    bias: Some((c, vec![n])),
                };
                for layout in LAYOUTS {
                    let y = run(&g, layout, out, &ep, &Serial);
                    for r in 0..m {
                        assert!(y[r * n + 2].is_nan(), "{layout:?}: 0 · NaN bias");
                    }
                }
            }
        }
    }
}

/// M = 0 is a no-op; the split's row limit (f32: M ≤ 2, f16: M ≤ 4) crossed at larger K; two
/// threads give the same bits as one.
#[test]
fn shapes_and_threads() {
    let (k, n) = (64usize, 20usize);
    for layout in LAYOUTS {
        let g = Gemm {
            dt: DType::F32,
            a: vec![],
            q: vec![0x38; n * k],
            s: vec![127; n * k / 32],
            m: 0,
            k,
            n,
        };
        assert!(run(&g, layout, DType::F32, &PLAIN, &Serial).is_empty());
    }
    let mut rng = Rng::new(6);
    let (k, n) = (512usize, 72usize);
    let q: Vec<u8> = (0..n * k).map(|_| e4m3(&mut rng)).collect();
    let s: Vec<u8> = (0..n * k / 32).map(|i| 115 + (i % 9) as u8).collect();
    for dt in [DType::F32, DType::F16] {
        for m in [1usize, 2, 3, 4, 5, 9] {
            let a: Vec<f32> = (0..m * k).map(|_| round_to(dt, rng.normal(2.0))).collect();
            let g = Gemm {
                dt,
                a,
                q: q.clone(),
                s: s.clone(),
                m,
                k,
                n,
            };
            let want = oracle(&g, &PLAIN);
            for layout in LAYOUTS {
                let one = run(&g, layout, DType::F32, &PLAIN, &Serial);
                let two = run(&g, layout, DType::F32, &PLAIN, &StdThreads::new(2));
                let label = format!("{dt:?} {layout:?} m {m}");
                check(DType::F32, &one, &want, &label);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&one), bits(&two), "{label}: threads changed the bits");
            }
        }
    }
}

/// An MXFP4 weight equals its widened MXFP8 weight bit for bit, for a split f32 A and a f16 A,
/// both layouts.
#[test]
fn fp4_weights_equal_their_widened_fp8_weights() {
    let (k, n) = (64usize, 20usize);
    let mut rng = Rng::new(7);
    let nibbles: Vec<u8> = (0..n * k).map(|_| (rng.next_u64() % 16) as u8).collect();
    let packed = |v: &[u8]| -> Vec<u8> { v.chunks(2).map(|p| p[0] | p[1] << 4).collect() };
    let s: Vec<u8> = (0..n * k / 32).map(|i| 120 + (i % 7) as u8).collect();
    let q = widened_e4m3(&packed(&nibbles), n * k);
    for dt in [DType::F32, DType::F16] {
        for m in [1usize, 2, 4] {
            let a: Vec<f32> = (0..m * k).map(|_| round_to(dt, rng.normal(1.0))).collect();
            let g = Gemm {
                dt,
                a,
                q: q.clone(),
                s: s.clone(),
                m,
                k,
                n,
            };
            let want = oracle(&g, &PLAIN);
            let a_bytes = bytes_of(dt, &g.a);
            for trans_b in [true, false] {
                let (w, ws, wshape, sshape) = if trans_b {
                    (packed(&nibbles), s.clone(), [n, k], [n, k / 32])
                } else {
                    (
                        packed(&transpose(&nibbles, n, k)),
                        transpose(&s, n, k / 32),
                        [k, n],
                        [k / 32, n],
                    )
                };
                let mut y = vec![0u8; m * n * 4];
                mx_matmul_float_a(
                    TensorRef::new(dt, &[m, k], &a_bytes).unwrap(),
                    TensorRef::new(DType::E2M1, &wshape, &w).unwrap(),
                    Some(TensorRef::new(DType::E8M0, &sshape, &ws).unwrap()),
                    None,
                    TensorMut::new(DType::F32, &[m, n], &mut y).unwrap(),
                    &MxMatMulAttrs {
                        trans_b,
                        ..Default::default()
                    },
                    &Serial,
                )
                .unwrap();
                let fp8 = run(
                    &g,
                    if trans_b { Layout::Nk } else { Layout::Kn },
                    DType::F32,
                    &PLAIN,
                    &Serial,
                );
                let fp4 = float_values(DType::F32, &y);
                let label = format!("FP4 {dt:?} m {m} trans_b {trans_b}");
                check(DType::F32, &fp4, &want, &label);
                assert!(
                    fp4.iter()
                        .zip(&fp8)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{label}: FP4 and its widened FP8 weight differ"
                );
            }
        }
    }
}

/// The AVX2-only path (`MXFUSE_CPU_ISA=avx2`'s, per thread here) meets the same oracle on the
/// split-worthy cases as the default.
#[test]
fn avx2_only_path_meets_the_same_oracle() {
    let (k, n) = (128usize, 20usize);
    let mut rng = Rng::new(8);
    for dt in [DType::F32, DType::F16] {
        for m in [1usize, 2, 4] {
            let a: Vec<f32> = (0..m * k).map(|_| round_to(dt, rng.normal(1.0))).collect();
            let q: Vec<u8> = (0..n * k).map(|_| e4m3(&mut rng)).collect();
            let mut s: Vec<u8> = (0..n * k / 32).map(|i| 118 + (i % 5) as u8).collect();
            s[4] = 254;
            let g = Gemm {
                dt,
                a,
                q,
                s,
                m,
                k,
                n,
            };
            let want = oracle(&g, &PLAIN);
            for layout in LAYOUTS {
                let y =
                    kernels::fast::with_avx2_only(|| run(&g, layout, DType::F32, &PLAIN, &Serial));
                check(
                    DType::F32,
                    &y,
                    &want,
                    &format!("avx2 {dt:?} {layout:?} m {m}"),
                );
            }
        }
    }
}

/// The column-lane kernel sums each 32-k block of unscaled products `a · e4m3(w)` before the
/// block's factor 2^(s-127): an A near 2^127 (a float A, or deq(MXFP8 A) at a large scale)
/// against small weight scales overflowed there (±Inf / NaN) although every `a · deq(w)` and
/// the sum are small. Such an A must take the row path.
#[test]
fn huge_a_against_small_weight_scales_in_column_groups() {
    let (k, n) = (64usize, 20usize);
    let mut rng = Rng::new(9);
    let q: Vec<u8> = (0..n * k).map(|_| e4m3(&mut rng)).collect();
    let s: Vec<u8> = (0..n * k / 32).map(|i| 10 + (i % 3) as u8).collect();
    // Float A (bf16 values: unsplit; f32: split at m ≤ 2).
    for dt in [DType::BF16, DType::F32] {
        for m in [1usize, 2, 5, 8] {
            let a: Vec<f32> = (0..m * k)
                .map(|_| round_to(dt, at_exponent(&mut rng, 120)))
                .collect();
            let g = Gemm {
                dt,
                a,
                q: q.clone(),
                s: s.clone(),
                m,
                k,
                n,
            };
            check_all(&g, DType::F32, &PLAIN, "huge A");
        }
    }
    // MXFP8 A at scale byte 240: deq(a) up to 448 · 2^113.
    for m in [1usize, 3, 8] {
        let aq: Vec<u8> = (0..m * k).map(|_| e4m3(&mut rng)).collect();
        let asc = vec![240u8; m * k / 32];
        let a: Vec<f32> = (0..m * k)
            .map(|i| e4m3_to_f32(aq[i]) * e8m0_to_f32(asc[i / 32]))
            .collect();
        let g = Gemm {
            dt: DType::F32,
            a,
            q: q.clone(),
            s: s.clone(),
            m,
            k,
            n,
        };
        let want = oracle(&g, &PLAIN);
        let (a_shape, as_shape) = ([m, k], [m, k / 32]);
        let a_ref = TensorRef::new(DType::E4M3, &a_shape, &aq).unwrap();
        let as_ref = TensorRef::new(DType::E8M0, &as_shape, &asc).unwrap();
        let attrs = MxMatMulAttrs {
            trans_b: true,
            ..Default::default()
        };
        let mut y = vec![0u8; m * n * 4];
        mx_matmul(
            a_ref,
            as_ref,
            TensorRef::new(DType::E4M3, &[n, k], &g.q).unwrap(),
            Some(TensorRef::new(DType::E8M0, &[n, k / 32], &g.s).unwrap()),
            None,
            TensorMut::new(DType::F32, &[m, n], &mut y).unwrap(),
            &attrs,
            &Serial,
        )
        .unwrap();
        check(
            DType::F32,
            &float_values(DType::F32, &y),
            &want,
            "MX A, [N, K]",
        );
        let (pq, ps) = pack(&g.q, &g.s, n, k);
        let w = MxColWeights {
            q: &pq,
            scales: &ps,
            n,
            k,
        };
        mx_matmul_cols(
            a_ref,
            as_ref,
            w,
            None,
            TensorMut::new(DType::F32, &[m, n], &mut y).unwrap(),
            &attrs,
            &Serial,
        )
        .unwrap();
        check(
            DType::F32,
            &float_values(DType::F32, &y),
            &want,
            "MX A, column groups",
        );
    }
}
