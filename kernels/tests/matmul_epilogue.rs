//! The `MxMatMul` epilogue (`y = round_T(alpha · acc + beta · C)`, docs/ops.md) on every GEMM
//! path: each fast path's output with an epilogue equals its own f32 accumulator (the same call
//! without one) put through the documented f32 arithmetic, bit for bit, for every bias shape,
//! alpha/beta, output dtype and NaN in C; the reference the same on its f64-rounded sum; and the
//! op-level API refuses bad bias shapes and dtypes with errors.

mod common;

use common::Rng;
use half::{bf16, f16};
use kernels::codec::{QuantConfig, BLOCK};
use kernels::fast::{with_avx2_only, with_portable};
use kernels::ops::{self, TensorMut, TensorRef};
use kernels::slices::MatB;
use kernels::{fast, reference, DType, Element, Epilogue, MxMatMulAttrs, Serial, StdThreads};

/// The bias shapes of ONNX Gemm's unidirectional broadcast to `[m, n]`.
fn bias_shapes(m: usize, n: usize) -> Vec<Vec<usize>> {
    vec![
        vec![n],
        vec![1, n],
        vec![1],
        vec![],
        vec![m, n],
        vec![m, 1],
        vec![1, 1],
    ]
}

/// `y[r, c]` by the documented arithmetic: `fl(fl(alpha·acc) + fl(beta·c))`, rounded to O.
fn expected<O: Element>(
    acc: &[f32],
    n: usize,
    (alpha, beta): (f32, f32),
    bias: Option<(&[f32], &[usize])>,
) -> Vec<u32> {
    acc.iter()
        .enumerate()
        .map(|(i, &a)| {
            let (r, c) = (i / n, i % n);
            let t = alpha * a;
            let y = match bias {
                None => t,
                Some((v, shape)) => {
                    let (rows, cols) = match shape {
                        [] => (1, 1),
                        [d] => (1, *d),
                        [r, d] => (*r, *d),
                        _ => unreachable!(),
                    };
                    let ri = if rows == 1 { 0 } else { r };
                    let ci = if cols == 1 { 0 } else { c };
                    t + beta * v[ri * cols + ci]
                }
            };
            bits(O::from_f32(y))
        })
        .collect()
}

fn bits<O: Element>(v: O) -> u32 {
    // NaNs compare as one pattern: the payload is not specified.
    let f = v.to_f32();
    if f.is_nan() {
        u32::MAX
    } else {
        f.to_bits()
    }
}

/// Bias values in O (so the f32 the kernel adds is exactly the stored value), with a NaN when
/// `nan` and one huge value.
fn bias_values<O: Element>(rng: &mut Rng, len: usize, nan: bool) -> Vec<O> {
    let mut v: Vec<O> = (0..len).map(|_| O::from_f32(rng.normal(4.0))).collect();
    if nan {
        v[len / 2] = O::from_f32(f32::NAN);
    }
    if len > 2 {
        v[len - 1] = O::from_f32(3.0e4);
    }
    v
}

struct Case {
    m: usize,
    k: usize,
    n: usize,
    a_q: Vec<u8>,
    a_s: Vec<u8>,
    x: Vec<f32>,
    w_q: Vec<u8>,
    w_s: Vec<u8>,
    wt_q: Vec<u8>,
    wt_s: Vec<u8>,
    wf: Vec<f32>,
}

impl Case {
    fn new(rng: &mut Rng, m: usize, k: usize, n: usize) -> Case {
        let cfg = QuantConfig::default();
        let x: Vec<f32> = (0..m * k).map(|_| rng.normal(2.0)).collect();
        let (mut a_q, mut a_s) = (vec![0u8; m * k], vec![0u8; m * k / BLOCK]);
        reference::mx_quantize(&x, k, &mut a_q, &mut a_s, cfg).unwrap();
        let wf: Vec<f32> = (0..k * n).map(|_| rng.normal(0.1)).collect(); // [N, K]
        let (mut w_q, mut w_s) = (vec![0u8; k * n], vec![0u8; k * n / BLOCK]);
        reference::mx_quantize(&wf, k, &mut w_q, &mut w_s, cfg).unwrap();
        let (mut wt_q, mut wt_s) = (vec![0u8; k * n], vec![0u8; k * n / BLOCK]);
        for nn in 0..n {
            for kk in 0..k {
                wt_q[kk * n + nn] = w_q[nn * k + kk];
            }
            for kb in 0..k / BLOCK {
                wt_s[kb * n + nn] = w_s[nn * (k / BLOCK) + kb];
            }
        }
        Case {
            m,
            k,
            n,
            a_q,
            a_s,
            x,
            w_q,
            w_s,
            wt_q,
            wt_s,
            wf,
        }
    }

    /// Every B form: MX `[N, K]` / `[K, N]`, float `[N, K]`.
    fn weights(&self) -> Vec<(MatB<'_>, bool)> {
        vec![
            (
                MatB::Mx {
                    q: &self.w_q,
                    scales: &self.w_s,
                },
                true,
            ),
            (
                MatB::Mx {
                    q: &self.wt_q,
                    scales: &self.wt_s,
                },
                false,
            ),
            (MatB::F32(&self.wf), true),
        ]
    }

    /// The fast GEMM (both the pre-quantized and the quantize-A path) with `ep`, in O.
    fn fast<O: Element>(&self, b: MatB<'_>, trans_b: bool, ep: &Epilogue) -> (Vec<O>, Vec<O>) {
        let (m, k, n) = (self.m, self.k, self.n);
        let mut y = vec![O::default(); m * n];
        let par = StdThreads::new(2);
        fast::mx_matmul(&self.a_q, &self.a_s, m, k, n, b, trans_b, &mut y, ep, &par).unwrap();
        let mut yq = vec![O::default(); m * n];
        let cfg = QuantConfig::default();
        fast::mx_matmul_quantize_a(&self.x, m, k, n, b, trans_b, cfg, &mut yq, ep, &Serial)
            .unwrap();
        (y, yq)
    }
}

/// Every path's epilogue output equals the documented arithmetic on its own accumulator.
fn check_dtype<O: Element>(case: &Case, rng: &mut Rng) {
    let (m, n) = (case.m, case.n);
    for (b, trans_b) in case.weights() {
        let (acc, _) = case.fast::<f32>(b, trans_b, &Epilogue::NONE);
        let mut ref_acc = vec![0f32; m * n];
        reference::mx_matmul(
            &case.a_q,
            &case.a_s,
            m,
            case.k,
            n,
            b,
            trans_b,
            &mut ref_acc,
            &Epilogue::NONE,
        )
        .unwrap();
        for shape in bias_shapes(m, n) {
            for (alpha, beta, nan) in [(1.0, 1.0, false), (0.5, -3.0, false), (1.0, 1.0, true)] {
                let len = shape.iter().product();
                let c: Vec<O> = bias_values(rng, len, nan);
                let cf: Vec<f32> = c.iter().map(|v| v.to_f32()).collect();
                let ep = Epilogue::new(alpha, beta, Some((&c[..], &shape[..])), m, n).unwrap();
                let want = expected::<O>(&acc, n, (alpha, beta), Some((&cf, &shape)));
                let ctx = format!(
                    "{:?} m={m} n={n} trans_b={trans_b} {shape:?} {alpha} {beta} nan={nan}",
                    O::DTYPE
                );
                let (y, yq) = case.fast::<O>(b, trans_b, &ep);
                assert_eq!(
                    y.iter().map(|v| bits(*v)).collect::<Vec<_>>(),
                    want,
                    "{ctx}"
                );
                assert_eq!(
                    yq.iter().map(|v| bits(*v)).collect::<Vec<_>>(),
                    want,
                    "{ctx}"
                );
                if nan {
                    assert!(y.iter().any(|v| v.to_f32().is_nan()), "{ctx}: NaN in C");
                }
                let mut yr = vec![O::default(); m * n];
                reference::mx_matmul(&case.a_q, &case.a_s, m, case.k, n, b, trans_b, &mut yr, &ep)
                    .unwrap();
                let want_ref = expected::<O>(&ref_acc, n, (alpha, beta), Some((&cf, &shape)));
                assert_eq!(
                    yr.iter().map(|v| bits(*v)).collect::<Vec<_>>(),
                    want_ref,
                    "reference {ctx}"
                );
            }
        }
        // alpha without a bias.
        let ep = Epilogue::new::<O>(0.25, 7.0, None, m, n).unwrap();
        let (y, _) = case.fast::<O>(b, trans_b, &ep);
        let want = expected::<O>(&acc, n, (0.25, 7.0), None);
        assert_eq!(y.iter().map(|v| bits(*v)).collect::<Vec<_>>(), want);
    }
}

#[test]
fn epilogue_is_the_documented_arithmetic_on_every_path() {
    let mut rng = Rng::new(21);
    // M = 1/2 in-register [N, K] GEMV, 3/5 the column-split register kernels, 8 the AVX-512
    // BF16 row group / tiled AVX2, 70 the tiled bf16 path; n = 37 leaves partial 4-column
    // units and a partial 16-column [K, N] stripe; n = 300 a partial second 256-column unit.
    for (m, k, n) in [
        (1, 64, 37),
        (2, 128, 37),
        (3, 64, 37),
        (5, 96, 37),
        (8, 64, 37),
        (70, 64, 37),
        (4, 64, 300),
    ] {
        let case = Case::new(&mut rng, m, k, n);
        let run = || {
            check_dtype::<f32>(&case, &mut Rng::new(1));
            check_dtype::<f16>(&case, &mut Rng::new(2));
            check_dtype::<bf16>(&case, &mut Rng::new(3));
        };
        run();
        with_avx2_only(run);
        with_portable(run);
    }
}

fn attrs(out: DType, alpha: f32, beta: f32) -> MxMatMulAttrs {
    MxMatMulAttrs {
        trans_b: true,
        output_dtype: out,
        alpha,
        beta,
    }
}

/// Through the op-level API (the provider's entry): a `[N]` bf16 bias equals the fast path with
/// the same epilogue; bad shapes and dtypes are errors, not panics.
#[test]
fn op_api_takes_the_bias_and_refuses_bad_ones() {
    const N: usize = 5;
    let (m, k, n) = (3usize, 64usize, N);
    let mut rng = Rng::new(4);
    let case = Case::new(&mut rng, m, k, n);
    let c: Vec<bf16> = bias_values(&mut rng, n, false);
    let c_bytes: Vec<u8> = c.iter().flat_map(|v| v.to_le_bytes()).collect();
    let run = |bias: Option<TensorRef<'_>>, out: DType, a: &MxMatMulAttrs| {
        let mut y = vec![0u8; m * n * out.size()];
        ops::mx_matmul(
            TensorRef::new(DType::E4M3, &[m, k], &case.a_q).unwrap(),
            TensorRef::new(DType::E8M0, &[m, k / 32], &case.a_s).unwrap(),
            TensorRef::new(DType::E4M3, &[n, k], &case.w_q).unwrap(),
            Some(TensorRef::new(DType::E8M0, &[n, k / 32], &case.w_s).unwrap()),
            bias,
            TensorMut::new(out, &[m, n], &mut y).unwrap(),
            a,
            &Serial,
        )
        .map(|_| y)
    };
    let good = TensorRef::new(DType::BF16, &[N], &c_bytes).unwrap();
    let y = run(Some(good), DType::BF16, &attrs(DType::BF16, 2.0, 0.5)).unwrap();
    let ep = Epilogue::new(2.0, 0.5, Some((&c[..], &[n][..])), m, n).unwrap();
    let (want, _) = case.fast::<bf16>(case.weights()[0].0, true, &ep);
    let want: Vec<u8> = want.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(y, want);

    let one = vec![0u8; 2 * n];
    let bad: [(TensorRef<'_>, DType, &str); 3] = [
        // [N - 1]: does not broadcast.
        (
            TensorRef::new(DType::BF16, &[N - 1], &one[..2 * (N - 1)]).unwrap(),
            DType::BF16,
            "does not broadcast",
        ),
        // rank 3.
        (
            TensorRef::new(DType::F16, &[1, 1, N], &one).unwrap(),
            DType::F16,
            "does not broadcast",
        ),
        // f16 bias, bf16 output.
        (
            TensorRef::new(DType::F16, &[N], &one).unwrap(),
            DType::BF16,
            "bias must be BF16",
        ),
    ];
    for (bias, out, why) in bad {
        let err = run(Some(bias), out, &attrs(out, 1.0, 1.0)).unwrap_err();
        assert!(err.to_string().contains(why), "{err}");
    }
    let err = run(
        Some(TensorRef::new(DType::E8M0, &[N], &one[..N]).unwrap()),
        DType::F32,
        &attrs(DType::F32, 1.0, 1.0),
    )
    .unwrap_err();
    assert!(err.to_string().contains("bias"), "{err}");
}

/// An epilogue built for other dims is an error from every GEMM entry, never an out-of-bounds
/// read.
#[test]
fn epilogue_of_other_dims_is_an_error() {
    let mut rng = Rng::new(8);
    let case = Case::new(&mut rng, 3, 64, 5);
    let c = [1f32; 2 * 5];
    let ep = Epilogue::new(1.0, 1.0, Some((&c[..], &[2, 5][..])), 2, 5).unwrap();
    for (b, trans_b) in case.weights() {
        let mut y = vec![0f32; 15];
        let r = fast::mx_matmul(
            &case.a_q, &case.a_s, 3, 64, 5, b, trans_b, &mut y, &ep, &Serial,
        );
        assert!(r.unwrap_err().to_string().contains("does not broadcast"));
        let r = reference::mx_matmul(&case.a_q, &case.a_s, 3, 64, 5, b, trans_b, &mut y, &ep);
        assert!(r.is_err());
        let cfg = QuantConfig::default();
        let r =
            fast::mx_matmul_quantize_a(&case.x, 3, 64, 5, b, trans_b, cfg, &mut y, &ep, &Serial);
        assert!(r.is_err());
    }
}

#[test]
fn alpha_and_beta_attributes_parse() {
    let a = MxMatMulAttrs::from_pairs([("alpha", "0.5"), ("beta", "-2")]).unwrap();
    assert_eq!((a.alpha, a.beta), (0.5, -2.0));
    let d = MxMatMulAttrs::default();
    assert_eq!((d.alpha, d.beta), (1.0, 1.0));
    assert!(MxMatMulAttrs::from_pairs([("alpha", "inf")]).is_err());
    assert!(MxMatMulAttrs::from_pairs([("beta", "x")]).is_err());
}
