//! Host-side packing of constant MX weights into the layout of the fragment-packed decode GEMM
//! (kernels/gpu/mx_matmul_frag.hip; bench/gpu/mxgpu.py `pack_frag` is the same layout).
//!
//! Why a packed layout: the decode GEMM is bound by weight bytes in flight. Packed, one k-block
//! of a warp's 16 weight rows is 512 contiguous bytes and each lane's 16 bytes are exactly its two
//! k16 mma fragments, so each lane issues one coalesced 16-byte load straight into registers.
//! Weights are constants, so the reshuffle is paid once, when the model is loaded.

use crate::codec::BLOCK;
use crate::error::KernelError;

/// K must be a multiple of this: a lane's scale word holds 4 k-blocks.
pub const FRAG_K_MULTIPLE: usize = 4 * BLOCK;

/// The scale byte of padding rows: 2^0, so the kernel's fast E8M0 decode (no 0 / 255 codes in
/// the word) stays on for the last tile; their weights are zero, so they add nothing.
const PAD_SCALE: u8 = 127;

/// `q_nk [N, K]` E4M3 + `scales_nk [N, K/32]` E8M0 (row-major, `K % 128 == 0`) packed as
/// `(wf, wsf)` for `GpuMatB::MxFrag`:
///
/// * `wf [ceil(N/16)][K/32][32 lanes][16 bytes]`: lane `4g + t` holds bytes `8t .. 8t + 7` of the
///   k-block of weight row `16 tile + g`, then the same bytes of row `16 tile + g + 8`;
/// * `wsf [ceil(N/16)][K/128][16 rows][4 bytes]`: byte `u` of row `r`'s word is the scale of
///   k-block `4 group + u` of weight row `16 tile + r`.
///
/// Rows past `n` (up to the next multiple of 16) are zero weights with scale byte 127.
pub fn pack_frag_weights(
    q_nk: &[u8],
    scales_nk: &[u8],
    n: usize,
    k: usize,
) -> Result<(Vec<u8>, Vec<u8>), KernelError> {
    if k == 0 || !k.is_multiple_of(FRAG_K_MULTIPLE) {
        return Err(KernelError::Shape(format!(
            "fragment-packed weights need K a positive multiple of {FRAG_K_MULTIPLE}, got {k}"
        )));
    }
    let kb = k / BLOCK;
    if q_nk.len() != n * k || scales_nk.len() != n * kb {
        return Err(KernelError::Buffer(format!(
            "weights [{n}, {k}] need {} value and {} scale bytes, got {} and {}",
            n * k,
            n * kb,
            q_nk.len(),
            scales_nk.len()
        )));
    }
    let tiles = n.div_ceil(16);
    let mut wf = vec![0u8; tiles * 16 * k];
    let mut wsf = vec![PAD_SCALE; tiles * 16 * kb];
    for row in 0..n {
        let (tile, r) = (row / 16, row % 16);
        // Row r of a tile is lane group g = r % 8, half h = r / 8 of each lane's 16 bytes.
        let (g, h) = (r % 8, r / 8);
        let src = &q_nk[row * k..(row + 1) * k];
        for (blk, block) in src.chunks_exact(BLOCK).enumerate() {
            for (t, bytes) in block.chunks_exact(8).enumerate() {
                let lane = 4 * g + t;
                let at = ((tile * kb + blk) * 32 + lane) * 16 + 8 * h;
                wf[at..at + 8].copy_from_slice(bytes);
            }
        }
        for (blk, &s) in scales_nk[row * kb..(row + 1) * kb].iter().enumerate() {
            let (group, u) = (blk / 4, blk % 4);
            wsf[((tile * (kb / 4) + group) * 16 + r) * 4 + u] = s;
        }
    }
    Ok((wf, wsf))
}

/// A stack of `e` experts `[e, N, K]` + `[e, N, K/32]` packed as [`pack_frag_weights`] packs
/// each, one expert after another (each `ceil(N/16) · 16 · K` value bytes and a 32nd of that in
/// scales): the layout the stacked-expert kernels read (`GpuMatB`'s `MxFrag` experts of
/// `MxGatherMatMul`, kernels/gpu/mx_matmul_frag_wo.hip and mx_prefill.hip).
pub fn pack_frag_experts(
    q: &[u8],
    scales: &[u8],
    (e, n, k): (usize, usize, usize),
) -> Result<(Vec<u8>, Vec<u8>), KernelError> {
    if q.len() != e * n * k || scales.len() != e * n * k / BLOCK {
        return Err(KernelError::Buffer(format!(
            "experts [{e}, {n}, {k}] need {} value and {} scale bytes, got {} and {}",
            e * n * k,
            e * n * k / BLOCK,
            q.len(),
            scales.len()
        )));
    }
    let (mut wf, mut wsf) = (Vec::new(), Vec::new());
    for x in 0..e {
        let (f, fs) = pack_frag_weights(
            &q[x * n * k..(x + 1) * n * k],
            &scales[x * n * k / BLOCK..(x + 1) * n * k / BLOCK],
            n,
            k,
        )?;
        wf.extend(f);
        wsf.extend(fs);
    }
    Ok((wf, wsf))
}

/// The power-of-two shift `c` that makes every value of MX weights `q [rows, K]` (E4M3) with
/// scales `[rows, K/32]` (E8M0) exactly an f16 after multiplying by `2^c`, or `None` when their
/// scales span too many binades for one shift (more than 22). With it the prefill route runs f16
/// activations through the library's f16 GEMM on the weights dequantized to f16 (one GEMM
/// instead of two bf16 parts) and scales the result by `2^-c` (exact).
///
/// Why the range: an E4M3 value is a multiple of 2^-9 at most 448, so `v 2^e` is exact in f16 iff
/// `e >= -15` (a multiple of 2^-24, f16's subnormal step) and `e <= 7` (448 · 2^7 < 65504). Blocks
/// whose values are all zero or NaN, and NaN scales (255), hold nothing that could be lost and are
/// not counted; `Some(0)` when no block counts.
pub fn f16_weight_shift(q: &[u8], scales: &[u8], k: usize) -> Option<i32> {
    if k == 0 || !k.is_multiple_of(BLOCK) || q.len() != scales.len() * BLOCK {
        return None;
    }
    // The scales alone first (a 32nd of the bytes): counting every block can only widen the
    // range, so a fit here is a fit; the values are read only when it does not.
    let spread = |r: Option<(i32, i32)>| r.map_or(0, |(lo, hi)| hi - lo);
    let by_scales = scales
        .iter()
        .filter(|&&s| s != 255)
        .map(|&s| i32::from(s) - 127)
        .fold(None, |r: Option<(i32, i32)>, e| {
            Some(r.map_or((e, e), |(lo, hi)| (lo.min(e), hi.max(e))))
        });
    if spread(by_scales) <= 22 {
        return shift_for(by_scales);
    }
    let mut range: Option<(i32, i32)> = None;
    for (block, &s) in q.chunks_exact(BLOCK).zip(scales) {
        // 0x7f / 0xff are NaN, 0x00 / 0x80 zero: neither constrains the shift.
        let holds = block.iter().any(|&v| v & 0x7f != 0 && v & 0x7f != 0x7f);
        if s == 255 || !holds {
            continue;
        }
        let e = i32::from(s) - 127;
        range = Some(range.map_or((e, e), |(lo, hi)| (lo.min(e), hi.max(e))));
    }
    shift_for(range)
}

/// The shift nearest 0 that puts exponents `[lo, hi]` in f16's exact `[-15, 7]` (`Some(0)` for
/// none): values stay near their own size, and `2^-c` stays a normal f32 (|c| <= 126).
fn shift_for(range: Option<(i32, i32)>) -> Option<i32> {
    let Some((lo, hi)) = range else {
        return Some(0);
    };
    let (min_c, max_c) = (-15 - lo, 7 - hi);
    let c = 0.clamp(min_c, max_c.max(min_c));
    (min_c <= max_c && c.abs() <= 126).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_shift_puts_the_largest_block_at_the_top_of_f16s_exact_range() {
        let k = 64;
        // Two rows of two blocks: scales 2^-12, 2^-3, 2^-20 and a NaN scale.
        let q = vec![0x38u8; 2 * k];
        let s = [115u8, 124, 107, 255];
        let c = f16_weight_shift(&q, &s, k).expect("spread 17");
        // Exponents -20 .. -3 fit with c in [5, 10]: the one nearest 0.
        assert_eq!(c, 5);
        // Every block's value 1.0 * 2^(e + c) is an exact f16 (normal or subnormal).
        for &sb in &s[..3] {
            let v = 2f32.powi(i32::from(sb) - 127 + c);
            assert_eq!(half::f16::from_f32(v).to_f32(), v, "scale byte {sb}");
        }
        // 448 at the top: 448 * 2^7 is f16's; 2^-9 at the bottom: 2^-24 is f16's.
        for &sb in &s[..3] {
            let e = i32::from(sb) - 127 + c;
            assert!((-15..=7).contains(&e), "scale byte {sb}");
        }
        assert_eq!(half::f16::from_f32(448.0 * 128.0).to_f32(), 57344.0);
        // A spread of 23 binades has no shift; zero and NaN blocks do not count.
        let s = [100u8, 123, 127, 127];
        assert_eq!(f16_weight_shift(&q, &s, k), None);
        let mut q0 = q.clone();
        q0[..32].fill(0x80);
        assert_eq!(f16_weight_shift(&q0, &s, k), Some(0));
        q0[..32].fill(0x7f);
        assert_eq!(f16_weight_shift(&q0, &s, k), Some(0));
        // One block at 2^-124: shifted up into f16's range.
        assert_eq!(f16_weight_shift(&[0x38u8; 32], &[3], 32), Some(109));
        // Malformed extents: none.
        assert_eq!(f16_weight_shift(&q, &s[..3], k), None);
    }

    /// Distinct-ish bytes so a misplaced byte shows: value of (row, col).
    fn weight(row: usize, col: usize) -> u8 {
        (row * 31 + col * 7 + 1) as u8
    }

    #[test]
    fn experts_are_packed_one_after_another() {
        let (e, n, k) = (3, 20, 128);
        let q: Vec<u8> = (0..e * n * k).map(|i| (i * 13 + 5) as u8).collect();
        let s: Vec<u8> = (0..e * n * k / 32).map(|i| (i % 250) as u8).collect();
        let (wf, wsf) = pack_frag_experts(&q, &s, (e, n, k)).unwrap();
        let (per_q, per_s) = (n * k, n * k / 32);
        let (one_f, one_s) =
            pack_frag_weights(&q[per_q..2 * per_q], &s[per_s..2 * per_s], n, k).unwrap();
        assert_eq!(&wf[one_f.len()..2 * one_f.len()], &one_f[..]);
        assert_eq!(&wsf[one_s.len()..2 * one_s.len()], &one_s[..]);
        assert_eq!(wf.len(), 3 * one_f.len());
        assert!(pack_frag_experts(&q[1..], &s, (e, n, k)).is_err());
    }

    #[test]
    fn bytes_land_where_the_kernel_reads_them() {
        let (n, k) = (40, 256); // 3 tiles, the last half padding; 8 k-blocks, 2 groups
        let kb = k / 32;
        let q: Vec<u8> = (0..n * k).map(|i| weight(i / k, i % k)).collect();
        let s: Vec<u8> = (0..n * kb).map(|i| (i % 250) as u8).collect();
        let (wf, wsf) = pack_frag_weights(&q, &s, n, k).unwrap();
        assert_eq!(wf.len(), 48 * k);
        assert_eq!(wsf.len(), 48 * kb);
        // wf[tile][blk][lane = 4g + t][8h + b] = q[16 tile + 8h + g][32 blk + 8t + b].
        for &(tile, blk, g, t, h, b) in &[
            (0, 0, 0, 0, 0, 0),
            (0, 3, 5, 2, 1, 7),
            (1, 7, 7, 3, 1, 4),
            (2, 1, 3, 1, 0, 2),
        ] {
            let at = ((tile * kb + blk) * 32 + 4 * g + t) * 16 + 8 * h + b;
            let row = 16 * tile + 8 * h + g;
            assert_eq!(
                wf[at],
                weight(row, 32 * blk + 8 * t + b),
                "{tile} {blk} {g} {t}"
            );
        }
        // wsf[tile][group][r][u] = s[16 tile + r][4 group + u].
        for &(tile, group, r, u) in &[(0, 0, 0, 0), (1, 1, 15, 3), (2, 0, 7, 2)] {
            let at = ((tile * 2 + group) * 16 + r) * 4 + u;
            assert_eq!(wsf[at], s[(16 * tile + r) * kb + 4 * group + u]);
        }
    }

    #[test]
    fn rows_past_n_are_zero_with_unit_scale() {
        let (n, k) = (40, 128);
        let q = vec![0x38u8; n * k];
        let s = vec![120u8; n * k / 32];
        let (wf, wsf) = pack_frag_weights(&q, &s, n, k).unwrap();
        let kb = k / 32;
        // Tile 2 holds rows 32..48: rows 40..48 are h = 1 of every lane.
        for blk in 0..kb {
            for lane in 0..32 {
                let at = ((2 * kb + blk) * 32 + lane) * 16;
                assert!(wf[at..at + 8].iter().all(|&b| b == 0x38));
                assert!(wf[at + 8..at + 16].iter().all(|&b| b == 0));
            }
        }
        for r in 0..16 {
            let word = &wsf[(2 * 16 + r) * 4..(2 * 16 + r) * 4 + 4];
            let want = if r < 8 { 120 } else { PAD_SCALE };
            assert!(word.iter().all(|&b| b == want), "row {r}: {word:?}");
        }
    }

    #[test]
    fn k_must_be_a_multiple_of_128_and_buffers_must_match() {
        let err = pack_frag_weights(&[0; 16 * 96], &[0; 16 * 3], 16, 96).unwrap_err();
        assert!(
            matches!(err, KernelError::Shape(ref m) if m.contains("128")),
            "{err}"
        );
        let err = pack_frag_weights(&[0; 10], &[0; 4], 16, 128).unwrap_err();
        assert!(matches!(err, KernelError::Buffer(_)), "{err}");
    }
}
