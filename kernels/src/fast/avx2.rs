//! AVX2+FMA+F16C building blocks: 8-lane loads/stores/rounding per element type, the vectorized
//! E4M3FN encoder and the MXFP8 block quantizer. Every function here must only be called after
//! [`super::isa::Isa::detect`] returned `Avx2`.
#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use half::{bf16, f16};

use crate::codec::{pow2_inverse, quantize_block, QuantConfig, ScaleRule, BLOCK};

/// 8-lane f32 access to an element type.
pub trait Lanes: Sized {
    /// Loads 8 elements from `p` (unaligned) widened to f32.
    unsafe fn load8(p: *const Self) -> __m256;
    /// Rounds 8 f32 lanes to `Self` (RNE, as `Element::from_f32`) and stores them at `p`.
    unsafe fn store8(p: *mut Self, v: __m256);
    /// round_T: the lanes after a round trip through `Self`.
    unsafe fn round8(v: __m256) -> __m256;
    /// `store8` and `round8` in one conversion: stores round_T(v) at `p` and returns it.
    unsafe fn round_store8(p: *mut Self, v: __m256) -> __m256;
    /// `round8` without the NaN quieting (bf16; the other types round exactly anyway). Exact for
    /// lanes that are not NaN, and for NaN lanes whose 16 low bits are zero — such as the sum of
    /// two values widened from bf16 (x86 returns a quieted operand NaN or the default NaN
    /// 0xFFC0_0000). Callers prove one of the two.
    unsafe fn round8_no_nan(v: __m256) -> __m256;
    /// `round_store8` under the same precondition as `round8_no_nan`.
    unsafe fn round_store8_no_nan(p: *mut Self, v: __m256) -> __m256;
}

impl Lanes for f32 {
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load8(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn store8(p: *mut f32, v: __m256) {
        _mm256_storeu_ps(p, v)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn round8(v: __m256) -> __m256 {
        v
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn round_store8(p: *mut f32, v: __m256) -> __m256 {
        _mm256_storeu_ps(p, v);
        v
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn round8_no_nan(v: __m256) -> __m256 {
        v
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn round_store8_no_nan(p: *mut f32, v: __m256) -> __m256 {
        Self::round_store8(p, v)
    }
}

impl Lanes for f16 {
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load8(p: *const f16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn store8(p: *mut f16, v: __m256) {
        _mm_storeu_si128(
            p as *mut __m128i,
            _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v),
        )
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn round8(v: __m256) -> __m256 {
        _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn round_store8(p: *mut f16, v: __m256) -> __m256 {
        let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
        _mm_storeu_si128(p as *mut __m128i, h);
        _mm256_cvtph_ps(h)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn round8_no_nan(v: __m256) -> __m256 {
        Self::round8(v)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn round_store8_no_nan(p: *mut f16, v: __m256) -> __m256 {
        Self::round_store8(p, v)
    }
}

/// f32 lanes → bf16 bit patterns in the low 16 bits of each 32-bit lane, RNE, NaN quieted the
/// way `half::bf16::from_f32` does it (top mantissa bit set, payload truncated).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn bf16_bits(v: __m256) -> __m256i {
    let x = _mm256_castps_si256(v);
    let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(x), _mm256_set1_epi32(1));
    let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(
        x,
        _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb),
    ));
    let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
    let quiet = _mm256_or_si256(_mm256_srli_epi32::<16>(x), _mm256_set1_epi32(0x40));
    _mm256_blendv_epi8(rounded, quiet, nan)
}

impl Lanes for bf16 {
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load8(p: *const bf16) -> __m256 {
        let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn store8(p: *mut bf16, v: __m256) {
        store_bf16_bits(p, bf16_bits(v));
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn round8(v: __m256) -> __m256 {
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(bf16_bits(v)))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn round_store8(p: *mut bf16, v: __m256) -> __m256 {
        let b = bf16_bits(v);
        store_bf16_bits(p, b);
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(b))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn round8_no_nan(v: __m256) -> __m256 {
        // Clearing the low 16 bits after the rounding add equals the shift pair.
        let x = _mm256_castps_si256(v);
        let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(x), _mm256_set1_epi32(1));
        let r = _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
        _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(-65536)))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn round_store8_no_nan(p: *mut bf16, v: __m256) -> __m256 {
        let b = bf16_bits_no_nan(v);
        store_bf16_bits(p, b);
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(b))
    }
}

/// `bf16_bits` for lanes that are not NaN: RNE by integer add (overflow correctly becomes ±Inf).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn bf16_bits_no_nan(v: __m256) -> __m256i {
    let x = _mm256_castps_si256(v);
    let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(x), _mm256_set1_epi32(1));
    _mm256_srli_epi32::<16>(_mm256_add_epi32(
        x,
        _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb),
    ))
}

/// Stores the low 16 bits of eight 32-bit lanes (each ≤ 0xFFFF) as eight bf16.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn store_bf16_bits(p: *mut bf16, b: __m256i) {
    let packed = _mm256_packus_epi32(b, b);
    let ordered = _mm256_permute4x64_epi64::<0b1000>(packed);
    _mm_storeu_si128(p as *mut __m128i, _mm256_castsi256_si128(ordered));
}

/// Encodes 8 finite f32 lanes to E4M3FN with RNE and saturation; one byte per 32-bit lane.
/// Same rule as `codec::f32_to_e4m3(x, true)` for finite inputs.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn encode_e4m3_finite(v: __m256) -> __m256i {
    let bits = _mm256_castps_si256(v);
    let sign = _mm256_and_si256(_mm256_srli_epi32::<24>(bits), _mm256_set1_epi32(0x80));
    let abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFF_FFFF));
    // Normal range: round 23 → 3 mantissa bits (ties to even), rebias 127 → 7, saturate at 0x7E.
    // abs + 0x7FFFF + lsb, written as abs + 0x80000 - (lsb == 0) (no shift), with the rebias
    // (120 << 23, a multiple of the rounding unit) folded into the constant: exact for every
    // lane at or above 2^-6, and the lanes below take the subnormal result.
    let even = _mm256_cmpeq_epi32(
        _mm256_and_si256(abs, _mm256_set1_epi32(1 << 20)),
        _mm256_setzero_si256(),
    );
    let r = _mm256_srli_epi32::<20>(_mm256_add_epi32(
        _mm256_add_epi32(abs, _mm256_set1_epi32(0x8_0000 - (120 << 23))),
        even,
    ));
    let normal = _mm256_min_epi32(r, _mm256_set1_epi32(0x7E));
    let is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3C80_0000), abs);
    if _mm256_testz_si256(is_sub, is_sub) != 0 {
        // No lane below 2^-6 (the common case once a block is scaled up to ~448).
        return _mm256_or_si256(normal, sign);
    }
    // Subnormal range (|v| < 2^-6): m = rne(|v|·512) in 0..=8.
    let scaled = _mm256_mul_ps(_mm256_castsi256_ps(abs), _mm256_set1_ps(512.0));
    let sub = _mm256_cvttps_epi32(_mm256_round_ps::<_MM_FROUND_TO_NEAREST_INT>(scaled));
    _mm256_or_si256(_mm256_blendv_epi8(normal, sub, is_sub), sign)
}

/// Packs four vectors of one-byte-per-lane codes (a, b, c, d in element order) into 32 bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn pack_bytes(a: __m256i, b: __m256i, c: __m256i, d: __m256i) -> __m256i {
    let ab = _mm256_packus_epi32(a, b); // a0-3 b0-3 | a4-7 b4-7 (u16)
    let cd = _mm256_packus_epi32(c, d);
    let abcd = _mm256_packus_epi16(ab, cd); // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
    _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// Horizontal max of 8 non-negative, non-NaN lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn hmax(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
    _mm_cvtss_f32(m)
}

/// Quantizes one block held in four vectors (elements 0-7, 8-15, 16-23, 24-31): writes 32
/// bytes at `q` and returns the scale byte. Blocks with a NaN or Inf take the scalar path.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn quantize_block_avx2(v: [__m256; 4], q: *mut u8, cfg: QuantConfig) -> u8 {
    let absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
    let inf = _mm256_set1_ps(f32::INFINITY);
    let a = [
        _mm256_and_ps(v[0], absmask),
        _mm256_and_ps(v[1], absmask),
        _mm256_and_ps(v[2], absmask),
        _mm256_and_ps(v[3], absmask),
    ];
    let m01 = _mm256_max_ps(a[0], a[1]);
    let m23 = _mm256_max_ps(a[2], a[3]);
    let m = _mm256_max_ps(m01, m23);
    // `max` drops NaN operands unpredictably, so test finiteness on all lanes, not on m.
    let finite = _mm256_and_ps(
        _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_LT_OQ>(a[0], inf),
            _mm256_cmp_ps::<_CMP_LT_OQ>(a[1], inf),
        ),
        _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_LT_OQ>(a[2], inf),
            _mm256_cmp_ps::<_CMP_LT_OQ>(a[3], inf),
        ),
    );
    if _mm256_movemask_ps(finite) != 0xFF {
        let mut x = [0f32; BLOCK];
        for (i, vi) in v.iter().enumerate() {
            _mm256_storeu_ps(x.as_mut_ptr().add(8 * i), *vi);
        }
        let mut out = [0u8; BLOCK];
        let s = quantize_block(&x, &mut out, cfg);
        std::ptr::copy_nonoverlapping(out.as_ptr(), q, BLOCK);
        return s;
    }
    let byte = cfg.scale_rule.scale_byte(hmax(m));
    let inv = _mm256_set1_ps(pow2_inverse(byte));
    let e = [
        encode_e4m3_finite(_mm256_mul_ps(v[0], inv)),
        encode_e4m3_finite(_mm256_mul_ps(v[1], inv)),
        encode_e4m3_finite(_mm256_mul_ps(v[2], inv)),
        encode_e4m3_finite(_mm256_mul_ps(v[3], inv)),
    ];
    _mm256_storeu_si256(q as *mut __m256i, pack_bytes(e[0], e[1], e[2], e[3]));
    byte
}

/// Blocks per group in [`quantize_group8`]: one scale lane per block.
pub const GROUP: usize = 8;

/// Lane b of the result = max of the eight lanes of `m[b]` (8 non-negative, non-NaN vectors).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn transpose_max(m: &[__m256; GROUP]) -> __m256 {
    // unpack + max: per 128-bit half, lanes [max(a0,a2), max(b0,b2), max(a1,a3), max(b1,b3)].
    let p01 = _mm256_max_ps(
        _mm256_unpacklo_ps(m[0], m[1]),
        _mm256_unpackhi_ps(m[0], m[1]),
    );
    let p23 = _mm256_max_ps(
        _mm256_unpacklo_ps(m[2], m[3]),
        _mm256_unpackhi_ps(m[2], m[3]),
    );
    let p45 = _mm256_max_ps(
        _mm256_unpacklo_ps(m[4], m[5]),
        _mm256_unpackhi_ps(m[4], m[5]),
    );
    let p67 = _mm256_max_ps(
        _mm256_unpacklo_ps(m[6], m[7]),
        _mm256_unpackhi_ps(m[6], m[7]),
    );
    // Per half: lane j = max over that half of block j (of this quad).
    let lo = _mm256_max_ps(
        _mm256_shuffle_ps::<0b01_00_01_00>(p01, p23),
        _mm256_shuffle_ps::<0b11_10_11_10>(p01, p23),
    );
    let hi = _mm256_max_ps(
        _mm256_shuffle_ps::<0b01_00_01_00>(p45, p67),
        _mm256_shuffle_ps::<0b11_10_11_10>(p45, p67),
    );
    _mm256_max_ps(
        _mm256_permute2f128_ps::<0x20>(lo, hi),
        _mm256_permute2f128_ps::<0x31>(lo, hi),
    )
}

/// Eight lanes of `ScaleRule::scale_byte` for finite amax (the same integer rule).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn scale_bytes8(amax: __m256, rule: ScaleRule) -> __m256i {
    let max_byte = _mm256_set1_epi32(254);
    match rule {
        ScaleRule::Floor => {
            let bits = _mm256_castps_si256(_mm256_mul_ps(amax, _mm256_set1_ps(1.0 / 256.0)));
            _mm256_min_epi32(_mm256_srli_epi32::<23>(bits), max_byte)
        }
        ScaleRule::FloorF16 => {
            // The product rounded to float16 (RNE; F16C, as `half`) and widened back.
            let p = _mm256_mul_ps(amax, _mm256_set1_ps(1.0 / 256.0));
            let p = _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(p));
            _mm256_min_epi32(_mm256_srli_epi32::<23>(_mm256_castps_si256(p)), max_byte)
        }
        ScaleRule::Rceil => {
            let bits = _mm256_castps_si256(_mm256_mul_ps(amax, _mm256_set1_ps(1.0f32 / 448.0)));
            let (zero, one) = (_mm256_setzero_si256(), _mm256_set1_epi32(1));
            let e = _mm256_srli_epi32::<23>(bits);
            let m = _mm256_and_si256(bits, _mm256_set1_epi32(0x7F_FFFF));
            let normal = _mm256_add_epi32(e, _mm256_andnot_si256(_mm256_cmpeq_epi32(m, zero), one));
            let sub = _mm256_and_si256(_mm256_cmpgt_epi32(m, _mm256_set1_epi32(0x40_0000)), one);
            let byte = _mm256_blendv_epi8(normal, sub, _mm256_cmpeq_epi32(e, zero));
            _mm256_min_epi32(byte, max_byte)
        }
    }
}

/// Eight lanes of `pow2_inverse`: 2^(127 - byte), byte 254 → the subnormal 2^-127.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn inverse8(bytes: __m256i) -> __m256 {
    let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(_mm256_set1_epi32(254), bytes));
    let is_254 = _mm256_cmpeq_epi32(bytes, _mm256_set1_epi32(254));
    _mm256_castsi256_ps(_mm256_blendv_epi8(
        normal,
        _mm256_set1_epi32(0x0040_0000),
        is_254,
    ))
}

/// Quantizes 8 consecutive blocks (256 values of T at `p`) into 256 bytes at `q` and 8 scale
/// bytes at `s`, computing the 8 scales in one vector. Groups with a NaN or Inf fall back to
/// [`quantize_block_avx2`] per block.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_group8<T: Lanes>(p: *const T, q: *mut u8, s: *mut u8, cfg: QuantConfig) {
    let absmask = _mm256_set1_epi32(0x7FFF_FFFF);
    let inf_bits = _mm256_set1_epi32(0x7F80_0000);
    let mut maxes = [_mm256_setzero_ps(); GROUP];
    let mut finite = _mm256_set1_epi32(-1);
    for (b, mb) in maxes.iter_mut().enumerate() {
        // |v| as integers orders like the values (NaNs above Inf), so the integer max keeps a
        // NaN (a float max may drop it) and one compare per block tests finiteness.
        let mut m = _mm256_setzero_si256();
        for c in 0..4 {
            let v = _mm256_castps_si256(T::load8(p.add(b * BLOCK + 8 * c)));
            m = _mm256_max_epi32(m, _mm256_and_si256(v, absmask));
        }
        finite = _mm256_and_si256(finite, _mm256_cmpgt_epi32(inf_bits, m));
        *mb = _mm256_castsi256_ps(m);
    }
    if _mm256_movemask_ps(_mm256_castsi256_ps(finite)) != 0xFF {
        for b in 0..GROUP {
            let pb = p.add(b * BLOCK);
            let v = [
                T::load8(pb),
                T::load8(pb.add(8)),
                T::load8(pb.add(16)),
                T::load8(pb.add(24)),
            ];
            *s.add(b) = quantize_block_avx2(v, q.add(b * BLOCK), cfg);
        }
        return;
    }
    let bytes = scale_bytes8(transpose_max(&maxes), cfg.scale_rule);
    let words = _mm256_packus_epi32(bytes, bytes); // u16: b0-3 b0-3 | b4-7 b4-7
    let octets = _mm256_packus_epi16(words, words); // u8: b0-3 ×4 | b4-7 ×4
    let ordered = _mm256_permutevar8x32_epi32(octets, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
    _mm_storel_epi64(s as *mut __m128i, _mm256_castsi256_si128(ordered));
    let inv = inverse8(bytes);
    for b in 0..GROUP {
        let ib = _mm256_permutevar8x32_ps(inv, _mm256_set1_epi32(b as i32));
        encode_scaled(p.add(b * BLOCK), ib, q.add(b * BLOCK));
    }
}

/// Encodes the finite block of T at `p` times `inv` (its inverse scale) into 32 codes at `q`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn encode_scaled<T: Lanes>(p: *const T, inv: __m256, q: *mut u8) {
    let e = [
        encode_e4m3_finite(_mm256_mul_ps(T::load8(p), inv)),
        encode_e4m3_finite(_mm256_mul_ps(T::load8(p.add(8)), inv)),
        encode_e4m3_finite(_mm256_mul_ps(T::load8(p.add(16)), inv)),
        encode_e4m3_finite(_mm256_mul_ps(T::load8(p.add(24)), inv)),
    ];
    _mm256_storeu_si256(q as *mut __m256i, pack_bytes(e[0], e[1], e[2], e[3]));
}

/// Quantizes a row of T (length a multiple of 32): groups of 8 blocks, then single blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_row<T: Lanes>(x: &[T], q: &mut [u8], scales: &mut [u8], cfg: QuantConfig) {
    debug_assert!(
        x.len().is_multiple_of(BLOCK) && q.len() == x.len() && scales.len() == x.len() / BLOCK
    );
    let nb = scales.len();
    let groups = nb / GROUP;
    for g in 0..groups {
        let off = g * GROUP * BLOCK;
        quantize_group8(
            x.as_ptr().add(off),
            q.as_mut_ptr().add(off),
            scales.as_mut_ptr().add(g * GROUP),
            cfg,
        );
    }
    for (b, s) in scales.iter_mut().enumerate().skip(groups * GROUP) {
        let p = x.as_ptr().add(b * BLOCK);
        let v = [
            T::load8(p),
            T::load8(p.add(8)),
            T::load8(p.add(16)),
            T::load8(p.add(24)),
        ];
        *s = quantize_block_avx2(v, q.as_mut_ptr().add(b * BLOCK), cfg);
    }
}
