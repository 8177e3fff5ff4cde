//! The pinned elementary functions and reduction order every kernel shares, so the reference,
//! the fast paths and [`super::onnx_ops`] produce the same bits.
//!
//! * `exp_f32`: Cody–Waite range reduction + a degree-6 polynomial (cephes `expf` coefficients),
//!   evaluated with separate f32 multiplies and adds (no FMA), so an AVX2 lane computes the same
//!   bits. Below −87 it returns 0, above 88 +Inf (≈ 1–2 ulp elsewhere).
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
/// Polynomial coefficients, highest degree first, for exp(r) ≈ 1 + r + r²·P(r).
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
    let n = (x * LOG2E).round_ties_even();
    let r = x - n * LN2_HI;
    let r = r - n * LN2_LO;
    let mut p = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        p = p * r + c;
    }
    let y = p * (r * r) + r + 1.0;
    // n is in [-126, 127] for x in [EXP_LO, EXP_HI], so 2^n is a normal f32.
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// The pinned f32 logistic function.
#[inline]
pub fn sigmoid_f32(z: f32) -> f32 {
    1.0 / (1.0 + exp_f32(-z))
}

/// The pinned mean: f64 lane sums (element i → lane i mod 16), lanes combined by halving,
/// divided by the count in f64, rounded to f32. 0 for no values.
pub fn lane_mean(values: impl IntoIterator<Item = f32>) -> f32 {
    let mut lanes = [0f64; REDUCE_LANES];
    let mut count = 0usize;
    for v in values {
        lanes[count % REDUCE_LANES] += f64::from(v);
        count += 1;
    }
    if count == 0 {
        return 0.0;
    }
    let mut w = REDUCE_LANES;
    while w > 1 {
        w /= 2;
        for j in 0..w {
            lanes[j] += lanes[j + w];
        }
    }
    (lanes[0] / count as f64) as f32
}

/// The pinned mean of squares: each square rounded to f32 (an f32 `Pow`), then [`lane_mean`].
pub fn mean_of_squares(s: &[f32]) -> f32 {
    lane_mean(s.iter().map(|v| v * v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_accurate_to_a_few_ulp() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let got = exp_f32(x) as f64;
            let want = (x as f64).exp();
            assert!(
                ((got - want) / want).abs() < 4.0 * f32::EPSILON as f64,
                "x = {x}"
            );
            x += 0.0137;
        }
        assert_eq!(exp_f32(0.0), 1.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(100.0), f32::INFINITY);
        assert_eq!(exp_f32(-100.0), 0.0);
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
