//! The column-lane MXFP8 GEMM over prepacked column-group weights (`fast::cols_layout`,
//! kernels/src/fast/{avx512_cols,matmul_cols}.rs) against the f64-accumulated reference: N
//! tails (not a multiple of 16), K = 32·odd, M across row groups of 8 and up to 64, blocks of
//! zeros / subnormals / ±448, scales at the route's edges and just past them, NaN weights
//! (those groups leave the kernel), epilogues and output types; bit for bit the same for any
//! thread count. Where the CPU has no AVX-512 BF16 the same calls take the unpacked `[N, K]`
//! path, which these tests then check instead.

mod common;

use half::f16;
use kernels::fast::cols_layout::{mx_matmul_cols, pack, unpack, MxColWeights};
use kernels::slices::MatB;
use kernels::{reference, Element, Epilogue, StdThreads};

/// Special blocks of a case's weights.
#[derive(Clone, Copy, Debug)]
enum Edge {
    None,
    /// Column 0: a zero block, a block of E4M3 subnormals and one of ±448; column 1 block 0
    /// scale 246 (`MAX_FAST_SCALE`); the last column's last block the smallest scale on the
    /// route and column 3 block 0 one below it (that group leaves the kernel).
    Values,
    /// A NaN weight (column 2) and a scale of 247 (column n-1): those groups leave the kernel.
    OffRoute,
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

fn case(seed: u64, m: usize, k: usize, n: usize, edge: Edge) -> Case {
    let ([a_q, a_s], [mut w_q, mut w_s]) = common::mx_gemm_operands(seed, m, k, n);
    let kb = k / 32;
    let small = |kk: usize| 0x08 | if kk.is_multiple_of(2) { 0x80 } else { 0 };
    match edge {
        Edge::None => {}
        Edge::Values => {
            for kk in 0..32 {
                w_q[kk] = 0;
                if kb > 2 {
                    w_q[32 + kk] = (kk % 8) as u8 | if kk.is_multiple_of(3) { 0x80 } else { 0 };
                    w_q[64 + kk] = 0x7E | if kk.is_multiple_of(2) { 0x80 } else { 0 };
                }
                w_q[k + kk] = small(kk);
            }
            w_s[kb] = 246;
            // The smallest nonzero deq(A) is 2^(e - 136) for A's smallest scale e; products stay
            // normal while that plus the weight's (s - 136) ≥ -126.
            let ea = a_s.iter().map(|&s| s as i32).min().unwrap() - 136;
            let lowest = (-126 - ea + 136).clamp(0, 246) as u8;
            w_s[(n - 1) * kb + kb - 1] = lowest;
            if n > 3 {
                w_s[3 * kb] = lowest.saturating_sub(1);
            }
        }
        Edge::OffRoute => {
            w_q[2 * k + 5] = 0x7F;
            for kk in 0..32 {
                w_q[(n - 1) * k + kk] = small(kk);
            }
            w_s[(n - 1) * kb] = 247;
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
    fn cols<O: Element>(&self, ep: &Epilogue, threads: usize) -> Vec<O> {
        let (q, scales) = pack(&self.w_q, &self.w_s, self.n, self.k);
        let w = MxColWeights {
            q: &q,
            scales: &scales,
            n: self.n,
            k: self.k,
        };
        let mut y = vec![O::default(); self.m * self.n];
        let par = StdThreads::new(threads);
        mx_matmul_cols(&self.a_q, &self.a_s, self.m, w, &mut y, ep, &par).unwrap();
        y
    }

    /// The one-thread result, after checking that 2 and 3 threads give the same bits.
    fn same_for_any_thread_count(&self, what: &str) -> Vec<f32> {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let one: Vec<f32> = self.cols(&Epilogue::NONE, 1);
        for threads in [2, 3] {
            let got: Vec<f32> = self.cols(&Epilogue::NONE, threads);
            assert_eq!(bits(&got), bits(&one), "{what}, {threads} threads");
        }
        one
    }

    fn reference(&self, a_q: &[u8], w_q: &[u8], ep: &Epilogue) -> Vec<f32> {
        let mut y = vec![0f32; self.m * self.n];
        let b = MatB::Mx {
            q: w_q,
            scales: &self.w_s,
        };
        let (m, k, n) = (self.m, self.k, self.n);
        reference::mx_matmul(a_q, &self.a_s, m, k, n, b, true, &mut y, ep).unwrap();
        y
    }

    /// f32 accumulation bound per output: k·2^-22·Σ|a·b| + 1e-6.
    fn bound(&self) -> Vec<f32> {
        let abs = |q: &[u8]| q.iter().map(|v| v & 0x7F).collect::<Vec<_>>();
        let y = self.reference(&abs(&self.a_q), &abs(&self.w_q), &Epilogue::NONE);
        let scale = self.k as f32 * 2f32.powi(-22);
        y.iter().map(|v| v.abs() * scale + 1e-6).collect()
    }
}

fn run_dtype<O: Element>(c: &Case, what: &str) {
    let bound = c.bound();
    let bias: Vec<f32> = (0..c.n).map(|j| (j as f32 - 20.0) / 8.0).collect();
    let biased = Epilogue::new(0.5, 2.0, Some((&bias[..], &[c.n][..])), c.m, c.n).unwrap();
    for (alpha, ep) in [(1.0, Epilogue::NONE), (0.5, biased)] {
        let want = c.reference(&c.a_q, &c.w_q, &ep);
        let got: Vec<O> = c.cols(&ep, 2);
        let what = format!("{what} m {} k {} n {}", c.m, c.k, c.n);
        common::check_gemm(&got, &want, &bound, alpha, &what);
    }
}

#[test]
fn cols_matches_reference_at_the_edges() {
    let mut seed = 500;
    for m in [1, 3, 8, 9, 16, 64] {
        // n = 21 / 40 / 33: partial groups; k = 96 / 288 / 32 / 1056: 32·odd.
        for (k, n) in [(96, 21), (288, 40), (32, 16), (1056, 33), (192, 64)] {
            for edge in [Edge::None, Edge::Values, Edge::OffRoute] {
                seed += 1;
                let c = case(seed, m, k, n, edge);
                run_dtype::<f32>(&c, &format!("{edge:?} f32"));
                run_dtype::<f16>(&c, &format!("{edge:?} f16"));
            }
        }
    }
}

#[test]
fn cols_is_the_same_for_any_thread_count() {
    for (m, k, n) in [(8, 1056, 200), (3, 288, 70), (64, 96, 48)] {
        let c = case(m as u64, m, k, n, Edge::OffRoute);
        c.same_for_any_thread_count(&format!("m {m} k {k} n {n}"));
    }
}

/// A is prepared in row chunks on the pool (f32, bf16, smallest exponent): an A that leaves
/// the kernel's route through one row only (a block scale that makes deq(A) subnormal, in a
/// later row than row 0, i.e. another task's) still sends every group to the row path, and an
/// all-zero row and a NaN block scale (255) change nothing else; the same bits for any thread
/// count, within the reference's bound.
#[test]
fn cols_a_prepared_in_row_chunks() {
    for (m, low_row) in [(8, 7), (9, 4), (2, 1)] {
        for low in [1u8, 255, 127] {
            let mut c = case(40 + m as u64, m, 288, 40, Edge::None);
            let kb = c.k / 32;
            c.a_s[low_row * kb + 1] = low;
            c.a_q[..c.k].fill(0);
            let bound = c.bound();
            let want = c.reference(&c.a_q, &c.w_q, &Epilogue::NONE);
            let what = format!("m {m} scale {low}");
            let one = c.same_for_any_thread_count(&what);
            common::check_gemm(&one, &want, &bound, 1.0, &what);
        }
    }
}

/// NaN weights give NaN in their column, every row, and nowhere else.
#[test]
fn cols_nan_weights_poison_only_their_column() {
    let c = case(9, 8, 288, 40, Edge::OffRoute);
    let y: Vec<f32> = c.cols(&Epilogue::NONE, 2);
    for (i, v) in y.iter().enumerate() {
        assert_eq!(v.is_nan(), i % c.n == 2, "y[{i}] = {v}");
    }
}

/// f16 / bf16 outputs are the f32 result rounded per element (`Element::from_f32`), bit for bit:
/// full groups (stored 8 lanes at a time) and the tail group alike, with alphas that push sums
/// past f16's range (±Inf), into f16 and bf16 subnormals and to ±0, and NaN columns.
#[test]
fn cols_outputs_round_like_from_f32() {
    fn check<O: Element>(c: &Case, ep: &Epilogue, what: &str) {
        let want: Vec<f32> = c.cols(ep, 2);
        let got: Vec<O> = c.cols(ep, 2);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let (g, w) = (g.to_f32(), O::from_f32(*w).to_f32());
            assert_eq!(g.to_bits(), w.to_bits(), "{what}: y[{i}]");
        }
    }
    let c = case(77, 9, 288, 40, Edge::OffRoute);
    for alpha in [1.0, 3e4, 1e-6, 1e-30, 2f32.powi(-133), -1e38] {
        let ep = Epilogue::new::<f32>(alpha, 1.0, None, c.m, c.n).unwrap();
        check::<f16>(&c, &ep, &format!("f16 alpha {alpha}"));
        check::<half::bf16>(&c, &ep, &format!("bf16 alpha {alpha}"));
    }
}

#[test]
fn pack_and_unpack_are_inverse() {
    let (n, k) = (37, 96);
    let q: Vec<u8> = (0..n * k).map(|i| (i * 7 % 251) as u8).collect();
    let s: Vec<u8> = (0..n * k / 32).map(|i| (i * 3 % 200) as u8).collect();
    let (pq, ps) = pack(&q, &s, n, k);
    assert_eq!(pq.len(), 48 * k);
    assert_eq!(unpack(&pq, &ps, k, (0, n)), (q.clone(), s.clone()));
    let (q2, s2) = unpack(&pq, &ps, k, (16, 21));
    assert_eq!((&q2[..], &s2[..]), (&q[16 * k..], &s[16 * k / 32..]));
}
