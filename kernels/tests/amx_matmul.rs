//! The AMX-BF16 path of the MXFP8 `[N, K]` GEMM (4 ≤ M ≤ 64; the kernel alone at M = 1..16:
//! kernels/src/fast/amx.rs) against the f64-accumulated reference and against the AVX-512 BF16
//! path, on random MX operands with the edges of its route: scales
//! at the guard limits, a scale past them and NaN weights (those 32-column units leave the
//! tiles), N not a multiple of 16, K = 32·odd (a 32-wide tail), f32 / bf16 / f16 outputs, with
//! and without an epilogue. Skipped (with a message) where the CPU or OS has no AMX.

mod common;

use half::{bf16, f16};
use kernels::slices::MatB;
use kernels::{fast, reference, Element, Epilogue, StdThreads};

fn amx_here() -> bool {
    let ok = fast::with_amx(true, fast::amx_bf16);
    if !ok {
        eprintln!("skipped: this CPU / OS has no AMX-BF16 (or no AVX-512 BF16)");
    }
    ok
}

struct Case {
    m: usize,
    k: usize,
    n: usize,
    a_q: Vec<u8>,
    a_s: Vec<u8>,
    w_q: Vec<u8>,
    w_s: Vec<u8>,
}

/// Edge weights of a case.
#[derive(Clone, Copy, Debug)]
enum Edge {
    /// Random weights only.
    None,
    /// Blocks at the route's limits: scale 246 (`MAX_FAST_SCALE`) and the smallest scale whose
    /// products stay normal f32 for this A.
    Limits,
    /// A NaN weight (column 2) and a scale of 247 (column 40): those units leave the tiles.
    OffRoute,
}

fn case(seed: u64, m: usize, k: usize, n: usize, edge: Edge) -> Case {
    let ([a_q, a_s], [mut w_q, mut w_s]) = common::mx_gemm_operands(seed, m, k, n);
    let kb = k / 32;
    match edge {
        Edge::None => {}
        Edge::Limits => {
            // Column 1, block 0: scale 246 with small magnitudes (outputs stay finite).
            for kk in 0..32 {
                w_q[k + kk] = 0x08 | if kk % 2 == 0 { 0x80 } else { 0 };
            }
            w_s[kb] = 246;
            // Column n-1, last block: the smallest scale on the route. The smallest nonzero
            // deq(A) is 2^(e - 127 - 9) for its smallest block scale e (E4M3 subnormal 2^-9);
            // products stay normal while that exponent plus the weight's (s - 136) ≥ -126.
            let ea = a_s.iter().map(|&s| s as i32).min().unwrap() - 136;
            let lowest = (-126 - ea + 136).clamp(0, 246) as u8;
            w_s[(n - 1) * kb + kb - 1] = lowest;
        }
        Edge::OffRoute => {
            w_q[2 * k + 5] = 0x7F;
            let c = 40.min(n - 1);
            for kk in 0..32 {
                w_q[c * k + kk] = 0x08 | if kk % 2 == 0 { 0x80 } else { 0 };
            }
            w_s[c * kb] = 247;
        }
    }
    Case {
        m,
        k,
        n,
        a_q,
        a_s,
        w_q,
        w_s,
    }
}

impl Case {
    fn b(&self) -> MatB<'_> {
        MatB::Mx {
            q: &self.w_q,
            scales: &self.w_s,
        }
    }

    /// The fast GEMM with AMX on or off (the AVX-512 BF16 path where the CPU has it).
    fn fast<O: Element>(&self, amx: bool, ep: &Epilogue) -> Vec<O> {
        let mut y = vec![O::default(); self.m * self.n];
        fast::with_amx(amx, || {
            fast::mx_matmul(
                &self.a_q,
                &self.a_s,
                self.m,
                self.k,
                self.n,
                self.b(),
                true,
                &mut y,
                ep,
                &StdThreads::new(2),
            )
        })
        .unwrap();
        y
    }

    fn reference(&self, ep: &Epilogue) -> Vec<f32> {
        let mut y = vec![0f32; self.m * self.n];
        reference::mx_matmul(
            &self.a_q,
            &self.a_s,
            self.m,
            self.k,
            self.n,
            self.b(),
            true,
            &mut y,
            ep,
        )
        .unwrap();
        y
    }

    /// f32 accumulation bound per output: k·2^-22·Σ|a·b| (Σ|a·b| from |A|·|B|) + 1e-6.
    fn bound(&self) -> Vec<f32> {
        let abs = |q: &[u8]| q.iter().map(|v| v & 0x7F).collect::<Vec<_>>();
        let (aa, ab) = (abs(&self.a_q), abs(&self.w_q));
        let mut y = vec![0f32; self.m * self.n];
        let b = MatB::Mx {
            q: &ab,
            scales: &self.w_s,
        };
        reference::mx_matmul(
            &aa,
            &self.a_s,
            self.m,
            self.k,
            self.n,
            b,
            true,
            &mut y,
            &Epilogue::NONE,
        )
        .unwrap();
        y.iter()
            .map(|v| v.abs() * self.k as f32 * 2f32.powi(-22) + 1e-6)
            .collect()
    }
}

/// The epilogues tried: none, and alpha 0.5, beta 2 with an `[N]` bias.
fn epilogues(m: usize, n: usize) -> Vec<(f32, Epilogue)> {
    let bias: Vec<f32> = (0..n).map(|j| (j as f32 - 20.0) / 8.0).collect();
    vec![
        (1.0, Epilogue::NONE),
        (
            0.5,
            Epilogue::new(0.5, 2.0, Some((&bias[..], &[n][..])), m, n).unwrap(),
        ),
    ]
}

/// `got` (type O) within `alpha`·bound plus the rounding of O of the reference.
fn check<O: Element>(c: &Case, got: &[O], want: &[f32], bound: &[f32], alpha: f32, what: &str) {
    let what = format!("{what} m {} k {} n {}", c.m, c.k, c.n);
    common::check_gemm(got, want, bound, alpha, &what);
}

fn run_dtype<O: Element>(c: &Case, label: &str) {
    let label = format!("{label} {}", std::any::type_name::<O>());
    let bound = c.bound();
    for (alpha, ep) in epilogues(c.m, c.n) {
        let want = c.reference(&ep);
        let amx: Vec<O> = c.fast(true, &ep);
        check(c, &amx, &want, &bound, alpha, &format!("amx {label}"));
        // AMX vs the AVX-512 path: both within the bound of the reference, so within twice it
        // of each other (f32 outputs: the summation orders are the only difference).
        if std::mem::size_of::<O>() == 4 {
            let other: Vec<f32> = c.fast(false, &ep);
            let twice: Vec<f32> = bound.iter().map(|b| 2.0 * b).collect();
            let other_o: Vec<O> = other.iter().map(|&v| O::from_f32(v)).collect();
            let got: Vec<f32> = amx.iter().map(|v| v.to_f32()).collect();
            check(
                c,
                &other_o,
                &got,
                &twice,
                alpha,
                &format!("amx vs avx512 {label}"),
            );
        }
    }
}

#[test]
fn amx_matches_reference_and_avx512() {
    if !amx_here() {
        return;
    }
    let mut seed = 100;
    // M < amx::MIN_M (1, 3) runs the AVX-512 path by dispatch; the kernel itself is tested at
    // those M in kernels/src/fast/amx.rs.
    for m in [1, 3, 4, 8, 9, 16, 17, 40, 64] {
        // K = 32·odd: the 32-wide tail (k = 32: nothing but it); n = 70 / 33 / 47: a partial
        // 16-column tile and a partial 32-column pass.
        for (k, n) in [(96, 70), (1056, 33), (32, 47), (192, 64)] {
            for edge in [Edge::None, Edge::Limits, Edge::OffRoute] {
                seed += 1;
                let c = case(seed, m, k, n, edge);
                let label = format!("{edge:?}");
                run_dtype::<f32>(&c, &label);
                run_dtype::<bf16>(&c, &label);
                run_dtype::<f16>(&c, &label);
            }
        }
    }
}

/// NaN weights give NaN in their column (every row) and nothing else changes: the unit with
/// the NaN is recomputed off the tiles, the other units stay on them.
#[test]
fn amx_nan_weights_poison_only_their_column() {
    if !amx_here() {
        return;
    }
    let c = case(7, 8, 1056, 70, Edge::OffRoute);
    let y: Vec<f32> = c.fast(true, &Epilogue::NONE);
    for r in 0..c.m {
        for j in 0..c.n {
            assert_eq!(y[r * c.n + j].is_nan(), j == 2, "row {r} column {j}");
        }
    }
}
