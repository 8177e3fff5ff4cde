//! The column-group layout of MXFP8 `[N, K]` weights that the column-lane GEMM kernel
//! (`avx512_cols`) reads, prepacked once per weight ([`MxColWeights`]), and its way back to
//! `[N, K]` for the paths that read rows (units off the kernel's route, M > 64, CPUs without
//! AVX-512 BF16). Layout: groups of [`GROUP`] = 16 columns (the last padded with zero weights
//! of scale 127), each group K/4 chunks of 64 bytes (4 k × 16 columns) in k order; in the chunk
//! of k = 4t..4t+4, byte `16·L + 8·p + 2·i + e` holds column `4·L + i`, k = `4t + 2p + e`
//! (`avx512_cols` explains why). Scales: per group, per 32-k block, the 16 columns' bytes.

use crate::codec::BLOCK;
use crate::element::Element;
use crate::epilogue::Epilogue;
use crate::error::Result;
use crate::parallel::Parallel;
use crate::slices::{MatA, MatB};

/// MXFP8 `[N, K]` weights in the column-group layout ([`pack`]): `q` `n.div_ceil(16)·16·k`
/// bytes, `scales` `n.div_ceil(16)·16·k/32`.
#[derive(Clone, Copy, Debug)]
pub struct MxColWeights<'a> {
    pub q: &'a [u8],
    pub scales: &'a [u8],
    pub n: usize,
    pub k: usize,
}

/// Whether constant MXFP8 weights should be prepacked in this layout ([`pack`]) on this CPU:
/// the AVX-512 BF16 GEMM without AMX (`MXFUSE_CPU_ISA` / `MXFUSE_CPU_AMX` as set for the
/// process; AMX and AVX2-only CPUs keep `[N, K]`).
pub fn wanted() -> bool {
    super::isa::avx512_bf16() && !super::isa::amx_bf16()
}

/// `y = deq(A) · deq(W)ᵀ` (+ epilogue) for MX A (`m × k` E4M3 values, `m × k/32` scales) and
/// weights `w` in the column-group layout: the column-lane kernel for M ≤ 64 where the CPU has
/// AVX-512 BF16 (`matmul_cols`), otherwise the weights unpacked to `[N, K]` per call and
/// [`super::mx_matmul`] with `trans_b`.
#[allow(clippy::too_many_arguments)]
pub fn mx_matmul_cols<O: Element>(
    a_q: &[u8],
    a_scales: &[u8],
    m: usize,
    w: MxColWeights<'_>,
    y: &mut [O],
    ep: &Epilogue,
    par: &dyn Parallel,
) -> Result<()> {
    let a = MatA::Mx {
        q: a_q,
        scales: a_scales,
    };
    mx_matmul_cols_a(a, m, w, y, ep, par)
}

/// [`mx_matmul_cols`] for either form of A (MX values + scales, or float rows; see
/// [`super::mx_matmul_a`]).
pub fn mx_matmul_cols_a<O: Element>(
    a: MatA<'_>,
    m: usize,
    w: MxColWeights<'_>,
    y: &mut [O],
    ep: &Epilogue,
    par: &dyn Parallel,
) -> Result<()> {
    let (n, k) = (w.n, w.k);
    crate::slices::check_block_multiple("K", k)?;
    use crate::slices::{check_len, elems};
    let packed = elems("packed B", elems("packed B", n.div_ceil(GROUP), GROUP)?, k)?;
    check_len("packed b", w.q.len(), packed)?;
    check_len("packed b_scale", w.scales.len(), packed / BLOCK)?;
    crate::slices::check_matmul_a(&a, m, k)?;
    check_len("y", y.len(), elems("y", m, n)?)?;
    ep.check_dims(m, n)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    // A float A that is not bf16-exact runs as its bf16 parts (`float_a`).
    let parts = |pa: MatA<'_>, rows: usize, sums: &mut [f32]| {
        mx_matmul_cols_a(pa, rows, w, sums, &Epilogue::default(), par)
    };
    if let Some(done) = super::float_a::run_split(a, m, k, n, y, ep, parts) {
        return done;
    }
    #[cfg(target_arch = "x86_64")]
    if m <= super::matmul_cols::MAX_M && super::isa::avx512_bf16() {
        super::matmul_cols::nk(a, m, w, y, ep, par);
        return Ok(());
    }
    let (q, scales) = unpack(w.q, w.scales, k, (0, n));
    let b = MatB::Mx {
        q: &q,
        scales: &scales,
    };
    super::mx_matmul_a(a, m, k, n, b, true, y, ep, par)
}

/// Output columns per group: the 16 f32 lanes of an accumulator.
pub const GROUP: usize = 16;
/// Bytes per chunk: 4 k × 16 columns.
pub(super) const CHUNK: usize = 64;
/// `[N, K]` MXFP8 weights `q` (`n·k` bytes) with scales `[N, K/32]` in the column-group layout
/// (module docs): (`n.div_ceil(16)·16·k` bytes, `n.div_ceil(16)·16·k/32` scales). Columns past
/// `n` hold zeros with scale 127.
///
/// # Panics
/// If `k` is not a positive multiple of 32 or `q` / `scales` are shorter than `n·k` / `n·k/32`
/// (a prepack of constant weights: the caller has checked the shapes).
pub fn pack(q: &[u8], scales: &[u8], n: usize, k: usize) -> (Vec<u8>, Vec<u8>) {
    let padded = n.div_ceil(GROUP) * GROUP;
    let (mut pq, mut ps) = (vec![0u8; padded * k], vec![0u8; padded * k / BLOCK]);
    pack_into(q, scales, n, k, (&mut pq, &mut ps));
    (pq, ps)
}

/// [`pack`] into `pq` / `ps` of exactly those lengths (every byte written), e.g. a buffer in
/// huge pages. Panics as [`pack`] does, and on output buffers of other lengths.
pub fn pack_into(q: &[u8], scales: &[u8], n: usize, k: usize, (pq, ps): (&mut [u8], &mut [u8])) {
    let kb = k / BLOCK;
    assert!(
        k > 0 && k.is_multiple_of(BLOCK) && n.checked_mul(k).is_some_and(|nk| q.len() >= nk),
        "cols_layout::pack: k = {k} (a positive multiple of {BLOCK}) and {} weight bytes for n = {n}",
        q.len()
    );
    assert!(
        scales.len() >= n * kb,
        "cols_layout::pack: {} scales for n = {n}, k = {k}",
        scales.len()
    );
    let padded = n.div_ceil(GROUP) * GROUP;
    assert!(pq.len() == padded * k && ps.len() == padded * kb);
    // Zero weights in the padding columns (everything else is overwritten below).
    pq[(n / GROUP) * GROUP * k..].fill(0);
    ps.fill(127);
    // Chunk by chunk (sequential writes): each column's 4 bytes of a chunk are two k pairs, at
    // 16·L + 2·i and 8 bytes on.
    for (g, (gq, gs)) in pq
        .chunks_exact_mut(GROUP * k)
        .zip(ps.chunks_exact_mut(GROUP * kb))
        .enumerate()
    {
        let cols = GROUP.min(n - g * GROUP);
        for (t, chunk) in gq.chunks_exact_mut(CHUNK).enumerate() {
            for j in 0..cols {
                let src = &q[(g * GROUP + j) * k + 4 * t..][..4];
                let at = 16 * (j / 4) + 2 * (j % 4);
                chunk[at..at + 2].copy_from_slice(&src[..2]);
                chunk[at + 8..at + 10].copy_from_slice(&src[2..]);
            }
        }
        for j in 0..cols {
            let row = &scales[(g * GROUP + j) * kb..][..kb];
            for (blk, &sc) in row.iter().enumerate() {
                gs[blk * GROUP + j] = sc;
            }
        }
    }
}

/// Columns n0..n0+cols of the packed weights ([`pack`], group-aligned n0) back in the `[N, K]`
/// layout: (`cols·k` bytes, `cols·k/32` scales). For what runs off this kernel's route.
///
/// # Panics
/// If `n0` is not a multiple of 16 or the packed buffers do not hold those columns.
pub fn unpack(pq: &[u8], ps: &[u8], k: usize, (n0, cols): (usize, usize)) -> (Vec<u8>, Vec<u8>) {
    let kb = k / BLOCK;
    assert!(n0.is_multiple_of(GROUP) && pq.len() >= (n0 + cols).div_ceil(GROUP) * GROUP * k);
    let mut q = vec![0u8; cols * k];
    let mut s = vec![0u8; cols * kb];
    for c in 0..cols {
        let (col, row) = (n0 + c, &mut q[c * k..(c + 1) * k]);
        let (g, j) = (col / GROUP, col % GROUP);
        let base = g * GROUP * k + 16 * (j / 4) + 2 * (j % 4);
        for (kk, b) in row.iter_mut().enumerate() {
            *b = pq[base + kk / 4 * CHUNK + 8 * (kk % 4 / 2) + kk % 2];
        }
        for (blk, d) in s[c * kb..(c + 1) * kb].iter_mut().enumerate() {
            *d = ps[(g * kb + blk) * GROUP + j];
        }
    }
    (q, s)
}

/// Chunks per 32-k block.
pub(super) const CHUNKS: usize = BLOCK / 4;
