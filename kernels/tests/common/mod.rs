//! Helpers shared by the integration tests: testdata parsing and a small deterministic RNG.
#![allow(dead_code)]

use std::path::PathBuf;

use kernels::Element;

/// Path of a file under kernels/testdata.
pub fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(name)
}

/// Non-comment, non-empty lines of a testdata file, split on whitespace.
pub fn rows(name: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(testdata(name)).expect("testdata file is committed");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// Parses a comma-separated list of hex numbers.
pub fn hex_list(s: &str) -> Vec<u32> {
    s.split(',')
        .map(|h| u32::from_str_radix(h, 16).expect("hex"))
        .collect()
}

/// xorshift64* — deterministic, dependency-free randomness for the differential tests.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Roughly normal (sum of uniforms), times `scale`.
    pub fn normal(&mut self, scale: f32) -> f32 {
        let s: f32 = (0..4).map(|_| self.unit()).sum();
        (s - 2.0) * 1.732 * scale
    }
    /// A vector of normals whose magnitude varies per 32-block over many binades, with some
    /// edge blocks mixed in (zeros, ±0, subnormals, huge values).
    pub fn mixed_row(&mut self, n: usize) -> Vec<f32> {
        let mut v = Vec::with_capacity(n);
        for b in 0..n.div_ceil(32) {
            let kind = self.next_u64() % 10;
            let scale = 2f32.powi((self.next_u64() % 40) as i32 - 20);
            for j in 0..32.min(n - b * 32) {
                v.push(match kind {
                    0 => 0.0,
                    1 => {
                        if j % 3 == 0 {
                            -0.0
                        } else {
                            0.0
                        }
                    }
                    2 => self.normal(1e-39),
                    3 => self.normal(1e30),
                    _ => self.normal(scale),
                });
            }
        }
        v
    }
}

/// GEMM outputs `got` (type O) within `alpha`·`bound` (the f32 accumulation bound) of the
/// f64-accumulated reference `want`, plus O's rounding of it — or equal to the reference
/// rounded to O (also where that overflows: f16 at 2^16), or both NaN.
pub fn check_gemm<O: Element>(got: &[O], want: &[f32], bound: &[f32], alpha: f32, what: &str) {
    // Half an ulp of O relative, plus its rounding of the bound-sized error.
    let rel = match std::mem::size_of::<O>() {
        4 => 2f32.powi(-23),
        _ if O::from_f32(1.0 + 2f32.powi(-9)).to_f32() != 1.0 => 2f32.powi(-10), // f16
        _ => 2f32.powi(-7),                                                      // bf16
    };
    for (i, ((g, w), b)) in got.iter().zip(want).zip(bound).enumerate() {
        let g = g.to_f32();
        let tol = alpha * b * (1.0 + rel) + w.abs() * rel;
        let same = g.to_bits() == O::from_f32(*w).to_f32().to_bits();
        assert!(
            same || (g - w).abs() <= tol || (g.is_nan() && w.is_nan()),
            "{what}: y[{i}] = {g}, reference {w}, tolerance {tol}"
        );
    }
}

/// Random MX GEMM operands: A (`m × k`, normal σ = 2) and `[N, K]` weights (σ = 0.1), each
/// quantized by the reference (RCEIL scales): ([a_q, a_scales], [w_q, w_scales]).
pub fn mx_gemm_operands(seed: u64, m: usize, k: usize, n: usize) -> ([Vec<u8>; 2], [Vec<u8>; 2]) {
    use kernels::codec::{NanPolicy, QuantConfig, ScaleRule};
    let mut rng = Rng::new(seed);
    let cfg = QuantConfig {
        scale_rule: ScaleRule::Rceil,
        nan_policy: NanPolicy::Ignore,
    };
    let mut quantize = |rows: usize, sigma: f32| {
        let x: Vec<f32> = (0..rows * k).map(|_| rng.normal(sigma)).collect();
        let (mut q, mut s) = (vec![0u8; rows * k], vec![0u8; rows * k / 32]);
        kernels::reference::mx_quantize(&x, k, &mut q, &mut s, cfg).unwrap();
        [q, s]
    };
    let a = quantize(m, 2.0);
    (a, quantize(n, 0.1))
}

/// The little-endian bytes of an f32, f16 or bf16 output (`dt`; any other dtype reads as bf16)
/// as f32 values.
pub fn float_values(dt: kernels::DType, y: &[u8]) -> Vec<f32> {
    use half::{bf16, f16};
    match dt {
        kernels::DType::F32 => y
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        kernels::DType::F16 => y
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => y
            .chunks_exact(2)
            .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    }
}
