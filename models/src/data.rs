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
#[cfg(test)]
fn e4m3_value(c: u8) -> f32 {
    let (exp, man) = (i32::from(c >> 3), f32::from(c & 7));
    if exp == 0 {
        man * (-9f32).exp2()
    } else {
        (1.0 + man / 8.0) * ((exp - 7) as f32).exp2()
    }
}

/// floor(log2 |a|) of a normal f32, exactly (from the exponent field).
fn floor_log2_normal(a: f32) -> i32 {
    ((a.to_bits() >> 23) & 0xFF) as i32 - 127
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
    // Both branches scale by a power of two (exact), so round_ties_even sees the true value and
    // a mantissa that rounds up to 16 carries into the exponent field by plain addition.
    let code = if a < (-6f32).exp2() {
        (a * 512.0).round_ties_even() as i32 // subnormals: multiples of 2^-9; 8 = smallest normal
    } else {
        let e = floor_log2_normal(a);
        let m = (a * ((3 - e) as f32).exp2()).round_ties_even() as i32; // in 8..=16
        ((e + 7) << 3) + (m - 8)
    };
    sign | code.min(126) as u8
}

/// E8M0 byte of a block's scale by the OCP floor rule: `2^(floor(log2 amax) − 8)`, clamped to the
/// E8M0 range; an all-zero block gets byte 0 (as ONNX `Cast(round_mode=down, saturate=1)` gives).
pub fn e8m0_floor_scale(amax: f32) -> u8 {
    e8m0_floor_scale_for(amax, E4M3_EMAX)
}

/// OCP MXFP4: the E8M0 exponent of a block is floor(log2 amax) − emax(E2M1) = … − 2.
const E2M1_EMAX: i32 = 2;
/// Magnitudes of the E2M1 codes 0..=7 (the sign is bit 3).
const E2M1_VALUES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// FLOAT4E2M1 code (low nibble) of `x`: the nearest value, ties to the even code (round to
/// nearest even: adjacent codes differ in the mantissa bit), saturating at ±6; NaN → +6 (E2M1 has
/// none; the generated weights never hold one).
pub fn e2m1_encode(x: f32) -> u8 {
    let a = if x.is_nan() { 6.0 } else { x.abs().min(6.0) };
    let mut best = 0u8;
    for (c, v) in E2M1_VALUES.iter().enumerate() {
        let (d, db) = ((v - a).abs(), (E2M1_VALUES[best as usize] - a).abs());
        if d < db || (d == db && c % 2 == 0) {
            best = c as u8;
        }
    }
    best | if x.is_sign_negative() && !x.is_nan() {
        8
    } else {
        0
    }
}

/// [`e8m0_floor_scale`] for an element format of largest exponent `emax`.
fn e8m0_floor_scale_for(amax: f32, emax: i32) -> u8 {
    if amax == 0.0 || !amax.is_finite() {
        return if amax == 0.0 { 0 } else { 0xFF };
    }
    // The exponent field is exact where log2() may round up just below a power of two.
    let bits = amax.to_bits();
    let floor_log2 = if (bits >> 23) & 0xFF == 0 {
        // fp32 subnormal: floor(log2) from the position of the top mantissa bit.
        -127 - ((bits & 0x7F_FFFF).leading_zeros() as i32 - 9)
    } else {
        floor_log2_normal(amax)
    };
    (floor_log2 - emax).clamp(-127, 127).wrapping_add(127) as u8
}

/// Quantizes a row-major `[k, n]` weight to MX along axis 0 (blocks of `block` rows per column):
/// returns (E4M3 bytes `[k, n]`, E8M0 bytes `[k/block, n]`), the `DequantizeLinear(axis=0)` layout.
pub fn mx_quantize_axis0(w: &[f32], k: usize, n: usize, block: usize) -> (Vec<u8>, Vec<u8>) {
    let mut q = vec![0u8; k * n];
    let mut scales = vec![0u8; (k / block) * n];
    let mut amax = vec![0f32; n];
    let mut inv_scale = vec![0f32; n];
    // Row-major passes over each block of rows: contiguous reads, per-column running state.
    for kb in 0..k / block {
        let rows = kb * block..(kb + 1) * block;
        amax.fill(0.0);
        for r in rows.clone() {
            for (m, v) in amax.iter_mut().zip(&w[r * n..(r + 1) * n]) {
                *m = m.max(v.abs());
            }
        }
        for col in 0..n {
            let s = e8m0_floor_scale(amax[col]);
            scales[kb * n + col] = s;
            // 2^(127 - s) is exact in f32 for s in 1..=254; byte 0 (zero block) quantizes zeros.
            inv_scale[col] = ((127 - i32::from(s)) as f32).exp2();
        }
        for r in rows {
            let (src, dst) = (&w[r * n..(r + 1) * n], &mut q[r * n..(r + 1) * n]);
            for ((d, v), is) in dst.iter_mut().zip(src).zip(&inv_scale) {
                *d = e4m3_encode(v * is);
            }
        }
    }
    (q, scales)
}

/// Quantizes a row-major `[k, n]` weight to MXFP4 along axis 0 (blocks of `block` rows per
/// column, OCP floor scales with emax 2): returns (FLOAT4E2M1 bytes of `[k, n]` packed two per
/// byte, element `2i` in the low nibble of byte `i`, and E8M0 bytes `[k/block, n]`).
pub fn mxfp4_quantize_axis0(w: &[f32], k: usize, n: usize, block: usize) -> (Vec<u8>, Vec<u8>) {
    let mut codes = vec![0u8; k * n];
    let mut scales = vec![0u8; (k / block) * n];
    for kb in 0..k / block {
        for col in 0..n {
            let at = |r: usize| (kb * block + r) * n + col;
            let amax = (0..block).fold(0f32, |m, r| m.max(w[at(r)].abs()));
            let s = e8m0_floor_scale_for(amax, E2M1_EMAX);
            scales[kb * n + col] = s;
            // 2^(127 - s) is exact in f32 for s in 1..=254; byte 0 (zero block) quantizes zeros.
            let inv = ((127 - i32::from(s)) as f32).exp2();
            for r in 0..block {
                codes[at(r)] = e2m1_encode(w[at(r)] * inv);
            }
        }
    }
    let packed = codes
        .chunks(2)
        .map(|p| p[0] | (p.get(1).copied().unwrap_or(0) << 4))
        .collect();
    (packed, scales)
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

    /// `len` Normal(mean, std) values (Box–Muller, both values of each pair used).
    pub fn normals(&mut self, len: usize, mean: f32, std: f32) -> Vec<f32> {
        let mut out = Vec::with_capacity(len + 1);
        while out.len() < len {
            let u1 = 1.0 - self.uniform(); // (0, 1]: ln() stays finite
            let r = (-2.0 * u1.ln()).sqrt() * f64::from(std);
            let (s, c) = (std::f64::consts::TAU * self.uniform()).sin_cos();
            out.push(mean + (r * c) as f32);
            out.push(mean + (r * s) as f32);
        }
        out.truncate(len);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mxfp4_weights_round_to_nearest_even_codes_with_floor_scales() {
        assert_eq!(e2m1_encode(0.25), 0, "tie 0 / 0.5 goes to even code 0");
        assert_eq!(
            e2m1_encode(0.75),
            2,
            "tie 0.5 / 1 goes to even code 2 (1.0)"
        );
        assert_eq!(e2m1_encode(2.5), 4, "tie 2 / 3 goes to 2");
        assert_eq!(e2m1_encode(5.0), 6, "tie 4 / 6 goes to 4");
        assert_eq!(e2m1_encode(7.9), 7, "saturates at 6");
        assert_eq!(e2m1_encode(-1.4), 8 | 3);
        assert_eq!(e2m1_encode(-0.0), 8);
        // One column of 64 rows: block 0 amax 12 (floor log2 = 3, scale 2^1), block 1 all zero.
        let mut w = vec![0f32; 64];
        w[0] = 12.0;
        w[1] = -1.0;
        w[2] = 3.0;
        let (q, s) = mxfp4_quantize_axis0(&w, 64, 1, 32);
        assert_eq!(s, vec![128, 0]);
        assert_eq!(q.len(), 32);
        // 12 / 2 = 6 (code 7), -1 / 2 = -0.5 (code 9), 3 / 2 = 1.5 (code 3): low nibble first.
        assert_eq!(q[0], 7 | (9 << 4));
        assert_eq!(q[1], 3);
    }

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

    /// Brute-force oracle: the nearest code by value, ties to the even code, saturating.
    fn e4m3_nearest(x: f32) -> u8 {
        let a = x.abs().min(E4M3_MAX);
        let best = (0..=126u8)
            .min_by(|&p, &q| {
                let (dp, dq) = ((e4m3_value(p) - a).abs(), (e4m3_value(q) - a).abs());
                dp.total_cmp(&dq).then((p % 2).cmp(&(q % 2)))
            })
            .unwrap_or(0);
        best | if x.is_sign_negative() { 0x80 } else { 0 }
    }

    #[test]
    fn e4m3_encode_matches_brute_force_on_midpoints_and_random_values() {
        let mut xs: Vec<f32> = (0..126u8)
            .map(|c| (e4m3_value(c) + e4m3_value(c + 1)) / 2.0)
            .collect();
        let mut rng = Rng::new(3);
        xs.extend(
            rng.normals(20_000, 0.0, 1.0)
                .iter()
                .zip(rng.normals(20_000, 0.0, 6.0))
                .map(|(v, e)| v * e.exp2()),
        );
        for x in xs {
            assert_eq!(e4m3_encode(x), e4m3_nearest(x), "{x:e}");
        }
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
