//! `MxMatMul` with a float A (a weight-only MX GEMM: `ops::mx_matmul_float_a`,
//! `ops::mx_matmul_cols_float_a`) against an f64 oracle of `Σ a · deq(w)`: f32 / f16 / bf16 A
//! and outputs, `[N, K]`, `[K, N]` and column-group prepacked MXFP8 weights and MXFP4 weights,
//! M on both sides of the bf16 split's row limit, A values that are not bf16 values (the split
//! into bf16 parts), A holding ±Inf / NaN (not split), weight scales 0, 254 and 255 (NaN),
//! a bias with alpha / beta; the same bits for any thread count; bad inputs are errors.

mod common;

use common::{check_gemm, float_values, mx_gemm_operands, Rng};
use half::{bf16, f16};
use kernels::fast::cols_layout::{pack, MxColWeights};
use kernels::ops::{mx_matmul_cols_float_a, mx_matmul_float_a, TensorMut, TensorRef};
use kernels::{DType, Element, MxMatMulAttrs, Parallel, Serial, StdThreads};

/// A (`m × k`) as `T` bytes and as the f32 values the kernel reads.
fn a_of<T: Element + Copy>(vals: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let t: Vec<T> = vals.iter().map(|&v| T::from_f32(v)).collect();
    let exact: Vec<f32> = t.iter().map(|v| v.to_f32()).collect();
    let bytes = exact
        .iter()
        .flat_map(|&f| match T::DTYPE {
            DType::F32 => f.to_le_bytes().to_vec(),
            DType::F16 => f16::from_f32(f).to_le_bytes().to_vec(),
            _ => bf16::from_f32(f).to_le_bytes().to_vec(),
        })
        .collect();
    (bytes, exact)
}

/// deq(w) of `[N, K]` E4M3 bytes with `[N, K/32]` scales, element (n, k).
fn deq_nk(q: &[u8], s: &[u8], k: usize, n: usize, kk: usize) -> f32 {
    kernels::codec::e4m3_to_f32(q[n * k + kk])
        * kernels::codec::e8m0_to_f32(s[n * (k / 32) + kk / 32])
}

/// The f64 reference `Σ a · deq(w)` (rounded to f32) and the f32 accumulation bound per output.
fn oracle(a: &[f32], q: &[u8], s: &[u8], m: usize, k: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
    let (mut want, mut bound) = (vec![0f32; m * n], vec![0f32; m * n]);
    for r in 0..m {
        for c in 0..n {
            let (mut acc, mut abs) = (0f64, 0f64);
            for kk in 0..k {
                let p = f64::from(a[r * k + kk]) * f64::from(deq_nk(q, s, k, c, kk));
                acc += p;
                abs += p.abs();
            }
            want[r * n + c] = acc as f32;
            bound[r * n + c] = (k as f64 * 2f64.powi(-22) * abs) as f32;
        }
    }
    (want, bound)
}

/// `[N, K]` → `[K, N]` bytes (weights or scales).
fn transpose(v: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    let mut t = vec![0u8; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = v[r * cols + c];
        }
    }
    t
}

/// Every weight layout's output for A `(dt, bytes)`, as f32 values of y (dtype `out`).
#[allow(clippy::too_many_arguments)]
fn run_all(
    (dt, a): (DType, &[u8]),
    (q, s): (&[u8], &[u8]),
    (m, k, n): (usize, usize, usize),
    out: DType,
    par: &dyn Parallel,
) -> Vec<(&'static str, Vec<u8>)> {
    let attrs = |trans_b| MxMatMulAttrs {
        trans_b,
        output_dtype: out,
        ..Default::default()
    };
    let a_shape = [m, k];
    let a_ref = TensorRef::new(dt, &a_shape, a).unwrap();
    let mut outs = Vec::new();
    let mut y = vec![0u8; m * n * out.size()];
    // [N, K]
    mx_matmul_float_a(
        a_ref,
        TensorRef::new(DType::E4M3, &[n, k], q).unwrap(),
        Some(TensorRef::new(DType::E8M0, &[n, k / 32], s).unwrap()),
        None,
        TensorMut::new(out, &[m, n], &mut y).unwrap(),
        &attrs(true),
        par,
    )
    .unwrap();
    outs.push(("nk", y.clone()));
    // [K, N]
    let (qt, st) = (transpose(q, n, k), transpose(s, n, k / 32));
    mx_matmul_float_a(
        a_ref,
        TensorRef::new(DType::E4M3, &[k, n], &qt).unwrap(),
        Some(TensorRef::new(DType::E8M0, &[k / 32, n], &st).unwrap()),
        None,
        TensorMut::new(out, &[m, n], &mut y).unwrap(),
        &attrs(false),
        par,
    )
    .unwrap();
    outs.push(("kn", y.clone()));
    // Column groups (the provider's prepack on AVX-512 BF16 CPUs).
    let (pq, ps) = pack(q, s, n, k);
    let w = MxColWeights {
        q: &pq,
        scales: &ps,
        n,
        k,
    };
    mx_matmul_cols_float_a(
        a_ref,
        w,
        None,
        TensorMut::new(out, &[m, n], &mut y).unwrap(),
        &attrs(true),
        par,
    )
    .unwrap();
    outs.push(("cols", y));
    outs
}

fn check(out: DType, got: &[f32], want: &[f32], bound: &[f32], what: &str) {
    match out {
        DType::F32 => check_gemm::<f32>(got, want, bound, 1.0, what),
        DType::F16 => {
            let g: Vec<f16> = got.iter().map(|&v| f16::from_f32(v)).collect();
            check_gemm(&g, want, bound, 1.0, what)
        }
        _ => {
            let g: Vec<bf16> = got.iter().map(|&v| bf16::from_f32(v)).collect();
            check_gemm(&g, want, bound, 1.0, what)
        }
    }
}

/// Random float A of each type (values with 24 / 11 / 8 significant bits, so f32 and f16 A are
/// split into three / two bf16 parts) × MXFP8 weights of every layout, M = 1..70.
#[test]
fn float_a_matches_the_f64_oracle_in_every_layout() {
    let mut rng = Rng::new(7);
    for (m, k, n) in [
        (1, 64, 40),
        (3, 96, 17),
        (8, 256, 48),
        (22, 128, 33),
        (40, 64, 20),
        (70, 64, 18),
    ] {
        let (_, [q, s]) = mx_gemm_operands(m as u64 * 31 + n as u64, m, k, n);
        let vals: Vec<f32> = (0..m * k).map(|_| rng.normal(1.5)).collect();
        for dt in [DType::F32, DType::F16, DType::BF16] {
            let (bytes, exact) = match dt {
                DType::F32 => a_of::<f32>(&vals),
                DType::F16 => a_of::<f16>(&vals),
                _ => a_of::<bf16>(&vals),
            };
            let (want, bound) = oracle(&exact, &q, &s, m, k, n);
            for out in [DType::F32, dt] {
                let serial = run_all((dt, &bytes), (&q, &s), (m, k, n), out, &Serial);
                let threads = run_all((dt, &bytes), (&q, &s), (m, k, n), out, &StdThreads::new(3));
                for ((what, y), (_, yt)) in serial.iter().zip(&threads) {
                    let label = format!("{dt:?} A, {out:?} y, {what}, m {m} k {k} n {n}");
                    check(out, &float_values(out, y), &want, &bound, &label);
                    assert_eq!(y, yt, "{label}: thread count changed the bits");
                }
            }
        }
    }
}

/// Weight scales 0 (tiny products: the exact row path), 254 (|w| ≥ 2 overflows to Inf) and 255
/// (NaN), and A holding ±Inf and NaN (not split): IEEE results as the oracle's.
#[test]
fn edge_scales_and_non_finite_a() {
    let (m, k, n) = (2usize, 64usize, 20usize);
    let (_, [q, mut s]) = mx_gemm_operands(99, m, k, n);
    s[0] = 0; // column 0, block 0
    s[2] = 254; // column 1, block 0
    s[5] = 255; // column 2, block 1: NaN
    let mut rng = Rng::new(3);
    let mut vals: Vec<f32> = (0..m * k).map(|_| rng.normal(1.0)).collect();
    for (case, edit) in [
        ("finite", None),
        ("inf", Some(f32::INFINITY)),
        ("nan", Some(f32::NAN)),
    ] {
        if let Some(v) = edit {
            vals[k + 5] = v; // row 1
        }
        let (bytes, exact) = a_of::<f32>(&vals);
        let (want, bound) = oracle(&exact, &q, &s, m, k, n);
        for (what, y) in run_all(
            (DType::F32, &bytes),
            (&q, &s),
            (m, k, n),
            DType::F32,
            &Serial,
        ) {
            check(
                DType::F32,
                &float_values(DType::F32, &y),
                &want,
                &bound,
                &format!("{case} {what}"),
            );
        }
    }
}

/// A bias with alpha and beta: `fl(alpha · acc) + fl(beta · c)` as for MXFP8 A.
#[test]
fn bias_alpha_beta_apply_to_the_float_a_product() {
    let (m, k, n) = (3usize, 64usize, 16usize);
    let (_, [q, s]) = mx_gemm_operands(5, m, k, n);
    let mut rng = Rng::new(11);
    let vals: Vec<f32> = (0..m * k).map(|_| rng.normal(1.0)).collect();
    let (bytes, _) = a_of::<f32>(&vals);
    let c: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 1.0).collect();
    let cb: Vec<u8> = c.iter().flat_map(|v| v.to_le_bytes()).collect();
    let c_shape = [n];
    let run = |alpha: f32, beta: f32, bias: bool| {
        let mut y = vec![0u8; m * n * 4];
        mx_matmul_float_a(
            TensorRef::new(DType::F32, &[m, k], &bytes).unwrap(),
            TensorRef::new(DType::E4M3, &[n, k], &q).unwrap(),
            Some(TensorRef::new(DType::E8M0, &[n, k / 32], &s).unwrap()),
            bias.then(|| TensorRef::new(DType::F32, &c_shape, &cb).unwrap()),
            TensorMut::new(DType::F32, &[m, n], &mut y).unwrap(),
            &MxMatMulAttrs {
                trans_b: true,
                alpha,
                beta,
                ..Default::default()
            },
            &Serial,
        )
        .unwrap();
        float_values(DType::F32, &y)
    };
    let acc = run(1.0, 1.0, false);
    let y = run(0.5, 2.0, true);
    for (i, (y, acc)) in y.iter().zip(&acc).enumerate() {
        assert_eq!(y.to_bits(), (0.5 * acc + 2.0 * c[i % n]).to_bits(), "{i}");
    }
}

/// Bad inputs are errors, never panics: an E4M3 a (needs a_scale), an integer a, K mismatch,
/// K not a multiple of 32, a short buffer.
#[test]
fn bad_float_a_inputs_are_errors() {
    let (k, n) = (64usize, 8usize);
    let q = vec![0x38u8; n * k];
    let s = vec![127u8; n * k / 32];
    let a = vec![0u8; 2 * k * 4];
    let attrs = MxMatMulAttrs {
        trans_b: true,
        ..Default::default()
    };
    let run = |dt: DType, shape: &[usize], a: &[u8], wk: usize| {
        let mut y = vec![0u8; 2 * n * 4];
        let wq = vec![0x38u8; n * wk];
        let ws = vec![127u8; n * wk.div_ceil(32)];
        mx_matmul_float_a(
            TensorRef::new(dt, shape, a)?,
            TensorRef::new(DType::E4M3, &[n, wk], &wq)?,
            Some(TensorRef::new(DType::E8M0, &[n, wk.div_ceil(32)], &ws)?),
            None,
            TensorMut::new(DType::F32, &[2, n], &mut y)?,
            &attrs,
            &Serial,
        )
    };
    assert!(run(DType::E4M3, &[2, k], &a[..2 * k], k).is_err());
    assert!(run(DType::F32, &[2, k], &a, 96).is_err());
    assert!(run(DType::F32, &[2, 48], &a[..2 * 48 * 4], 48).is_err());
    assert!(run(DType::F32, &[2, k], &a[..k * 4], k).is_err());
    assert!(run(DType::F32, &[2, k], &a, k).is_ok());
    let _ = (q, s);
}
