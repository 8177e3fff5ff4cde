//! Fused AddRmsNormMxQuant vs our own unfused chain (Add pass → RMSNorm pass → MxQuantize) vs
//! the memory floor (bytes the fused op must move / copy bandwidth measured in this run), bf16,
//! hidden 6144 (MiniMax-M3), M = 1 … 2048. `cargo bench -p kernels --bench norm_quant`.
//! Criterion times each variant; a ratio table is printed at the end.

mod common;

use half::bf16;
use kernels::attrs::AddRmsNormAttrs;
use kernels::codec::QuantConfig;
use kernels::fast;
use kernels::parallel::for_row_chunks;
use kernels::slices::NormOutputs;
use kernels::ThreadPool;

const H: usize = 6144;
const MS: [usize; 6] = [1, 8, 16, 64, 192, 2048];

struct Bufs {
    x: Vec<bf16>,
    r: Vec<bf16>,
    g: Vec<bf16>,
    ro: Vec<bf16>,
    normed: Vec<bf16>,
    q: Vec<u8>,
    s: Vec<u8>,
}

fn bufs(m: usize) -> Bufs {
    let to = |v: Vec<f32>| v.into_iter().map(bf16::from_f32).collect::<Vec<_>>();
    Bufs {
        x: to(common::normals(m * H, 1, 1.0)),
        r: to(common::normals(m * H, 2, 4.0)),
        g: to(common::normals(H, 3, 0.1)),
        ro: vec![bf16::ZERO; m * H],
        normed: vec![bf16::ZERO; m * H],
        q: vec![0; m * H],
        s: vec![0; m * H / 32],
    }
}

fn attrs() -> AddRmsNormAttrs {
    AddRmsNormAttrs {
        gemma: true,
        quant: QuantConfig::default(),
        ..Default::default()
    }
}

fn fused(b: &mut Bufs, par: &ThreadPool) {
    let out = NormOutputs {
        q: &mut b.q,
        scales: &mut b.s,
        residual_out: Some(&mut b.ro),
        normed: None,
    };
    fast::add_rms_norm_mx_quant(&b.x, Some(&b.r), &b.g, H, &attrs(), out, par)
        .expect("valid shapes");
}

/// The unfused chain with our own kernels: an Add pass (writes the residual), a Gemma RMSNorm
/// pass (writes the bf16 normed rows), then the fast MxQuantize pass reading them back.
fn unfused(b: &mut Bufs, par: &ThreadPool) {
    let (x, r, g) = (&b.x, &b.r, &b.g);
    let ro = b.ro.as_mut_ptr() as usize;
    let nm = b.normed.as_mut_ptr() as usize;
    let rows = x.len() / H;
    for_row_chunks(par, rows, 16, &|r0, r1| {
        // SAFETY: disjoint row ranges of buffers that outlive the call.
        let (ro, nm) = unsafe {
            (
                std::slice::from_raw_parts_mut((ro as *mut bf16).add(r0 * H), (r1 - r0) * H),
                std::slice::from_raw_parts_mut((nm as *mut bf16).add(r0 * H), (r1 - r0) * H),
            )
        };
        for (o, (a, c)) in ro
            .iter_mut()
            .zip(x[r0 * H..r1 * H].iter().zip(&r[r0 * H..r1 * H]))
        {
            *o = bf16::from_f32(a.to_f32() + c.to_f32());
        }
        for (srow, nrow) in ro.chunks_exact(H).zip(nm.chunks_exact_mut(H)) {
            let ss: f32 = srow.iter().map(|v| v.to_f32() * v.to_f32()).sum();
            let inv = 1.0 / (ss / H as f32 + 1e-6).sqrt();
            for ((n, s), w) in nrow.iter_mut().zip(srow).zip(g) {
                *n = bf16::from_f32(s.to_f32() * inv * (1.0 + w.to_f32()));
            }
        }
    });
    fast::mx_quantize(
        &b.normed,
        H,
        &mut b.q,
        &mut b.s,
        QuantConfig::default(),
        par,
    )
    .expect("valid shapes");
}

/// Bytes the fused op must move per element: x, residual in; residual_out, q, scales out.
fn fused_bytes(m: usize) -> usize {
    m * H * (2 + 2 + 2 + 1) + m * H / 32
}

fn main() {
    common::fused_vs_unfused::FusedVsUnfused {
        group: "norm_quant_bf16_h6144",
        title: format!("norm_quant bf16 H={H}"),
        ms: &MS,
        bufs,
        fused,
        unfused,
        fused_bytes,
        copy_min_rows: 16,
    }
    .main();
}
