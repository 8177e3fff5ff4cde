//! The harness shared by the fused-vs-unfused benches (norm_quant, swiglu_quant): a criterion
//! group timing both variants per M, a same-run ratio table against the memory floor, and the
//! `MXFUSE_BENCH_LOOP=M,iters` mode that only loops the fused kernel (for `perf stat`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use kernels::ThreadPool;

use super::{copy_bandwidth, median_secs, runs_for};

/// What one fused-vs-unfused bench times; everything else is the same for all of them.
pub struct FusedVsUnfused<B> {
    /// Criterion group name.
    pub group: &'static str,
    /// First line of the ratio table (the thread count is appended).
    pub title: String,
    /// The row counts M.
    pub ms: &'static [usize],
    /// Inputs and outputs for M rows.
    pub bufs: fn(usize) -> B,
    /// The fused op.
    pub fused: fn(&mut B, &ThreadPool),
    /// Our own unfused chain computing the same outputs.
    pub unfused: fn(&mut B, &ThreadPool),
    /// Bytes the fused op must move for M rows (the memory floor's numerator).
    pub fused_bytes: fn(usize) -> usize,
    /// `min_rows` of the copy that measures the floor's bandwidth.
    pub copy_min_rows: usize,
}

impl<B> FusedVsUnfused<B> {
    /// The bench's `main`: the loop mode when `MXFUSE_BENCH_LOOP` is set, else criterion
    /// (configured from the command line, as `criterion_group!` does) and the ratio table.
    pub fn main(&self) {
        if let Some(spec) = std::env::var_os("MXFUSE_BENCH_LOOP") {
            // `M,iters`: run the fused kernel in a loop (for `perf stat`), nothing else.
            let v: Vec<usize> = spec
                .to_string_lossy()
                .split(',')
                .map(|x| x.parse().expect("M,iters"))
                .collect();
            let (par, mut b) = (ThreadPool::global(), (self.bufs)(v[0]));
            (0..v[1]).for_each(|_| (self.fused)(&mut b, par));
            return;
        }
        let mut c = Criterion::default().configure_from_args();
        self.bench(&mut c);
        Criterion::default().configure_from_args().final_summary();
        self.summary();
    }

    fn bench(&self, c: &mut Criterion) {
        let par = ThreadPool::global();
        let mut group = c.benchmark_group(self.group);
        group
            .warm_up_time(Duration::from_millis(200))
            .measurement_time(Duration::from_millis(600))
            .sample_size(15);
        for &m in self.ms {
            let mut b = (self.bufs)(m);
            group.bench_with_input(BenchmarkId::new("fused", m), &m, |bn, _| {
                bn.iter(|| (self.fused)(black_box(&mut b), par))
            });
            group.bench_with_input(BenchmarkId::new("unfused", m), &m, |bn, _| {
                bn.iter(|| (self.unfused)(black_box(&mut b), par))
            });
        }
        group.finish();
    }

    /// The ratio table (same process, medians): fused/floor and unfused/fused.
    fn summary(&self) {
        let par = ThreadPool::global();
        println!(
            "\n{} threads={}",
            self.title,
            kernels::Parallel::concurrency(par)
        );
        println!(
            "{:>6} {:>11} {:>11} {:>11} {:>12} {:>14}",
            "M", "fused_us", "unfused_us", "floor_us", "fused/floor", "unfused/fused"
        );
        for &m in self.ms {
            let mut b = (self.bufs)(m);
            let bytes = (self.fused_bytes)(m);
            let runs = runs_for(bytes);
            let tf = median_secs(runs, || (self.fused)(&mut b, par));
            let tu = median_secs(runs, || (self.unfused)(&mut b, par));
            let bw = copy_bandwidth(bytes / 2, m, self.copy_min_rows, par);
            let floor = bytes as f64 / bw;
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
}
