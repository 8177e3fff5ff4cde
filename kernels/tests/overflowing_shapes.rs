//! Shapes whose element counts overflow `usize`, with tiny buffers: every public entry point
//! returns an error. Unchecked, `m·k` wrapped to a small count that a short buffer passed, and
//! the fast GEMM read past the end of A (found by an outside-API probe, session 18).

use kernels::attrs::SwiGluLayout;
use kernels::codec::QuantConfig;
use kernels::fast;
use kernels::reference as rf;
use kernels::slices::{MatB, SwiGluInput};
use kernels::{Epilogue, Serial, SwiGluAttrs};

/// m · 64 ≡ 64 and m · 2 ≡ 2 (mod 2^64): a 1 × 64 A and a 2-wide y to a wrapping check.
const M: usize = (1usize << 63) + 1;
const K: usize = 64;
const N: usize = 2;

#[test]
fn matmul_entry_points_refuse_overflowing_dims() {
    let (aq, asc) = (vec![0x38u8; K], vec![127u8; K / 32]);
    let bf = vec![1.0f32; K * N];
    let (bq, bs) = (vec![0x38u8; K * N], vec![127u8; K / 32 * N]);
    let mut y = vec![0f32; N];
    let ep = Epilogue::NONE;
    let mx = || MatB::Mx {
        q: &bq,
        scales: &bs,
    };
    for (what, r) in [
        (
            "reference",
            rf::mx_matmul(&aq, &asc, M, K, N, MatB::F32(&bf), false, &mut y, &ep),
        ),
        (
            "fast f32 B",
            fast::mx_matmul(
                &aq,
                &asc,
                M,
                K,
                N,
                MatB::F32(&bf),
                false,
                &mut y,
                &ep,
                &Serial,
            ),
        ),
        (
            "fast MX B",
            fast::mx_matmul(&aq, &asc, M, K, N, mx(), false, &mut y, &ep, &Serial),
        ),
        (
            "fast MX B^T",
            fast::mx_matmul(&aq, &asc, M, K, N, mx(), true, &mut y, &ep, &Serial),
        ),
    ] {
        let err = r.expect_err(what).to_string();
        assert!(err.contains("overflow"), "{what}: {err}");
    }
    let x = vec![1.0f32; K];
    let cfg = QuantConfig::default();
    let r = fast::mx_matmul_quantize_a(
        &x,
        M,
        K,
        N,
        MatB::F32(&bf),
        false,
        cfg,
        &mut y,
        &ep,
        &Serial,
    );
    assert!(r.is_err());
    let (pq, ps) = (vec![0x38u8; 16 * K], vec![127u8; 16 * K / 32]);
    let mut y16 = vec![0f32; 16];
    let w = fast::cols_layout::MxColWeights {
        q: &pq,
        scales: &ps,
        n: 16,
        k: K,
    };
    assert!(fast::cols_layout::mx_matmul_cols(&aq, &asc, M, w, &mut y16, &ep, &Serial).is_err());
}

/// I = 2^63 + 32: 2I ≡ 64, so a 4096-value gate_up looked like 64 rows; the fast kernel then
/// returned Ok having written nothing.
#[test]
fn swiglu_refuses_an_overflowing_row() {
    const I: usize = (1usize << 63) + 32;
    let gu = vec![0.5f32; 4096];
    let (mut q, mut s) = (vec![0u8; 2048], vec![0u8; 64]);
    let a = SwiGluAttrs {
        layout: SwiGluLayout::SplitHalves,
        ..Default::default()
    };
    assert!(
        fast::swiglu_mx_quant(SwiGluInput::Fused(&gu), I, &a, &mut q, &mut s, &Serial).is_err()
    );
    assert!(rf::swiglu_mx_quant(SwiGluInput::Fused(&gu), I, &a, &mut q, &mut s).is_err());
}

#[test]
fn reference_tensor_refuses_an_overflowing_shape() {
    use kernels::reference::onnx_ops::Tensor;
    assert!(Tensor::new(kernels::DType::F32, &[1usize << 63, 2], vec![]).is_err());
}
