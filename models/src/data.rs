//! Element encodings of initializer bytes (little-endian `raw_data`) and the deterministic random
//! source of the weights.

use half::{bf16, f16};

use crate::config::DType;

/// Largest finite FLOAT8E4M3FN magnitude.
const E4M3_MAX: f32 = 448.0;
/// OCP MX: the E8M0 exponent of a block is floor(log2 amax) − emax(E4M3) = … − 8.
const E4M3_EMAX: i32 = 8;

/// Encodes f32 values as the bytes of `dtype` (round-to-nearest-even for f16/bf16).
pub fn encode_floats(dtype: DType, values: &[f32]) -> Vec<u8> {
    match dtype {
        DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => values
            .iter()
            .flat_map(|v| f16::from_f32(*v).to_le_bytes())
            .collect(),
        DType::Bf16 => values
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_le_bytes())
            .collect(),
    }
}

/// Value of the positive FLOAT8E4M3FN code `c` (0..=126; 127 is NaN).
fn e4m3_value(c: u8) -> f32 {
    let (exp, man) = (i32::from(c >> 3), f32::from(c & 7));
    if exp == 0 {
        man * (-9f32).exp2()
    } else {
        (1.0 + man / 8.0) * ((exp - 7) as f32).exp2()
    }
}

/// FLOAT8E4M3FN byte of `x`: round-to-nearest-even, saturating at ±448, NaN → 0x7F.
pub fn e4m3_encode(x: f32) -> u8 {
    if x.is_nan() {
        return 0x7F;
    }
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    let a = x.abs();
    if a >= E4M3_MAX {
        return sign | 126;
    }
    // Codes 0..=126 are monotone in value: find the last code not above `a`.
    let (mut lo, mut hi) = (0u8, 126u8);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if e4m3_value(mid) <= a {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let (below, above) = (e4m3_value(lo), e4m3_value(lo + 1));
    let code = if a - below < above - a || (a - below == above - a && lo % 2 == 0) {
        lo
    } else {
        lo + 1
    };
    sign | code
}

/// E8M0 byte of a block's scale by the OCP floor rule: `2^(floor(log2 amax) − 8)`, clamped to the
/// E8M0 range; an all-zero block gets byte 0 (as ONNX `Cast(round_mode=down, saturate=1)` gives).
pub fn e8m0_floor_scale(amax: f32) -> u8 {
    if amax == 0.0 || !amax.is_finite() {
        return if amax == 0.0 { 0 } else { 0xFF };
    }
    // The exponent field is exact where log2() may round up just below a power of two.
    let bits = amax.to_bits();
    let field = ((bits >> 23) & 0xFF) as i32;
    let floor_log2 = if field == 0 {
        // fp32 subnormal: floor(log2) from the position of the top mantissa bit.
        let man = bits & 0x7F_FFFF;
        -127 - (man.leading_zeros() as i32 - 9)
    } else {
        field - 127
    };
    (floor_log2 - E4M3_EMAX).clamp(-127, 127).wrapping_add(127) as u8
}

/// Quantizes a row-major `[k, n]` weight to MX along axis 0 (blocks of `block` rows per column):
/// returns (E4M3 bytes `[k, n]`, E8M0 bytes `[k/block, n]`), the `DequantizeLinear(axis=0)` layout.
pub fn mx_quantize_axis0(w: &[f32], k: usize, n: usize, block: usize) -> (Vec<u8>, Vec<u8>) {
    let mut q = vec![0u8; k * n];
    let mut scales = vec![0u8; (k / block) * n];
    for kb in 0..k / block {
        for col in 0..n {
            let rows = kb * block..(kb + 1) * block;
            let amax = rows
                .clone()
                .map(|r| w[r * n + col].abs())
                .fold(0.0f32, f32::max);
            let s = e8m0_floor_scale(amax);
            scales[kb * n + col] = s;
            let scale = (i32::from(s) - 127) as f32;
            for r in rows {
                q[r * n + col] = e4m3_encode(w[r * n + col] / scale.exp2());
            }
        }
    }
    (q, scales)
}

/// SplitMix64: a tiny, seedable, platform-independent generator (weights must be reproducible
/// byte for byte across machines, so no OS randomness and no float-order tricks).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x6A09_E667_F3BC_C908)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Normal(0, std) by Box–Muller.
    pub fn normal(&mut self, std: f32) -> f32 {
        let u1 = 1.0 - self.uniform(); // (0, 1]: ln() stays finite
        let u2 = self.uniform();
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos() * f64::from(std)) as f32
    }

    /// `len` Normal(mean, std) values.
    pub fn normals(&mut self, len: usize, mean: f32, std: f32) -> Vec<f32> {
        (0..len).map(|_| mean + self.normal(std)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_encode_matches_known_codes() {
        assert_eq!(e4m3_encode(0.0), 0x00);
        assert_eq!(e4m3_encode(-0.0), 0x80);
        assert_eq!(e4m3_encode(1.0), 0x38);
        assert_eq!(e4m3_encode(448.0), 0x7E);
        assert_eq!(e4m3_encode(1e9), 0x7E, "saturates");
        assert_eq!(e4m3_encode(f32::NEG_INFINITY), 0xFE, "saturates");
        assert_eq!(e4m3_encode(f32::NAN), 0x7F);
        assert_eq!(e4m3_encode((-9f32).exp2()), 0x01, "smallest subnormal");
        // 1.0625 is halfway between 1.0 (0x38, even) and 1.125 (0x39): ties to even.
        assert_eq!(e4m3_encode(1.0625), 0x38);
        assert_eq!(
            e4m3_encode(1.1875),
            0x3A,
            "halfway 1.125/1.25 goes to even 0x3A"
        );
        assert_eq!(e4m3_encode(-3.3), 0x80 | e4m3_encode(3.3));
    }

    #[test]
    fn e4m3_round_trips_every_finite_code() {
        for c in 0..=126u8 {
            assert_eq!(e4m3_encode(e4m3_value(c)), c);
        }
    }

    #[test]
    fn e8m0_floor_scale_follows_ocp_rule() {
        assert_eq!(e8m0_floor_scale(0.0), 0);
        assert_eq!(e8m0_floor_scale(1.0), 127 - 8);
        assert_eq!(e8m0_floor_scale(1.99), 127 - 8);
        assert_eq!(
            e8m0_floor_scale(f32::from_bits(0x3FFF_FFFF)),
            127 - 8,
            "just below 2"
        );
        assert_eq!(e8m0_floor_scale(448.0), 127);
        assert_eq!(e8m0_floor_scale(f32::MAX), 127 + 127 - 8);
        assert_eq!(e8m0_floor_scale(f32::from_bits(1)), 0, "clamped at 2^-127");
    }

    #[test]
    fn mx_quantize_axis0_uses_column_blocks() {
        let (k, n) = (64, 2);
        let w: Vec<f32> = (0..k * n)
            .map(|i| if i % n == 0 { 1.0 } else { 4.0 })
            .collect();
        let (q, s) = mx_quantize_axis0(&w, k, n, 32);
        assert_eq!(s, vec![119, 121, 119, 121]);
        assert!(q.iter().all(|&b| b == e4m3_encode(256.0)));
    }

    #[test]
    fn rng_is_deterministic() {
        let a = Rng::new(7).normals(4, 0.0, 1.0);
        assert_eq!(a, Rng::new(7).normals(4, 0.0, 1.0));
        assert_ne!(a, Rng::new(8).normals(4, 0.0, 1.0));
    }
}
