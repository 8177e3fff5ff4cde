//! The prefill route of `MxMatMul` (kernels/src/gpu/prefill.rs: dequantize to bf16, cuBLAS, the
//! exactness guard) against the CPU reference: within the f32 summation-order bound on random
//! inputs, fragment-packed and plain weights, bf16, f16 and f32 outputs, a bias; float
//! activations (bf16, and f16 / f32 split into bf16 parts) of the weight-only form; and the
//! guard's exact recompute where a block's scale leaves the bf16-safe range (2^-127
//! activations, huge weights), with a NaN scale's column NaN as on the CPU.

use super::*;

/// The reference of `MxMatMul` with `ep` (f64 accumulation, f32 epilogue) as f32.
fn reference_f32(
    (aq, asc): (&[u8], &[u8]),
    (w, ws): (&[u8], &[u8]),
    (m, k, n): (usize, usize, usize),
    ep: &kernels::Epilogue,
) -> Vec<f32> {
    let mut want = vec![0f32; m * n];
    reference::mx_matmul(
        aq,
        asc,
        m,
        k,
        n,
        MatB::Mx { q: w, scales: ws },
        true,
        &mut want,
        ep,
    )
    .expect("reference");
    want
}

/// Device output `y` of `n` elements of type `out` (bf16, f16 or f32) as f32.
fn download_f32(y: &DeviceBuffer, n: usize, out: kernels::DType) -> Vec<f32> {
    match out {
        kernels::DType::BF16 => download::<bf16>(y, n).iter().map(|v| v.to_f32()).collect(),
        kernels::DType::F16 => download::<f16>(y, n).iter().map(|v| v.to_f32()).collect(),
        _ => download::<f32>(y, n),
    }
}

/// One prefill-route launch, f32, f16 or bf16 out, read back as f32.
#[allow(clippy::too_many_arguments)]
fn prefill_run(
    rt: &Arc<GpuRuntime>,
    (m, k, n): (usize, usize, usize),
    daq: &DeviceBuffer,
    das: &DeviceBuffer,
    b: &GpuMatB,
    out: kernels::DType,
    ep: &GpuEpilogue,
) -> Vec<f32> {
    let dy = poisoned::<f32>(rt, m * n);
    rt.mx_matmul_prefill((m, k, n), daq.ptr(), das.ptr(), b, dy.ptr(), out, ep, 0)
        .expect("prefill launch");
    download_f32(&dy, m * n, out)
}

#[test]
fn gpu_prefill_gemm_matches_reference() {
    let Some(rt) = gpu() else { return };
    if rt.backend() != kernels::gpu::Backend::Cuda {
        eprintln!("skipped: the prefill route is NVIDIA-only");
        return;
    }
    let mut rng = Rng(0x6E44_0000_0000_7F11);
    // N = 45: odd, so the f16 rounding kernel takes its one-element-at-a-time path.
    for (n, k) in [(200usize, 256usize), (96, 768), (45, 256)] {
        let (w, ws) = random_mx_weights(&mut rng, n, k);
        let (wf, wsf) = kernels::gpu::pack_frag_weights(&w, &ws, n, k).expect("pack");
        let bufs = [
            upload(&rt, &wf),
            upload(&rt, &wsf),
            upload(&rt, &w),
            upload(&rt, &ws),
        ];
        let frag = GpuMatB::MxFrag {
            q: bufs[0].ptr(),
            scales: bufs[1].ptr(),
            f16_shift: None,
        };
        // The same weights with their f16 shift, as the plugin EP packs them: an f16 output is
        // then one f16 GEMM of both operands dequantized to f16 (no f32 rows).
        let shift = kernels::gpu::f16_weight_shift(&w, &ws, k);
        assert!(shift.is_some(), "random weights fit one shift");
        let frag16 = GpuMatB::MxFrag {
            q: bufs[0].ptr(),
            scales: bufs[1].ptr(),
            f16_shift: shift,
        };
        let plain = GpuMatB::Mx {
            q: bufs[2].ptr(),
            scales: bufs[3].ptr(),
            trans_b: true,
        };
        for m in [1usize, 37, 130] {
            let (aq, asc) = random_activations(&mut rng, m, k);
            let (daq, das) = (upload(&rt, &aq), upload(&rt, &asc));
            let want = reference_f32((&aq, &asc), (&w, &ws), (m, k, n), &kernels::Epilogue::NONE);
            // f32 out within the f32 summation bound, bf16 / f16 out within their rounding (f16:
            // f32 rows rounded by the route's last kernel).
            for (b, (out, tol)) in [&frag, &plain]
                .into_iter()
                .flat_map(|b| {
                    [
                        (kernels::DType::F32, 1e-5),
                        (kernels::DType::BF16, 4e-3),
                        (kernels::DType::F16, 6e-4),
                    ]
                    .map(|o| (b, o))
                })
                .chain([(&frag16, (kernels::DType::F16, 6e-4))])
            {
                let got = prefill_run(&rt, (m, k, n), &daq, &das, b, out, &GpuEpilogue::NONE);
                let err = rel_err_nan_aware(&got, &want);
                assert!(
                    err.is_some_and(|e| e < tol),
                    "{out:?} m={m} n={n} k={k} {b:?}: {err:?}"
                );
            }
            // A row bias with alpha = 0.5: y = fl(0.5 acc) + c (the library may fuse the two),
            // f32 out (bias filled, then the GEMM with beta = 1) and f16 out (the epilogue in
            // the f16 rounding kernel, f16 bias).
            let bias: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
            let bias16: Vec<f16> = bias.iter().map(|&v| f16::from_f32(v)).collect();
            let bias16_f32: Vec<f32> = bias16.iter().map(|v| v.to_f32()).collect();
            for (out, tol, dbias, host_bias, b) in [
                (kernels::DType::F32, 1e-5, upload(&rt, &bias), &bias, &frag),
                (
                    kernels::DType::F16,
                    6e-4,
                    upload(&rt, &bias16),
                    &bias16_f32,
                    &frag,
                ),
                // f16 out of the f16 GEMM: bias filled, then the GEMM with beta = 1.
                (
                    kernels::DType::F16,
                    6e-4,
                    upload(&rt, &bias16),
                    &bias16_f32,
                    &frag16,
                ),
            ] {
                let ep = GpuEpilogue {
                    alpha: 0.5,
                    beta: 1.0,
                    bias: Some(GpuBias {
                        ptr: dbias.ptr(),
                        rows: 1,
                        cols: n,
                    }),
                };
                let host_ep =
                    kernels::Epilogue::new(0.5, 1.0, Some((&host_bias[..], &[n][..])), m, n)
                        .expect("ep");
                let want = reference_f32((&aq, &asc), (&w, &ws), (m, k, n), &host_ep);
                let got = prefill_run(&rt, (m, k, n), &daq, &das, b, out, &ep);
                let err = rel_err_nan_aware(&got, &want);
                assert!(
                    err.is_some_and(|e| e < tol),
                    "bias {out:?} m={m} n={n} k={k} {b:?}: {err:?}"
                );
            }
            // At the device's table M and above, mx_matmul itself takes the route: same bits.
            if rt.prefill_takes(
                (m, k, n),
                kernels::DType::E4M3,
                &frag,
                kernels::DType::F32,
                &GpuEpilogue::NONE,
            ) {
                let routed = matmul_f32(&rt, (m, k, n), &daq, &das, &frag);
                let direct = prefill_run(
                    &rt,
                    (m, k, n),
                    &daq,
                    &das,
                    &frag,
                    kernels::DType::F32,
                    &GpuEpilogue::NONE,
                );
                assert_eq!(same_bits(&routed, &direct), 0, "mx_matmul at m={m}");
            }
        }
    }
}

#[test]
fn gpu_prefill_guard_recomputes_out_of_range_scales_exactly() {
    let Some(rt) = gpu() else { return };
    if rt.backend() != kernels::gpu::Backend::Cuda {
        eprintln!("skipped: the prefill route is NVIDIA-only");
        return;
    }
    let mut rng = Rng(0x6E44_0000_0000_9A4D);
    let (m, n, k) = (70usize, 48usize, 256usize);
    let kb = k / 32;
    let (w, mut ws) = random_mx_weights(&mut rng, n, k);
    let (mut aq, mut asc) = random_activations(&mut rng, m, k);
    // Activations at 2^-127 (scale byte 0, nonzero values: subnormal in bf16) against weights at
    // 2^100: products near 2^-27 that bf16 / tensor cores would lose; a NaN weight scale; zero
    // blocks of scale byte 0 elsewhere are not out of range.
    asc[5 * kb + 2] = 0;
    // Row 5's other blocks zero, so that block alone makes row 5's outputs.
    for (i, q) in aq[5 * k..6 * k].iter_mut().enumerate() {
        if i / 32 != 2 {
            *q = 0;
        }
    }
    ws[7 * kb + 2] = 227;
    ws[11 * kb + 3] = 255;
    let (wf, wsf) = kernels::gpu::pack_frag_weights(&w, &ws, n, k).expect("pack");
    let (dwf, dwsf, daq, das) = (
        upload(&rt, &wf),
        upload(&rt, &wsf),
        upload(&rt, &aq),
        upload(&rt, &asc),
    );
    let frag = GpuMatB::MxFrag {
        q: dwf.ptr(),
        scales: dwsf.ptr(),
        f16_shift: None,
    };
    let want = reference_f32((&aq, &asc), (&w, &ws), (m, k, n), &kernels::Epilogue::NONE);
    let got = prefill_run(
        &rt,
        (m, k, n),
        &daq,
        &das,
        &frag,
        kernels::DType::F32,
        &GpuEpilogue::NONE,
    );
    let err = rel_err_nan_aware(&got, &want);
    assert!(err.is_some_and(|e| e < 1e-6), "guarded product: {err:?}");
    // The one output the tiny block dominates is exact to the f32 reference's rounding.
    let (g, r) = (got[5 * n + 7], want[5 * n + 7]);
    assert!((g - r).abs() <= r.abs() * 1e-6, "row 5 col 7: {g} vs {r}");
    assert!(got[11].is_nan(), "NaN weight scale's column");
    // f16 out of the f16 GEMM, with a shift (0) that the 2^100 weight block and the 2^-127
    // activation block do not fit: the guard recomputes; every output within one f16 ulp of
    // the reference rounded to f16 (±Inf where it overflows f16), the NaN column NaN.
    let frag16 = GpuMatB::MxFrag {
        q: dwf.ptr(),
        scales: dwsf.ptr(),
        f16_shift: Some(0),
    };
    let got16 = prefill_run(
        &rt,
        (m, k, n),
        &daq,
        &das,
        &frag16,
        kernels::DType::F16,
        &GpuEpilogue::NONE,
    );
    for (i, (&g, &r)) in got16.iter().zip(&want).enumerate() {
        let w = f16::from_f32(r).to_f32();
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= w.abs() * 2f32.powi(-10);
        assert!(ok, "guarded product, f16 out, element {i}: {g} vs {w}");
    }
    assert!(got16[11].is_nan(), "NaN weight scale's column, f16 out");
}

#[test]
fn gpu_prefill_weight_only_matches_reference() {
    let Some(rt) = gpu() else { return };
    if rt.backend() != kernels::gpu::Backend::Cuda {
        eprintln!("skipped: the prefill route is NVIDIA-only");
        return;
    }
    let mut rng = Rng(0x6E44_0000_0000_B0F1);
    // 400 rows: past the device's table for these small weights (f16 too), so the entry point
    // routes too.
    let (m, n, k) = (400usize, 80usize, 384usize);
    let kb = k / 32;
    let (w, ws_ok) = random_mx_weights(&mut rng, n, k);
    // The same weights with two blocks out of the bf16-safe range: the guard recomputes.
    let mut ws_bad = ws_ok.clone();
    ws_bad[3 * kb + 1] = 200;
    ws_bad[5 * kb + 2] = 3;
    // f32 activations with a wide range (tiny, huge); bf16 ones rounded from them; f16 ones of
    // their own (2^-14 .. 2^-3 times normals: f16 subnormals included, and sums that an f16
    // output holds).
    let a32: Vec<f32> = (0..m * k)
        .map(|_| rng.normal() * 2f32.powi(rng.below(40) as i32 - 20))
        .collect();
    let a16: Vec<bf16> = a32.iter().map(|&v| bf16::from_f32(v)).collect();
    let ah: Vec<f16> = (0..m * k)
        .map(|_| f16::from_f32(rng.normal() * 2f32.powi(rng.below(12) as i32 - 14)))
        .collect();
    use kernels::codec::{e4m3_to_f32, e8m0_to_f32};
    let reference = |a: &dyn Fn(usize) -> f32, ws: &[u8]| -> Vec<f32> {
        (0..m * n)
            .map(|e| {
                let (i, j) = (e / n, e % n);
                (0..k)
                    .map(|kk| {
                        let wv = e4m3_to_f32(w[j * k + kk]) * e8m0_to_f32(ws[j * kb + kk / 32]);
                        f64::from(a(i * k + kk)) * f64::from(wv)
                    })
                    .sum::<f64>() as f32
            })
            .collect()
    };
    let (da16, dah, da32) = (upload(&rt, &a16), upload(&rt, &ah), upload(&rt, &a32));
    use kernels::DType as D;
    for ws in [&ws_ok, &ws_bad] {
        let (wf, wsf) = kernels::gpu::pack_frag_weights(&w, ws, n, k).expect("pack");
        let (dwf, dwsf) = (upload(&rt, &wf), upload(&rt, &wsf));
        let frag = GpuMatB::MxFrag {
            q: dwf.ptr(),
            scales: dwsf.ptr(),
            f16_shift: None,
        };
        let want_bf16 = reference(&|i| a16[i].to_f32(), ws);
        let want_f16 = reference(&|i| ah[i].to_f32(), ws);
        let want_f32 = reference(&|i| a32[i], ws);
        // The in-range weights' f16 shift (scales 2^-9 .. 2^0 fit as they are: 0), also used on the guard's
        // weights, which no shift fits: the route then recomputes exactly.
        let shift = kernels::gpu::f16_weight_shift(&w, &ws_ok, k);
        assert_eq!(shift, Some(0));
        let shift_of_bad = kernels::gpu::f16_weight_shift(&w, &ws_bad, k);
        assert_eq!(shift_of_bad, None);
        use kernels::gpu::PrefillA as A;
        // (a's type, a, the f16 shift the entry point gets, the route's activations, y's type,
        // reference, tolerance): f32 out within the f32 summation bound (a missing bf16 part
        // would leave ~2^-9), f16 out within its rounding.
        let cases = [
            (
                D::BF16,
                &da16,
                None,
                A::Bf16(da16.ptr()),
                D::F32,
                &want_bf16,
                1e-5,
            ),
            (
                D::F16,
                &dah,
                None,
                A::F16(dah.ptr()),
                D::F32,
                &want_f16,
                1e-5,
            ),
            (
                D::F16,
                &dah,
                None,
                A::F16(dah.ptr()),
                D::F16,
                &want_f16,
                6e-4,
            ),
            (
                D::F32,
                &da32,
                None,
                A::F32(da32.ptr()),
                D::F32,
                &want_f32,
                1e-5,
            ),
        ];
        let shifted = shift.map(|w_shift| A::F16Shifted {
            a: dah.ptr(),
            w_shift,
        });
        let shifted_cases = shifted.into_iter().flat_map(|pa| {
            [
                (D::F16, &dah, shift, pa, D::F32, &want_f16, 1e-5),
                (D::F16, &dah, shift, pa, D::F16, &want_f16, 6e-4),
            ]
        });
        for (dt, da, f16_shift, pa, out, want, tol) in cases.into_iter().chain(shifted_cases) {
            let dy = poisoned::<f32>(&rt, m * n);
            rt.prefill_product((m, k, n), pa, &frag, dy.ptr(), out, &GpuEpilogue::NONE, 0)
                .expect("prefill launch");
            let got = download_f32(&dy, m * n, out);
            let guarded = std::ptr::eq(ws, &ws_bad);
            // f16 out: where the f32 reference rounds past f16's range (the 2^73 weights), both
            // are infinite; the rest within tolerance.
            let (got_f, want_f): (Vec<f32>, Vec<f32>) = got
                .iter()
                .zip(want.iter())
                .filter(|&(g, w)| {
                    let w16 = if out == D::F16 {
                        f16::from_f32(*w).to_f32()
                    } else {
                        *w
                    };
                    assert_eq!(
                        g.is_infinite(),
                        w16.is_infinite(),
                        "{dt:?} into {out:?}: {g} vs {w}"
                    );
                    !w16.is_infinite()
                })
                .map(|(g, w)| (*g, *w))
                .unzip();
            let err = rel_err_nan_aware(&got_f, &want_f);
            assert!(
                err.is_some_and(|e| e < tol),
                "weight-only {dt:?} into {out:?} (guard {guarded}): {err:?}"
            );
            // The weight-only entry point takes the route at this M where the device's table
            // says so.
            if rt.prefill_takes((m, k, n), pa.table_dtype(), &frag, out, &GpuEpilogue::NONE) {
                let dy2 = poisoned::<f32>(&rt, m * n);
                rt.mx_matmul_float_a_frag(
                    (m, da.ptr(), dt),
                    (dwf.ptr(), dwsf.ptr(), f16_shift),
                    (n, k),
                    dy2.ptr(),
                    out,
                    &GpuEpilogue::NONE,
                    0,
                )
                .expect("launch");
                let routed = download_f32(&dy2, m * n, out);
                assert_eq!(same_bits(&routed, &got), 0, "{dt:?} into {out:?} ({pa:?})");
            }
        }
    }
}

#[test]
fn gpu_prefill_moe_route_matches_the_cpu_kernel() {
    use kernels::gpu::runtime::pod::{as_bytes, as_bytes_mut};
    use kernels::gpu::{GpuGatherMatMul, GpuIndices};
    use kernels::ops::{self, TensorMut, TensorRef};
    let Some(rt) = gpu() else { return };
    if rt.backend() != kernels::gpu::Backend::Cuda {
        eprintln!("skipped: the prefill route is NVIDIA-only");
        return;
    }
    let mut rng = Rng(0x6E44_0000_0000_30E5);
    let (e, n, k, s) = (6usize, 72usize, 256usize, 300usize);
    let (mut q, mut sc) = (Vec::new(), Vec::new());
    for _ in 0..e {
        let (w, ws) = random_mx_weights(&mut rng, n, k);
        q.extend(w);
        sc.extend(ws);
    }
    let pack = |sc: &[u8]| {
        let (wf, wsf) = kernels::gpu::pack_frag_experts(&q, sc, (e, n, k)).expect("pack");
        (upload(&rt, &wf), upload(&rt, &wsf))
    };
    let (wf, wsf) = pack(&sc);
    // Expert 5 never selected; negative indices count from the end.
    let ids: Vec<i64> = (0..s)
        .map(|_| [0, 1, 2, 3, 4, -2][rng.below(6)] as i64)
        .collect();
    // The CPU kernel's f32 output for activations `a` (`dt`) and expert scales `sc`.
    let cpu = |dt: DType, a: &[u8], sc: &[u8]| {
        let mut want = vec![0f32; s * n];
        ops::mx_gather_matmul_laid_out(
            TensorRef::new(dt, &[s, 1, k], a).unwrap(),
            TensorRef::new(DType::E4M3, &[e, n, k], &q).unwrap(),
            TensorRef::new(DType::E8M0, &[e, n, k / 32], sc).unwrap(),
            &ids,
            TensorMut::new(DType::F32, &[s, 1, n], as_bytes_mut(&mut want)).unwrap(),
            &kernels::MxGatherMatMulAttrs {
                trans_b: false,
                output_dtype: DType::F32,
            },
            true,
            &kernels::Serial,
        )
        .expect("CPU kernel");
        want
    };
    // The route on activations `a` (`dt`) into `yt` with the stack's f16 shift `shift`: whether
    // it took the product, and y as f32.
    let run_into = |a: &DeviceBuffer,
                    (dt, yt): (DType, DType),
                    ids: &[i64],
                    w: (&DeviceBuffer, &DeviceBuffer),
                    shift: Option<i32>| {
        let (wf, wsf) = w;
        let (ib, dy) = (upload(&rt, ids), poisoned::<f32>(&rt, s * n));
        let idx = GpuIndices {
            ptr: ib.ptr(),
            count: s,
            wide: true,
        };
        let mm = GpuGatherMatMul {
            a: a.ptr(),
            a_dtype: dt,
            a_samples: s,
            p: 1,
            samples: s,
            y: dy.ptr(),
            y_dtype: yt,
        };
        let taken = rt
            .mx_gather_matmul_prefill(&mm, (wf.ptr(), wsf.ptr(), e, n, k), shift, idx, 0)
            .expect("launch");
        (taken, download_f32(&dy, s * n, yt))
    };
    let run = |a: &DeviceBuffer, dt: DType, ids: &[i64], wf: &DeviceBuffer, wsf: &DeviceBuffer| {
        run_into(a, (dt, DType::F32), ids, (wf, wsf), None)
    };
    let a: Vec<bf16> = (0..s * k).map(|_| bf16::from_f32(rng.normal())).collect();
    let want = cpu(DType::BF16, as_bytes(&a), &sc);
    let da = upload(&rt, &a);
    let (taken, got) = run(&da, DType::BF16, &ids, &wf, &wsf);
    assert!(taken, "the route took the product");
    let err = rel_err_nan_aware(&got, &want);
    assert!(err.is_some_and(|x| x < 1e-5), "MoE route: {err:?}");
    // An index out of range, or an expert scale out of the bf16-safe range: not taken (the
    // kernels then run and report / recompute).
    let mut bad = ids.clone();
    bad[17] = 6;
    assert!(!run(&da, DType::BF16, &bad, &wf, &wsf).0);
    let mut sc2 = sc.clone();
    sc2[2 * n * k / 32 + 5] = 1;
    let (wf2, wsf2) = pack(&sc2);
    assert!(!run(&da, DType::BF16, &ids, &wf2, &wsf2).0);
    // f32 activations into f32 (three bf16 parts) and f16 into f32 (two): taken within the
    // safe range (a missing part would leave ~2^-9), not at the out-of-range scale.
    let a32: Vec<f32> = (0..s * k).map(|_| rng.normal() * 3.0).collect();
    let ah: Vec<f16> = (0..s * k)
        .map(|_| f16::from_f32(rng.normal() * 3.0))
        .collect();
    for (dt, bytes, da) in [
        (DType::F32, as_bytes(&a32), upload(&rt, &a32)),
        (DType::F16, as_bytes(&ah), upload(&rt, &ah)),
    ] {
        let want = cpu(dt, bytes, &sc);
        let (taken, got) = run(&da, dt, &ids, &wf, &wsf);
        assert!(taken, "{dt:?} route taken");
        let err = rel_err_nan_aware(&got, &want);
        assert!(err.is_some_and(|x| x < 1e-5), "MoE {dt:?} route: {err:?}");
        assert!(
            !run(&da, dt, &ids, &wf2, &wsf2).0,
            "{dt:?} at an out-of-range scale"
        );
    }
    // f16 activations on f16 experts (the dense route's `F16Shifted`): the stack's scales moved
    // 12 binades down (2^-21 .. 2^-12: scale bytes in the bf16-safe range, but below f16's exact
    // range without a shift) take the shift 6 and one f16 GEMM an expert; into f32 within the
    // f32 summation bound, into f16 within its rounding.
    let sc_lo: Vec<u8> = sc.iter().map(|&b| b - 12).collect();
    let shift = kernels::gpu::f16_weight_shift(&q, &sc_lo, k);
    assert_eq!(shift, Some(6), "one shift for the whole stack");
    assert_eq!(kernels::gpu::f16_weight_shift(&q, &sc, k), Some(0));
    let (wf_lo, wsf_lo) = pack(&sc_lo);
    let dah = upload(&rt, &ah);
    let want = cpu(DType::F16, as_bytes(&ah), &sc_lo);
    for (yt, tol) in [(DType::F32, 1e-5), (DType::F16, 6e-4)] {
        let (taken, got) = run_into(&dah, (DType::F16, yt), &ids, (&wf_lo, &wsf_lo), shift);
        assert!(taken, "f16 on f16 experts into {yt:?} taken");
        let err = rel_err_nan_aware(&got, &want);
        assert!(
            err.is_some_and(|x| x < tol),
            "MoE f16 on f16 experts into {yt:?}: {err:?}"
        );
    }
    // A shift that does not fit the experts (the in-range stack's 0 here: 2^-21 leaves f16; 20
    // on the in-range stack: 448 * 2^20 does) sets the guard's flag: not taken, never a wrong
    // result. The out-of-range scale is refused with a shift too.
    for (w, wrong) in [
        ((&wf_lo, &wsf_lo), Some(0)),
        ((&wf, &wsf), Some(20)),
        ((&wf2, &wsf2), Some(0)),
    ] {
        for yt in [DType::F32, DType::F16] {
            assert!(
                !run_into(&dah, (DType::F16, yt), &ids, w, wrong).0,
                "shift {wrong:?} into {yt:?} refused"
            );
        }
    }
    // Other activation types ignore the shift (bf16 here, with the wrong 20): taken, as before.
    let (taken, got) = run_into(&da, (DType::BF16, DType::F32), &ids, (&wf, &wsf), Some(20));
    assert!(taken, "bf16 ignores the f16 shift");
    let err = rel_err_nan_aware(&got, &cpu(DType::BF16, as_bytes(&a), &sc));
    assert!(err.is_some_and(|x| x < 1e-5), "bf16 with a shift: {err:?}");
}
