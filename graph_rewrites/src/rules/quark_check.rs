//! The Quark weight check's pass over the bytes: quantize a fake-quantized float constant to
//! MXFP8 (E4M3 values, E8M0 scales; OCP floor, as Quark's op does) and compare every element with
//! what Quark's kernel writes, for [`check_quark_exact_along`] (which memoizes it and says which
//! weights it runs on).
//!
//! Speed (BENCHMARKS.md "Rewrite", 2026-12-02 h-quarkbig): the pass used to run Quark's reference
//! kernel (`kernels::reference::quark_mx::quark_mx_block`: a division and an f64 round, a libm
//! `rint` call without SSE4.1, per element) beside the codec's per-block quantizer, read the
//! elements byte by byte (the element size unknown to the compiler) and walked stacked experts
//! `[E, N, K]` block column by block column (a 16 KB stride between reads): 150-270 MB/s of f32
//! on the 2-core Zen 4 VM, seconds per expert stack of a real MoE layer. Now (~1.5 GB/s of f32
//! experts, ~1.3 GB/s of a `[K, N]` weight, both cores):
//!
//! * the element size is a constant of the loop (f32, float16 / bfloat16), a tensor whose K is
//!   its last axis is read in order, row after row, and one blocked along another axis (a
//!   `[K, N]` weight) 16 channels at a time ([`gather_tile`]: 32 runs of 16 contiguous elements);
//!   float16 is read and rounded without `half`'s per-value F16C dispatch ([`f16_to_f32`],
//!   [`round_to_f16`]: ~2x on float16 weights);
//! * a *regular* block — no NaN / Inf, and a largest exponent field of at least 8 (Quark's scale
//!   2^(e − 135) is then E8M0's own, byte e − 8) or all zeros (byte 0) — is quantized and
//!   compared by [`quantize_regular_block`] in branch-free lanes the compiler vectorizes: the
//!   codec's OCP floor byte is then e − 8, each element's E4M3 byte is `f32_to_e4m3(x ·
//!   2^(135 − e), true)` ([`e4m3_below_512`], the same bytes without branches), and Quark's value
//!   is computed as Quark's kernel computes it — `x / scale`, rounded to the E4M3 grid half to
//!   even, clamped to 448, times `scale` — with the grid rounding as an f32 add and subtract of
//!   2^(exponent + 20) (exact: the sum's ulp is the grid step) instead of f64 arithmetic, then
//!   rounded to the output type and compared with the decoded byte times the scale, as before;
//! * every other block (an Inf or NaN, a non-zero block below 2^-119: the rare ones, where Quark
//!   and E8M0 part ways and the verdict depends on the elements) takes the old path
//!   ([`quantize_edge_block`]: [`quantize_block`] and [`quark_mx_block`]), unchanged.
//!
//! The tests keep the old pass as the reference: the bytes and the first differing element of
//! both agree on random tensors and on edge blocks (zeros, subnormals, 448 saturation, ties, NaN,
//! Inf, blocks below 2^-119, any bit pattern, float16 / bfloat16 outputs); the branch-free
//! encoder is the codec's and the grid rounding `round_to_fp`'s on every exponent and tie, and
//! the float16 conversions are `half`'s (every float16; f32s of every exponent and tie).
//!
//! [`check_quark_exact_along`]: super::mx_consumers::check_quark_exact_along

use kernels::codec::mx::{quantize_block, NanPolicy, QuantConfig, ScaleRule};
use kernels::codec::{e4m3_to_f32, e8m0::e8m0_to_f32, pow2_inverse};
use kernels::reference::quark_mx::{pow2_f32, quark_mx_block, IntRounding, QuarkElement};

use super::mx_consumers::QuarkMx;
use super::spellings::mx_quant::BLOCK;
use crate::pattern::predicates::dtype;
use crate::pattern::Reject;
use crate::reject;
use crate::view::{ConstBytes, GraphView, ValueId};

const B: usize = BLOCK as usize;

/// Reads one element's bytes as f32.
type ReadElem = fn(&[u8]) -> f32;

/// How to read one element of a float constant's raw bytes as f32: f16 / bf16 widened exactly,
/// other types as `values_f64` reads them, then rounded to f32. `None` for other types.
fn decoder(elem_type: i32) -> Option<(usize, ReadElem)> {
    use half::{bf16, f16};
    fn f32_(b: &[u8]) -> f32 {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
    fn f16_(b: &[u8]) -> f32 {
        f16::from_le_bytes([b[0], b[1]]).to_f32()
    }
    fn bf16_(b: &[u8]) -> f32 {
        bf16::from_le_bytes([b[0], b[1]]).to_f32()
    }
    fn f64_(b: &[u8]) -> f32 {
        f64::from_le_bytes(<[u8; 8]>::try_from(b).unwrap_or([0; 8])) as f32
    }
    fn i64_(b: &[u8]) -> f32 {
        i64::from_le_bytes(<[u8; 8]>::try_from(b).unwrap_or([0; 8])) as f64 as f32
    }
    fn i32_(b: &[u8]) -> f32 {
        i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64 as f32
    }
    Some(match elem_type {
        dtype::FLOAT => (4, f32_),
        dtype::FLOAT16 => (2, f16_),
        dtype::BFLOAT16 => (2, bf16_),
        dtype::DOUBLE => (8, f64_),
        dtype::INT64 => (8, i64_),
        dtype::INT32 => (4, i32_),
        _ => return None,
    })
}

/// How many neighbouring channels [`gather_tile`] reads at once.
const TILE: usize = 16;

/// [`gather_block`] of the [`TILE`] channels from `nn` (`tile[c]` is channel `nn + c`'s block),
/// which lie in one run of the source's rows (the same outer index, `inner` > 1).
#[inline(always)]
fn gather_tile(
    raw: &[u8],
    size: usize,
    dec: impl Fn(&[u8]) -> f32,
    (k, inner): (usize, usize),
    nn: usize,
    kb: usize,
    tile: &mut [[f32; B]; TILE],
) {
    let (o, i) = (nn / inner, nn % inner);
    for j in 0..B {
        let off = ((o * k + kb * B + j) * inner + i) * size;
        for (x, b) in tile
            .iter_mut()
            .zip(raw[off..off + TILE * size].chunks_exact(size))
        {
            x[j] = dec(b);
        }
    }
}

/// The 32 values of block `kb` (along K) of output channel `nn` of a `[K, N]` weight; of row
/// `nn` = (o, i) of a tensor `[outer, K, inner]` blocked along K (`(k, inner)`; `inner` = N and
/// o = 0 for a `[K, N]` weight).
#[inline(always)]
fn gather_block(
    raw: &[u8],
    size: usize,
    dec: impl Fn(&[u8]) -> f32,
    (k, inner): (usize, usize),
    nn: usize,
    kb: usize,
    x: &mut [f32; B],
) {
    let (o, i) = (nn / inner, nn % inner);
    let first = ((o * k + kb * B) * inner + i) * size;
    if inner == 1 {
        // Along the last axis (stacked experts `[E, N, K]`): one contiguous run.
        for (x, b) in x
            .iter_mut()
            .zip(raw[first..first + B * size].chunks_exact(size))
        {
            *x = dec(b);
        }
        return;
    }
    for (j, x) in x.iter_mut().enumerate() {
        let off = first + j * inner * size;
        *x = dec(&raw[off..off + size]);
    }
}

/// [`check_quark_weight_exact`](super::mx_consumers::check_quark_weight_exact) of `w`'s bytes `t` along `axis`, not memoized. One pass over the
/// weight, block by block (32 K rows of the `[K, N]` source at a time, one output channel's block
/// after the other: every element is read once, from cache lines the block's 32 rows share),
/// quantizing each block and comparing it with Quark's kernel on the spot: no transposed float
/// copy of the weight.
pub(crate) fn quantize_quark_weight(
    g: &dyn GraphView,
    w: ValueId,
    t: &ConstBytes<'_>,
    axis: usize,
) -> Result<QuarkMx, Reject> {
    let name = g.value_name(w);
    let dims: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    if axis >= dims.len() {
        return Err(reject!("weight '{name}' has dims {:?}", t.dims));
    }
    // [outer, K, inner] around the quantized axis; the blocks' rows are (outer, inner).
    let (k, inner) = (dims[axis], dims[axis + 1..].iter().product::<usize>());
    let n = dims[..axis].iter().product::<usize>() * inner;
    let (size, dec) = decoder(t.elem_type)
        .filter(|(size, _)| t.raw.len() == k * n * size)
        .ok_or_else(|| reject!("weight '{name}' is not float"))?;
    if k == 0 || !k.is_multiple_of(B) {
        return Err(reject!(
            "weight '{name}' has K = {k}, not a multiple of {BLOCK}"
        ));
    }
    let elem = g.tensor_info(w).map(|i| i.elem_type).unwrap_or(0);
    let round = |f: f32| match elem {
        dtype::FLOAT16 => half::f16::from_f32(f).to_f32(),
        dtype::BFLOAT16 => half::bf16::from_f32(f).to_f32(),
        _ => f,
    };
    // The common types' readers inlined into the loop; the others through `dec`.
    let shape = (k, n, inner);
    let (values, scales, bad) = match t.elem_type {
        dtype::FLOAT => quantize_rounded(&t.raw, shape, elem, |b| {
            f32::from_le_bytes([b[0], b[1], b[2], b[3]])
        }),
        dtype::FLOAT16 => quantize_rounded(&t.raw, shape, elem, |b| {
            f16_to_f32(u16::from_le_bytes([b[0], b[1]]))
        }),
        dtype::BFLOAT16 => quantize_rounded(&t.raw, shape, elem, |b| {
            half::bf16::from_le_bytes([b[0], b[1]]).to_f32()
        }),
        _ => quantize_rounded(&t.raw, shape, elem, dec),
    };
    let Some(i) = bad else {
        return Ok(QuarkMx {
            k,
            n,
            values,
            scales,
        });
    };
    let (nn, kk) = (i / k, i % k);
    let mut x = [0f32; B];
    let mut want = [0f32; B];
    gather_block(&t.raw, size, dec, (k, inner), nn, kk / B, &mut x);
    // The element's index in the tensor (`[kk, nn]` for a `[K, N]` weight).
    let (o, ii) = (nn / inner, nn % inner);
    let mut at = (o * k + kk) * inner + ii;
    let mut index = vec![0; dims.len()];
    for (x, &d) in index.iter_mut().zip(&dims).rev() {
        (*x, at) = (at % d.max(1), at / d.max(1));
    }
    quark_mx_block(&x, &mut want, QuarkElement::Fp8E4M3, IntRounding::HalfEven);
    let j = kk % B;
    let why = if x.iter().any(|v| v.is_infinite()) {
        "its block holds an Inf, which Quark ignores for the scale and passes through (an E4M3 \
         element has no Inf)"
            .to_string()
    } else if x.iter().all(|v| v.abs() < f32::from_bits(8 << 23)) {
        "its block's largest magnitude is below 2^-119: Quark's scale is then below E8M0's \
         2^-127"
            .to_string()
    } else if elem == dtype::FLOAT16 || elem == dtype::BFLOAT16 {
        format!(
            "the fake-quant's {} output rounds it, MxMatMul would read it unrounded",
            dtype::name(elem)
        )
    } else {
        "the rewrite-time quantizer and Quark's kernel differ there".to_string()
    };
    let got = e4m3_to_f32(values[i]) * e8m0_to_f32(scales[i / B]);
    Err(reject!(
        "Quark-quantized weight '{name}' is not exactly an MXFP8 weight: element {index:?} \
         ({:e}) fake-quantizes to {:e}, E4M3 value × E8M0 scale gives {got:e} ({why}); it stays \
         fake-quantized at run time",
        x[j],
        round(want[j]),
    ))
}

/// [`quantize_blocks`] with the output type's rounding (`elem`: float16 / bfloat16 round
/// Quark's values, other types keep them) a closure of its own, inlined into the loop (a match
/// on the type per element cost ~20 % of the EP's session creation on f32 experts).
fn quantize_rounded(
    raw: &[u8],
    dims: (usize, usize, usize),
    elem: i32,
    dec: impl Fn(&[u8]) -> f32 + Copy + Send + Sync,
) -> (Vec<u8>, Vec<u8>, Option<usize>) {
    match elem {
        dtype::FLOAT16 => quantize_blocks(raw, dims, round_to_f16, dec),
        dtype::BFLOAT16 => quantize_blocks(raw, dims, |f| half::bf16::from_f32(f).to_f32(), dec),
        _ => quantize_blocks(raw, dims, |f| f, dec),
    }
}

/// `half::f16::from_bits(h).to_f32()` (NaN: a NaN), exact and without branches: `half` converts
/// one value at a time through a run-time F16C check, which kept the loop from vectorizing (f16
/// weights: ~280 MB/s against ~500 for bfloat16). The f16 bits moved to f32's place are the value
/// × 2^-112 (subnormals included), then scaled back; Inf / NaN keep their field.
#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let em = h & 0x7FFF;
    let finite = f32::from_bits(em << 13) * f32::from_bits((127 + 112) << 23);
    let v = if em >= 0x7C00 {
        0x7F80_0000 | (em & 0x3FF) << 13
    } else {
        finite.to_bits()
    };
    f32::from_bits((h & 0x8000) << 16 | v)
}

/// `half::f16::from_f32(f).to_f32()` (NaN: a NaN), without branches: `f` rounded half to even
/// to float16's grid (step 2^(max(⌊log2 |f|⌋, −14) − 10), by adding and subtracting 2^(that +
/// 23)), ±Inf from 65520 up.
#[inline(always)]
fn round_to_f16(f: f32) -> f32 {
    let a = f.abs();
    let field = ((a.to_bits() >> 23) as i32).clamp(127 - 14, 127 + 15);
    let magic = f32::from_bits(((field + 13) as u32) << 23);
    let r = (a + magic) - magic;
    let r = if a >= 65520.0 { f32::INFINITY } else { r };
    if f.is_nan() {
        f
    } else {
        r.copysign(f)
    }
}

/// The loop of [`quantize_quark_weight`] over a `[K, N]` weight's raw bytes (`[outer, K, inner]`,
/// N = outer × inner rows, [`gather_block`]), elements read by
/// `dec`: `[N, K]` E4M3 values, `[N, K/32]` E8M0 scales (OCP floor, NaN ignored for the scale
/// and kept as a NaN element, as Quark's kernel does) and the first element (in `[N, K]` order)
/// whose E4M3 value × scale differs from Quark's kernel rounded by `round` (NaN matches NaN).
/// Output channels are split over the available cores (each writes its own rows); the bytes do
/// not depend on the split.
fn quantize_blocks(
    raw: &[u8],
    (k, n, inner): (usize, usize, usize),
    round: impl Fn(f32) -> f32 + Copy + Send + Sync,
    dec: impl Fn(&[u8]) -> f32 + Copy + Send + Sync,
) -> (Vec<u8>, Vec<u8>, Option<usize>) {
    let kbs = k / BLOCK as usize;
    let mut values = vec![0u8; n * k];
    let mut scales = vec![0u8; n * kbs];
    // Below ~1 M elements a thread costs more than it saves.
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .min((n * k) >> 20)
        .clamp(1, n.max(1));
    let per = n.div_ceil(threads).max(1);
    let bad = std::thread::scope(|sc| {
        let jobs: Vec<_> = values
            .chunks_mut(per * k)
            .zip(scales.chunks_mut(per * kbs))
            .enumerate()
            .map(|(i, (v, s))| {
                let run = move || quantize_channels(raw, (k, n, inner), i * per, v, s, round, dec);
                if i + 1 == n.div_ceil(per) {
                    Err(run) // the last range runs on this thread
                } else {
                    Ok(sc.spawn(run))
                }
            })
            .collect();
        jobs.into_iter()
            .map(|j| match j {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(mut run) => run(),
            })
            .fold(None, |a: Option<usize>, b| match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            })
    });
    (values, scales, bad)
}

/// [`quantize_blocks`] for the output channels from `n0` (as many as `values` holds rows of K).
fn quantize_channels(
    raw: &[u8],
    dims: (usize, usize, usize),
    n0: usize,
    values: &mut [u8],
    scales: &mut [u8],
    round: impl Fn(f32) -> f32 + Copy,
    dec: impl Fn(&[u8]) -> f32 + Copy,
) -> Option<usize> {
    // The element size as a constant where it is one of the common ones: the reads compile to
    // plain loads (about 3x on f32 in the throughput test).
    let sweep = match raw.len() / (dims.0 * dims.1).max(1) {
        2 => sweep_channels::<2, _, _>,
        4 => sweep_channels::<4, _, _>,
        _ => sweep_channels::<0, _, _>,
    };
    sweep(raw, dims, n0, values, scales, round, dec)
}

/// [`quantize_channels`] with elements of `S` bytes (0: read from the lengths).
fn sweep_channels<const S: usize, R: Fn(f32) -> f32 + Copy, D: Fn(&[u8]) -> f32 + Copy>(
    raw: &[u8],
    (k, n, inner): (usize, usize, usize),
    n0: usize,
    values: &mut [u8],
    scales: &mut [u8],
    round: R,
    dec: D,
) -> Option<usize> {
    let size = if S == 0 {
        raw.len() / (k * n).max(1)
    } else {
        S
    };
    let kbs = k / B;
    let rows = values.len() / k;
    let mut tile = [[0f32; B]; TILE];
    let mut bad: Option<usize> = None;
    let mut t = 0;
    while t < rows * kbs {
        let (r, kb) = if inner == 1 {
            // K is the last axis: row after row, reading the bytes in order.
            (t / kbs, t % kbs)
        } else {
            // Block row by block row (32 K rows of the source): each element is read once,
            // from the cache lines the block row's 32 rows share.
            (t % rows, t / rows)
        };
        // Along another axis, TILE neighbouring channels at once where they are in one run of
        // the source's rows: 32 reads of TILE contiguous elements instead of 32 × TILE strided
        // ones (`[K, N]` weights: ~1.5x).
        let i = (n0 + r) % inner;
        let width = if inner > 1 && r + TILE <= rows && i + TILE <= inner {
            gather_tile(raw, size, dec, (k, inner), n0 + r, kb, &mut tile);
            TILE
        } else {
            gather_block(raw, size, dec, (k, inner), n0 + r, kb, &mut tile[0]);
            1
        };
        for (c, x) in tile[..width].iter().enumerate() {
            let at = (r + c) * k + kb * B;
            let q: &mut [u8; B] = (&mut values[at..at + B]).try_into().expect("a block");
            let (s, differs) = quantize_regular_block(x, q, round)
                .unwrap_or_else(|| quantize_edge_block(x, q, round));
            scales[(r + c) * kbs + kb] = s;
            if let Some(j) = differs {
                let i = n0 * k + at + j;
                bad = Some(bad.map_or(i, |b| b.min(i)));
            }
        }
        t += width;
    }
    bad
}

/// A block's E8M0 byte and E4M3 bytes `q` (OCP floor, NaN ignored for the scale, as
/// [`quantize_block`]) and the first element whose E4M3 value × scale is not Quark's kernel's
/// value rounded by `round` — when the block is regular (module docs); `None` (and `q` untouched)
/// for the others, [`quantize_edge_block`]'s.
#[inline(always)]
fn quantize_regular_block(
    x: &[f32; B],
    q: &mut [u8; B],
    round: impl Fn(f32) -> f32,
) -> Option<(u8, Option<usize>)> {
    // Quark's shared exponent is the largest biased exponent field; a field of 0xFF (NaN, Inf)
    // makes the block an edge block.
    let (mut shared, mut any) = (0u32, 0u32);
    for v in x {
        let b = v.to_bits();
        shared = shared.max((b >> 23) & 0xFF);
        any |= b & 0x7FFF_FFFF;
    }
    if shared == 0xFF || (shared < 8 && any != 0) {
        return None;
    }
    // E8M0's byte for amax with field `shared` (>= 8) is shared − 8; a zero block's is 0.
    let byte = shared.saturating_sub(8) as u8;
    let inv = pow2_inverse(byte);
    for (q, &v) in q.iter_mut().zip(x) {
        *q = e4m3_below_512(v * inv);
    }
    // Quark's kernel: scale 2^(shared − 135) (E8M0's 2^(byte − 127) here), e = x / scale on the
    // E4M3 grid (step 2^(max(⌊log2 |e|⌋, −6) − 3), half to even, by adding and subtracting
    // 2^(step + 23)), clamped to 448, times the scale.
    let scale = pow2_f32(shared.max(8) as i32 - 135);
    let mut differs = 0u32;
    for (j, (&v, &q)) in x.iter().zip(q.iter()).enumerate() {
        let e = v / scale;
        let a = e.abs();
        let field = ((a.to_bits() >> 23) as i32).max(127 - 6);
        let magic = f32::from_bits(((field + 20) as u32) << 23);
        let want = round(((a + magic) - magic).min(448.0).copysign(e) * scale);
        let got = e4m3_to_f32(q) * scale;
        differs |= u32::from(got != want) << j;
    }
    Some((
        byte,
        (differs != 0).then(|| differs.trailing_zeros() as usize),
    ))
}

/// `f32_to_e4m3(e, true)` for a finite `|e| < 512` (what a regular block's elements are over
/// its scale), without branches: the normal range's mantissa rounded to 3 bits half to even as
/// there, below E4M3's smallest normal (2^-6) `|e| · 512` rounded to an integer by adding 2^23.
#[inline(always)]
fn e4m3_below_512(e: f32) -> u8 {
    let bits = e.to_bits();
    let sign = (bits >> 24) & 0x80;
    let abs = bits & 0x7FFF_FFFF;
    let normal = ((abs + 0x7_FFFF + ((abs >> 20) & 1)) >> 20).wrapping_sub(120 << 3);
    let sub = ((f32::from_bits(abs) * 512.0 + 8_388_608.0).to_bits() - 0x4B00_0000) & 0xF;
    let enc = if abs < 0x3C80_0000 {
        sub
    } else {
        normal.min(0x7E)
    };
    (sign | enc) as u8
}

/// [`quantize_regular_block`] for any block: the codec's [`quantize_block`] and Quark's kernel
/// [`quark_mx_block`], element by element (NaN matches NaN).
fn quantize_edge_block(
    x: &[f32; B],
    q: &mut [u8; B],
    round: impl Fn(f32) -> f32,
) -> (u8, Option<usize>) {
    let cfg = QuantConfig {
        scale_rule: ScaleRule::Floor,
        nan_policy: NanPolicy::Ignore,
    };
    let s = quantize_block(x, q, cfg);
    let mut want = [0f32; B];
    quark_mx_block(x, &mut want, QuarkElement::Fp8E4M3, IntRounding::HalfEven);
    let scale = e8m0_to_f32(s);
    let differs = |j: usize| {
        let got = e4m3_to_f32(q[j]) * scale;
        let want = round(want[j]);
        !(got == want || (got.is_nan() && want.is_nan()))
    };
    (s, (0..B).find(|&j| differs(j)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    /// The pass before h-quarkbig, kept as the reference: [`quantize_block`] and Quark's kernel
    /// ([`quark_mx_block`]) on every block, element by element.
    fn reference_channels(
        raw: &[u8],
        (k, n, inner): (usize, usize, usize),
        n0: usize,
        values: &mut [u8],
        scales: &mut [u8],
        round: impl Fn(f32) -> f32,
        dec: impl Fn(&[u8]) -> f32 + Copy,
    ) -> Option<usize> {
        let size = raw.len() / (k * n).max(1);
        let cfg = QuantConfig {
            scale_rule: ScaleRule::Floor,
            nan_policy: NanPolicy::Ignore,
        };
        let kbs = k / B;
        let rows = values.len() / k;
        let (mut x, mut q, mut want) = ([0f32; B], [0u8; B], [0f32; B]);
        let mut bad: Option<usize> = None;
        // Block row by block row (32 K rows of the source): each element is read once, from the
        // cache lines the block row's 32 rows share.
        for kb in 0..kbs {
            for r in 0..rows {
                gather_block(raw, size, dec, (k, inner), n0 + r, kb, &mut x);
                let s = quantize_block(&x, &mut q, cfg);
                let at = r * k + kb * B;
                values[at..at + B].copy_from_slice(&q);
                scales[r * kbs + kb] = s;
                quark_mx_block(&x, &mut want, QuarkElement::Fp8E4M3, IntRounding::HalfEven);
                let scale = e8m0_to_f32(s);
                let differs = |j: usize| {
                    let got = e4m3_to_f32(q[j]) * scale;
                    let want = round(want[j]);
                    !(got == want || (got.is_nan() && want.is_nan()))
                };
                if let Some(j) = (0..B).find(|&j| differs(j)) {
                    let i = n0 * k + at + j;
                    bad = Some(bad.map_or(i, |b| b.min(i)));
                }
            }
        }
        bad
    }

    fn f32_dec(b: &[u8]) -> f32 {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The output roundings of the three float types the check handles.
    const ROUNDS: [fn(f32) -> f32; 3] = [
        |f| f,
        |f| f16::from_f32(f).to_f32(),
        |f| bf16::from_f32(f).to_f32(),
    ];

    /// xorshift64: reproducible test data without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// One test block of `kind`: regular ones of several spreads, and the edge cases (zeros,
    /// subnormals, 448 saturation, E4M3 ties, NaN, Inf, blocks below 2^-119, any bit pattern).
    fn block(rng: &mut Rng, kind: u64) -> [f32; B] {
        let mut x = [0f32; B];
        let e0 = rng.below(250) as i32 - 124; // the block's top exponent
        for v in x.iter_mut() {
            let m = (rng.next() >> 41) as u32; // 23 random mantissa bits
            let sign = (rng.next() & 1) << 31;
            let e = (e0 - rng.below(24) as i32).clamp(-126, 127);
            *v = f32::from_bits(sign as u32 | (((e + 127) as u32) << 23) | m);
        }
        let j = rng.below(B as u64) as usize;
        match kind % 12 {
            0 | 1 => {}
            2 => x = [0.0; B],
            3 => x
                .iter_mut()
                .for_each(|v| *v = f32::from_bits(rng.next() as u32)), // any bits
            4 => x[j] = f32::NAN,
            5 => {
                x[j] = if rng.next() & 1 == 0 {
                    f32::INFINITY
                } else {
                    f32::NEG_INFINITY
                }
            }
            // Below 2^-119 (subnormals and small normals), or subnormals beside a normal.
            6 => x
                .iter_mut()
                .for_each(|v| *v = f32::from_bits(rng.below(8 << 23) as u32)),
            7 => x
                .iter_mut()
                .for_each(|v| *v = f32::from_bits(rng.below(1 << 23) as u32)),
            // Ties of the E4M3 grid and values rounding past 448 (scale 1: anchor 256).
            8 | 9 => {
                x[0] = 256.0;
                for v in x[1..].iter_mut() {
                    let grid = f32::from_bits(
                        ((rng.below(18) as u32 + 118) << 23) | (rng.below(16) as u32) << 19,
                    );
                    let tie = f32::from_bits(grid.to_bits() | 1 << 19);
                    *v = [grid, tie, 448.0, 464.0, 479.0, 480.0, 500.0, -464.0]
                        [rng.below(8) as usize]
                        .copysign(if rng.next() & 1 == 0 { 1.0 } else { -1.0 });
                }
            }
            10 => x[j] = 0.0,
            _ => x[j] = -0.0,
        }
        x
    }

    /// Every block, regular or not: the fast pass gives the old pass's scale byte, E4M3 bytes and
    /// first differing element, for the three output roundings.
    #[test]
    fn blocks_agree_with_the_old_pass() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut regular, mut bad) = (0, 0);
        for i in 0..60_000u64 {
            let x = block(&mut rng, i);
            for round in ROUNDS {
                let (mut q0, mut q1) = ([0u8; B], [0u8; B]);
                let want = quantize_edge_block(&x, &mut q0, round);
                let fast = quantize_regular_block(&x, &mut q1, round);
                regular += usize::from(fast.is_some());
                let got = fast.unwrap_or_else(|| quantize_edge_block(&x, &mut q1, round));
                assert_eq!((got, q1), (want, q0), "block {x:?}");
                bad += usize::from(got.1.is_some());
            }
        }
        // Both kinds of block, accepted and refused, were seen.
        assert!(
            regular > 90_000 && regular < 170_000 && bad > 10_000,
            "{regular} {bad}"
        );
    }

    /// The fast block's E4M3 grid rounding is Quark's (`round_to_fp`, f64) for every exponent
    /// and sign, every pattern of the mantissa bits that survive (bits 19 and up: E4M3 keeps 3,
    /// its subnormals fewer) and the patterns of the lower bits that decide a tie.
    #[test]
    fn grid_rounding_is_quarks_below_512() {
        use kernels::reference::quark_mx::round_to_fp;
        let fmt = QuarkElement::Fp8E4M3.fp_format().expect("fp8");
        let mut x = [0f32; B];
        x[0] = 256.0; // field 135: scale 1, e = x
        let mut q = [0u8; B];
        for hi in 0u32..1 << 13 {
            let field = (hi >> 4) & 0xFF;
            if field > 135 {
                continue;
            }
            for lo in [0, 1, 0x3_FFFF, 0x4_0000, 0x4_0001, 0x7_FFFF] {
                let v = f32::from_bits(hi << 19 | lo);
                x[1] = v;
                let (byte, differs) = quantize_regular_block(&x, &mut q, |f| f).expect("regular");
                assert_eq!((byte, differs), (127, None), "{v:e}");
                assert_eq!(e4m3_to_f32(q[1]), round_to_fp(v, fmt), "{v:e}");
            }
        }
    }

    /// [`e4m3_below_512`] is the codec's saturating `f32_to_e4m3` on f32s below 512 of every
    /// exponent, in steps of 61 ulps (a prime: every residue of the low mantissa bits), and
    /// on every tie and its neighbours.
    #[test]
    fn branch_free_encoder_is_the_codecs() {
        use kernels::codec::f32_to_e4m3;
        let below_512 = 0x4400_0000u32;
        let ties = (0..1u32 << 13)
            .flat_map(|hi| [0, 1, 0x3_FFFF, 0x4_0000, 0x4_0001].map(|lo| hi << 19 | lo));
        for bits in (0..below_512)
            .step_by(61)
            .chain(ties.filter(|b| b & 0x7FFF_FFFF < below_512))
        {
            for e in [f32::from_bits(bits), -f32::from_bits(bits)] {
                assert_eq!(e4m3_below_512(e), f32_to_e4m3(e, true), "{e:e}");
            }
        }
    }

    /// [`f16_to_f32`] is `half`'s on every float16, and [`round_to_f16`] `half`'s round trip on
    /// f32s of every exponent in steps of 997 ulps (a prime) and on float16's ties and their
    /// neighbours.
    #[test]
    fn float16_conversions_are_halfs() {
        let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        for h in 0..=u16::MAX {
            let want = f16::from_bits(h).to_f32();
            assert!(same(f16_to_f32(h), want), "{h:#06x}");
        }
        // Ties of float16's grid: bit 12 of a normal's mantissa (higher ones for subnormals,
        // in `hi`) and the bits below it.
        let lows = [0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF];
        let ties = (0..1u32 << 19).flat_map(|hi| lows.map(|lo| hi << 13 | lo));
        for bits in (0..u32::MAX).step_by(997).chain(ties) {
            let f = f32::from_bits(bits);
            assert!(
                same(round_to_f16(f), f16::from_f32(f).to_f32()),
                "{f:e} ({bits:#x})"
            );
        }
    }

    /// Whole tensors of f32, float16 and bfloat16 bytes along K contiguous (stacked experts) and
    /// strided (`[K, N]`), with a few edge blocks: the threaded fast pass gives the old pass's
    /// bytes and first differing element.
    #[test]
    fn tensors_agree_with_the_old_pass() {
        let mut rng = Rng(42);
        // N = 100: tiles of 16 channels and a remainder; `[2, K, 50]`: tiles stop at the
        // outer index's end.
        let (k, n) = (256usize, 100usize);
        let vals: Vec<f32> = (0..k * n / B)
            .flat_map(|i| block(&mut rng, if i % 7 == 3 { i as u64 } else { 0 }))
            .collect();
        let f16_dec = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
        let bf16_dec = |b: &[u8]| bf16::from_le_bytes([b[0], b[1]]).to_f32();
        for inner in [1, n, n / 2] {
            let as_f32: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
            let as_f16: Vec<u8> = vals
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect();
            let as_bf16: Vec<u8> = vals
                .iter()
                .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
                .collect();
            for round in ROUNDS {
                let check = |raw: &[u8], dec: fn(&[u8]) -> f32| {
                    let (v, s, b) = quantize_blocks(raw, (k, n, inner), round, dec);
                    let (mut v1, mut s1) = (vec![0u8; k * n], vec![0u8; n * k / B]);
                    let b1 =
                        reference_channels(raw, (k, n, inner), 0, &mut v1, &mut s1, round, dec);
                    assert!(v == v1 && s == s1, "inner {inner}");
                    assert_eq!(b, b1, "inner {inner}");
                };
                check(&as_f32, f32_dec);
                check(&as_f16, f16_dec);
                check(&as_bf16, bf16_dec);
            }
        }
    }

    /// The output channels split over threads give the bytes and the first differing element of
    /// one pass over all of them.
    #[test]
    fn quantizing_a_weight_over_threads_gives_the_single_pass_bytes() {
        let (k, n) = (64usize, 33_000usize); // over 2 M elements: split when 2 cores are there
        let mut vals: Vec<f32> = (0..k * n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013 * (1.0 + (i % 7) as f32))
            .collect();
        let round = |f: f32| f;
        for bad in [None, Some([(40, 32_000), (3, 15_000)])] {
            if let Some(at) = bad {
                for (kk, nn) in at {
                    vals[kk * n + nn] = f32::INFINITY;
                }
            }
            let raw: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
            let (v, s, b) = quantize_blocks(&raw, (k, n, n), round, f32_dec);
            let (mut v1, mut s1) = (vec![0u8; k * n], vec![0u8; n * k / 32]);
            let b1 = reference_channels(&raw, (k, n, n), 0, &mut v1, &mut s1, round, f32_dec);
            assert!(v == v1 && s == s1);
            assert_eq!(b, b1);
            // Channel 15 000 (a later channel differs too, in the other half).
            assert_eq!(b.map(|i| i / k), bad.map(|_| 15_000));
        }
    }

    /// Throughput of the pass on 256 MiB of f32 (`cargo test --release -p graph_rewrites --lib
    /// quark_check_throughput -- --ignored --nocapture`; BENCHMARKS.md "Rewrite").
    #[test]
    #[ignore]
    fn quark_check_throughput() {
        let n_el = 64usize << 20;
        let mut rng = Rng(0x1234_5678);
        let vals: Vec<f32> = (0..n_el)
            .map(|_| ((rng.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.02)
            .collect();
        let f32s: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let bf16s: Vec<u8> = vals
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect();
        let (k, n) = (4096, n_el / 4096);
        let time = |what: &str, raw: &[u8], pass: &dyn Fn() -> Option<usize>| {
            let t = std::time::Instant::now();
            assert_eq!(pass(), None);
            let dt = t.elapsed().as_secs_f64();
            let mb = raw.len() as f64 / 1e6;
            eprintln!("{what}: {mb:.0} MB in {dt:.3} s, {:.0} MB/s", mb / dt);
        };
        // Closures, as `quantize_quark_weight` passes them (inlined into the loop).
        let f32_le = |b: &[u8]| f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let bf16_le = |b: &[u8]| bf16::from_le_bytes([b[0], b[1]]).to_f32();
        time("f32 [E, N, K] along K", &f32s, &|| {
            quantize_blocks(&f32s, (k, n, 1), |f| f, f32_le).2
        });
        time("f32 [K, N] along K", &f32s, &|| {
            quantize_blocks(&f32s, (k, n, n), |f| f, f32_le).2
        });
        let f16s: Vec<u8> = vals
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect();
        // Float16 read and rounded by `half` (one value at a time, a run-time F16C check each),
        // then as `quantize_quark_weight` does (`f16_to_f32`, `round_to_f16`).
        let half_le = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
        time("f16 [E, N, K] along K, half", &f16s, &|| {
            let round = |f: f32| f16::from_f32(f).to_f32();
            quantize_blocks(&f16s, (k, n, 1), round, half_le).2
        });
        let f16_le = |b: &[u8]| f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
        time("f16 [E, N, K] along K", &f16s, &|| {
            quantize_blocks(&f16s, (k, n, 1), round_to_f16, f16_le).2
        });
        time("bf16 [E, N, K] along K", &bf16s, &|| {
            let round = |f: f32| bf16::from_f32(f).to_f32();
            quantize_blocks(&bf16s, (k, n, 1), round, bf16_le).2
        });
    }
}
