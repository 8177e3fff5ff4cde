//! Fast `MxQuantize`.

use super::shared::SharedMut;
use super::{min_rows_per_task, FastElement, Isa};
use crate::codec::{QuantConfig, BLOCK};
use crate::error::Result;
use crate::parallel::{for_row_chunks, Parallel};
use crate::slices::check_quant_io;

/// Quantizes the rows `x` (a whole number of rows of `k`) into `q` and `scales`, using
/// `scratch` (k floats) on the portable path.
pub(crate) fn quantize_rows<T: FastElement>(
    isa: Isa,
    x: &[T],
    q: &mut [u8],
    scales: &mut [u8],
    cfg: QuantConfig,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Avx2 is only returned by Isa::detect when the CPU has AVX2, FMA and F16C;
        // lengths were checked by the caller (whole blocks, matching q/scales).
        Isa::Avx2 => unsafe { super::avx2::quantize_row(x, q, scales, cfg) },
        _ => {
            let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
            crate::reference::quantize_row_f32(&xf, q, scales, cfg);
        }
    }
}

/// `MxQuantize` over rows of `k` (bit-exact with [`crate::reference::mx_quantize`]).
pub fn mx_quantize<T: FastElement>(
    x: &[T],
    k: usize,
    q: &mut [u8],
    scales: &mut [u8],
    cfg: QuantConfig,
    par: &dyn Parallel,
) -> Result<()> {
    let rows = check_quant_io(x.len(), k, q.len(), scales.len())?;
    let isa = Isa::detect();
    let nb = k / BLOCK;
    let (q, scales) = (SharedMut::new(q), SharedMut::new(scales));
    for_row_chunks(par, rows, min_rows_per_task(k), &|r0, r1| {
        // SAFETY: row chunks are disjoint, so these pieces are too.
        let (qc, sc) = unsafe { (q.piece(r0 * k, r1 * k), scales.piece(r0 * nb, r1 * nb)) };
        quantize_rows(isa, &x[r0 * k..r1 * k], qc, sc, cfg);
    });
    Ok(())
}
