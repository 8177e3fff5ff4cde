//! `MxGatherMatMul(a, b, b_scale, indices) -> y`: each sample's activation times the MX weight
//! of the expert `indices` names for it, reading the stacked weights in place: ONNX
//! `MatMul(Gather(DequantizeLinear(b, b_scale), indices), a)` (`trans_b = 1`, the weight first,
//! transformers' `bmm(weight, x.unsqueeze(-1))`) or `MatMul(a, Gather(...))` (`trans_b = 0`).
//!
//! Shapes (S samples, E experts):
//! * `trans_b = 1`: a `[S, K, 1]`, b `[E, N, K]`, b_scale `[E, N, K/32]`, y `[S, N, 1]`;
//! * `trans_b = 0`: a `[S, P, K]`, b `[E, K, N]`, b_scale `[E, K/32, N]`, y `[S, P, N]`.
//!
//! The sample dim broadcasts as MatMul's batch dim does: a with one sample against S indices
//! (every sample reads it), or one index against a's S samples (every sample takes that expert).
//!
//! Samples are grouped by expert (one product per expert that any sample selects, its rows
//! gathered), each product the float-`a` MX GEMM of `MxMatMul` (exact products, f32
//! accumulation: docs/ops.md). Indices in `[-E, E)`; anything else is an error naming it.

use super::{expect_dtype, expect_shape, float_a, unsupported_dtype, TensorMut, TensorRef};
use crate::attrs::MxGatherMatMulAttrs;
use crate::element::{DType, Element};
use crate::epilogue::Epilogue;
use crate::error::{shape_err, Result};
use crate::fast;
use crate::parallel::Parallel;
use crate::slices::{MatA, MatB};
use half::{bf16, f16};

/// `(s, p, k, e, n)` of the operands, checked: `weight_first` says a's layout (`[S, K, 1]`, else
/// `[S, P, K]`), `b_nk` b's (`[E, N, K]`, else `[E, K, N]`).
fn dims(a: &[usize], b: &[usize], weight_first: bool, b_nk: bool) -> Result<[usize; 5]> {
    let ([s, a1, a2], [e, b1, b2]) = (a, b) else {
        return Err(shape_err!(
            "a {a:?} and b {b:?} must both have rank 3 ([S, K, 1] / [S, P, K] and [E, N, K] / [E, K, N])"
        ));
    };
    let (p, k) = if weight_first {
        if *a2 != 1 {
            return Err(shape_err!(
                "a {a:?} must be [S, K, 1] with the weight first"
            ));
        }
        (1, *a1)
    } else {
        (*a1, *a2)
    };
    let (n, kb) = if b_nk { (*b1, *b2) } else { (*b2, *b1) };
    if k != kb || !k.is_multiple_of(32) {
        return Err(shape_err!(
            "a {a:?} and b {b:?} disagree on K or K is not a multiple of 32"
        ));
    }
    Ok([*s, p, k, *e, n])
}

/// One product per selected expert: the rows of the samples that chose it, gathered.
#[allow(clippy::too_many_arguments)]
fn grouped<T: Copy + Default, O: Element>(
    a: &[T],
    wrap: fn(&[T]) -> MatA<'_>,
    [s, p, k, e, n]: [usize; 5],
    (b, b_scale, fp4): (&[u8], &[u8], bool),
    idx: &[usize],
    trans_b: bool,
    y: &mut [O],
    par: &dyn Parallel,
) -> Result<()> {
    // idx has S entries (broadcast already); a has S or 1 samples.
    let a_rows = |i: usize| if a.len() == p * k { 0 } else { i };
    let mut order: Vec<usize> = (0..s).collect();
    order.sort_by_key(|&i| idx[i]);
    let (wbytes, sbytes) = (n * k, n * k / 32);
    let wlen = if fp4 { wbytes.div_ceil(2) } else { wbytes };
    let mut rows: Vec<T> = Vec::new();
    let mut out: Vec<O> = Vec::new();
    for run in order.chunk_by(|&i, &j| idx[i] == idx[j]) {
        let ex = idx[run[0]];
        debug_assert!(ex < e);
        rows.clear();
        for &i in run {
            let ai = a_rows(i);
            rows.extend_from_slice(&a[ai * p * k..(ai + 1) * p * k]);
        }
        let m = run.len() * p;
        out.clear();
        out.resize(m * n, O::default());
        // An MXFP4 expert is the MXFP8 expert of the same values (every E2M1 value is an E4M3
        // one, same blocks and scales): widened per product. Its first value starts on a byte
        // when N K is even, which K (a multiple of 32) makes sure of.
        let widened;
        let q = if fp4 {
            widened = crate::codec::widened_e4m3(&b[ex * wlen..(ex + 1) * wlen], wbytes);
            widened.as_slice()
        } else {
            &b[ex * wbytes..(ex + 1) * wbytes]
        };
        let mat_b = MatB::Mx {
            q,
            scales: &b_scale[ex * sbytes..(ex + 1) * sbytes],
        };
        fast::mx_matmul_a(
            wrap(&rows),
            m,
            k,
            n,
            mat_b,
            trans_b,
            &mut out,
            &Epilogue::NONE,
            par,
        )?;
        for (r, &i) in run.iter().enumerate() {
            y[i * p * n..(i + 1) * p * n].copy_from_slice(&out[r * p * n..(r + 1) * p * n]);
        }
    }
    Ok(())
}

/// `MxGatherMatMul` (module docs): a float, float16 or bfloat16; b FLOAT8E4M3FN or FLOAT4E2M1;
/// b_scale FLOAT8E8M0; y of `attrs.output_dtype`.
pub fn mx_gather_matmul(
    a: TensorRef<'_>,
    b: TensorRef<'_>,
    b_scale: TensorRef<'_>,
    indices: &[i64],
    y: TensorMut<'_>,
    attrs: &MxGatherMatMulAttrs,
    par: &dyn Parallel,
) -> Result<()> {
    mx_gather_matmul_laid_out(a, b, b_scale, indices, y, attrs, attrs.trans_b, par)
}

/// [`mx_gather_matmul`] with b (and b_scale) in the layout `b_nk` says (`[E, N, K]` /
/// `[E, N, K/32]`, else `[E, K, N]` / `[E, K/32, N]`) whatever `attrs.trans_b` (which says a's
/// and y's): the provider's prepack stores a `trans_b = 0` weight transposed, per expert, into
/// the layout the kernels decode fastest. The same products and sums either way.
#[allow(clippy::too_many_arguments)]
pub fn mx_gather_matmul_laid_out(
    a: TensorRef<'_>,
    b: TensorRef<'_>,
    b_scale: TensorRef<'_>,
    indices: &[i64],
    y: TensorMut<'_>,
    attrs: &MxGatherMatMulAttrs,
    b_nk: bool,
    par: &dyn Parallel,
) -> Result<()> {
    let tb = attrs.trans_b;
    let [sa, p, k, e, n] = dims(a.shape, b.shape, tb, b_nk)?;
    let si = indices.len();
    let s = match (sa, si) {
        _ if sa == si => sa,
        (1, _) => si,
        (_, 1) => sa,
        _ => {
            return Err(shape_err!(
            "{si} indices against {sa} samples of a {:?}: the sample dims must match or one be 1",
            a.shape
        ))
        }
    };
    let d = [s, p, k, e, n];
    if !matches!(b.dtype, DType::E4M3 | DType::E2M1) {
        return Err(crate::KernelError::DType(format!(
            "b must be FLOAT8E4M3FN or FLOAT4E2M1, got {:?}",
            b.dtype
        )));
    }
    expect_dtype("b_scale", b_scale.dtype, DType::E8M0)?;
    let want_scale = if b_nk { [e, n, k / 32] } else { [e, k / 32, n] };
    expect_shape("b_scale", b_scale.shape, &want_scale)?;
    expect_dtype("y", y.dtype, attrs.output_dtype)?;
    let want_y = if tb { [s, n, 1] } else { [s, p, n] };
    expect_shape("y", y.shape, &want_y)?;
    let idx = (0..s)
        .map(|i| indices[if si == 1 { 0 } else { i }])
        .map(|v| {
            if v >= -(e as i64) && v < e as i64 {
                Ok(v.rem_euclid(e as i64) as usize)
            } else {
                // Not b's shape: after a rewrite it is the stored layout ([E, N, K] for a
                // user's [E, K, N]), which misled (new-user probe 7).
                Err(shape_err!(
                    "index {v} is out of range for {e} experts (valid: -{e} .. {})",
                    e - 1
                ))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let w = (b.bytes(), b_scale.view::<u8>()?, b.dtype == DType::E2M1);
    macro_rules! go {
        ($t:ty, $v:ident) => {{
            let wrap: fn(&[$t]) -> MatA<'_> = |r| MatA::$v(r);
            let av = a.view::<$t>()?;
            match y.dtype {
                DType::F32 => grouped(av, wrap, d, w, &idx, b_nk, y.view_mut::<f32>()?, par),
                DType::F16 => grouped(av, wrap, d, w, &idx, b_nk, y.view_mut::<f16>()?, par),
                DType::BF16 => grouped(av, wrap, d, w, &idx, b_nk, y.view_mut::<bf16>()?, par),
                other => Err(unsupported_dtype("y", other)),
            }
        }};
    }
    // Checks a's dtype (float types only).
    float_a(&a)?;
    match a.dtype {
        DType::F32 => go!(f32, F32),
        DType::F16 => go!(f16, F16),
        DType::BF16 => go!(bf16, BF16),
        other => Err(unsupported_dtype("a", other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::e2m1;
    use crate::Serial;

    /// f64 oracle: y[s] = deq(b[ids[s]]) · a[s] (weight first) or a[s] · deq(b[ids[s]]).
    fn oracle(
        a: &[f32],
        b: &[u8],
        sc: &[u8],
        fp4: bool,
        d: [usize; 5],
        ids: &[i64],
        tb: bool,
    ) -> Vec<f64> {
        let [s, p, k, e, n] = d;
        let val = |ex: usize, kk: usize, nn: usize| -> f64 {
            let (i, si) = if tb {
                (
                    ex * n * k + nn * k + kk,
                    ex * n * k / 32 + nn * (k / 32) + kk / 32,
                )
            } else {
                (
                    ex * k * n + kk * n + nn,
                    ex * k * n / 32 + (kk / 32) * n + nn,
                )
            };
            let v = if fp4 {
                e2m1::e2m1_to_f32(e2m1::nibble(b, i)) as f64
            } else {
                crate::codec::e4m3_to_f32(b[i]) as f64
            };
            v * 2f64.powi(sc[si] as i32 - 127)
        };
        let mut y = vec![0.0; s * p * n];
        for si in 0..s {
            let ex = ids[si].rem_euclid(e as i64) as usize;
            for r in 0..p {
                for nn in 0..n {
                    y[(si * p + r) * n + nn] = (0..k)
                        .map(|kk| a[(si * p + r) * k + kk] as f64 * val(ex, kk, nn))
                        .sum();
                }
            }
        }
        y
    }

    fn case(tb: bool, fp4: bool, p: usize, ids: &[i64]) {
        let (s, k, e, n) = (ids.len(), 64, 5, 24);
        let a: Vec<f32> = (0..s * p * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 16.0)
            .collect();
        let nb = e * n * k;
        let b: Vec<u8> = if fp4 {
            (0..nb.div_ceil(2)).map(|i| (i * 29 % 251) as u8).collect()
        } else {
            (0..nb).map(|i| ((i * 53 % 251) as u8) & 0x7e).collect()
        };
        let sc: Vec<u8> = (0..nb / 32).map(|i| 120 + (i % 9) as u8).collect();
        let (ashape, bshape, sshape, yshape) = if tb {
            (
                vec![s, k, 1],
                vec![e, n, k],
                vec![e, n, k / 32],
                vec![s, n, 1],
            )
        } else {
            (
                vec![s, p, k],
                vec![e, k, n],
                vec![e, k / 32, n],
                vec![s, p, n],
            )
        };
        let bdt = if fp4 { DType::E2M1 } else { DType::E4M3 };
        let ab: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut y = vec![0u8; s * p * n * 4];
        mx_gather_matmul(
            TensorRef::new(DType::F32, &ashape, &ab).unwrap(),
            TensorRef::new(bdt, &bshape, &b).unwrap(),
            TensorRef::new(DType::E8M0, &sshape, &sc).unwrap(),
            ids,
            TensorMut::new(DType::F32, &yshape, &mut y).unwrap(),
            &MxGatherMatMulAttrs {
                trans_b: tb,
                output_dtype: DType::F32,
            },
            &Serial,
        )
        .unwrap();
        let got: Vec<f32> = y
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let want = oracle(&a, &b, &sc, fp4, [s, p, k, e, n], ids, tb);
        let big = want.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // Exact products, f32 accumulation over K = 64: well within 1e-5 of the largest.
            assert!(
                (*g as f64 - w).abs() <= 1e-5 * big,
                "y[{i}] = {g}, want {w}"
            );
        }
        if tb || fp4 {
            return;
        }
        // The weight second, stored transposed per expert ([E, N, K], as the provider's prepack
        // keeps it): the same products, within the same bound.
        let tr = |src: &[u8], rows: usize, cols: usize| -> Vec<u8> {
            (0..e)
                .flat_map(|ex| {
                    let m = &src[ex * rows * cols..(ex + 1) * rows * cols];
                    (0..cols).flat_map(move |c| (0..rows).map(move |r| m[r * cols + c]))
                })
                .collect()
        };
        let (bt, st) = (tr(&b, k, n), tr(&sc, k / 32, n));
        let mut y2 = vec![0u8; s * p * n * 4];
        mx_gather_matmul_laid_out(
            TensorRef::new(DType::F32, &ashape, &ab).unwrap(),
            TensorRef::new(DType::E4M3, &[e, n, k], &bt).unwrap(),
            TensorRef::new(DType::E8M0, &[e, n, k / 32], &st).unwrap(),
            ids,
            TensorMut::new(DType::F32, &yshape, &mut y2).unwrap(),
            &MxGatherMatMulAttrs {
                trans_b: false,
                output_dtype: DType::F32,
            },
            true,
            &Serial,
        )
        .unwrap();
        for (i, (c, w)) in y2.chunks(4).zip(&want).enumerate() {
            let g = f32::from_le_bytes(c.try_into().unwrap()) as f64;
            assert!(
                (g - w).abs() <= 1e-5 * big,
                "laid out: y[{i}] = {g}, want {w}"
            );
        }
    }

    #[test]
    fn weight_first_and_weight_second_match_the_oracle() {
        case(true, false, 1, &[3, 0, 4, 3, -1]);
        case(false, false, 2, &[1, 1, 0, -5]);
        case(true, true, 1, &[2, 2, 2]);
        case(false, true, 3, &[4, 0]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let a = vec![0u8; 2 * 64 * 4];
        let b = vec![0u8; 3 * 8 * 64];
        let sc = vec![127u8; 3 * 8 * 2];
        let run = |ids: &[i64], ashape: &[usize], tb: bool| {
            let ys = if tb { vec![2, 8, 1] } else { vec![2, 1, 8] };
            let mut y = vec![0u8; 2 * 8 * 4];
            let bs = if tb { vec![3, 8, 64] } else { vec![3, 64, 8] };
            let ss = if tb { vec![3, 8, 2] } else { vec![3, 2, 8] };
            mx_gather_matmul(
                TensorRef::new(DType::F32, ashape, &a)?,
                TensorRef::new(DType::E4M3, &bs, &b)?,
                TensorRef::new(DType::E8M0, &ss, &sc)?,
                ids,
                TensorMut::new(DType::F32, &ys, &mut y)?,
                &MxGatherMatMulAttrs {
                    trans_b: tb,
                    output_dtype: DType::F32,
                },
                &Serial,
            )
        };
        assert!(run(&[0, 2], &[2, 64, 1], true).is_ok());
        assert!(run(&[0, 2], &[2, 1, 64], false).is_ok());
        let e = run(&[0, 3], &[2, 64, 1], true).unwrap_err().to_string();
        assert!(e.contains("index 3 is out of range for 3 experts"), "{e}");
        assert!(run(&[0, 1, 2], &[2, 64, 1], true).is_err());
        assert!(run(&[0, 1], &[2, 1, 64], true).is_err());
        assert!(run(&[0, 1], &[128], true).is_err());
    }

    /// y of the weight-first op for a f32 `[sa, 64, 1]` built from `rows` and `ids`, 3 experts.
    fn weight_first(rows: &[f32], sa: usize, ids: &[i64]) -> Vec<u8> {
        let (k, e, n) = (64, 3, 8);
        let b: Vec<u8> = (0..e * n * k)
            .map(|i| ((i * 53 % 251) as u8) & 0x7e)
            .collect();
        let sc: Vec<u8> = (0..e * n * k / 32).map(|i| 120 + (i % 9) as u8).collect();
        let ab: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
        let s = sa.max(ids.len());
        let mut y = vec![0u8; s * n * 4];
        mx_gather_matmul(
            TensorRef::new(DType::F32, &[sa, k, 1], &ab).unwrap(),
            TensorRef::new(DType::E4M3, &[e, n, k], &b).unwrap(),
            TensorRef::new(DType::E8M0, &[e, n, k / 32], &sc).unwrap(),
            ids,
            TensorMut::new(DType::F32, &[s, n, 1], &mut y).unwrap(),
            &MxGatherMatMulAttrs {
                trans_b: true,
                output_dtype: DType::F32,
            },
            &Serial,
        )
        .unwrap();
        y
    }

    #[test]
    fn the_sample_dim_broadcasts_as_matmul_does() {
        let row: Vec<f32> = (0..64).map(|i| (i as f32 - 30.0) / 8.0).collect();
        let three: Vec<f32> = row.iter().cycle().take(3 * 64).copied().collect();
        // One activation against three experts = the activation repeated.
        assert_eq!(
            weight_first(&row, 1, &[0, 2, 1]),
            weight_first(&three, 3, &[0, 2, 1])
        );
        // One expert for three samples = that expert repeated.
        let three: Vec<f32> = (0..3 * 64).map(|i| (i % 17) as f32 - 8.0).collect();
        assert_eq!(
            weight_first(&three, 3, &[2]),
            weight_first(&three, 3, &[2, 2, 2])
        );
    }
}
