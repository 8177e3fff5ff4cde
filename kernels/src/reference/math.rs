//! The pinned elementary functions and reduction order every kernel shares, so the reference,
//! the fast paths and [`super::onnx_ops`] produce the same bits.
//!
//! * `exp_f32`: Cody–Waite range reduction + a degree-6 polynomial (cephes `expf` coefficients),
//!   every step one correctly rounded f32 fused multiply-add (`f32::mul_add`), so an AVX2/AVX-512
//!   lane (`vfmadd`) and the GPU (`fmaf`) compute the same bits with half the operations of
//!   separate multiplies and adds. Below −87 it returns 0, above 88 +Inf, NaN stays NaN; within
//!   1 ulp of the true exp elsewhere (exhaustive: `exp_is_within_one_ulp_exhaustive`).
//! * `sigmoid_f32(z) = 1 / (1 + exp_f32(-z))` in f32.
//! * `mean_of_squares`: each square rounded to f32 (an f32 `Pow`/`Mul`), summed in f64 over
//!   [`REDUCE_LANES`] lanes (element i → lane i mod 16, each lane in index order), lanes combined
//!   by halving (lane j += lane j + w for w = 8, 4, 2, 1), divided by the count in f64 and
//!   rounded to f32.

/// Number of f64 partial sums in [`mean_of_squares`] (four AVX2 registers).
pub const REDUCE_LANES: usize = 16;

/// ln 2 split so that `n · LN2_HI` is exact for |n| < 2^9.
pub const LN2_HI: f32 = 0.693_359_4;
/// ln 2 − LN2_HI.
pub const LN2_LO: f32 = -2.121_944_4e-4;
/// log2(e).
pub const LOG2E: f32 = std::f32::consts::LOG2_E;
/// 1.5 · 2^23: `fma(x, LOG2E, EXP_SHIFTER)` is n + 1.5 · 2^23 with n = rint(x · LOG2E) (exact
/// product, ties to even), the GPU's way to round without a rounding instruction.
pub const EXP_SHIFTER: f32 = 12_582_912.0;
/// Polynomial coefficients, highest degree first, for exp(r) ≈ 1 + r·(1 + r·P(r)) (Horner).
pub const EXP_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5, // cephes 5.0000001201e-1 rounds to exactly 0.5 in f32
];
/// Inputs above this give +Inf.
pub const EXP_HI: f32 = 88.0;
/// Inputs below this give 0.
pub const EXP_LO: f32 = -87.0;

/// The pinned f32 exponential (see the module docs).
#[inline]
pub fn exp_f32(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x > EXP_HI {
        return f32::INFINITY;
    }
    if x < EXP_LO {
        return 0.0;
    }
    // One rounding of the exact x · log2(e) + 1.5 · 2^23 (|x · log2 e| < 2^7, ulp 1 there), so
    // n = rint(x · log2 e) of the unrounded product; the subtraction is exact.
    let n = x.mul_add(LOG2E, EXP_SHIFTER) - EXP_SHIFTER;
    // n · LN2_HI is exact and cancels against x exactly; the fma keeps n · LN2_LO unrounded.
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        p = p.mul_add(r, *c);
    }
    let y = p.mul_add(r, 1.0).mul_add(r, 1.0);
    // n is in [-126, 127] for x in [EXP_LO, EXP_HI], so 2^n is a normal f32.
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// The pinned f32 logistic function.
#[inline]
pub fn sigmoid_f32(z: f32) -> f32 {
    1.0 / (1.0 + exp_f32(-z))
}

/// The pinned sum: f64 lane sums (element i → lane i mod 16), lanes combined by halving; with
/// the number of values.
pub fn lane_sum(values: impl IntoIterator<Item = f32>) -> (f64, usize) {
    let mut lanes = [0f64; REDUCE_LANES];
    let mut count = 0usize;
    for v in values {
        lanes[count % REDUCE_LANES] += f64::from(v);
        count += 1;
    }
    let mut w = REDUCE_LANES;
    while w > 1 {
        w /= 2;
        for j in 0..w {
            lanes[j] += lanes[j + w];
        }
    }
    (lanes[0], count)
}

/// The pinned mean: [`lane_sum`] divided by the count in f64, rounded to f32. 0 for no values.
pub fn lane_mean(values: impl IntoIterator<Item = f32>) -> f32 {
    match lane_sum(values) {
        (_, 0) => 0.0,
        (sum, count) => (sum / count as f64) as f32,
    }
}

/// The pinned mean of squares: each square rounded to f32 (an f32 `Pow`), then [`lane_mean`].
pub fn mean_of_squares(s: &[f32]) -> f32 {
    lane_mean(s.iter().map(|v| v * v))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// |got − exp(x)| in units of the f32 spacing at exp(x) (the smaller one at a power of two).
    fn ulp_error(x: f32) -> f64 {
        let want = f64::from(x).exp();
        let w = want as f32;
        let up = f64::from(f32::from_bits(w.to_bits() + 1)) - f64::from(w);
        let down = f64::from(w) - f64::from(f32::from_bits(w.to_bits() - 1));
        (f64::from(exp_f32(x)) - want).abs() / up.min(down)
    }

    #[test]
    fn exp_is_accurate_to_a_few_ulp() {
        let mut x = -87.0f32;
        while x < 88.0 {
            assert!(ulp_error(x) <= 1.0, "x = {x}");
            x += 0.0137;
        }
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(-0.0), 1.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(100.0), f32::INFINITY);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(-100.0), 0.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
    }

    /// Every f32 in [-87, 88] (2.2e9 values, ~1-2 min in release): the pinned exp is within 1 ulp
    /// of the true exp (measured 2026-11-30: max 1.0000 ulp, none above). Run with
    /// `cargo test -p kernels --release -- --ignored exp_is_within_one_ulp_exhaustive`.
    #[test]
    #[ignore]
    fn exp_is_within_one_ulp_exhaustive() {
        let ranges = [(0u32, EXP_HI.to_bits()), (0x8000_0000u32, EXP_LO.to_bits())];
        let (mut worst, mut at) = (0f64, 0f32);
        for (a, b) in ranges {
            for bits in a..=b {
                let x = f32::from_bits(bits);
                let e = ulp_error(x);
                if e > worst {
                    (worst, at) = (e, x);
                }
            }
        }
        assert!(worst <= 1.0, "max {worst} ulp at x = {at}");
    }

    #[test]
    fn sigmoid_limits() {
        assert_eq!(sigmoid_f32(0.0), 0.5);
        assert_eq!(sigmoid_f32(-200.0), 0.0);
        assert_eq!(sigmoid_f32(200.0), 1.0);
        assert!(sigmoid_f32(f32::NAN).is_nan());
    }

    #[test]
    fn mean_of_squares_matches_f64_for_easy_rows() {
        let v: Vec<f32> = (0..100).map(|i| i as f32 * 0.5).collect();
        let want = v.iter().map(|x| (x * x) as f64).sum::<f64>() / 100.0;
        assert_eq!(mean_of_squares(&v), want as f32);
    }
}
