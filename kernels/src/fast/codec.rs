//! Vectorized element-wise codecs (ONNX `Cast` to/from FLOAT8E4M3FN) over slices, bit-exact
//! with the scalar `codec::f32_to_e4m3` / `codec::e4m3_to_f32`.

use super::{FastElement, Isa};
use crate::codec::{e4m3_to_f32, f32_to_e4m3};
use crate::error::Result;
use crate::slices::check_len;

/// `dst[i] = e4m3(src[i])` with RNE; `saturate` as ONNX defines it.
pub fn cast_to_e4m3<T: FastElement>(src: &[T], dst: &mut [u8], saturate: bool) -> Result<()> {
    check_len("dst", dst.len(), src.len())?;
    encode_e4m3(src, dst, saturate);
    Ok(())
}

/// [`cast_to_e4m3`] of the first `min(src.len(), dst.len())` elements, for callers whose
/// lengths agree by construction (`MxQuantizeLinear`'s scaled blocks).
pub(super) fn encode_e4m3<T: FastElement>(src: &[T], dst: &mut [u8], saturate: bool) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    let done = match Isa::detect() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Avx2 implies the CPU features; the lengths are equal.
        Isa::Avx2 => unsafe { avx2_cast::to_e4m3(src, dst, saturate) },
        _ => 0,
    };
    for (d, s) in dst[done..].iter_mut().zip(&src[done..]) {
        *d = f32_to_e4m3(s.to_f32(), saturate);
    }
}

/// `dst[i] = T(e4m3(src[i]))` (exact for f32 and f16; bf16 rounds the 3-bit mantissa exactly too).
pub fn cast_from_e4m3<T: FastElement>(src: &[u8], dst: &mut [T]) -> Result<()> {
    check_len("dst", dst.len(), src.len())?;
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = T::from_f32(e4m3_to_f32(s));
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_op_in_unsafe_fn)]
mod avx2_cast {
    use std::arch::x86_64::*;

    use super::super::avx2::{encode_e4m3_finite, Lanes};
    use crate::codec::f32_to_e4m3;

    /// Converts whole chunks of 8; returns how many elements it wrote (the caller finishes the
    /// tail). Chunks with a non-finite lane, or a lane that overflows without saturation, go
    /// through the scalar codec lane by lane.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn to_e4m3<T: Lanes + crate::Element>(
        src: &[T],
        dst: &mut [u8],
        saturate: bool,
    ) -> usize {
        let n = src.len() / 8 * 8;
        let absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
        // Above 464 a non-saturating cast gives NaN; the vector encoder saturates instead.
        let limit = _mm256_set1_ps(if saturate { f32::MAX } else { 464.0 });
        for i in (0..n).step_by(8) {
            let v = T::load8(src.as_ptr().add(i));
            let ok = _mm256_cmp_ps::<_CMP_LE_OQ>(_mm256_and_ps(v, absmask), limit);
            if _mm256_movemask_ps(ok) != 0xFF {
                for j in i..i + 8 {
                    dst[j] = f32_to_e4m3(src[j].to_f32(), saturate);
                }
                continue;
            }
            let e = encode_e4m3_finite(v);
            // One byte per 32-bit lane → 8 bytes.
            let w = _mm256_packus_epi32(e, e);
            let b = _mm256_packus_epi16(w, w);
            let b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
            _mm_storel_epi64(
                dst.as_mut_ptr().add(i) as *mut __m128i,
                _mm256_castsi256_si128(b),
            );
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast::with_portable;
    use half::bf16;

    #[test]
    fn cast_matches_scalar_on_a_sweep() {
        // Every 97th f32 bit pattern (all signs, subnormals, specials, overflow).
        let src: Vec<f32> = (0..(1u64 << 32))
            .step_by(97 * 4099)
            .map(|b| f32::from_bits(b as u32))
            .collect();
        for saturate in [true, false] {
            let want: Vec<u8> = src.iter().map(|&v| f32_to_e4m3(v, saturate)).collect();
            for portable in [false, true] {
                let mut got = vec![0u8; src.len()];
                let mut run = || cast_to_e4m3(&src, &mut got, saturate).unwrap();
                if portable {
                    with_portable(run)
                } else {
                    run()
                }
                assert_eq!(got, want, "saturate {saturate} portable {portable}");
            }
        }
        let b: Vec<bf16> = src.iter().map(|&v| bf16::from_f32(v)).collect();
        let mut got = vec![0u8; b.len()];
        cast_to_e4m3(&b, &mut got, true).unwrap();
        assert!(got
            .iter()
            .zip(&b)
            .all(|(&g, v)| g == f32_to_e4m3(v.to_f32(), true)));
        let mut back = vec![0f32; got.len()];
        cast_from_e4m3(&got, &mut back).unwrap();
        assert!(back
            .iter()
            .zip(&got)
            .all(|(v, &g)| v.to_bits() == e4m3_to_f32(g).to_bits() || v.is_nan()));
    }
}
