//! Fast `SwiGluMxQuant`: the activation of a 32-element block is computed in registers and
//! quantized without materialising the row.

use super::shared::SharedMut;
use super::{min_rows_per_task, FastElement, Isa};
use crate::attrs::{SwiGluAttrs, SwiGluLayout};
use crate::codec::BLOCK;
use crate::error::Result;
use crate::parallel::{for_row_chunks, Parallel};
use crate::reference::layout_mismatch;
use crate::slices::{check_swiglu_io, SwiGluInput};

/// `SwiGluMxQuant` producing rows of `i` activations (bit-exact with
/// [`crate::reference::swiglu_mx_quant`]).
pub fn swiglu_mx_quant<T: FastElement>(
    input: SwiGluInput<'_, T>,
    i: usize,
    attrs: &SwiGluAttrs,
    q: &mut [u8],
    scales: &mut [u8],
    par: &dyn Parallel,
) -> Result<()> {
    let rows = check_swiglu_io(&input, i, q.len(), scales.len())?;
    let fused = matches!(input, SwiGluInput::Fused(_));
    if fused == (attrs.layout == SwiGluLayout::Separate) {
        return Err(layout_mismatch(attrs.layout));
    }
    let isa = Isa::detect();
    let nb = i / BLOCK;
    let (q, scales) = (SharedMut::new(q), SharedMut::new(scales));
    for_row_chunks(par, rows, min_rows_per_task(2 * i), &|r0, r1| {
        // SAFETY: row chunks are disjoint, so these pieces are too.
        let (qc, sc) = unsafe { (q.piece(r0 * i, r1 * i), scales.piece(r0 * nb, r1 * nb)) };
        let chunk = match input {
            SwiGluInput::Fused(gu) => SwiGluInput::Fused(&gu[r0 * 2 * i..r1 * 2 * i]),
            SwiGluInput::Separate { gate, up } => SwiGluInput::Separate {
                gate: &gate[r0 * i..r1 * i],
                up: &up[r0 * i..r1 * i],
            },
        };
        match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: Avx2 implies the CPU features; shapes and layout were checked above.
            Isa::Avx2 => unsafe { avx2_swiglu::rows(chunk, i, attrs, qc, sc) },
            _ => {
                let r = crate::reference::swiglu_mx_quant(chunk, i, attrs, qc, sc);
                debug_assert!(r.is_ok());
            }
        }
    });
    Ok(())
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_op_in_unsafe_fn)]
mod avx2_swiglu {
    use std::arch::x86_64::*;

    use super::super::avx2::{quantize_block_avx2, quantize_group8, Lanes, GROUP};
    use super::super::avx2_act::swiglu8;
    use crate::attrs::{SwiGluAttrs, SwiGluLayout};
    use crate::codec::BLOCK;
    use crate::element::Element;
    use crate::slices::SwiGluInput;

    /// Reorders the 64-bit pairs [0, 2, 1, 3] → [0, 1, 2, 3] after an in-lane shuffle.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn halves_in_order(v: __m256) -> __m256 {
        _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)))
    }

    /// Gate and up lanes for outputs j..j+8 of one row.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load_pair<T: Lanes>(
        input: &SwiGluInput<'_, T>,
        layout: SwiGluLayout,
        row: usize,
        i: usize,
        j: usize,
    ) -> (__m256, __m256) {
        match *input {
            SwiGluInput::Separate { gate, up } => (
                T::load8(gate.as_ptr().add(row * i + j)),
                T::load8(up.as_ptr().add(row * i + j)),
            ),
            SwiGluInput::Fused(gu) => {
                let base = gu.as_ptr().add(row * 2 * i);
                if layout == SwiGluLayout::SplitHalves {
                    (T::load8(base.add(j)), T::load8(base.add(i + j)))
                } else {
                    // [g0 u0 g1 u1 g2 u2 g3 u3], [g4 u4 … g7 u7] → even / odd lanes.
                    let v0 = T::load8(base.add(2 * j));
                    let v1 = T::load8(base.add(2 * j + 8));
                    let even = _mm256_shuffle_ps::<0b10_00_10_00>(v0, v1);
                    let odd = _mm256_shuffle_ps::<0b11_01_11_01>(v0, v1);
                    (halves_in_order(even), halves_in_order(odd))
                }
            }
        }
    }

    /// Computes and quantizes rows of the SwiGLU activation.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn rows<T: Lanes + Element>(
        input: SwiGluInput<'_, T>,
        i: usize,
        attrs: &SwiGluAttrs,
        q: &mut [u8],
        scales: &mut [u8],
    ) {
        let nb = i / BLOCK;
        let groups = nb / GROUP;
        let mut buf = [0f32; GROUP * BLOCK];
        for row in 0..q.len() / i {
            // Whole groups of 8 blocks: activations to a stack buffer, one group quantization.
            for g in 0..groups {
                let off = g * GROUP * BLOCK;
                for c in (0..GROUP * BLOCK).step_by(8) {
                    let (gv, uv) = load_pair(&input, attrs.layout, row, i, off + c);
                    _mm256_storeu_ps(buf.as_mut_ptr().add(c), swiglu8::<T>(gv, uv, attrs));
                }
                quantize_group8(
                    buf.as_ptr(),
                    q.as_mut_ptr().add(row * i + off),
                    scales.as_mut_ptr().add(row * nb + g * GROUP),
                    attrs.quant,
                );
            }
            for b in groups * GROUP..nb {
                let mut act = [_mm256_setzero_ps(); 4];
                for (c, a) in act.iter_mut().enumerate() {
                    let (g, u) = load_pair(&input, attrs.layout, row, i, b * BLOCK + 8 * c);
                    *a = swiglu8::<T>(g, u, attrs);
                }
                scales[row * nb + b] =
                    quantize_block_avx2(act, q.as_mut_ptr().add(row * i + b * BLOCK), attrs.quant);
            }
        }
    }
}
