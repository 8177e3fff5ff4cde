//! Shared bench helpers: inputs, best-of timing and the same-run memory-copy floor.
#![allow(dead_code)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use kernels::parallel::{for_row_chunks, Parallel};

pub mod fused_vs_unfused;

/// Deterministic pseudo-random normals (sum of uniforms).
pub fn normals(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            let mut acc = 0f32;
            for _ in 0..4 {
                s ^= s >> 12;
                s ^= s << 25;
                s ^= s >> 27;
                acc += (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 24) as f32;
            }
            (acc - 2.0) * 1.732 * scale
        })
        .collect()
}

/// Median of `runs` timings of `f` after a warm-up, as seconds.
pub fn median_secs(runs: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    let mut t: Vec<Duration> = (0..runs)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed()
        })
        .collect();
    t.sort();
    t[t.len() / 2].as_secs_f64()
}

/// Copy bandwidth (bytes read + written per second) for a copy of `bytes` bytes split into
/// `rows` rows across `par` like the kernels split their rows.
pub fn copy_bandwidth(bytes: usize, rows: usize, min_rows: usize, par: &dyn Parallel) -> f64 {
    let row = bytes.div_ceil(rows.max(1)).max(64);
    let src = vec![1u8; row * rows.max(1)];
    let mut dst = vec![0u8; row * rows.max(1)];
    let dst_ptr = dst.as_mut_ptr() as usize;
    let runs = (64 << 20) / src.len().max(1) + 5;
    let secs = median_secs(runs.min(2000), || {
        for_row_chunks(par, rows.max(1), min_rows, &|r0, r1| {
            // SAFETY: row chunks are disjoint ranges of `dst`, which outlives the call.
            let d = unsafe {
                std::slice::from_raw_parts_mut((dst_ptr as *mut u8).add(r0 * row), (r1 - r0) * row)
            };
            d.copy_from_slice(&src[r0 * row..r1 * row]);
        });
        black_box(&mut dst);
    });
    2.0 * src.len() as f64 / secs
}

/// How many timed runs for a case that takes about `work_bytes` of traffic.
pub fn runs_for(work_bytes: usize) -> usize {
    ((256usize << 20) / work_bytes.max(1)).clamp(15, 3000)
}
