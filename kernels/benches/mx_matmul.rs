//! MxMatMul at the MiniMax-M3 TP4 shapes (N, K) = (1536, 6144), (6144, 768), (6144, 6144) with
//! MXFP8 weights [N, K] + [N, K/32] scales and bf16 output: the quantize-A-inside path
//! (`mx_matmul_quantize_a`, bf16 activations) and the pre-quantized path, reported as weight-read
//! bandwidth relative to the copy bandwidth measured in the same run. Decode GEMMs stream their
//! weights from DRAM in a real model, so each call uses the next of several weight copies whose
//! total (≥ 384 MiB) exceeds the last-level cache (32 MiB on the EPYC VM, 300 MiB on the Xeon),
//! and the copy is measured on that footprint.
//! Where the CPU's path wants them (`fast::cols_layout::wanted`: AVX-512 BF16 without AMX) the
//! `[N, K]` weights are prepacked in the column-group layout as the provider does, and the
//! `[N, K]` calls run `mx_matmul_cols` (the `[K, N]` ones read the first n·k bytes as before).
//! `cargo bench -p kernels --bench mx_matmul`.

mod common;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, BenchmarkId, Criterion};
use half::bf16;
use kernels::codec::QuantConfig;
use kernels::fast::cols_layout::MxColWeights;
use kernels::slices::MatB;
use kernels::{fast, reference};
use kernels::{Epilogue, ThreadPool};

const SHAPES: [(usize, usize); 3] = [(1536, 6144), (6144, 768), (6144, 6144)];
const MS: [usize; 4] = [1, 8, 16, 64];

struct Case {
    m: usize,
    n: usize,
    k: usize,
    x: Vec<bf16>,
    a_q: Vec<u8>,
    a_s: Vec<u8>,
    /// Weight copies (values, scales), used round-robin; in the column-group layout when
    /// `cols`.
    w: Vec<(Vec<u8>, Vec<u8>)>,
    cols: bool,
    next: usize,
    y: Vec<bf16>,
    /// A `[N]` bf16 bias with alpha 0.5, beta 2 (the `,bias` loop mode: the epilogue's cost).
    bias: Epilogue,
}

/// Total bytes of weight copies a case cycles through.
const ROTATION_BYTES: usize = 384 << 20;

impl Case {
    /// Advances to the next weight copy and returns its index.
    fn advance(&mut self) -> usize {
        self.next = (self.next + 1) % self.w.len();
        self.next
    }
}

fn case(m: usize, n: usize, k: usize) -> Case {
    let cfg = QuantConfig::default();
    let x: Vec<bf16> = common::normals(m * k, 7, 1.0)
        .into_iter()
        .map(bf16::from_f32)
        .collect();
    let (mut a_q, mut a_s) = (vec![0u8; m * k], vec![0u8; m * k / 32]);
    reference::mx_quantize(&x, k, &mut a_q, &mut a_s, cfg).expect("valid shapes");
    let w = common::normals(n * k, 8, 0.02);
    let (mut w_q, mut w_s) = (vec![0u8; n * k], vec![0u8; n * k / 32]);
    fast::mx_quantize(&w, k, &mut w_q, &mut w_s, cfg, ThreadPool::global()).expect("valid shapes");
    // MXFUSE_BENCH_CACHED=1 (loop mode): one weight copy, so a small one stays in cache and the
    // kernel's compute rate shows without DRAM.
    let cached = std::env::var_os("MXFUSE_BENCH_CACHED").is_some();
    let copies = if cached {
        1
    } else {
        ROTATION_BYTES.div_ceil(weight_bytes(n, k))
    };
    let cols = fast::cols_layout::wanted();
    let (w_q, w_s) = if cols {
        fast::cols_layout::pack(&w_q, &w_s, n, k)
    } else {
        (w_q, w_s)
    };
    Case {
        m,
        n,
        k,
        x,
        a_q,
        a_s,
        w: vec![(w_q, w_s); copies],
        cols,
        next: 0,
        y: vec![bf16::ZERO; m * n],
        bias: {
            let c: Vec<bf16> = common::normals(n, 9, 1.0)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            Epilogue::new(0.5, 2.0, Some((&c[..], &[n][..])), m, n).expect("bias of [N]")
        },
    }
}

fn run_quantize_a(c: &mut Case, par: &ThreadPool) {
    let i = c.advance();
    let cfg = QuantConfig::default();
    if c.cols {
        // What `mx_matmul_quantize_a` does: quantize A, then the GEMM.
        let (mut a_q, mut a_s) = (vec![0u8; c.m * c.k], vec![0u8; c.m * c.k / 32]);
        fast::mx_quantize(&c.x, c.k, &mut a_q, &mut a_s, cfg, par).expect("valid shapes");
        let w = cols_weights(&c.w[i], c.n, c.k);
        fast::cols_layout::mx_matmul_cols(&a_q, &a_s, c.m, w, &mut c.y, &Epilogue::NONE, par)
            .expect("valid shapes");
        return;
    }
    let b = MatB::Mx {
        q: &c.w[i].0,
        scales: &c.w[i].1,
    };
    fast::mx_matmul_quantize_a(
        &c.x,
        c.m,
        c.k,
        c.n,
        b,
        true,
        cfg,
        &mut c.y,
        &Epilogue::NONE,
        par,
    )
    .expect("valid shapes");
}

/// A weight copy in the column-group layout.
fn cols_weights((q, scales): &(Vec<u8>, Vec<u8>), n: usize, k: usize) -> MxColWeights<'_> {
    MxColWeights { q, scales, n, k }
}

/// The pre-quantized GEMM; `trans_b = false` reads the same bytes as `[K, N]` weights with
/// `[K/32, N]` scales (same sizes, finite values: the timing is what matters here).
fn run_prequantized(c: &mut Case, trans_b: bool, par: &ThreadPool) {
    run_prequantized_ep(c, trans_b, false, par)
}

/// [`run_prequantized`], with the case's bias epilogue when `bias`.
fn run_prequantized_ep(c: &mut Case, trans_b: bool, bias: bool, par: &ThreadPool) {
    let i = c.advance();
    let ep = if bias { &c.bias } else { &Epilogue::NONE };
    if c.cols && trans_b {
        let w = cols_weights(&c.w[i], c.n, c.k);
        fast::cols_layout::mx_matmul_cols(&c.a_q, &c.a_s, c.m, w, &mut c.y, ep, par)
            .expect("valid shapes");
        return;
    }
    let (nk, nkb) = (c.n * c.k, c.n * c.k / 32);
    let b = MatB::Mx {
        q: &c.w[i].0[..nk],
        scales: &c.w[i].1[..nkb],
    };
    fast::mx_matmul(&c.a_q, &c.a_s, c.m, c.k, c.n, b, trans_b, &mut c.y, ep, par)
        .expect("valid shapes");
}

fn weight_bytes(n: usize, k: usize) -> usize {
    n * k + n * k / 32
}

fn bench(c: &mut Criterion) {
    let par = ThreadPool::global();
    let mut group = c.benchmark_group("mx_matmul_mxfp8_weights");
    group
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_millis(800))
        .sample_size(10);
    for (n, k) in SHAPES {
        for m in MS {
            let mut cs = case(m, n, k);
            let id = format!("n{n}_k{k}");
            group.bench_with_input(
                BenchmarkId::new(format!("{id}/quantize_a"), m),
                &m,
                |bn, _| bn.iter(|| run_quantize_a(black_box(&mut cs), par)),
            );
        }
    }
    group.finish();
}

fn summary() {
    let par = ThreadPool::global();
    println!(
        "\nmx_matmul MXFP8 weights [N,K], bf16 out, threads={}",
        kernels::Parallel::concurrency(par)
    );
    println!(
        "{:>5} {:>5} {:>4} {:>12} {:>12} {:>12} {:>10} {:>10} {:>11}",
        "N", "K", "M", "quant_a_us", "preq_us", "kn_preq_us", "w_GB/s", "copy_GB/s", "w/copy_bw"
    );
    for (n, k) in SHAPES {
        let copy_bw = common::copy_bandwidth(ROTATION_BYTES, n, 64, par);
        for m in MS {
            let mut cs = case(m, n, k);
            let runs = 15;
            let tq = common::median_secs(runs, || run_quantize_a(&mut cs, par));
            let tp = common::median_secs(runs, || run_prequantized(&mut cs, true, par));
            let tkn = common::median_secs(runs, || run_prequantized(&mut cs, false, par));
            // Weight-read bandwidth: weight bytes per call / time, against the copy bandwidth
            // counted STREAM-style (bytes read + written per second).
            let wbw = weight_bytes(n, k) as f64 / tq;
            println!(
                "{n:>5} {k:>5} {m:>4} {:>12.1} {:>12.1} {:>12.1} {:>10.2} {:>10.2} {:>11.2}",
                tq * 1e6,
                tp * 1e6,
                tkn * 1e6,
                wbw / 1e9,
                copy_bw / 1e9,
                wbw / copy_bw
            );
        }
    }
}

criterion_group!(benches, bench);

fn main() {
    if let Some(spec) = std::env::var_os("MXFUSE_BENCH_LOOP") {
        // `N,K,M,iters[,kn|,preq|,bias]`: run the quantize-A GEMM (or, with `kn` / `preq`, the
        // pre-quantized `[K, N]` / `[N, K]` GEMM; `bias`: `preq` with a `[N]` bias, alpha and
        // beta) in a loop, printing the per-call median.
        let spec = spec.to_string_lossy().into_owned();
        let kn = spec.ends_with(",kn");
        let bias = spec.ends_with(",bias");
        let preq = spec.ends_with(",preq") || bias;
        let v: Vec<usize> = spec
            .trim_end_matches(",kn")
            .trim_end_matches(",preq")
            .trim_end_matches(",bias")
            .split(',')
            .map(|x| x.parse().expect("N,K,M,iters[,kn|,preq|,bias]"))
            .collect();
        let (par, mut cs) = (ThreadPool::global(), case(v[2], v[0], v[1]));
        let mut times: Vec<f64> = (0..v[3])
            .map(|_| {
                let t = std::time::Instant::now();
                if kn || preq {
                    run_prequantized_ep(&mut cs, !kn, bias, par);
                } else {
                    run_quantize_a(&mut cs, par);
                }
                t.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let (n, k) = (v[0], v[1]);
        let med = times[times.len() / 2];
        eprintln!(
            "N={n} K={k} M={} median {:.1} us min {:.1} us, weights {:.2} GB/s",
            v[2],
            med * 1e6,
            times[0] * 1e6,
            weight_bytes(n, k) as f64 / med / 1e9
        );
        return;
    }
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
    summary();
}
