//! The grouped decode GEMM (kernels/src/gpu/grouped.rs) against one `mx_matmul` launch per weight,
//! in one run: the constant-weight GEMMs of one MXFP8 activation (q / k / v, gate / up) at decode
//! rows, bf16 and f32 outputs, fragment-packed weights as the plugin EP holds them, rotating over
//! at least 400 MB of copies so L2 holds none. Times: back-to-back calls between two
//! synchronizations (what a decode step pays: launches, PDL overlap, kernels), µs per call (all
//! of the group's GEMMs), median of 5, and the host's enqueue time per call.
//!
//!     cargo run --release -p kernels --example grouped_bench -- [M,M,...] [N+N+...xK;...]
//!
//! Default: M = 1, 8, 16; MiniMax-M3-TP4's q / k / v (2048 + 256 + 256 x 6144), a full-width
//! attention's (6144 + 1024 + 1024 x 6144) and a gate / up pair (768 + 768 x 6144).

use kernels::gpu::{pack_frag_group, DeviceBuffer, FragSegment, GpuEpilogue, GpuMatB, GpuRuntime};
use kernels::DType;

#[path = "common/bench_util.rs"]
mod bench_util;
use bench_util::{time_us, Rng};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ms: Vec<usize> = args.get(1).map_or(vec![1, 8, 16], |s| {
        s.split(',').map(|v| v.parse().expect("M")).collect()
    });
    let groups: Vec<(Vec<usize>, usize)> = args
        .get(2)
        .map_or("2048+256+256x6144;6144+1024+1024x6144;768+768x6144", |s| {
            s.as_str()
        })
        .split(';')
        .map(|g| {
            let (ns, k) = g.split_once('x').expect("N+N+...xK");
            (
                ns.split('+').map(|n| n.parse().expect("N")).collect(),
                k.parse().expect("K"),
            )
        })
        .collect();
    let rt = match GpuRuntime::shared() {
        Ok(Some(rt)) => rt,
        _ => {
            eprintln!("no GPU runtime here");
            return;
        }
    };
    println!("device {} ({})", rt.device().name, rt.device().arch);
    println!("| group (N x K) | M | out | separate launches | grouped | separate / grouped | host enqueue separate / grouped |");
    println!("|---|---|---|---|---|---|---|");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for (ns, k) in groups {
        if !rt.frag_gemm_available(k) {
            println!("{ns:?} x {k}: no fragment GEMM on this device");
            continue;
        }
        let weights: Vec<(Vec<u8>, Vec<u8>)> = ns
            .iter()
            .map(|&n| {
                let q = (0..n * k).map(|_| rng.e4m3()).collect();
                let s = (0..n * k / 32)
                    .map(|_| 118 + (rng.next() % 10) as u8)
                    .collect();
                (q, s)
            })
            .collect();
        let refs: Vec<(&[u8], &[u8], usize)> = weights
            .iter()
            .zip(&ns)
            .map(|((q, s), &n)| (q.as_slice(), s.as_slice(), n))
            .collect();
        let (wf, wsf) = pack_frag_group(&refs, k).expect("pack");
        let copies = (400_000_000 / wf.len()).max(2);
        let bufs: Vec<(DeviceBuffer, DeviceBuffer)> = (0..copies)
            .map(|_| (rt.upload(&wf).expect("up"), rt.upload(&wsf).expect("up")))
            .collect();
        // Segment s's part of a copy: its tiles' bytes.
        let starts: Vec<usize> = ns
            .iter()
            .scan(0, |at, &n| {
                let s = *at;
                *at += n.div_ceil(16);
                Some(s)
            })
            .collect();
        for &m in &ms {
            let aq: Vec<u8> = (0..m * k).map(|_| rng.e4m3()).collect();
            let asc: Vec<u8> = (0..m * k / 32)
                .map(|_| 120 + (rng.next() % 6) as u8)
                .collect();
            let (daq, das) = (rt.upload(&aq).expect("up"), rt.upload(&asc).expect("up"));
            for out in [DType::BF16, DType::F32] {
                let ys: Vec<DeviceBuffer> = ns
                    .iter()
                    .map(|&n| rt.upload(&vec![0u8; m * n * out.size()]).expect("up"))
                    .collect();
                let separate = |i: usize| {
                    let (q, s) = &bufs[i % copies];
                    for ((&n, y), &t0) in ns.iter().zip(&ys).zip(&starts) {
                        let b = GpuMatB::MxFrag {
                            q: q.ptr() + (t0 * (k / 32) * 512) as u64,
                            scales: s.ptr() + (t0 * (k / 128) * 64) as u64,
                            f16_shift: None,
                        };
                        rt.mx_matmul(
                            m,
                            k,
                            n,
                            daq.ptr(),
                            das.ptr(),
                            &b,
                            y.ptr(),
                            out,
                            &GpuEpilogue::NONE,
                            0,
                        )
                        .expect("launch");
                    }
                };
                let segs: Vec<FragSegment> = ns
                    .iter()
                    .zip(&ys)
                    .map(|(&n, y)| FragSegment {
                        n,
                        y: y.ptr(),
                        ep: GpuEpilogue::NONE,
                        f16_shift: None,
                    })
                    .collect();
                let grouped = |i: usize| {
                    let (q, s) = &bufs[i % copies];
                    rt.mx_matmul_frag_grouped(
                        m,
                        k,
                        (daq.ptr(), das.ptr()),
                        (q.ptr(), s.ptr()),
                        &segs,
                        out,
                        0,
                    )
                    .expect("launch");
                };
                let iters = 400;
                let (sep, sep_host) = time_us(iters, &rt, separate);
                let (grp, grp_host) = time_us(iters, &rt, grouped);
                let names: Vec<String> = ns.iter().map(|n| n.to_string()).collect();
                println!(
                    "| {} x {k} | {m} | {out:?} | {sep:.2} | {grp:.2} | {:.2} | {sep_host:.2} / {grp_host:.2} |",
                    names.join(" + "),
                    sep / grp
                );
            }
        }
    }
}
