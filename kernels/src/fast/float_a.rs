//! Float A on the bf16 GEMM routes (a weight-only MX GEMM: `MxMatMul` with a float `a`).
//!
//! The AVX-512 BF16 / AMX kernels multiply bf16 A by bf16 weights; deq(MXFP8 A) is always a bf16
//! value, a float32 or float16 activation is not. Such an A is split exactly into bf16 parts,
//! `a = h + m + l` per element (`h` = a with its low 16 bits cleared, `m` = the same of `a − h`,
//! `l = a − h − m`: each subtraction exact, each part at most 8 significant bits), the parts run
//! as `parts · M` rows of one GEMM through the bf16 routes (each product of a part and a weight
//! is an exact f32 product, as for MXFP8 A), and each output is `fl(S_h + fl(S_m + S_l))` of
//! the parts' f32 sums before the epilogue. A float16 A needs two parts (11 significant bits),
//! a float32 A three, a bfloat16 A (or an A whose values all happen to be bf16 values) one: it
//! is not split. At small M the GEMM is bound by the weight decode, which the parts' rows share
//! (the kernels decode each weight once for up to 8 rows).
//!
//! Summation: every product `a·w` is split into `h·w + m·w + l·w`, all exact; the three partial
//! sums are f32 accumulations in the kernels' order, so the result is within the f32
//! accumulation bound of docs/ops.md (`K·2^-22·Σ|a·b|`), like any other order.
//!
//! Not split (the caller's plain path, exact f32 products on the AVX2 route): A holding a
//! NaN or ±Inf (`h` would be the infinity and `a − h` NaN), CPUs without AVX-512 BF16 (or with
//! `MXFUSE_CPU_ISA=avx2`), and `parts · M` above [`MAX_ROWS`]. Recomputed there: a GEMM with a
//! NaN among the combined sums — an infinite weight times a zero part of a nonzero `a` gives
//! `0 · ∞ = NaN` where `a · ∞` is ±∞.
//!
//! A part below 2^-126 (the rest of an `a` near or below f32's normal minimum) is an f32
//! subnormal and may hold more than 8 significant bits (not a bf16 value); the routes' guard
//! (every value a normal f32) sends such parts to exact f32 products, so the sum stays exact.

use super::isa;
use crate::element::Element;
use crate::epilogue::Epilogue;
use crate::error::Result;
use crate::slices::MatA;

/// Largest `parts · M` split: one row group of the in-register bf16 kernels (8 rows decode
/// each weight once). More rows decode the weights again per group, and the exact f32 route
/// was faster there (BENCHMARKS.md, session 19: a float32 A at M = 8, 24 split rows, 3.80 ms a
/// step against 2.56 ms on the AVX2 route).
pub const MAX_ROWS: usize = 8;

/// `a` with its low 16 bits cleared (the leading 8 significant bits: a bf16 value).
fn high(a: f32) -> f32 {
    f32::from_bits(a.to_bits() & 0xFFFF_0000)
}

/// A (float, `m × k`) split into bf16-exact parts stacked as `parts · m` rows (part p of row r
/// at row `p·m + r`), and `parts` (2 or 3); `None` when A is MX or bfloat16, already bf16
/// exact, or holds a non-finite value.
pub fn split(a: MatA<'_>, m: usize, k: usize) -> Option<(Vec<f32>, usize)> {
    if matches!(a, MatA::Mx { .. } | MatA::BF16(_)) {
        return None;
    }
    let mut rows = vec![0f32; 3 * m * k];
    let (hs, rest) = rows.split_at_mut(m * k);
    let (ms, ls) = rest.split_at_mut(m * k);
    let mut row = vec![0f32; k];
    let (mut any_m, mut any_l) = (false, false);
    for r in 0..m {
        a.row_f32(r, k, &mut row);
        let span = r * k..(r + 1) * k;
        for (((&v, h), mid), lo) in row
            .iter()
            .zip(&mut hs[span.clone()])
            .zip(&mut ms[span.clone()])
            .zip(&mut ls[span])
        {
            if !v.is_finite() {
                return None;
            }
            *h = high(v);
            let rem = v - *h;
            *mid = high(rem);
            *lo = rem - *mid;
            any_m |= *mid != 0.0;
            any_l |= *lo != 0.0;
        }
    }
    let parts = match (any_m, any_l) {
        (false, false) => return None,
        (_, false) => 2,
        _ => 3,
    };
    rows.truncate(parts * m * k);
    Some((rows, parts))
}

/// Runs a float A through the bf16 routes by [`split`] where that applies: `run(parts_a, rows,
/// sums)` computes the raw f32 sums (`rows × n`, no epilogue) of the stacked parts; the parts'
/// sums are combined, the epilogue applied and y written. `None` (y not written) where A is
/// not split or a combined sum is NaN (see below): the caller runs its own path.
#[allow(clippy::too_many_arguments)]
pub fn run_split<O: Element>(
    a: MatA<'_>,
    m: usize,
    k: usize,
    n: usize,
    y: &mut [O],
    ep: &Epilogue,
    run: impl FnOnce(MatA<'_>, usize, &mut [f32]) -> Result<()>,
) -> Option<Result<()>> {
    if m == 0 || 2 * m > MAX_ROWS || !isa::avx512_bf16() {
        return None;
    }
    let (parts_a, parts) = split(a, m, k)?;
    if parts * m > MAX_ROWS {
        return None;
    }
    let mut sums = vec![0f32; parts * m * n];
    if let Err(e) = run(MatA::F32(&parts_a), parts * m, &mut sums) {
        return Some(Err(e));
    }
    let mut acc = vec![0f32; m * n];
    for (r, row) in acc.chunks_exact_mut(n).enumerate() {
        let part = |p: usize| &sums[(p * m + r) * n..(p * m + r + 1) * n];
        let (sh, sm) = (part(0), part(1));
        for (c, x) in row.iter_mut().enumerate() {
            let low = if parts == 3 {
                sm[c] + part(2)[c]
            } else {
                sm[c]
            };
            *x = sh[c] + low;
        }
    }
    // An infinite weight (E4M3 ≥ 2 at scale 254, ...) times a zero part of a nonzero a — the low
    // parts of a bf16 value, the high part of a subnormal — adds 0 · ∞ = NaN where a · ∞ is ±∞:
    // a NaN sum is recomputed on the caller's path, which multiplies a itself (IEEE there; a NaN
    // that is the right answer costs the GEMM twice).
    if acc.iter().any(|v| v.is_nan()) {
        return None;
    }
    for (r, row) in acc.chunks_exact_mut(n).enumerate() {
        ep.apply_row(r, 0, row);
        for (o, &v) in y[r * n..(r + 1) * n].iter_mut().zip(row.iter()) {
            *o = O::from_f32(v);
        }
    }
    Some(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_bf16_values_that_sum_to_a_exactly() {
        let vals = [
            1.0f32,
            std::f32::consts::PI,
            -1.0e-20,
            3.402_823_5e38,
            1.175_494_4e-38,
            0.1,
            -7.0e5,
            0.0,
            -0.0,
        ];
        let mut a = vec![0f32; 32];
        a[..vals.len()].copy_from_slice(&vals);
        let (p, parts) = split(MatA::F32(&a), 1, 32).expect("split");
        assert_eq!(parts, 3);
        for (i, &v) in a.iter().enumerate() {
            let (h, m, l) = (p[i], p[32 + i], p[64 + i]);
            for x in [h, m, l] {
                assert_eq!(x.to_bits() & 0xFFFF, 0, "{v}: {x} is not a bf16");
            }
            assert_eq!(
                f64::from(h) + f64::from(m) + f64::from(l),
                f64::from(v),
                "{v}"
            );
        }
        // Float16 values need two parts; bf16 values none; non-finite values are not split.
        let f16s: Vec<f32> = (0..32)
            .map(|i| half::f16::from_f32(1.0 + i as f32 / 1000.0).to_f32())
            .collect();
        assert_eq!(split(MatA::F32(&f16s), 1, 32).map(|s| s.1), Some(2));
        assert!(split(MatA::F32(&[0.5f32; 32]), 1, 32).is_none());
        let mut inf = vec![1.1f32; 32];
        inf[3] = f32::INFINITY;
        assert!(split(MatA::F32(&inf), 1, 32).is_none());
    }
}
