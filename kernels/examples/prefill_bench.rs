//! `MxMatMul` at prefill sizes on the GPU: the runtime's decode kernels against the prefill route
//! (dequantize to bf16 + cuBLAS + guard, kernels/src/gpu/prefill.rs) against cuBLAS's bf16 GEMM
//! alone on bf16 operands (what a bf16 model pays), all in one run. bf16 output (PREFILL_OUT=f16 /
//! f32 for those), fragment-packed weights as the plugin EP holds them; weights rotate over >= 400
//! MB of copies so L2 holds none.
//! Times: back-to-back calls between two synchronizations, µs per call, median of 5.
//!
//!     cargo run --release -p kernels --example prefill_bench -- [M,M,...] [NxK,NxK,...]
//!
//! Prints one row per (N, K, M) and the route each M takes by default (the device's
//! `PrefillTable`); then `MxGatherMatMul` on 32 stacked experts (top-8 of random ids, bf16
//! activations) at T tokens: the tensor-core gather kernels (grouped up to 2048 samples) against
//! the MoE prefill route (kernels/src/gpu/prefill_moe.rs). Needs a CUDA GPU with cuBLAS
//! (bench/gpu/device_prefill.sh runs it). MOE_T=64,256,... sets the token counts (none: no MoE section), MOE_DT=f32 /
//! f16 activations and output (an f32 / f16 export) instead of bf16; with f16 the route is timed
//! both with two bf16 parts and with the stack's f16 shift (one f16 GEMM an expert). WO_DT=f16 or f32 adds the
//! weight-only `MxMatMul` of such activations (the route's bf16 parts, kernels/gpu/mx_prefill.hip)
//! against the tensor-core weight-only kernel at WO_MS rows (default 256,2048), first.

use std::sync::Arc;

use half::{bf16, f16};
use kernels::gpu::{DeviceBuffer, GpuEpilogue, GpuGatherMatMul, GpuIndices, GpuMatB, GpuRuntime};
use kernels::DType;

#[path = "common/bench_util.rs"]
mod bench_util;
use bench_util::{time_us, Rng};

fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        num += (x - y) * (x - y);
        den += y * y;
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// `n` elements of `dt` (bf16, f16, f32) from the device, as f32.
fn download_f32(buf: &DeviceBuffer, n: usize, dt: DType) -> Vec<f32> {
    match dt {
        DType::F32 => {
            let mut v = vec![0f32; n];
            buf.download(&mut v).expect("down");
            v
        }
        DType::F16 => {
            let mut v = vec![f16::ZERO; n];
            buf.download(&mut v).expect("down");
            v.iter().map(|x| x.to_f32()).collect()
        }
        _ => {
            let mut v = vec![bf16::ZERO; n];
            buf.download(&mut v).expect("down");
            v.iter().map(|x| x.to_f32()).collect()
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ms: Vec<usize> = args
        .get(1)
        .map_or(vec![16, 32, 48, 64, 96, 128, 256, 512, 2048, 8192], |s| {
            s.split(',').map(|v| v.parse().expect("M")).collect()
        });
    let shapes: Vec<(usize, usize)> =
        args.get(2)
            .map_or(vec![(6144, 6144), (1536, 6144), (6144, 768)], |s| {
                s.split(',')
                    .map(|p| {
                        let (n, k) = p.split_once('x').expect("NxK");
                        (n.parse().expect("N"), k.parse().expect("K"))
                    })
                    .collect()
            });
    let rt = match GpuRuntime::shared() {
        Ok(Some(rt)) => rt,
        _ => {
            eprintln!("no GPU runtime here");
            return;
        }
    };
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    println!(
        "device {} ({}); route table {:?}",
        rt.device().name,
        rt.device().arch,
        kernels::gpu::PrefillTable::for_arch(&rt.device().arch)
    );
    if std::env::var("WO_DT").is_ok() {
        weight_only(&rt, &mut rng, &shapes);
    }
    // PREFILL_OUT=f16 / f32: the MXFP8 product's output type (cuBLAS bf16 stays bf16 out).
    let out = float_dtype("PREFILL_OUT");
    println!("MXFP8 activations, {out:?} output");
    // The weights carry their f16 shift (as the plugin EP packs them): an f16 output then takes
    // one f16 GEMM; "f32-rows route" times the same call without the shift (bf16 GEMM into f32
    // rows rounded by a last kernel), f16 output only.
    println!("| N x K | M | decode kernels | prefill route | cuBLAS bf16 | route / cuBLAS | decode / route | default | rel diff | host enqueue decode / route / cuBLAS | f32-rows route |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    // Scale bytes of the random blocks: 2^-9 .. 2^0; for f16 output 2^-15 .. 2^-9, so that the
    // products' sums stay inside f16's range (with 2^0 scales they overflow it and the "rel
    // diff" column read NaN), still inside the f16 route's exact window (112 ..= 134).
    let f16_out = out == DType::F16;
    let scale_byte = |rng: &mut Rng| match f16_out {
        true => 112 + (rng.next() % 7) as u8,
        false => 118 + (rng.next() % 10) as u8,
    };
    for &(n, k) in &shapes {
        let copies = (400usize << 20).div_ceil(n * k).clamp(1, 16);
        let bf_copies = (400usize << 20).div_ceil(2 * n * k).clamp(1, 16);
        let frag: Vec<(DeviceBuffer, DeviceBuffer, Option<i32>)> = (0..copies)
            .map(|_| {
                let w: Vec<u8> = (0..n * k).map(|_| rng.e4m3()).collect();
                let ws: Vec<u8> = (0..n * k / 32).map(|_| scale_byte(&mut rng)).collect();
                let shift = kernels::gpu::f16_weight_shift(&w, &ws, k);
                let (wf, wsf) = kernels::gpu::pack_frag_weights(&w, &ws, n, k).expect("pack");
                (
                    rt.upload(&wf).expect("up"),
                    rt.upload(&wsf).expect("up"),
                    shift,
                )
            })
            .collect();
        let wb: Vec<DeviceBuffer> = (0..bf_copies)
            .map(|_| {
                let v: Vec<bf16> = (0..n * k)
                    .map(|_| bf16::from_f32((rng.next() % 2001) as f32 / 1000.0 - 1.0))
                    .collect();
                rt.upload(&v).expect("up")
            })
            .collect();
        for &m in &ms {
            let aq: Vec<u8> = (0..m * k).map(|_| rng.e4m3()).collect();
            let asc: Vec<u8> = (0..m * k / 32).map(|_| scale_byte(&mut rng)).collect();
            let ab: Vec<bf16> = (0..m * k)
                .map(|_| bf16::from_f32((rng.next() % 2001) as f32 / 1000.0 - 1.0))
                .collect();
            let (daq, das, dab) = (
                rt.upload(&aq).expect("up"),
                rt.upload(&asc).expect("up"),
                rt.upload(&ab).expect("up"),
            );
            let (y1, y2) = (
                rt.alloc(m * n * 4).expect("y"),
                rt.alloc(m * n * 4).expect("y"),
            );
            let mat_with = |i: usize, shifted: bool| GpuMatB::MxFrag {
                q: frag[i % copies].0.ptr(),
                scales: frag[i % copies].1.ptr(),
                f16_shift: frag[i % copies].2.filter(|_| shifted),
            };
            let mat = |i: usize| mat_with(i, true);
            // One decode-kernel call into y1 and one route call into y2 (weights copy i; the
            // route with or without the weights' f16 shift).
            let decode_call = |i: usize| {
                rt.mx_matmul(
                    m,
                    k,
                    n,
                    daq.ptr(),
                    das.ptr(),
                    &mat(i),
                    y1.ptr(),
                    out,
                    &GpuEpilogue::NONE,
                    0,
                )
                .expect("decode");
            };
            let route_call = |i: usize, shifted: bool| {
                rt.mx_matmul_prefill(
                    (m, k, n),
                    daq.ptr(),
                    das.ptr(),
                    &mat_with(i, shifted),
                    y2.ptr(),
                    out,
                    &GpuEpilogue::NONE,
                    0,
                )
                .expect("prefill");
            };
            let iters = if m * n * k > (1usize << 36) { 10 } else { 40 };
            std::env::set_var("MXFUSE_GPU_PREFILL", "0");
            let decode = time_us(iters, &rt, decode_call);
            std::env::remove_var("MXFUSE_GPU_PREFILL");
            let route = time_us(iters, &rt, |i| route_call(i, true));
            let blas = time_us(iters, &rt, |i| {
                rt.vendor_gemm_bf16(
                    (m, k, n),
                    dab.ptr(),
                    wb[i % bf_copies].ptr(),
                    y1.ptr(),
                    DType::BF16,
                    0,
                )
                .expect("cublas");
            });
            // Same weights (copy 0) both ways: the two results agree to bf16 rounding.
            std::env::set_var("MXFUSE_GPU_PREFILL", "0");
            decode_call(0);
            std::env::remove_var("MXFUSE_GPU_PREFILL");
            route_call(0, true);
            let (g1, g2) = (download_f32(&y1, m * n, out), download_f32(&y2, m * n, out));
            let rows_route = if f16_out {
                format!("{:.1}", time_us(iters, &rt, |i| route_call(i, false)).0)
            } else {
                "-".into()
            };
            let default =
                if rt.prefill_takes((m, k, n), DType::E4M3, &mat(0), out, &GpuEpilogue::NONE) {
                    "route"
                } else {
                    "decode"
                };
            println!(
                "| {n} x {k} | {m} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {default} | {:.1e} | {:.1} / {:.1} / {:.1} | {rows_route} |",
                decode.0,
                route.0,
                blas.0,
                route.0 / blas.0,
                decode.0 / route.0,
                rel_err(&g2, &g1),
                decode.1,
                route.1,
                blas.1
            );
        }
    }
    moe(&rt, &mut rng);
}

/// Float activations of `dt` (bf16, f16, f32) from `vals`, uploaded.
fn upload_float(rt: &Arc<GpuRuntime>, dt: DType, vals: &[f32]) -> DeviceBuffer {
    match dt {
        DType::F32 => rt.upload(vals),
        DType::F16 => rt.upload(&vals.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>()),
        _ => rt.upload(&vals.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>()),
    }
    .expect("up")
}

/// The activation type named by `var` (f32 / f16; else bf16).
fn float_dtype(var: &str) -> DType {
    match std::env::var(var).as_deref() {
        Ok("f32") => DType::F32,
        Ok("f16") => DType::F16,
        _ => DType::BF16,
    }
}

/// The weight-only section (module docs): kernels against the route, `dt` in and out.
fn weight_only(rt: &Arc<GpuRuntime>, rng: &mut Rng, shapes: &[(usize, usize)]) {
    let dt = float_dtype("WO_DT");
    let ms: Vec<usize> = std::env::var("WO_MS").map_or(vec![256, 2048], |v| {
        v.split(',').map(|t| t.parse().expect("M")).collect()
    });
    println!("weight-only MxMatMul, {dt:?} activations and output");
    println!("| N x K | M | weight-only kernel | route, bf16 parts | route, f16 weights | kernel / route | default |");
    println!("|---|---|---|---|---|---|---|");
    for &(n, k) in shapes {
        let copies = (400usize << 20).div_ceil(n * k).clamp(1, 16);
        // (values, scales, f16 shift) of each copy.
        let frag: Vec<(DeviceBuffer, DeviceBuffer, Option<i32>)> = (0..copies)
            .map(|_| {
                let w: Vec<u8> = (0..n * k).map(|_| rng.e4m3()).collect();
                let ws: Vec<u8> = (0..n * k / 32)
                    .map(|_| 118 + (rng.next() % 10) as u8)
                    .collect();
                let shift = kernels::gpu::f16_weight_shift(&w, &ws, k);
                let (wf, wsf) = kernels::gpu::pack_frag_weights(&w, &ws, n, k).expect("pack");
                (
                    rt.upload(&wf).expect("up"),
                    rt.upload(&wsf).expect("up"),
                    shift,
                )
            })
            .collect();
        let mat = |i: usize| GpuMatB::MxFrag {
            q: frag[i % copies].0.ptr(),
            scales: frag[i % copies].1.ptr(),
            f16_shift: frag[i % copies].2,
        };
        for &m in &ms {
            let vals: Vec<f32> = (0..m * k)
                .map(|_| (rng.next() % 2001) as f32 / 1000.0 - 1.0)
                .collect();
            let da = upload_float(rt, dt, &vals);
            let y = rt.alloc(m * n * dt.size()).expect("y");
            let call = |i: usize| {
                let (wf, wsf, shift) = &frag[i % copies];
                rt.mx_matmul_float_a_frag(
                    (m, da.ptr(), dt),
                    (wf.ptr(), wsf.ptr(), *shift),
                    (n, k),
                    y.ptr(),
                    dt,
                    &GpuEpilogue::NONE,
                    0,
                )
                .expect("weight-only");
            };
            let route_of = |pa: &dyn Fn(usize) -> kernels::gpu::PrefillA| {
                time_us(iters_for(m, n, k), rt, |i| {
                    rt.prefill_product(
                        (m, k, n),
                        pa(i),
                        &mat(i),
                        y.ptr(),
                        dt,
                        &GpuEpilogue::NONE,
                        0,
                    )
                    .expect("route");
                })
            };
            std::env::set_var("MXFUSE_GPU_PREFILL", "0");
            let kern = time_us(iters_for(m, n, k), rt, call);
            std::env::remove_var("MXFUSE_GPU_PREFILL");
            let route = route_of(&|_| match dt {
                DType::F32 => kernels::gpu::PrefillA::F32(da.ptr()),
                DType::F16 => kernels::gpu::PrefillA::F16(da.ptr()),
                _ => kernels::gpu::PrefillA::Bf16(da.ptr()),
            });
            let shifted = (dt == DType::F16 && frag[0].2.is_some()).then(|| {
                route_of(&|i| kernels::gpu::PrefillA::F16Shifted {
                    a: da.ptr(),
                    w_shift: frag[i % copies].2.expect("shift"),
                })
            });
            let best = shifted.map_or(route.0, |s| s.0.min(route.0));
            // The entry point's choice (f16 on f16 weights where the shift exists).
            let table_a = match shifted {
                Some(_) => kernels::gpu::PrefillA::F16Shifted { a: 0, w_shift: 0 }.table_dtype(),
                None => dt,
            };
            let default = if rt.prefill_takes((m, k, n), table_a, &mat(0), dt, &GpuEpilogue::NONE) {
                "route"
            } else {
                "kernel"
            };
            println!(
                "| {n} x {k} | {m} | {:.1} | {:.1} | {} | {:.2} | {default} |",
                kern.0,
                route.0,
                shifted.map_or("-".into(), |s| format!("{:.1}", s.0)),
                kern.0 / best
            );
        }
    }
    println!();
}

/// Timed calls per repetition: fewer for the largest products.
fn iters_for(m: usize, n: usize, k: usize) -> usize {
    if m * n * k > (1usize << 36) {
        10
    } else {
        40
    }
}

/// The MoE section (module docs).
fn moe(rt: &Arc<GpuRuntime>, rng: &mut Rng) {
    // MOE_T=none skips the section.
    let ts: Vec<usize> = match std::env::var("MOE_T").as_deref() {
        Ok("none") => return,
        Ok(v) => v.split(',').map(|t| t.parse().expect("T")).collect(),
        Err(_) => vec![64, 256, 512, 2048],
    };
    let e = 32usize;
    // MOE_DT=f32 / f16: such activations and output (an f32 / f16 export), else bf16.
    let dt = float_dtype("MOE_DT");
    println!();
    println!("MoE, {dt:?} activations and output");
    println!(
        "| experts | T (S) | gather kernels | MoE prefill route, bf16 parts | route, f16 experts | kernels / route | default |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (n, k) in [(1536usize, 6144usize), (6144, 768)] {
        let (w, ws): (Vec<u8>, Vec<u8>) = (
            (0..e * n * k).map(|_| rng.e4m3()).collect(),
            (0..e * n * k / 32)
                .map(|_| 118 + (rng.next() % 10) as u8)
                .collect(),
        );
        // One shift for the whole stack, as the plugin EP computes it (read with f16 a only).
        let shift = kernels::gpu::f16_weight_shift(&w, &ws, k);
        let (wf, wsf) = kernels::gpu::pack_frag_experts(&w, &ws, (e, n, k)).expect("pack");
        drop((w, ws));
        let (dwf, dwsf) = (rt.upload(&wf).expect("up"), rt.upload(&wsf).expect("up"));
        for &t in &ts {
            let s = 8 * t;
            // top-8 distinct experts a token
            let ids: Vec<i64> = (0..t)
                .flat_map(|_| {
                    let mut pick: Vec<i64> = Vec::new();
                    while pick.len() < 8 {
                        let x = (rng.next() % e as u64) as i64;
                        if !pick.contains(&x) {
                            pick.push(x);
                        }
                    }
                    pick
                })
                .collect();
            let vals: Vec<f32> = (0..s * k)
                .map(|_| (rng.next() % 2001) as f32 / 1000.0 - 1.0)
                .collect();
            let da = upload_float(rt, dt, &vals);
            let (di, dy) = (
                rt.upload(&ids).expect("up"),
                rt.alloc(s * n * dt.size()).expect("y"),
            );
            let err = rt.upload(&[0u8; 16]).expect("err");
            let mm = GpuGatherMatMul {
                a: da.ptr(),
                a_dtype: dt,
                a_samples: s,
                p: 1,
                samples: s,
                y: dy.ptr(),
                y_dtype: dt,
            };
            let idx = GpuIndices {
                ptr: di.ptr(),
                count: s,
                wide: true,
            };
            let w = (dwf.ptr(), dwsf.ptr(), e, n, k);
            let iters = if s > 2048 { 3 } else { 10 };
            std::env::set_var("MXFUSE_GPU_PREFILL", "0");
            let kern = time_us(iters, rt, |_| {
                rt.mx_gather_matmul_frag(&mm, w, shift, idx, err.ptr(), 0)
                    .expect("kernels");
            });
            std::env::remove_var("MXFUSE_GPU_PREFILL");
            let route_with = |shift: Option<i32>| {
                time_us(iters, rt, |_| {
                    assert!(rt
                        .mx_gather_matmul_prefill(&mm, w, shift, idx, 0)
                        .expect("route"));
                })
            };
            let route = route_with(None);
            let shifted = (dt == DType::F16 && shift.is_some()).then(|| route_with(shift));
            let best = shifted.map_or(route.0, |s| s.0.min(route.0));
            let default = if rt.gather_prefill_takes(&mm, &idx, e) {
                "route"
            } else {
                "kernels"
            };
            println!(
                "| [{e}, {n}, {k}] | {t} ({s}) | {:.1} | {:.1} | {} | {:.2} | {default} |",
                kern.0,
                route.0,
                shifted.map_or("-".into(), |s| format!("{:.1}", s.0)),
                kern.0 / best
            );
        }
    }
}
