//! Test rows for the fused norm's packed-word paths (AVX-512 `avx512_norm_words`, AVX2
//! `avx2_norm_words`): rows and attributes on the edges those paths guard, each compared with
//! the reference by the tests of the path.

use half::bf16;

use crate::attrs::{AddRmsNormAttrs, InvForm};
use crate::codec::{ScaleRule, BLOCK};
use crate::slices::NormOutputs;
use crate::Element;

/// A way to compute bf16 rows of the fused norm into the outputs it is given.
pub type Call<'a> = &'a dyn Fn(NormOutputs<'_, bf16>);

/// A [`Call`] and its name.
pub type Run<'a> = (&'a str, Call<'a>);

/// bf16 rows (`normed` not asked for, `residual_out` if `ro`) through each of `runs` and
/// through the reference: the same q, scales and residual_out, compared row by row (the run
/// and the first row that differ are named).
pub fn runs_match_reference<G: Element>(
    x: &[bf16],
    residual: Option<&[bf16]>,
    gamma: &[G],
    h: usize,
    attrs: &AddRmsNormAttrs,
    ro: bool,
    runs: &[Run<'_>],
) {
    let m = x.len() / h;
    let run = |how: Option<Call<'_>>| {
        let (mut q, mut s) = (vec![0u8; m * h], vec![0u8; m * h / BLOCK]);
        let mut r_out = vec![bf16::ZERO; m * h];
        let out = NormOutputs {
            q: &mut q,
            scales: &mut s,
            residual_out: ro.then_some(&mut r_out[..]),
            normed: None,
        };
        match how {
            Some(f) => f(out),
            None => crate::reference::add_rms_norm_mx_quant(x, residual, gamma, h, attrs, out)
                .expect("valid shapes"),
        }
        let bits: Vec<u16> = r_out.iter().map(|v| v.to_bits()).collect();
        (q, s, bits)
    };
    let want = run(None);
    let ctx = format!("{attrs:?} residual {} ro {ro}", residual.is_some());
    for (name, f) in runs {
        let got = run(Some(*f));
        for r in 0..m {
            let (a, b) = (r * h..(r + 1) * h, r * h / BLOCK..(r + 1) * h / BLOCK);
            let row = |what| format!("{what}, {name}, row {r}: {ctx}");
            assert!(got.0[a.clone()] == want.0[a.clone()], "{}", row("q"));
            assert!(got.1[b.clone()] == want.1[b], "{}", row("scales"));
            assert!(got.2[a.clone()] == want.2[a], "{}", row("residual_out"));
        }
    }
}

/// A xorshift64 generator from `seed` (non-zero).
pub fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// bf16 rows of `h` (x, a residual), f32 weights and the cases to run them with: attributes,
/// whether the residual is passed, whether `residual_out` is asked for.
pub struct EdgeRows {
    pub x: Vec<bf16>,
    pub res: Vec<bf16>,
    pub gamma: Vec<f32>,
    pub h: usize,
    pub cases: Vec<(AddRmsNormAttrs, bool, bool)>,
}

impl EdgeRows {
    /// Runs `check(x, residual, gamma, h, attrs, residual_out)` on every case.
    pub fn each(
        &self,
        check: impl Fn(&[bf16], Option<&[bf16]>, &[f32], usize, &AddRmsNormAttrs, bool),
    ) {
        for (attrs, residual, ro) in &self.cases {
            let r = residual.then_some(&self.res[..]);
            check(&self.x, r, &self.gamma, self.h, attrs, *ro);
        }
    }
}

/// Rows for the packed-word pass 2 and its quantizer. The weights put the normed values on the
/// word path's edges: subnormal lanes (which `vcvtne2ps2bf16` flushes) inside large blocks,
/// blocks whose |max| is just above / at / below the 2^-100 guard, zeros, E4M3 subnormal
/// lanes, values around 448 · 2^k, a block that overflows to ±Inf; a NaN row and an
/// Inf + -Inf row take the NaN-aware pass 2 from the words. Both scale rules and NaN
/// policies, `round_sum` on and off (off: not the word path), with and without residual
/// and residual_out, 33 blocks (a partial 16-block group).
pub fn pass2_edges() -> EdgeRows {
    let (m, h) = (4, 1056);
    let mut next = xorshift(0x2545_F491_4F6C_DD1Du64);
    let mut val = |scale: f32| (next() % 2001) as f32 / 1000.0 * scale - scale;
    let mut xf: Vec<f32> = (0..m * h).map(|_| val(2.0)).collect();
    let resf: Vec<f32> = (0..m * h).map(|_| val(3.0)).collect();
    let mut gamma: Vec<f32> = (0..h).map(|_| val(1.0) + 0.05).collect();
    let p = |e: i32| 2f32.powi(e);
    for j in 0..32 {
        let sign = if j % 3 == 0 { -1.0 } else { 1.0 };
        // Block 1: subnormal products among normal ones; block 2: zeros and E4M3 subnormal
        // lanes (2^-16 of the block max).
        gamma[32 + j] = if j % 4 == 0 {
            sign * 1e-39
        } else {
            gamma[32 + j]
        };
        gamma[64 + j] = [0.0, sign * p(-16), gamma[64 + j]][j % 3];
        // Blocks 3-6: |max| of about 2^-99, 2^-100 (exactly, for |s|·(1/d) = 1 lanes
        // rounded), 2^-101, 2^-127 with subnormal lanes in each.
        for (b, e) in [(3, -99), (4, -100), (5, -101), (6, -127)] {
            gamma[32 * b + j] = if j % 2 == 0 {
                sign * p(e)
            } else {
                sign * 3e-39
            };
        }
        // Block 7: values around 448 · 2^k, block 8: overflow to ±Inf.
        gamma[224 + j] = sign * (440.0 + j as f32);
        gamma[256 + j] = if j == 5 { 3e38 } else { 1.0 };
    }
    // A NaN row and an Inf + -Inf row (Σs² not finite: the NaN-aware pass 2).
    xf[h + 9] = f32::NAN;
    (xf[2 * h + 3], xf[2 * h + 4]) = (f32::INFINITY, f32::NEG_INFINITY);
    let to = |v: &[f32]| v.iter().map(|f| bf16::from_f32(*f)).collect::<Vec<_>>();
    let (x, res) = (to(&xf), to(&resf));
    let quants = [
        crate::codec::QuantConfig::default(),
        crate::codec::QuantConfig {
            scale_rule: ScaleRule::Rceil,
            nan_policy: crate::codec::NanPolicy::Ignore,
        },
    ];
    let mut cases = Vec::new();
    for quant in quants {
        for (round_sum, inv_form) in [(true, InvForm::Rsqrt), (false, InvForm::RecipMul)] {
            let attrs = AddRmsNormAttrs {
                gemma: false,
                gamma_in_f32: true,
                inv_form,
                round_sum,
                quant,
                ..Default::default()
            };
            for residual in [true, false] {
                for ro in [true, false] {
                    cases.push((attrs, residual, ro));
                }
            }
        }
    }
    EdgeRows {
        x,
        res,
        gamma,
        h,
        cases,
    }
}

/// Rows for the packed-word pass 1 (pipelined into the previous row's pass 2): subnormal sums
/// (flushed by `vcvtne2ps2bf16`) with zeros, |s| near 2^-67 and 2^-70 (subnormal f32 squares)
/// and 2^64 (f32 squares overflow), sums halfway between bf16 values, values spanning ±2^40
/// (the f64 sums round, so their order shows), rows whose first 16 |s| are at / just below
/// 2^-40 followed by |s| just below 2^-67 (the AVX2 FMA sum's guard), and plain rows between
/// them; with and without residual and residual_out, epsilon 1e-6 and 0.
pub fn pass1_edges() -> EdgeRows {
    let h = 512;
    let mut next = xorshift(0x9E37_79B9_7F4A_7C15u64);
    let mut wide = |span: i32| {
        let r = next();
        let mag = 2f32.powi((r % (2 * span as u64 + 1)) as i32 - span);
        let sign = if r & (1 << 40) != 0 { -1.0 } else { 1.0 };
        sign * mag * (1.0 + (r >> 44) as f32 / (1u64 << 20) as f32)
    };
    let plain: Vec<f32> = (0..2 * h).map(|_| wide(3)).collect();
    let p = |e: i32| 2f32.powi(e);
    let sub = f32::from_bits(0x0001_0000); // the smallest bf16 subnormal, 2^-133
    let mut rows: Vec<(Vec<f32>, Vec<f32>)> = Vec::new();
    let row_of =
        |f: &dyn Fn(usize) -> (f32, f32)| -> (Vec<f32>, Vec<f32>) { (0..h).map(f).unzip() };
    // Subnormal sums and zeros among normal values.
    rows.push(row_of(&|i| match i % 7 {
        0 => (sub * 3.0, sub * 2.0),
        1 => (p(-127), -sub * 4.0),
        2 => (1.5, -1.5),
        _ => (plain[i], plain[h + i]),
    }));
    rows.push(row_of(&|i| (plain[h + i], plain[i])));
    // |s| around 2^-67 and 2^-64 (no subnormals), then 2^64.
    rows.push(row_of(&|i| match i % 5 {
        0 => (p(-68) * 1.5, 0.0),
        1 => (-p(-66) * 1.25, p(-70)),
        2 => (p(-64), 0.0),
        _ => (plain[i], 0.0),
    }));
    // Every |s| near 2^-70 with 8 significant bits: inexact f32 squares that decide Σs²
    // (with epsilon 0).
    rows.push(row_of(&|i| {
        ((1.0 + (i % 128) as f32 / 128.0) * p(-70), 0.0)
    }));
    // The first 16 |s| at 2^-40 (each lane starts at 2^-80), then |s| just below 2^-67
    // (squares just below 2^-134, inexact in f32): the AVX2 FMA sum without its fallback.
    // Then the first |s| just below 2^-40: the fallback.
    let tiny_tail = move |i: usize| (1.0 + (i % 128) as f32 / 128.0) * p(-68);
    rows.push(row_of(&|i| match i {
        0..16 => (if i % 2 == 0 { p(-40) } else { -p(-40) }, 0.0),
        _ => (tiny_tail(i), 0.0),
    }));
    rows.push(row_of(&|i| match i {
        0 => (p(-40) * (1.0 - p(-8)), 0.0),
        1..16 => (p(-40), 0.0),
        _ => (tiny_tail(i), 0.0),
    }));
    rows.push(row_of(&|i| match i % 9 {
        0 => (p(64) * 1.5, 0.0),
        1 => (-p(63), -p(62)),
        _ => (plain[i], plain[h + i]),
    }));
    // Halfway sums: 1 + 2^-8 (to 1), 1 + 3 · 2^-8 (up), their negatives.
    rows.push(row_of(&|i| match i % 4 {
        0 => (1.0, p(-8)),
        1 => (1.0 + p(-7), p(-8)),
        2 => (-1.0, -p(-8)),
        _ => (-1.0 - p(-7), -p(-8)),
    }));
    rows.push(row_of(&|i| (plain[i] * p(37), plain[h + i] * p(-30))));
    rows.push(row_of(&|i| (plain[i], -plain[h + i])));
    let to = |v: Vec<f32>| v.into_iter().map(bf16::from_f32).collect::<Vec<_>>();
    let x = to(rows.iter().flat_map(|r| r.0.clone()).collect());
    let res = to(rows.iter().flat_map(|r| r.1.clone()).collect());
    let gamma: Vec<f32> = (0..h).map(|i| 0.5 + (i % 7) as f32 * 0.1).collect();
    let mut cases = Vec::new();
    for (residual, ro, epsilon) in [
        (true, true, 1e-6),
        (true, false, 0.0),
        (false, true, 0.0),
        (false, false, 1e-6),
    ] {
        let attrs = AddRmsNormAttrs {
            epsilon,
            ..Default::default()
        };
        cases.push((attrs, residual, ro));
    }
    EdgeRows {
        x,
        res,
        gamma,
        h,
        cases,
    }
}
