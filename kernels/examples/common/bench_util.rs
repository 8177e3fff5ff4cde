//! What the GPU bench examples share: a small xorshift generator of E4M3 bytes and the timing of
//! back-to-back calls between two synchronizations.

use std::time::Instant;

use kernels::gpu::GpuRuntime;

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// An E4M3 byte that is not NaN.
    pub fn e4m3(&mut self) -> u8 {
        match self.next() as u8 {
            b if b & 0x7F == 0x7F => 0x38,
            b => b,
        }
    }
}

/// (µs per call until the device finished, µs per call the host spent enqueueing), medians of 5.
pub fn time_us(iters: usize, rt: &GpuRuntime, mut f: impl FnMut(usize)) -> (f64, f64) {
    f(0);
    f(1);
    rt.synchronize().expect("sync");
    let (mut dev, mut host): (Vec<f64>, Vec<f64>) = (0..5)
        .map(|_| {
            let t = Instant::now();
            for i in 0..iters {
                f(i);
            }
            let enq = t.elapsed().as_secs_f64();
            rt.synchronize().expect("sync");
            let per = |s: f64| s * 1e6 / iters as f64;
            (per(t.elapsed().as_secs_f64()), per(enq))
        })
        .unzip();
    dev.sort_by(|a, b| a.total_cmp(b));
    host.sort_by(|a, b| a.total_cmp(b));
    (dev[2], host[2])
}
