//! Fused SwiGluMxQuant (SwiGLU-OAI, split halves, bf16, I = 768 = MiniMax-M3 TP4 shared expert)
//! vs our own unfused chain (activation pass writing bf16 → fast MxQuantize) vs the memory floor.
//! `cargo bench -p kernels --bench swiglu_quant`; a ratio table is printed at the end.

mod common;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, BenchmarkId, Criterion};
use half::bf16;
use kernels::attrs::{Activation, SwiGluAttrs, SwiGluLayout};
use kernels::codec::QuantConfig;
use kernels::fast;
use kernels::parallel::for_row_chunks;
use kernels::reference::swiglu_value;
use kernels::slices::SwiGluInput;
use kernels::ThreadPool;

const I: usize = 768;
const MS: [usize; 6] = [1, 8, 16, 64, 192, 2048];

fn attrs() -> SwiGluAttrs {
    SwiGluAttrs {
        layout: SwiGluLayout::SplitHalves,
        activation: Activation::Oai,
        alpha: 1.702,
        ..Default::default()
    }
}

struct Bufs {
    gu: Vec<bf16>,
    act: Vec<bf16>,
    q: Vec<u8>,
    s: Vec<u8>,
}

fn bufs(m: usize) -> Bufs {
    Bufs {
        gu: common::normals(m * 2 * I, 5, 3.0)
            .into_iter()
            .map(bf16::from_f32)
            .collect(),
        act: vec![bf16::ZERO; m * I],
        q: vec![0; m * I],
        s: vec![0; m * I / 32],
    }
}

fn fused(b: &mut Bufs, par: &ThreadPool) {
    fast::swiglu_mx_quant(
        SwiGluInput::Fused(&b.gu),
        I,
        &attrs(),
        &mut b.q,
        &mut b.s,
        par,
    )
    .expect("valid shapes");
}

/// Activation pass (the scalar per-op-rounded activation, as the unfused graph computes it)
/// writing bf16, then the fast quantizer reading it back.
fn unfused(b: &mut Bufs, par: &ThreadPool) {
    let a = attrs();
    let (gu, act) = (&b.gu, b.act.as_mut_ptr() as usize);
    let rows = gu.len() / (2 * I);
    for_row_chunks(par, rows, 64, &|r0, r1| {
        // SAFETY: disjoint row ranges of a buffer that outlives the call.
        let out = unsafe {
            std::slice::from_raw_parts_mut((act as *mut bf16).add(r0 * I), (r1 - r0) * I)
        };
        for (r, orow) in (r0..r1).zip(out.chunks_exact_mut(I)) {
            let row = &gu[r * 2 * I..(r + 1) * 2 * I];
            for (j, o) in orow.iter_mut().enumerate() {
                *o = bf16::from_f32(swiglu_value::<bf16>(
                    row[j].to_f32(),
                    row[I + j].to_f32(),
                    &a,
                ));
            }
        }
    });
    fast::mx_quantize(&b.act, I, &mut b.q, &mut b.s, QuantConfig::default(), par)
        .expect("valid shapes");
}

fn fused_bytes(m: usize) -> usize {
    m * I * (2 * 2 + 1) + m * I / 32
}

fn bench(c: &mut Criterion) {
    let par = ThreadPool::global();
    let mut group = c.benchmark_group("swiglu_oai_quant_bf16_i768");
    group
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_millis(600))
        .sample_size(15);
    for m in MS {
        let mut b = bufs(m);
        group.bench_with_input(BenchmarkId::new("fused", m), &m, |bn, _| {
            bn.iter(|| fused(black_box(&mut b), par))
        });
        group.bench_with_input(BenchmarkId::new("unfused", m), &m, |bn, _| {
            bn.iter(|| unfused(black_box(&mut b), par))
        });
    }
    group.finish();
}

fn summary() {
    let par = ThreadPool::global();
    println!(
        "\nswiglu_oai_quant bf16 I={I} threads={}",
        kernels::Parallel::concurrency(par)
    );
    println!(
        "{:>6} {:>11} {:>11} {:>11} {:>12} {:>14}",
        "M", "fused_us", "unfused_us", "floor_us", "fused/floor", "unfused/fused"
    );
    for m in MS {
        let mut b = bufs(m);
        let runs = common::runs_for(fused_bytes(m));
        let tf = common::median_secs(runs, || fused(&mut b, par));
        let tu = common::median_secs(runs, || unfused(&mut b, par));
        let floor = fused_bytes(m) as f64 / common::copy_bandwidth(fused_bytes(m) / 2, m, 64, par);
        println!(
            "{m:>6} {:>11.2} {:>11.2} {:>11.2} {:>12.2} {:>14.2}",
            tf * 1e6,
            tu * 1e6,
            floor * 1e6,
            tf / floor,
            tu / tf
        );
    }
}

criterion_group!(benches, bench);

fn main() {
    if let Some(spec) = std::env::var_os("MXFUSE_BENCH_LOOP") {
        // `M,iters`: run the fused kernel in a loop (for `perf stat`), nothing else.
        let v: Vec<usize> = spec
            .to_string_lossy()
            .split(',')
            .map(|x| x.parse().expect("M,iters"))
            .collect();
        let (par, mut b) = (ThreadPool::global(), bufs(v[0]));
        (0..v[1]).for_each(|_| fused(&mut b, par));
        return;
    }
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
    summary();
}
