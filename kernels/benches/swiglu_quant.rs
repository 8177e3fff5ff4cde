//! Fused SwiGluMxQuant (SwiGLU-OAI, split halves, bf16, I = 768 = MiniMax-M3 TP4 shared expert)
//! vs our own unfused chain (activation pass writing bf16 → fast MxQuantize) vs the memory floor.
//! `cargo bench -p kernels --bench swiglu_quant`; a ratio table is printed at the end.

mod common;

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

fn main() {
    common::fused_vs_unfused::FusedVsUnfused {
        group: "swiglu_oai_quant_bf16_i768",
        title: format!("swiglu_oai_quant bf16 I={I}"),
        ms: &MS,
        bufs,
        fused,
        unfused,
        fused_bytes,
        copy_min_rows: 64,
    }
    .main();
}
