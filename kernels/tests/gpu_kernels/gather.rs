//! The gathered ops on the GPU (kernels/gpu/mx_gather.hip) against the CPU kernels:
//! `MxGatherDequantize` bit for bit, `MxGatherMatMul` within the f32 summation-order bound, and
//! an index out of range reported through the error record without an out-of-bounds read.

use super::*;
use kernels::gpu::runtime::pod::{as_bytes, as_bytes_mut};
use kernels::gpu::{index_error, GpuExperts, GpuGatherMatMul, GpuIndices, GATHER_ERR_BYTES};
use kernels::ops::{self, TensorMut, TensorRef};
use kernels::{MxDequantAttrs, MxGatherDequantAttrs, MxGatherMatMulAttrs, Serial};

/// Indices on the device as int32 or int64.
fn upload_indices(rt: &Arc<GpuRuntime>, v: &[i64], wide: bool) -> (DeviceBuffer, GpuIndices) {
    let buf = if wide {
        upload(rt, v)
    } else {
        upload(rt, &v.iter().map(|&i| i as i32).collect::<Vec<_>>())
    };
    let idx = GpuIndices {
        ptr: buf.ptr(),
        count: v.len(),
        wide,
    };
    (buf, idx)
}

fn err_record(rt: &Arc<GpuRuntime>) -> DeviceBuffer {
    upload(rt, &[0u8; GATHER_ERR_BYTES])
}

fn read_record(buf: &DeviceBuffer) -> [u64; 2] {
    let v = download::<u64>(buf, 2);
    [v[0], v[1]]
}

/// One `MxGatherDequantize` on the GPU and the CPU; returns the elements whose bits differ.
#[allow(clippy::too_many_arguments)]
fn gather_dequantize_case<T: Element + Pod + Default>(
    rt: &Arc<GpuRuntime>,
    rng: &mut Rng,
    xt: DType,
    (xs, ss): (&[usize], &[usize]),
    (axis, block, gather_axis): (i64, usize, i64),
    ids: &[i64],
    ids_shape: &[usize],
    wide: bool,
) -> usize {
    let count: usize = xs.iter().product();
    let x: Vec<u8> = (0..xt.byte_len(count).unwrap())
        .map(|_| rng.next() as u8)
        .collect();
    let s: Vec<u8> = (0..ss.iter().product::<usize>())
        .map(|i| match i % 17 {
            0 => 0,
            1 => 255,
            2 => 254,
            _ => 100 + rng.below(60) as u8,
        })
        .collect();
    let attrs = MxGatherDequantAttrs {
        dequant: MxDequantAttrs {
            axis,
            block_size: block,
            output_dtype: T::DTYPE,
        },
        gather_axis,
    };
    let ys = ops::gather_shape(xs, ids_shape, gather_axis).unwrap();
    let n: usize = ys.iter().product();
    let mut want = vec![T::default(); n];
    ops::mx_gather_dequantize(
        TensorRef::new(xt, xs, &x).unwrap(),
        TensorRef::new(DType::E8M0, ss, &s).unwrap(),
        ids,
        ids_shape,
        TensorMut::new(T::DTYPE, &ys, as_bytes_mut(&mut want)).unwrap(),
        &attrs,
        &Serial,
    )
    .expect("CPU kernel");
    let (xb, sb, yb, err) = (
        upload(rt, &x),
        upload(rt, &s),
        poisoned::<T>(rt, n),
        err_record(rt),
    );
    let (_ib, idx) = upload_indices(rt, ids, wide);
    rt.mx_gather_dequantize(
        xt,
        T::DTYPE,
        xs,
        ss,
        axis,
        block,
        gather_axis,
        idx,
        (xb.ptr(), sb.ptr(), yb.ptr(), err.ptr()),
        0,
    )
    .expect("launch");
    rt.synchronize().expect("sync");
    assert_eq!(read_record(&err), [0, 0]);
    same_bits(&download::<T>(&yb, n), &want)
}

/// Stacked experts `[E, N, K]` blocked along K gathered by expert (repeats, negative ids, int32
/// and int64), an embedding table by 2-D token ids, a middle axis with an odd slice (FP4 by
/// nibble) and per-axis / per-tensor scales; every format into f32 and bf16.
#[test]
fn gpu_gather_dequantize_matches_the_cpu_kernel_bit_for_bit() {
    let Some(rt) = gpu() else { return };
    let mut rng = Rng(0x6a7e_0001);
    type Case<'a> = (
        &'a [usize],
        &'a [usize],
        i64,
        usize,
        i64,
        &'a [i64],
        &'a [usize],
    );
    let cases: [Case; 5] = [
        (&[6, 40, 64], &[6, 40, 2], 2, 32, 0, &[5, 0, -1, 5, 2], &[5]),
        (
            &[100, 96],
            &[100, 3],
            1,
            32,
            0,
            &[0, 99, -1, 5, 5, -100],
            &[2, 3],
        ),
        (&[3, 9, 33], &[3, 2, 33], 1, 5, 2, &[32, 0, 7], &[3]),
        (&[4, 7, 33], &[33], 2, 0, 1, &[6, -7, 3, 3], &[4]),
        (&[4, 8, 32], &[], 1, 0, 1, &[1, 2], &[2]),
    ];
    for xt in [DType::E4M3, DType::E5M2, DType::E2M1] {
        let mut bad = 0;
        for (i, &(xs, ss, axis, block, g, ids, is)) in cases.iter().enumerate() {
            let wide = i % 2 == 0;
            bad += gather_dequantize_case::<f32>(
                &rt,
                &mut rng,
                xt,
                (xs, ss),
                (axis, block, g),
                ids,
                is,
                wide,
            ) + gather_dequantize_case::<bf16>(
                &rt,
                &mut rng,
                xt,
                (xs, ss),
                (axis, block, g),
                ids,
                is,
                !wide,
            );
        }
        assert_eq!(bad, 0, "{xt:?}: {bad} elements differ from the CPU kernel");
    }
}

/// Stacked experts for `MxGatherMatMul`: E4M3 without NaN codes (or FP4 codes), scales near 1,
/// in the layout `nk` says; returns (values, scales).
fn random_experts(rng: &mut Rng, e: usize, n: usize, k: usize, fp4: bool) -> (Vec<u8>, Vec<u8>) {
    let q: Vec<u8> = if fp4 {
        (0..e * n * k / 2).map(|_| rng.next() as u8).collect()
    } else {
        (0..e)
            .flat_map(|_| random_mx_weights(rng, n, k).0)
            .collect()
    };
    let s: Vec<u8> = (0..e * n * k / 32)
        .map(|_| 118 + rng.below(10) as u8)
        .collect();
    (q, s)
}

/// One `MxGatherMatMul` on the GPU and the CPU: the relative error of the GPU's output.
#[allow(clippy::too_many_arguments)]
fn gather_matmul_case<A: Element + Pod, O: Element + Pod + Default>(
    rt: &Arc<GpuRuntime>,
    rng: &mut Rng,
    (sa, p, k, e, n): (usize, usize, usize, usize, usize),
    trans_b: bool,
    nk: bool,
    fp4: bool,
    ids: &[i64],
) -> f64 {
    let (q, sc) = random_experts(rng, e, n, k, fp4);
    let a: Vec<A> = (0..sa * p * k).map(|_| A::from_f32(rng.normal())).collect();
    let s = sa.max(ids.len());
    let (a_shape, y_shape) = if trans_b {
        (vec![sa, k, 1], vec![s, n, 1])
    } else {
        (vec![sa, p, k], vec![s, p, n])
    };
    let (b_shape, s_shape) = if nk {
        ([e, n, k], [e, n, k / 32])
    } else {
        ([e, k, n], [e, k / 32, n])
    };
    let bt = if fp4 { DType::E2M1 } else { DType::E4M3 };
    let attrs = MxGatherMatMulAttrs {
        trans_b,
        output_dtype: O::DTYPE,
    };
    let ny = s * p * n;
    let mut want = vec![O::default(); ny];
    ops::mx_gather_matmul_laid_out(
        TensorRef::new(A::DTYPE, &a_shape, as_bytes(&a)).unwrap(),
        TensorRef::new(bt, &b_shape, &q).unwrap(),
        TensorRef::new(DType::E8M0, &s_shape, &sc).unwrap(),
        ids,
        TensorMut::new(O::DTYPE, &y_shape, as_bytes_mut(&mut want)).unwrap(),
        &attrs,
        nk,
        &Serial,
    )
    .expect("CPU kernel");
    let (ab, qb, sb, yb, err) = (
        upload(rt, &a),
        upload(rt, &q),
        upload(rt, &sc),
        poisoned::<O>(rt, ny),
        err_record(rt),
    );
    let (_ib, idx) = upload_indices(rt, ids, ids.len().is_multiple_of(2));
    let mm = GpuGatherMatMul {
        a: ab.ptr(),
        a_dtype: A::DTYPE,
        a_samples: sa,
        p,
        samples: s,
        y: yb.ptr(),
        y_dtype: O::DTYPE,
    };
    let w = GpuExperts {
        q: qb.ptr(),
        scales: sb.ptr(),
        e,
        n,
        k,
        fp4,
        nk,
    };
    rt.mx_gather_matmul(&mm, &w, idx, err.ptr(), 0)
        .expect("launch");
    rt.synchronize().expect("sync");
    assert_eq!(read_record(&err), [0, 0]);
    rel_err(&download::<O>(&yb, ny), &want)
}

/// Both orders, the `[E, N, K]` E4M3 kernel and the any-layout one (E4M3 `[E, K, N]`, FP4 both
/// layouts), a row chunk past the 8 a warp takes, the sample broadcasts, every activation and
/// output type.
#[test]
fn gpu_gather_matmul_matches_the_cpu_kernel() {
    let Some(rt) = gpu() else { return };
    let mut rng = Rng(0x6a7e_0002);
    let ids: &[i64] = &[3, -1, 0, 3, 6, 2, 3];
    for (nk, fp4) in [(true, false), (false, false), (true, true), (false, true)] {
        for (trans_b, sa, p, ids) in [
            (true, 7, 1, ids),
            (false, 7, 1, ids),
            (false, 7, 6, ids),
            (false, 3, 11, &ids[..3]),
            (true, 1, 1, ids),
            (false, 5, 3, &ids[..1]),
        ] {
            let dims = (sa, p, 96, 7, 72);
            let errs = [
                gather_matmul_case::<f32, f32>(&rt, &mut rng, dims, trans_b, nk, fp4, ids),
                gather_matmul_case::<bf16, bf16>(&rt, &mut rng, dims, trans_b, nk, fp4, ids),
                gather_matmul_case::<f16, f32>(&rt, &mut rng, dims, trans_b, nk, fp4, ids),
            ];
            // f32: summation order only; bf16 / f16 outputs: one rounding of those.
            assert!(
                errs[0] < 1e-6 && errs[1] < 8e-3 && errs[2] < 1e-6,
                "nk {nk} fp4 {fp4} trans_b {trans_b} samples {sa} rows {p}: {errs:?}"
            );
        }
    }
}

/// An index out of range fails through the error record (the value kept, the range named),
/// writes NaN where it would have read, and reads nothing out of bounds (compute-sanitizer).
#[test]
fn gpu_gathered_kernels_report_an_index_out_of_range() {
    let Some(rt) = gpu() else { return };
    let (e, n, k) = (4, 8, 64);
    let (q, sc) = (vec![0x38u8; e * n * k], vec![127u8; e * n * k / 32]);
    let (qb, sb) = (upload(&rt, &q), upload(&rt, &sc));
    let a = upload(&rt, &vec![1f32; 2 * k]);
    for (ids, bad) in [(vec![1i64, 4], 4i64), (vec![-5, 0], -5)] {
        let (_ib, idx) = upload_indices(&rt, &ids, bad < 0);
        let (y, err) = (poisoned::<f32>(&rt, 2 * n), err_record(&rt));
        let mm = GpuGatherMatMul {
            a: a.ptr(),
            a_dtype: DType::F32,
            a_samples: 2,
            p: 1,
            samples: 2,
            y: y.ptr(),
            y_dtype: DType::F32,
        };
        let w = GpuExperts {
            q: qb.ptr(),
            scales: sb.ptr(),
            e,
            n,
            k,
            fp4: false,
            nk: true,
        };
        rt.mx_gather_matmul(&mm, &w, idx, err.ptr(), 0).unwrap();
        rt.synchronize().unwrap();
        let msg = index_error(read_record(&err), e)
            .expect("recorded")
            .to_string();
        assert!(
            msg.contains(&format!("index {bad} is out of range [-4, 4)")),
            "{msg}"
        );
        let got = download::<f32>(&y, 2 * n);
        let (good, nan) = if bad < 0 {
            (n..2 * n, 0..n)
        } else {
            (0..n, n..2 * n)
        };
        assert!(got[nan].iter().all(|v| v.is_nan()), "{got:?}");
        assert!(got[good].iter().all(|&v| v == k as f32), "{got:?}");

        let (yb, err) = (poisoned::<f32>(&rt, 2 * n * k), err_record(&rt));
        rt.mx_gather_dequantize(
            DType::E4M3,
            DType::F32,
            &[e, n, k],
            &[e, n, k / 32],
            2,
            32,
            0,
            idx,
            (qb.ptr(), sb.ptr(), yb.ptr(), err.ptr()),
            0,
        )
        .unwrap();
        rt.synchronize().unwrap();
        assert_eq!(read_record(&err), [1, bad as u64]);
    }
}

/// The weight-only `MxMatMul` (a float `a` times one MX weight, the gathered GEMM's kernels on
/// one "expert") against the CPU kernel: `[N, K]` E4M3 (the fast kernel), `[K, N]` E4M3 and
/// FLOAT4E2M1 in both layouts (the any-layout kernel), 1-9 rows, with a Gemm epilogue (alpha,
/// beta, a bias broadcast over the rows).
#[test]
fn gpu_weight_only_matmul_matches_the_cpu_kernel() {
    let Some(rt) = gpu() else { return };
    let mut rng = Rng(0x6a7e_0003);
    let (k, n) = (96, 72);
    for (nk, fp4) in [(true, false), (false, false), (true, true), (false, true)] {
        let (q, sc) = random_experts(&mut rng, 1, n, k, fp4);
        // The CPU kernel reads E4M3: an FP4 weight as the E4M3 bytes of the same values.
        let q8 = if fp4 {
            kernels::codec::widened_e4m3(&q, n * k)
        } else {
            q.clone()
        };
        let (b_shape, s_shape) = if nk {
            ([n, k], [n, k / 32])
        } else {
            ([k, n], [k / 32, n])
        };
        let bias: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
        let attrs = kernels::MxMatMulAttrs {
            trans_b: nk,
            output_dtype: DType::F32,
            alpha: 0.5,
            beta: 2.0,
        };
        let (qb, sb, cb) = (upload(&rt, &q), upload(&rt, &sc), upload(&rt, &bias));
        for m in [1usize, 4, 9] {
            let a: Vec<bf16> = (0..m * k).map(|_| bf16::from_f32(rng.normal())).collect();
            let mut want = vec![0f32; m * n];
            ops::mx_matmul_float_a(
                TensorRef::new(DType::BF16, &[m, k], as_bytes(&a)).unwrap(),
                TensorRef::new(DType::E4M3, &b_shape, &q8).unwrap(),
                Some(TensorRef::new(DType::E8M0, &s_shape, &sc).unwrap()),
                Some(TensorRef::new(DType::F32, &[n], as_bytes(&bias)).unwrap()),
                TensorMut::new(DType::F32, &[m, n], as_bytes_mut(&mut want)).unwrap(),
                &attrs,
                &Serial,
            )
            .expect("CPU kernel");
            let (ab, yb) = (upload(&rt, &a), poisoned::<f32>(&rt, m * n));
            let w = GpuExperts {
                q: qb.ptr(),
                scales: sb.ptr(),
                e: 1,
                n,
                k,
                fp4,
                nk,
            };
            let ep = GpuEpilogue {
                alpha: 0.5,
                beta: 2.0,
                bias: Some(GpuBias {
                    ptr: cb.ptr(),
                    rows: 1,
                    cols: n,
                }),
            };
            rt.mx_matmul_float_a((m, ab.ptr(), DType::BF16), &w, yb.ptr(), DType::F32, &ep, 0)
                .expect("launch");
            rt.synchronize().expect("sync");
            let err = rel_err(&download::<f32>(&yb, m * n), &want);
            assert!(err < 1e-6, "nk {nk} fp4 {fp4} m {m}: {err}");
        }
    }
}

/// The tensor-core weight-only `MxMatMul` (kernels/gpu/mx_matmul_frag_wo.hip: f16 / bf16 `a`, and
/// f32 `a` split into three bf16 parts; the weight packed for the fragment GEMM) against the CPU
/// kernel: 1-21 rows (a partial 16-row tile, two tiles), N = 72 (a partial 16-column tile), with a
/// Gemm epilogue, f32 and a's own output type; NaN and scale-0 / 255 weight blocks included, and
/// for f32 `a` an Inf, a tiny and a huge activation (non-finite outputs where the CPU's are).
#[test]
fn gpu_weight_only_matmul_on_tensor_cores_matches_the_cpu_kernel() {
    let Some(rt) = gpu() else { return };
    let (k, n) = (256, 72);
    if !rt.weight_only_frag_available(k, DType::BF16, DType::BF16) {
        eprintln!("skipped: no tensor-core weight-only kernel on this device");
        return;
    }
    let mut rng = Rng(0x6a7e_0004);
    let (mut q, mut sc) = random_experts(&mut rng, 1, n, k, false);
    q[5 * k + 3] = 0x7f; // a NaN weight in row 5
    sc[7 * (k / 32) + 2] = 0; // 2^-127 and NaN block scales
    sc[9 * (k / 32) + 5] = 255;
    let (wf, wsf) = kernels::gpu::pack_frag_weights(&q, &sc, n, k).expect("pack");
    let (wfb, wsfb) = (upload(&rt, &wf), upload(&rt, &wsf));
    let bias: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
    let attrs = kernels::MxMatMulAttrs {
        trans_b: true,
        output_dtype: DType::F32,
        alpha: 0.5,
        beta: 2.0,
    };
    fn case<A: Element + Pod, O: Element + Pod + Default>(
        rt: &Arc<GpuRuntime>,
        rng: &mut Rng,
        (m, k, n): (usize, usize, usize),
        (q, sc, bias): (&[u8], &[u8], &[f32]),
        attrs: &kernels::MxMatMulAttrs,
        (wf, wsf): (&DeviceBuffer, &DeviceBuffer),
    ) -> f64 {
        let mut a: Vec<A> = (0..m * k).map(|_| A::from_f32(rng.normal())).collect();
        if A::DTYPE == DType::F32 && m >= 3 {
            // Inf stays Inf (the split's low parts are zero), a tiny and a huge value keep
            // their low parts.
            a[3] = A::from_f32(f32::INFINITY);
            a[k + 7] = A::from_f32(1.0e-30);
            a[2 * k + 9] = A::from_f32(-1.0e30);
        }
        let bias_o: Vec<O> = bias.iter().map(|&v| O::from_f32(v)).collect();
        let mut want = vec![O::default(); m * n];
        let attrs = kernels::MxMatMulAttrs {
            output_dtype: O::DTYPE,
            ..*attrs
        };
        ops::mx_matmul_float_a(
            TensorRef::new(A::DTYPE, &[m, k], as_bytes(&a)).unwrap(),
            TensorRef::new(DType::E4M3, &[n, k], q).unwrap(),
            Some(TensorRef::new(DType::E8M0, &[n, k / 32], sc).unwrap()),
            Some(TensorRef::new(O::DTYPE, &[n], as_bytes(&bias_o)).unwrap()),
            TensorMut::new(O::DTYPE, &[m, n], as_bytes_mut(&mut want)).unwrap(),
            &attrs,
            &Serial,
        )
        .expect("CPU kernel");
        let (ab, yb, cb) = (
            upload(rt, &a),
            poisoned::<O>(rt, m * n),
            upload(rt, &bias_o),
        );
        let ep = GpuEpilogue {
            alpha: 0.5,
            beta: 2.0,
            bias: Some(GpuBias {
                ptr: cb.ptr(),
                rows: 1,
                cols: n,
            }),
        };
        rt.mx_matmul_float_a_frag(
            (m, ab.ptr(), A::DTYPE),
            (wf.ptr(), wsf.ptr(), None),
            (n, k),
            yb.ptr(),
            O::DTYPE,
            &ep,
            0,
        )
        .expect("launch");
        rt.synchronize().expect("sync");
        let got = download::<O>(&yb, m * n);
        // NaN / Inf exactly where the CPU kernel has them (rows 5 and 9's columns, row 0 of an
        // f32 a), the rest close.
        let odd = |v: &[O]| {
            v.iter()
                .map(|x| {
                    let f = x.to_f32();
                    (f.is_nan(), f.is_infinite().then_some(f))
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(odd(&got), odd(&want), "NaN / Inf positions, m {m}");
        let keep = |v: &[O]| -> Vec<O> {
            v.iter()
                .map(|x| {
                    if !x.to_f32().is_finite() {
                        O::from_f32(0.0)
                    } else {
                        *x
                    }
                })
                .collect()
        };
        rel_err(&keep(&got), &keep(&want))
    }
    let w = (&wfb, &wsfb);
    let d = (&q[..], &sc[..], &bias[..]);
    for m in [1usize, 5, 16, 21] {
        let errs = [
            case::<bf16, f32>(&rt, &mut rng, (m, k, n), d, &attrs, w),
            case::<f16, f32>(&rt, &mut rng, (m, k, n), d, &attrs, w),
            case::<bf16, bf16>(&rt, &mut rng, (m, k, n), d, &attrs, w),
            case::<f16, f16>(&rt, &mut rng, (m, k, n), d, &attrs, w),
            case::<f32, f32>(&rt, &mut rng, (m, k, n), d, &attrs, w),
        ];
        // f32 a: the three bf16 parts make every product exact, so only the summation order
        // differs from the CPU kernel.
        assert!(
            errs[0] < 1e-5 && errs[1] < 1e-5 && errs[2] < 8e-3 && errs[3] < 2e-3 && errs[4] < 2e-6,
            "m {m}: {errs:?}"
        );
    }
}

/// `MxGatherMatMul` on tensor cores (kernels/gpu/mx_matmul_frag_wo.hip, f16 / bf16 `a`, each
/// expert packed for the fragment GEMM): weight first and second (6 rows a sample: a partial
/// 16-row tile), both sample broadcasts, against the CPU kernel; one row a sample also grouped by
/// expert (`mx_matmul_frag_wo_ggroup_*`: an expert with more samples than a group, a broadcast
/// activation, more samples than the grouped kernel takes); an index out of range writes NaN to
/// that sample's outputs and is recorded.
#[test]
fn gpu_gather_matmul_on_tensor_cores_matches_the_cpu_kernel() {
    let Some(rt) = gpu() else { return };
    let (e, n, k) = (5, 72, 256);
    if !rt.weight_only_frag_available(k, DType::BF16, DType::BF16) {
        eprintln!("skipped: no tensor-core kernel on this device");
        return;
    }
    let mut rng = Rng(0x6a7e_0005);
    let (q, sc) = random_experts(&mut rng, e, n, k, false);
    let (wf, wsf) = kernels::gpu::pack_frag_experts(&q, &sc, (e, n, k)).expect("pack");
    let (wfb, wsfb) = (upload(&rt, &wf), upload(&rt, &wsf));
    fn case<A: Element + Pod, O: Element + Pod + Default>(
        rt: &Arc<GpuRuntime>,
        rng: &mut Rng,
        (sa, p, trans_b): (usize, usize, bool),
        ids: &[i64],
        (q, sc): (&[u8], &[u8]),
        (e, n, k): (usize, usize, usize),
        (wf, wsf): (&DeviceBuffer, &DeviceBuffer),
    ) -> (f64, Vec<O>) {
        let s = sa.max(ids.len());
        let a: Vec<A> = (0..sa * p * k).map(|_| A::from_f32(rng.normal())).collect();
        let (a_shape, y_shape) = if trans_b {
            (vec![sa, k, 1], vec![s, n, 1])
        } else {
            (vec![sa, p, k], vec![s, p, n])
        };
        let good: Vec<i64> = ids
            .iter()
            .map(|&i| i.clamp(-(e as i64), e as i64 - 1))
            .collect();
        let mut want = vec![O::default(); s * p * n];
        ops::mx_gather_matmul_laid_out(
            TensorRef::new(A::DTYPE, &a_shape, as_bytes(&a)).unwrap(),
            TensorRef::new(DType::E4M3, &[e, n, k], q).unwrap(),
            TensorRef::new(DType::E8M0, &[e, n, k / 32], sc).unwrap(),
            &good,
            TensorMut::new(O::DTYPE, &y_shape, as_bytes_mut(&mut want)).unwrap(),
            &MxGatherMatMulAttrs {
                trans_b,
                output_dtype: O::DTYPE,
            },
            true,
            &Serial,
        )
        .expect("CPU kernel");
        let (ab, yb, err) = (upload(rt, &a), poisoned::<O>(rt, s * p * n), err_record(rt));
        let (_ib, idx) = upload_indices(rt, ids, true);
        let mm = GpuGatherMatMul {
            a: ab.ptr(),
            a_dtype: A::DTYPE,
            a_samples: sa,
            p,
            samples: s,
            y: yb.ptr(),
            y_dtype: O::DTYPE,
        };
        rt.mx_gather_matmul_frag(&mm, (wf.ptr(), wsf.ptr(), e, n, k), None, idx, err.ptr(), 0)
            .expect("launch");
        rt.synchronize().expect("sync");
        let got = download::<O>(&yb, s * p * n);
        let bad: Vec<usize> = (0..ids.len()).filter(|&i| ids[i] != good[i]).collect();
        let record = read_record(&err);
        if let Some(&b) = bad.first() {
            assert_eq!(record, [1, ids[b] as u64]);
        } else {
            assert_eq!(record, [0, 0]);
        }
        // Outputs of a sample with a bad index are NaN; compare the rest.
        let mut g2 = got.clone();
        let mut w2 = want.clone();
        for &b in &bad {
            for v in &got[b * p * n..(b + 1) * p * n] {
                assert!(v.to_f32().is_nan());
            }
            g2[b * p * n..(b + 1) * p * n].fill(O::from_f32(0.0));
            w2[b * p * n..(b + 1) * p * n].fill(O::from_f32(0.0));
        }
        (rel_err(&g2, &w2), got)
    }
    let ids: &[i64] = &[3, -1, 0, 3, 4, 2];
    // One row a sample with an index each: the samples grouped by expert on the device (up to
    // 16 a group). 40 samples: expert 3 taken 21 times (two groups), -1 (expert 4) 9 times, one
    // index out of range; 2100 samples: past the grouped kernel's limit (the per-sample kernel).
    let many: Vec<i64> = (0..40)
        .map(|i| match i % 9 {
            0 | 2 | 4 | 6 | 8 if i != 38 => 3,
            1 | 5 => -1,
            _ if i == 38 => 9,
            _ => (i % 3) as i64,
        })
        .collect();
    let huge: Vec<i64> = (0..2100).map(|i| ((i * 7) % 5) as i64).collect();
    let d = (&q[..], &sc[..]);
    let w = (&wfb, &wsfb);
    for (sa, p, trans_b, ids) in [
        (6, 1, true, ids),
        (6, 6, false, ids),
        (1, 6, false, ids),
        (6, 1, true, &ids[..1]),
        (3, 6, false, &[1, 9, 2][..]),
        (40, 1, true, &many[..]),
        (40, 1, false, &many[..]),
        (1, 1, false, &many[..]),
        (2100, 1, true, &huge[..]),
    ] {
        let errs = [
            case::<bf16, f32>(&rt, &mut rng, (sa, p, trans_b), ids, d, (e, n, k), w).0,
            case::<f16, f32>(&rt, &mut rng, (sa, p, trans_b), ids, d, (e, n, k), w).0,
            case::<bf16, bf16>(&rt, &mut rng, (sa, p, trans_b), ids, d, (e, n, k), w).0,
            case::<f32, f32>(&rt, &mut rng, (sa, p, trans_b), ids, d, (e, n, k), w).0,
        ];
        assert!(
            errs[0] < 1e-5 && errs[1] < 1e-5 && errs[2] < 8e-3 && errs[3] < 2e-6,
            "samples {sa} rows {p} weight first {trans_b} ids {ids:?}: {errs:?}"
        );
    }
}
