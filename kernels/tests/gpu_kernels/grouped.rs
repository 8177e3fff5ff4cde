//! The grouped decode GEMM (kernels/src/gpu/grouped.rs: several constant weights of one
//! activation packed one after another, one launch): each segment's output is, bit for bit, the
//! columns the one-matrix fragment kernel writes for the concatenated weights (the same grid and
//! tile arithmetic), at decode rows for bf16 and f32 outputs, with segments of odd tile counts
//! (a `_g1` / `_t2` pair straddling two segments) and an empty one; each segment's own epilogue is the
//! documented f32 arithmetic on that accumulator; at prefill rows (each segment alone) within the
//! summation-order bound of the reference.

use super::*;
use kernels::gpu::{pack_frag_group, FragSegment};

/// Random MX weights for `ns`, packed as one group.
#[allow(clippy::type_complexity)]
fn group(rng: &mut Rng, ns: &[usize], k: usize) -> (Vec<(Vec<u8>, Vec<u8>)>, Vec<u8>, Vec<u8>) {
    let ws: Vec<(Vec<u8>, Vec<u8>)> = ns.iter().map(|&n| random_mx_weights(rng, n, k)).collect();
    let refs: Vec<(&[u8], &[u8], usize)> = ws
        .iter()
        .zip(ns)
        .map(|((q, s), &n)| (q.as_slice(), s.as_slice(), n))
        .collect();
    let (wf, wsf) = pack_frag_group(&refs, k).expect("pack");
    (ws, wf, wsf)
}

/// The GPU runtime, the generator after [`group`], the weights and their packing on the device;
/// `None` (said on stderr) without a GPU or the fragment GEMM for `k`.
#[allow(clippy::type_complexity)]
fn uploaded_group(
    ns: &[usize],
    k: usize,
    seed: u64,
) -> Option<(
    Arc<GpuRuntime>,
    Rng,
    Vec<(Vec<u8>, Vec<u8>)>,
    (DeviceBuffer, DeviceBuffer),
)> {
    let rt = gpu()?;
    if !rt.frag_gemm_available(k) {
        eprintln!("skipped: no fragment-packed GEMM on this device for K = {k}");
        return None;
    }
    let mut rng = Rng(seed);
    let (ws, wf, wsf) = group(&mut rng, ns, k);
    let packed = (upload(&rt, &wf), upload(&rt, &wsf));
    Some((rt, rng, ws, packed))
}

/// First packed column of each segment.
fn starts(ns: &[usize]) -> Vec<usize> {
    ns.iter()
        .scan(0, |at, &n| {
            let s = *at;
            *at += 16 * n.div_ceil(16);
            Some(s)
        })
        .collect()
}

/// One grouped launch of the weights `ns` at `(wf, wsf)` on `(aq, asc)`: segment s writes `ys[s]`
/// with `eps[s]`.
fn launch_grouped(
    rt: &Arc<GpuRuntime>,
    (m, k): (usize, usize),
    (aq, asc): (&DeviceBuffer, &DeviceBuffer),
    (wf, wsf): (&DeviceBuffer, &DeviceBuffer),
    (ns, ys, eps): (&[usize], &[DeviceBuffer], &[GpuEpilogue]),
    out: DType,
) {
    let segs: Vec<FragSegment> = ns
        .iter()
        .zip(ys)
        .zip(eps)
        .map(|((&n, y), ep)| FragSegment {
            n,
            y: y.ptr(),
            ep: *ep,
            f16_shift: None,
        })
        .collect();
    rt.mx_matmul_frag_grouped(
        m,
        k,
        (aq.ptr(), asc.ptr()),
        (wf.ptr(), wsf.ptr()),
        &segs,
        out,
        0,
    )
    .expect("grouped launch");
}

#[test]
fn gpu_grouped_gemm_is_the_concatenated_kernel_per_segment() {
    let Some(rt) = gpu() else { return };
    let mut rng = Rng(0x6E44_0000_0000_6A11);
    for (ns, k) in [
        (vec![100usize, 16, 40], 256usize),
        (vec![512, 0, 64, 72], 768),
        (vec![2048, 256, 256], 6144),
        // 321 tiles: on a 132-SM H200 the two-tile loop's mixed grid (`_t2h`) at M <= 8, its
        // one-tile blocks (the last one too) across segment boundaries.
        (vec![4096, 512, 520], 1536),
    ] {
        if !rt.frag_gemm_available(k) {
            eprintln!("skipped: no fragment-packed GEMM on this device for K = {k}");
            return;
        }
        let (_, wf, wsf) = group(&mut rng, &ns, k);
        let (dwf, dwsf) = (upload(&rt, &wf), upload(&rt, &wsf));
        let n_total = 16 * ns.iter().map(|n| n.div_ceil(16)).sum::<usize>();
        let whole = GpuMatB::MxFrag {
            q: dwf.ptr(),
            scales: dwsf.ptr(),
            f16_shift: None,
        };
        let at = starts(&ns);
        for m in [1usize, 3, 8, 12, 16, 21] {
            let (aq, asc) = random_activations(&mut rng, m, k);
            let (daq, das) = (upload(&rt, &aq), upload(&rt, &asc));
            for out in [DType::BF16, DType::F32] {
                let size = out.size();
                let dwhole = poisoned::<u8>(&rt, m * n_total * size);
                rt.mx_matmul(
                    m,
                    k,
                    n_total,
                    daq.ptr(),
                    das.ptr(),
                    &whole,
                    dwhole.ptr(),
                    out,
                    &GpuEpilogue::NONE,
                    0,
                )
                .expect("one-matrix launch");
                let ys: Vec<DeviceBuffer> = ns
                    .iter()
                    .map(|&n| poisoned::<u8>(&rt, (m * n * size).max(1)))
                    .collect();
                let eps = vec![GpuEpilogue::NONE; ns.len()];
                launch_grouped(
                    &rt,
                    (m, k),
                    (&daq, &das),
                    (&dwf, &dwsf),
                    (&ns, &ys, &eps),
                    out,
                );
                let whole_bytes = download::<u8>(&dwhole, m * n_total * size);
                for ((&n, y), &c0) in ns.iter().zip(&ys).zip(&at) {
                    let got = download::<u8>(y, m * n * size);
                    for r in 0..m {
                        let want = &whole_bytes[(r * n_total + c0) * size..][..n * size];
                        assert_eq!(
                            &got[r * n * size..][..n * size],
                            want,
                            "segment at column {c0} (N = {n}), row {r}, M = {m}, K = {k}, {out:?}"
                        );
                    }
                }
            }
        }
    }
}

/// Each segment's epilogue (alpha, beta, a row-broadcast bias) on the grouped launch's f32
/// accumulator: `fl(alpha · acc) + fl(beta · c)` bit for bit.
#[test]
fn gpu_grouped_gemm_applies_each_segments_epilogue() {
    let (ns, k, m) = ([48usize, 100, 16], 256usize, 5usize);
    let Some((rt, mut rng, _, (dwf, dwsf))) = uploaded_group(&ns, k, 0x6E44_0000_0000_6A12) else {
        return;
    };
    let (aq, asc) = random_activations(&mut rng, m, k);
    let (daq, das) = (upload(&rt, &aq), upload(&rt, &asc));
    let launch = |eps: &[GpuEpilogue]| -> Vec<Vec<f32>> {
        let ys: Vec<DeviceBuffer> = ns.iter().map(|&n| poisoned::<f32>(&rt, m * n)).collect();
        let io = (&ns[..], &ys[..], eps);
        launch_grouped(&rt, (m, k), (&daq, &das), (&dwf, &dwsf), io, DType::F32);
        ys.iter()
            .zip(&ns)
            .map(|(y, &n)| download::<f32>(y, m * n))
            .collect()
    };
    let acc = launch(&[GpuEpilogue::NONE; 3]);
    let biases: Vec<Vec<f32>> = ns
        .iter()
        .map(|&n| (0..n).map(|_| rng.normal()).collect())
        .collect();
    let dbias: Vec<DeviceBuffer> = biases.iter().map(|b| upload(&rt, b)).collect();
    let params = [(0.5f32, 1.0f32), (-3.0, 0.25), (1.0, 2.0)];
    let eps: Vec<GpuEpilogue> = params
        .iter()
        .zip(&dbias)
        .zip(&ns)
        .map(|((&(alpha, beta), b), &n)| GpuEpilogue {
            alpha,
            beta,
            bias: Some(GpuBias {
                ptr: b.ptr(),
                rows: 1,
                cols: n,
            }),
        })
        .collect();
    let got = launch(&eps);
    for (s, &n) in ns.iter().enumerate() {
        let (alpha, beta) = params[s];
        let want: Vec<f32> = (0..m * n)
            .map(|i| alpha * acc[s][i] + beta * biases[s][i % n])
            .collect();
        assert_eq!(same_bits(&got[s], &want), 0, "segment {s} (N = {n})");
    }
}

/// At prefill rows each segment runs alone (the prefill route where it takes the shape): within
/// the summation-order bound of the reference.
#[test]
fn gpu_grouped_gemm_at_prefill_rows_matches_the_reference() {
    let (ns, k, m) = ([256usize, 64, 64], 256usize, 300usize);
    let Some((rt, mut rng, ws, (dwf, dwsf))) = uploaded_group(&ns, k, 0x6E44_0000_0000_6A13) else {
        return;
    };
    let (_, aq, asc, _) = reference_gemm_case(&mut rng, m, k, ns[0], &ws[0].0, &ws[0].1);
    let (daq, das) = (upload(&rt, &aq), upload(&rt, &asc));
    let ys: Vec<DeviceBuffer> = ns.iter().map(|&n| poisoned::<f32>(&rt, m * n)).collect();
    let eps = [GpuEpilogue::NONE; 3];
    launch_grouped(
        &rt,
        (m, k),
        (&daq, &das),
        (&dwf, &dwsf),
        (&ns, &ys, &eps),
        DType::F32,
    );
    for (s, (&n, (w, wscale))) in ns.iter().zip(&ws).enumerate() {
        let mut want = vec![0f32; m * n];
        reference::mx_matmul(
            &aq,
            &asc,
            m,
            k,
            n,
            MatB::Mx {
                q: w,
                scales: wscale,
            },
            true,
            &mut want,
            &kernels::Epilogue::NONE,
        )
        .expect("reference");
        let err = rel_err(&download::<f32>(&ys[s], m * n), &want);
        assert!(err < 1e-5, "segment {s} (N = {n}): {err}");
    }
}

/// Bad groups are errors, never launches: too many segments, K not a multiple of 32.
#[test]
fn gpu_grouped_gemm_rejects_bad_groups() {
    let Some(rt) = gpu() else { return };
    let seg = FragSegment {
        n: 16,
        y: 0x1000,
        ep: GpuEpilogue::NONE,
        f16_shift: None,
    };
    let err = rt
        .mx_matmul_frag_grouped(
            1,
            256,
            (0x1000, 0x1000),
            (0x1000, 0x1000),
            &[seg; 5],
            DType::F32,
            0,
        )
        .expect_err("five segments");
    assert!(err.to_string().contains("at most 4 weights"), "{err}");
    let err = rt
        .mx_matmul_frag_grouped(
            1,
            100,
            (0x1000, 0x1000),
            (0x1000, 0x1000),
            &[seg],
            DType::F32,
            0,
        )
        .expect_err("K = 100");
    assert!(err.to_string().contains("multiple of 32"), "{err}");
}
