//! Launch shapes of the cluster kernels (Hopper, sm_90+): how many blocks of a thread-block
//! cluster share one norm row or one GEMM column tile, and the GEMM's block size. Pure functions
//! of the problem size and the multiprocessor count, mirrored by bench/gpu/mxgpu.py, where the
//! alternatives are measured side by side (BENCHMARKS.md, "GPU kernels").

/// Cluster sizes the kernels are compiled for (`_s2`, `_s4`, `_s8` norm kernels; the GEMM
/// stops at 4).
const NORM_SPLITS: [usize; 3] = [8, 4, 2];
const GEMM_SPLITS: [usize; 3] = [1, 2, 4];
/// The split-K GEMM's reduction buffer holds at most this many warps (`MX_GEMM_MAX_WARPS`).
const GEMM_MAX_WARPS: usize = 16;
/// Warps of the split-K GEMM one SM holds at once, for 8 and 16 activation rows per block: its
/// kernels use 80-82 and 96-100 registers a thread (NVRTC 13.0, sm_90; ptxas -v through
/// bench/gpu/offline_compile.py), and 64K registers / (32 x registers) is ~24 and ~20.
const GEMM_WARPS_PER_SM: [usize; 2] = [24, 20];

/// Blocks per row of `AddRmsNormMxQuant` (1 = the one-block-per-row kernels).
///
/// Few rows leave most SMs idle and make each busy SM issue a whole row's work, so a row is split
/// over a cluster of `s` blocks: the largest `s` that keeps the grid within one block per SM and
/// whole 32-element quantizer groups in each block (H200, H = 6144: s = 8 / 8 / 4 / 2 at M = 8 /
/// 16 / 32 / 64 were each the fastest split, BENCHMARKS.md). From `sms` rows on, every SM
/// already has a row.
pub fn norm_split(rows: usize, h: usize, sms: usize) -> usize {
    if rows >= sms {
        return 1;
    }
    let groups = h / 32;
    NORM_SPLITS
        .into_iter()
        .find(|&s| groups.is_multiple_of(s) && rows * s <= sms && h / 8 / s <= 1024)
        .unwrap_or(1)
}

/// `(s, warps)` of the split-K decode GEMM for `n` output columns, reduction length `k` and `m`
/// activation rows: the fewest cluster splits `s` that give at least two blocks per SM (so every
/// SM streams weights and a second block hides the tail), but no more splits than groups of four
/// k-blocks; then as many warps as the split has groups (each warp keeps its group and the next in
/// flight), but few enough that all blocks are resident at once (one wave: every weight load is
/// issued at the start instead of a wave later), at most 16, and preferably a divisor of the
/// groups (every warp the same number of groups).
pub fn splitk_shape(n: usize, k: usize, m: usize, sms: usize) -> (usize, usize) {
    let rows_per_block = if m <= 8 { 8 } else { 16 };
    let tiles = n.div_ceil(16) * m.div_ceil(rows_per_block);
    let groups = (k / 32).div_ceil(4);
    let mut s = GEMM_SPLITS
        .into_iter()
        .find(|&s| tiles * s >= 2 * sms)
        .unwrap_or(GEMM_SPLITS[GEMM_SPLITS.len() - 1]);
    while s > 1 && groups < s {
        s /= 2;
    }
    let per_split = groups.div_ceil(s);
    let blocks_per_sm = (tiles * s).div_ceil(sms.max(1));
    let resident = GEMM_WARPS_PER_SM[usize::from(m > 8)] / blocks_per_sm;
    let cap = per_split.min(resident).clamp(1, GEMM_MAX_WARPS);
    let even = (1..=cap)
        .rev()
        .find(|w| per_split.is_multiple_of(*w))
        .unwrap_or(1);
    (s, if 2 * even > cap { even } else { cap })
}

/// Cluster splits the pipeline GEMM is compiled for.
const PIPE_SPLITS: [usize; 4] = [1, 2, 4, 8];

/// `(w, s)` of the pipeline decode GEMM (kernels/gpu/mx_matmul_pipe.hip) for `n` output columns,
/// reduction length `k` (a multiple of 128) and `m` activation rows, on `sms` multiprocessors; `w
/// = 0` means the first tensor-core kernel serves the shape. A measured row of `table` where one
/// exists, else the rule that reproduces the H200's best shapes: 1 warp per block for few rows,
/// else 2 (4 never won: the block's warps wait for each other at every stage); then the fewest
/// cluster splits that give `table.min_warps_per_sm` warps per SM (each warp has its own
/// 16-column tile and K range, and a warp's group-by-group latency, not DRAM, bounds it), as long
/// as each split keeps `table.min_groups_per_split` groups of 4 k-blocks (the cluster reduction
/// and the pipeline's fill cost more than a short split saves).
pub fn pipe_shape(
    n: usize,
    k: usize,
    m: usize,
    sms: usize,
    table: &super::thresholds::PipeGemmTable,
) -> (usize, usize) {
    if let Some(ws) = table.measured(n, k, m) {
        return ws;
    }
    let w = if m <= table.one_warp_max_m { 1 } else { 2 };
    let warps = n.div_ceil(16) * m.div_ceil(if m <= 8 { 8 } else { 16 });
    let groups = k / 128;
    let want = table.min_warps_per_sm * sms.max(1);
    let mut s = 1;
    for cand in PIPE_SPLITS {
        if cand > 1 && groups / cand < table.min_groups_per_split {
            break;
        }
        s = cand;
        if warps * cand >= want {
            break;
        }
    }
    (w, s)
}

/// Warps per block and cluster splits the fragment-packed GEMM is compiled for (and the m8 kernel
/// also at 3 warps, 1 split: [`trim_idle_warp`]).
const FRAG_WARPS: [usize; 3] = [2, 4, 8];
const FRAG_SPLITS: [usize; 4] = [1, 2, 4, 8];

/// `(w, s)` of the fragment-packed decode GEMM (kernels/gpu/mx_matmul_frag.hip) for `n` output
/// columns, reduction length `k` (a multiple of 128) and `m` activation rows on `sms`
/// multiprocessors: a measured row of `table` where one exists, else the rule the H200's
/// measurements follow (BENCHMARKS.md): one block per 16-column tile, with the most warps `w`
/// (8, 4, 2) for which every block is resident in one wave (`table.resident_warps_per_sm` / `w`
/// blocks per SM: registers bound residency, and a second wave or a second block on some SMs cost
/// more than the extra warps gained) and each warp keeps `table.min_groups` groups of 4 k-blocks;
/// then cluster splits `s` only where the tiles leave most SMs idle (splitting K over a cluster
/// measured slower wherever the tiles alone fill the GPU). Mirrored by bench/gpu/mxgpu.py
/// `frag_choice`.
pub fn frag_shape(
    n: usize,
    k: usize,
    m: usize,
    sms: usize,
    table: &super::thresholds::FragGemmTable,
) -> (usize, usize) {
    if let Some(ws) = table.measured(n, k, m) {
        return ws;
    }
    let tiles = n.div_ceil(16) * m.div_ceil(if m <= 8 { 8 } else { 16 });
    frag_rule(tiles, k, sms, table)
}

/// [`frag_shape`]'s rule for a grid of `tiles` blocks before cluster splits (column tiles, or
/// pairs of them, times row tiles).
fn frag_rule(
    tiles: usize,
    k: usize,
    sms: usize,
    table: &super::thresholds::FragGemmTable,
) -> (usize, usize) {
    let sms = sms.max(1);
    let groups = k / 128;
    let enough = |parts: usize| groups.div_ceil(parts) >= table.min_groups;
    let w = FRAG_WARPS
        .iter()
        .rev()
        .copied()
        .find(|&w| enough(w) && tiles <= sms * (table.resident_warps_per_sm / w).max(1))
        .unwrap_or(FRAG_WARPS[0]);
    let mut s = FRAG_SPLITS[0];
    if 2 * tiles < sms {
        for cand in FRAG_SPLITS {
            if tiles * cand <= sms && enough(w * cand) {
                s = cand;
            }
        }
    }
    (w, s)
}

/// The m8 kernel's `(w, s)` with an idle warp dropped: at `w` = 4, `s` = 1, where 3 warps give each
/// warp as many groups of 4 k-blocks as 4 do (K = 640, 768, 1152: 5, 6, 9 groups), the fourth warp
/// of every block holds registers and does nothing; the blocks on 3 warps
/// (`mx_matmul_frag_m8_*_w3_s1`) do the same work per warp. H200, BENCHMARKS.md follow-up 17, M =
/// 1-8: 6144 x 768 2.73-3.01 against 2.93-3.16 us, 4096 x 640 2.14-2.39 against 2.33-2.75, 4096 x
/// 1152 3.08-3.16 against 3.49-3.93, 3072 x 768 equal. (Why is not pinned down: the gain is
/// largest at 4096 x 1152, whose 256 blocks leave SMs room at 4 warps too.) `_fs` lost with 3
/// warps (the other 16-row loops were not measured there), so only the m8 kernel.
fn trim_idle_warp(k: usize, (w, s): (usize, usize)) -> (usize, usize) {
    let groups = k / 128;
    if w == 4 && s == 1 && groups.div_ceil(3) == groups.div_ceil(4) {
        (3, 1)
    } else {
        (w, s)
    }
}

/// The fragment GEMM kernel the runtime launches ([`frag_kernel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragKernel {
    /// Activation rows a block covers: 8 (`mx_matmul_frag_m8_*`) or 16 (`_m16_*`).
    pub rows: usize,
    /// Warps per block and cluster splits ([`frag_shape`], then [`trim_idle_warp`] for 8 rows).
    pub w: usize,
    pub s: usize,
    /// Which loop of that kernel family runs.
    pub lp: FragLoop,
    /// The whole-range L2 prefetch of each warp's weights (`pre & 2`).
    pub l2_prefetch: bool,
}

impl FragKernel {
    /// The kernels' `pre` argument: bit 0, the weights are constants, so the kernel loads its
    /// first batch of them before waiting for the previous kernel (PDL overlap); bit 1, the L2
    /// prefetch.
    pub fn pre(&self) -> i32 {
        1 | if self.l2_prefetch { 2 } else { 0 }
    }
}

/// The loop of a fragment GEMM kernel (all give the same bits at the same `w`, `s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FragLoop {
    /// The m8 / m16 kernels (every output type).
    Plain,
    /// `_fs`: 16 rows, bf16 output, two register buffers.
    Fs,
    /// `_fsa`: `_fs` with the activations staged through shared memory.
    Fsa,
    /// `_t2`: 8 rows, bf16 output, each block on two neighbouring 16-column tiles (the grid's y
    /// is half the tiles, rounded up).
    T2,
    /// `_g1`: 8 rows, every output type, one group of 4 k-blocks a warp (`w` = K / 128, from
    /// [`FRAG_G1_MIN_WARPS`] to [`FRAG_G1_MAX_WARPS`]) on two neighbouring 16-column tiles, as `_t2`'s grid.
    G1,
    /// `_g1c`: 16 rows, every output type, one group of 4 k-blocks a warp (`w` = K / 128) on one
    /// 16-column tile, the weights converted to f16 mma fragments before the PDL wait.
    G1c,
    /// `_t2h` (`w` = 4, `s` = 1): `_t2`'s first `pair_blocks` pair blocks, then one block for each
    /// tile left (the grid's y is tiles - `pair_blocks`; taken as [`frag_kernel`] says).
    T2Mixed { pair_blocks: usize },
}

impl FragLoop {
    /// The kernel name's suffix.
    pub fn suffix(self) -> &'static str {
        match self {
            FragLoop::Plain => "",
            FragLoop::Fs => "_fs",
            FragLoop::Fsa => "_fsa",
            FragLoop::T2 => "_t2",
            FragLoop::G1 => "_g1",
            FragLoop::G1c => "_g1c",
            FragLoop::T2Mixed { .. } => "_t2h",
        }
    }

    /// The grid's y for `tiles` 16-column tiles: a block for each tile, each pair of them, or
    /// (`_t2h`) each of `pair_blocks` pairs and each tile left.
    pub fn blocks_y(self, tiles: usize) -> usize {
        match self {
            FragLoop::T2 | FragLoop::G1 => tiles.div_ceil(2),
            FragLoop::T2Mixed { pair_blocks } => tiles - pair_blocks.min(tiles / 2),
            _ => tiles,
        }
    }
}

/// The runtime's switches of [`frag_kernel`] (each on unless an `MXFUSE_GPU_FRAG_*` variable turns
/// it off; kernels/src/gpu/launch.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragSwitches {
    /// The `_fs` loop (`MXFUSE_GPU_FRAG_FS`).
    pub fs: bool,
    /// The L2 prefetch where SMs idle (`MXFUSE_GPU_FRAG_L2PF`).
    pub l2_prefetch: bool,
    /// `_fsa` on those grids (`MXFUSE_GPU_FRAG_FSA`, and a 16-byte aligned `a`).
    pub staged_a: bool,
    /// The m8 kernel on 3 warps where the fourth is idle ([`trim_idle_warp`];
    /// `MXFUSE_GPU_FRAG_W3`).
    pub trim_idle_warp: bool,
    /// The two-tile `_t2` loop with bf16 output: at M <= 8, and at 9-16 rows where
    /// [`frag_kernel`] takes it (`MXFUSE_GPU_FRAG_T2`).
    pub two_tiles: bool,
    /// The one-group-a-warp `_g1` loop at M <= 8 and K <= 1024 where [`frag_kernel`] takes it
    /// (`MXFUSE_GPU_FRAG_G1`).
    pub one_group: bool,
    /// `_t2`'s mixed grid `_t2h` where [`frag_kernel`] takes it (`MXFUSE_GPU_FRAG_T2H`).
    pub mixed_grid: bool,
    /// The 16-row `_g1c` loop at 9-16 rows and K <= 1024 where [`frag_kernel`] takes it
    /// (`MXFUSE_GPU_FRAG_G1C`).
    pub one_group_16: bool,
}

impl FragSwitches {
    /// Everything on: the runtime's default.
    pub const ON: Self = Self {
        fs: true,
        l2_prefetch: true,
        staged_a: true,
        trim_idle_warp: true,
        two_tiles: true,
        one_group: true,
        mixed_grid: true,
        one_group_16: true,
    };
}

/// Warps of the two-tile kernel resident per SM (200 registers a lane: 65536 / (200 * 32)).
const T2_RESIDENT_WARPS_PER_SM: usize = 10;
/// The most 16-column tiles an SM `_t2h` is taken for: a pair and a single at most, where `_t2`
/// puts two pairs (4 tiles) on some SMs (follow-up 36). Above it some SM holds two pairs whatever
/// the grid. (`_t2h` needs two of its 4-warp blocks resident an SM: T2_RESIDENT_WARPS_PER_SM.)
const T2_MIXED_MAX_TILES_PER_SM: usize = 3;
/// Warps of the `_g1` kernels resident per SM (94-96 registers a lane: 65536 / (96 * 32)).
const G1_RESIDENT_WARPS_PER_SM: usize = 21;
/// The largest K / 128 the `_g1` kernels are compiled for (one warp a group: K <= 1024).
pub const FRAG_G1_MAX_WARPS: usize = 8;
/// The smallest K / 128 the runtime takes `_g1` at: at one or two groups a block `_t2` has as
/// little to do and was as fast or faster (H200: 1024 x 128 0.87-0.90x, 2048 x 256 0.98x).
pub const FRAG_G1_MIN_WARPS: usize = 3;

/// Which fragment GEMM kernel runs `m` rows of `n x k` on `sms` multiprocessors (`bf16_out`: the
/// output is bf16; `sw`: the runtime's switches). H200,
/// BENCHMARKS.md follow-ups 11-12: the `_fs` loop takes 9-16 rows; where the grid leaves SMs idle
/// (fewer blocks than SMs, e.g. 1536 x 6144: 96 tiles) a warp's few groups are a chain of DRAM
/// round trips, so there it also takes M <= 8 (on half a tile: 5.71 against 6.45 us at M = 8) and
/// asks L2 for each warp's whole range up front (4.95 against 5.31 us at M = 1). Where every SM
/// has a block the prefetch only churns L2 (6144 x 6144: 14.5 against 12.1 us) and the m8 kernel
/// is as fast. On those SM-starved grids, from `table.staged_a_from_rows` rows the activation
/// loads (8 rows of 8 bytes a load instruction) bound the busy SMs, so `_fsa` copies them into
/// shared memory with 16-byte cp.async (1536 x 6144 M = 16: 5.78 against 6.63 us; follow-up 13);
/// on full grids it is slower. At M <= 8 the m8 kernel drops an idle warp ([`trim_idle_warp`],
/// follow-up 17). With bf16 output the two-tile `_t2` loop (8-row tiles) runs instead of all of
/// these at M <= 8 (follow-up 20: one activation load feeds two tiles and a block has twice the
/// weight loads in flight; median 0.94x the time of the choice without it over 12 shapes), and
/// at 9-16 rows on two row tiles where no measured row names the shape and its pairs keep the
/// warps a block of `_fs`'s grid within one wave (follow-up 21: 0.83-0.91x at 4096 x 4096,
/// 8192 x 2048, 2048 x 6144, 4096 x 1152; where the pairs' grid would need fewer warps a block,
/// as at 6144 x 768 and 6144 x 6144, it lost 10-32 %), with the rule's (w, s) for the pairs at
/// the kernel's residency and no prefetch. Before all of these, at M <= 8 and 384 <= K <= 1024
/// ([`FRAG_G1_MIN_WARPS`]-[`FRAG_G1_MAX_WARPS`] groups), every output type takes `_g1` where its tile pairs fit one wave
/// (follow-up 32: one group a warp, K / 128 warps a block; 6144 x 768 M = 1 / 8 2.31 / 2.46 against
/// `_t2`'s 2.67 / 3.11 us). Where `_t2`'s pairs number between one and one and a half an SM (6144 x
/// 6144: 192 pairs on 132 SMs, 60 SMs holding two), its `w4 s1` grid becomes `_t2h`'s mixed one
/// (follow-up 36): the first SMs-many pairs a block each, then each tile left a block, so no SM
/// holds more than 3 tiles. At 9-16 rows and the same K, `_g1c` (one group a warp on one
/// 16-row tile, the weights converted before the PDL wait) from 1.25 tiles an SM to one wave
/// (follow-up 38: 6144 x 768 M = 12 / 16 3.13 / 3.25 against `_fs`'s 3.21 / 3.31 us).
/// Mirrored by bench/gpu/mxgpu.py `frag_kernel`.
pub fn frag_kernel(
    n: usize,
    k: usize,
    m: usize,
    sms: usize,
    table: &super::thresholds::FragGemmTable,
    bf16_out: bool,
    sw: FragSwitches,
) -> FragKernel {
    let tiles = n.div_ceil(16);
    // Follow-up 32: at K <= 1024 one group a warp on tile pairs, where the pairs' blocks of K / 128
    // warps all fit at once (one wave: every weight byte requested before the PDL wait).
    let groups = k / 128;
    let g1_wave =
        tiles.div_ceil(2) <= sms.max(1) * (G1_RESIDENT_WARPS_PER_SM / groups.max(1)).max(1);
    if sw.one_group
        && m <= 8
        && (FRAG_G1_MIN_WARPS..=FRAG_G1_MAX_WARPS).contains(&groups)
        && g1_wave
    {
        return FragKernel {
            rows: 8,
            w: groups,
            s: 1,
            lp: FragLoop::G1,
            l2_prefetch: false,
        };
    }
    // Follow-up 38: at 9-16 rows one group a warp on one tile, where the tiles' blocks give the
    // SMs more than one each on the whole (at 1.25 tiles an SM and up: on fewer tiles than SMs it
    // lost, 1536 x 768 and 2048 x 896, at one an SM by 2.6 %, 2112 x 768, and at 1.45 an SM it won
    // by 5.7 %, 3072 x 640) and fit one wave at the kernel's 91-96 registers (12672 x 768 lost).
    let g1c_wave = 4 * tiles >= 5 * sms
        && tiles <= sms.max(1) * (G1_RESIDENT_WARPS_PER_SM / groups.max(1)).max(1);
    if sw.one_group_16
        && (9..=16).contains(&m)
        && (FRAG_G1_MIN_WARPS..=FRAG_G1_MAX_WARPS).contains(&groups)
        && g1c_wave
    {
        return FragKernel {
            rows: 16,
            w: groups,
            s: 1,
            lp: FragLoop::G1c,
            l2_prefetch: false,
        };
    }
    let (w16, s16) = frag_shape(n, k, m.max(9), sms, table);
    if sw.two_tiles && bf16_out && m <= 16 {
        // The measured rows name one-tile shapes; the rule sizes the grid of tile pairs, with
        // this kernel's residency: 200 registers a lane (ptxas, sm_90) leave 10 warps per SM.
        let t2 = super::thresholds::FragGemmTable {
            resident_warps_per_sm: T2_RESIDENT_WARPS_PER_SM,
            ..*table
        };
        let pairs = tiles.div_ceil(2) * m.div_ceil(8);
        let (w, s) = frag_rule(pairs, k, sms, &t2);
        let one_wave = pairs <= sms.max(1) * (T2_RESIDENT_WARPS_PER_SM / w).max(1);
        if m <= 8 || (table.measured(n, k, m).is_none() && w >= w16 && one_wave) {
            // Follow-up 36: between one and one and a half pairs an SM, the pairs take one SM each
            // and the tiles left a block each, so no SM holds two pairs.
            let mixed = sw.mixed_grid
                && m <= 8
                && (w, s) == (4, 1)
                && pairs > sms
                && tiles <= T2_MIXED_MAX_TILES_PER_SM * sms;
            return FragKernel {
                rows: 8,
                w,
                s,
                lp: if mixed {
                    FragLoop::T2Mixed { pair_blocks: sms }
                } else {
                    FragLoop::T2
                },
                l2_prefetch: false,
            };
        }
    }
    let blocks = |rows: usize, s: usize| tiles * m.div_ceil(rows) * s;
    let fs = sw.fs && bf16_out && m <= 16 && (m > 8 || blocks(16, s16) < sms);
    let (rows, (w, s)) = if fs || m > 8 {
        (16, (w16, s16))
    } else {
        let ws = frag_shape(n, k, m, sms, table);
        (
            8,
            if sw.trim_idle_warp {
                trim_idle_warp(k, ws)
            } else {
                ws
            },
        )
    };
    let idle = blocks(rows, s) < sms;
    let lp = match fs {
        false => FragLoop::Plain,
        true if sw.staged_a && idle && m >= table.staged_a_from_rows => FragLoop::Fsa,
        true => FragLoop::Fs,
    };
    FragKernel {
        rows,
        w,
        s,
        lp,
        l2_prefetch: sw.l2_prefetch && idle,
    }
}

/// `fk` with its cluster split halved until the device holds all of the grid's clusters at once:
/// `clusters(fk)` is how many the grid has, `holds(fk)` how many the device holds (the driver's
/// cluster occupancy query; `None`: unknown, `fk` stays). Why: [`frag_rule`] sizes a split by
/// multiprocessors, but a cluster's blocks must share one GPC, so the H200 holds 30 clusters of 4
/// one-block-an-SM blocks, not 33: 1024 x 6144's `_t2` w8 s4 (32 clusters) ran in two waves, 6.95
/// against 4.38 us at s = 2 (BENCHMARKS.md issue 6 follow-up 47). Every loop that takes s > 1 has
/// kernels at s = 1, 2, 4 and 8 for its warp counts.
pub fn fit_cluster_split<E>(
    mut fk: FragKernel,
    clusters: impl Fn(&FragKernel) -> usize,
    mut holds: impl FnMut(&FragKernel) -> Result<Option<usize>, E>,
) -> Result<FragKernel, E> {
    while fk.s > 1 {
        match holds(&fk)? {
            Some(cap) if clusters(&fk) > cap => fk.s /= 2,
            _ => break,
        }
    }
    Ok(fk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_split_halves_until_the_device_holds_the_grid() {
        // The H200's answers for one-block-an-SM blocks (call 8 of session 35): 66 clusters of 2,
        // 30 of 4; 15 of 8 assumed.
        let holds = |f: &FragKernel| -> Result<Option<usize>, ()> {
            Ok(Some(match f.s {
                2 => 66,
                4 => 30,
                _ => 15,
            }))
        };
        let t2 = |s| FragKernel {
            rows: 8,
            w: 8,
            s,
            lp: FragLoop::T2,
            l2_prefetch: false,
        };
        // 1024 x 6144: 32 tile pairs, one cluster each.
        let pairs = |_: &FragKernel| 32;
        assert_eq!(fit_cluster_split(t2(4), pairs, holds).unwrap().s, 2);
        // 768 x 6144: 24 pairs fit at s = 4; 16 pairs at s = 8 do not (15), at 4 they do.
        assert_eq!(fit_cluster_split(t2(4), |_| 24, holds).unwrap().s, 4);
        assert_eq!(fit_cluster_split(t2(8), |_| 16, holds).unwrap().s, 4);
        // More clusters than any split holds: down to s = 1 (no cluster).
        assert_eq!(fit_cluster_split(t2(8), |_| 200, holds).unwrap().s, 1);
        // s = 1 is never asked about; an unknown capacity keeps the split; errors pass through.
        let never = |_: &FragKernel| -> Result<Option<usize>, ()> { panic!("asked at s = 1") };
        assert_eq!(fit_cluster_split(t2(1), pairs, never).unwrap().s, 1);
        assert_eq!(
            fit_cluster_split(t2(4), pairs, |_| Ok::<_, ()>(None))
                .unwrap()
                .s,
            4
        );
        assert!(fit_cluster_split(t2(4), pairs, |_| Err::<Option<usize>, _>("driver")).is_err());
    }

    /// (rows, w, s, loop, L2 prefetch) of [`frag_kernel`] on the H200's table and 132 SMs.
    fn h200_choice(
        n: usize,
        k: usize,
        m: usize,
        bf16: bool,
        sw: FragSwitches,
    ) -> (usize, usize, usize, FragLoop, bool) {
        let table = super::super::thresholds::FragGemmTable::for_arch("sm_90");
        let f = frag_kernel(n, k, m, 132, &table, bf16, sw);
        (f.rows, f.w, f.s, f.lp, f.l2_prefetch)
    }

    #[test]
    fn norm_rows_spread_over_clusters_until_every_sm_has_a_row() {
        assert_eq!(norm_split(8, 6144, 132), 8);
        assert_eq!(norm_split(16, 6144, 132), 8);
        assert_eq!(norm_split(32, 6144, 132), 4);
        assert_eq!(norm_split(64, 6144, 132), 2);
        assert_eq!(norm_split(128, 6144, 132), 1);
        assert_eq!(norm_split(132, 6144, 132), 1);
        assert_eq!(norm_split(8192, 6144, 132), 1);
        // 96 = 3 groups: no split keeps whole groups per block.
        assert_eq!(norm_split(1, 96, 132), 1);
    }

    #[test]
    fn pipe_gemm_rule_reproduces_the_measured_shapes() {
        use super::super::thresholds::PipeGemmTable;
        let rule = PipeGemmTable::DEFAULT;
        // The H200's best shapes (thresholds.rs) follow from the rule alone ...
        assert_eq!(pipe_shape(1536, 6144, 1, 132, &rule), (1, 8));
        assert_eq!(pipe_shape(1536, 6144, 8, 132, &rule), (2, 8));
        assert_eq!(pipe_shape(6144, 768, 8, 132, &rule), (2, 1));
        assert_eq!(pipe_shape(6144, 6144, 16, 132, &rule), (2, 2));
        // ... except 1536 x 6144 at 16 rows (measured s = 4) and 6144 x 6144 at <= 4 rows (the
        // first kernel), which the table names.
        assert_eq!(pipe_shape(1536, 6144, 16, 132, &rule), (2, 8));
        let h200 = PipeGemmTable::for_arch("sm_90");
        assert_eq!(pipe_shape(1536, 6144, 16, 132, &h200), (2, 4));
        assert_eq!(pipe_shape(6144, 6144, 4, 132, &h200), (0, 0));
        assert_eq!(pipe_shape(6144, 6144, 5, 132, &h200), (2, 2));
        assert_eq!(pipe_shape(6144, 768, 1, 132, &h200), (2, 1));
        // Unmeasured: small K keeps 4 groups per split; tiny problems one block.
        assert_eq!(pipe_shape(4096, 1024, 1, 132, &h200), (1, 2));
        assert_eq!(pipe_shape(16, 256, 1, 132, &h200), (1, 1));
        assert_eq!(pipe_shape(16, 8192, 9, 132, &h200), (2, 8));
    }

    #[test]
    fn frag_gemm_rule_and_table() {
        use super::super::thresholds::FragGemmTable;
        let rule = FragGemmTable::DEFAULT;
        // The H200's measured best shapes follow from the rule: 1536 x 6144 (96 tiles) w8, one
        // block per SM; 6144 x 768 and 6144 x 6144 (384 tiles) w4, 3 blocks per SM; s = 1.
        for m in [1, 8, 16] {
            assert_eq!(frag_shape(1536, 6144, m, 132, &rule), (8, 1));
            assert_eq!(frag_shape(6144, 768, m, 132, &rule), (4, 1));
            assert_eq!(frag_shape(6144, 6144, m, 132, &rule), (4, 1));
        }
        // 6144 x 6144, 24 rows: 768 tiles fit one wave only at w2.
        assert_eq!(frag_shape(6144, 6144, 24, 132, &rule), (2, 1));
        // More tiles than one wave holds at any w: w2.
        assert_eq!(frag_shape(16384, 6144, 1, 132, &rule), (2, 1));
        // Tiny K: one group still runs (w2 s1), never fewer.
        assert_eq!(frag_shape(16, 128, 1, 132, &rule), (2, 1));
        // Large K, one tile: K split over a cluster too, up to w8 s8.
        assert_eq!(frag_shape(16, 65536, 1, 132, &rule), (8, 8));
        assert_eq!(frag_shape(16, 4096, 1, 132, &rule), (8, 2));
        // The H200's table names the measured shapes (the same as the rule's).
        let h200 = FragGemmTable::for_arch("sm_90");
        assert_eq!(frag_shape(1536, 6144, 16, 132, &h200), (8, 1));
        assert_eq!(frag_shape(6144, 768, 3, 132, &h200), (4, 1));
        assert_eq!(frag_shape(6144, 6144, 9, 132, &h200), (4, 1));
        assert_eq!(frag_shape(6144, 6144, 24, 132, &h200), (2, 1));
        assert_eq!(frag_shape(4096, 1024, 1, 132, &h200), (4, 1));
    }

    #[test]
    fn gemm_splits_k_when_column_tiles_cannot_fill_the_sms() {
        // MiniMax-M3 TP4 decode shapes on a 132-SM H200.
        assert_eq!(splitk_shape(1536, 6144, 1, 132), (4, 6));
        assert_eq!(splitk_shape(6144, 768, 8, 132), (1, 6));
        assert_eq!(splitk_shape(6144, 6144, 1, 132), (1, 8));
        assert_eq!(splitk_shape(6144, 6144, 16, 132), (1, 6));
        // 13 groups (prime): the register cap rather than 1 warp.
        assert_eq!(splitk_shape(6144, 1664, 1, 132), (1, 8));
        // Few blocks: up to 16 warps each.
        assert_eq!(splitk_shape(256, 6144, 1, 132), (4, 12));
        assert_eq!(splitk_shape(256, 16384, 1, 132), (4, 16));
        // Tiny K: never more splits than groups of 4 k-blocks.
        assert_eq!(splitk_shape(16, 64, 1, 132), (1, 1));
        assert_eq!(splitk_shape(16, 256, 1, 132), (2, 1));
    }

    #[test]
    fn frag_kernel_takes_fs_and_the_prefetch_only_where_sms_idle() {
        use super::super::thresholds::FragGemmTable;
        use FragLoop::{Fs, Fsa, Plain};
        let h200 = FragGemmTable::for_arch("sm_90");
        // The two-tile and one-group loops apart (their own tests below).
        let on = FragSwitches {
            two_tiles: false,
            one_group: false,
            one_group_16: false,
            ..FragSwitches::ON
        };
        let k = |n, kk, m, bf16| frag_kernel(n, kk, m, 132, &h200, bf16, on);
        // 1536 x 6144: 96 tiles on 132 SMs: `_fs` with the prefetch at every M <= 16.
        for m in [1, 8, 12, 16] {
            let f = k(1536, 6144, m, true);
            // `_fsa` from 13 rows there.
            let lp = if m >= 13 { Fsa } else { Fs };
            assert_eq!(
                (f.rows, f.w, f.s, f.lp, f.l2_prefetch),
                (16, 8, 1, lp, true),
                "m = {m}"
            );
        }
        // 6144 x 768 and 6144 x 6144: 384 tiles: the m8 kernel at M <= 8 (at K = 768 its 6
        // groups on 3 warps, none idle), `_fs` above, no prefetch.
        for (n, kk, w8) in [(6144, 768, 3), (6144, 6144, 4)] {
            let f = k(n, kk, 8, true);
            assert_eq!(
                (f.rows, f.w, f.s, f.lp, f.l2_prefetch),
                (8, w8, 1, Plain, false)
            );
            let f = k(n, kk, 16, true);
            assert_eq!(
                (f.rows, f.w, f.s, f.lp, f.l2_prefetch),
                (16, 4, 1, Fs, false)
            );
        }
        // f16 / f32 out: no `_fs` kernel; the prefetch still follows the grid.
        let f = k(1536, 6144, 4, false);
        assert_eq!((f.rows, f.lp, f.l2_prefetch), (8, Plain, true));
        let f = k(1536, 6144, 16, false);
        assert_eq!((f.rows, f.lp, f.l2_prefetch), (16, Plain, true));
        // Past 16 rows: the m16 kernel over several row tiles, never `_fs`.
        let f = k(1536, 6144, 40, true);
        assert_eq!((f.rows, f.lp), (16, Plain));
        // The switches.
        let sw = |fs, l2_prefetch, staged_a| FragSwitches {
            fs,
            l2_prefetch,
            staged_a,
            ..on
        };
        let f = frag_kernel(1536, 6144, 4, 132, &h200, true, sw(false, false, true));
        assert_eq!((f.rows, f.lp, f.l2_prefetch), (8, Plain, false));
        let f = frag_kernel(1536, 6144, 16, 132, &h200, true, sw(true, true, false));
        assert_eq!((f.lp, f.l2_prefetch), (Fs, true));
        let f = frag_kernel(1536, 6144, 16, 132, &h200, true, sw(false, true, true));
        assert_eq!(f.lp, Plain);
    }

    #[test]
    fn m8_kernel_drops_only_an_idle_fourth_warp() {
        use super::super::thresholds::FragGemmTable;
        // 3 warps where they give each warp as many groups as 4: K = 640, 768, 1152 (5, 6, 9).
        for k in [640, 768, 1152] {
            assert_eq!(trim_idle_warp(k, (4, 1)), (3, 1), "k = {k}");
        }
        // Every warp of 4 busy (K = 1024: 8 groups, 2 each; K = 6144: 12 each): unchanged.
        for k in [512, 1024, 1280, 6144] {
            assert_eq!(trim_idle_warp(k, (4, 1)), (4, 1), "k = {k}");
        }
        // Cluster splits and other warp counts: unchanged (no m8 w3 kernel at s > 1).
        assert_eq!(trim_idle_warp(768, (4, 2)), (4, 2));
        assert_eq!(trim_idle_warp(768, (2, 1)), (2, 1));
        assert_eq!(trim_idle_warp(768, (8, 1)), (8, 1));
        // Through the rule: 4096 x 1152 at M = 8 takes w3; 12288 x 768 (768 tiles) takes w2 and
        // stays; the 16-row kernels never trim; the switch off keeps w4.
        let h200 = FragGemmTable::for_arch("sm_90");
        let on = FragSwitches {
            two_tiles: false,
            one_group: false,
            one_group_16: false,
            ..FragSwitches::ON
        };
        let f = frag_kernel(4096, 1152, 8, 132, &h200, true, on);
        assert_eq!((f.rows, f.w, f.s), (8, 3, 1));
        let f = frag_kernel(12288, 768, 8, 132, &h200, true, on);
        assert_eq!((f.rows, f.w, f.s), (8, 2, 1));
        let f = frag_kernel(6144, 768, 16, 132, &h200, true, on);
        assert_eq!((f.rows, f.w), (16, 4));
        let off = FragSwitches {
            trim_idle_warp: false,
            ..on
        };
        let f = frag_kernel(6144, 768, 8, 132, &h200, false, off);
        assert_eq!((f.rows, f.w, f.s), (8, 4, 1));
    }

    #[test]
    fn two_tile_loop_takes_bf16_decode_rows_with_the_rule_for_half_the_tiles() {
        use super::super::thresholds::FragGemmTable;
        let h200 = FragGemmTable::for_arch("sm_90");
        // The one-group loop apart (its own test below: it takes K <= 1024 at M <= 8).
        let on = FragSwitches {
            one_group: false,
            one_group_16: false,
            ..FragSwitches::ON
        };
        let k = |n, kk, m, bf16| h200_choice(n, kk, m, bf16, on);
        // The measured winners (BENCHMARKS.md follow-up 20): 6144 x 768 and 6144 x 6144 (192
        // pairs) w4 s1; 1536 x 6144 (48 pairs) w8 s2; no prefetch.
        // (192 pairs on 132 SMs: the mixed grid, its own test below.)
        let mixed = FragLoop::T2Mixed { pair_blocks: 132 };
        for m in [1, 4, 8] {
            assert_eq!(k(6144, 768, m, true), (8, 4, 1, mixed, false));
            assert_eq!(k(6144, 6144, m, true), (8, 4, 1, mixed, false));
            assert_eq!(k(1536, 6144, m, true), (8, 8, 2, FragLoop::T2, false));
        }
        // 9-16 rows: on two row tiles where no measured row names the shape and the pairs keep
        // `_fs`'s warps a block in one wave (follow-up 21) ...
        for m in [9, 12, 16] {
            assert_eq!(k(4096, 4096, m, true), (8, 4, 1, FragLoop::T2, false));
            assert_eq!(k(8192, 2048, m, true), (8, 2, 1, FragLoop::T2, false));
            assert_eq!(k(2048, 6144, m, true), (8, 8, 1, FragLoop::T2, false));
            assert_eq!(k(4096, 1152, m, true), (8, 4, 1, FragLoop::T2, false));
        }
        // ... not on the measured MiniMax shapes, where the pairs would need fewer warps a block
        // (6144 x 768 / 6144 x 6144: w2 against `_fs`'s w4) or the table names `_fs` ...
        assert_eq!(k(6144, 768, 9, true).3, FragLoop::Fs);
        assert_eq!(k(6144, 6144, 16, true).3, FragLoop::Fs);
        assert_eq!(k(1536, 6144, 12, true).3, FragLoop::Fs);
        let rule = FragGemmTable::DEFAULT;
        let f = frag_kernel(6144, 768, 12, 132, &rule, true, on);
        assert_eq!((f.w, f.lp), (4, FragLoop::Fs));
        // ... nor where the pairs need two waves (12288 x 768: 768 pairs on w2).
        assert_eq!(k(12288, 768, 16, true).3, FragLoop::Fs);
        // Not for f16 / f32 output, not with the switch off.
        assert_eq!(k(6144, 768, 8, false).3, FragLoop::Plain);
        let off = FragSwitches {
            two_tiles: false,
            ..on
        };
        let f = frag_kernel(6144, 768, 8, 132, &h200, true, off);
        assert_eq!((f.w, f.lp), (3, FragLoop::Plain));
        // An odd tile count: one pair is half empty (the kernel skips its stores), the grid rounds up.
        assert_eq!(FragLoop::T2.blocks_y(7), 4);
        assert_eq!(FragLoop::Fs.blocks_y(7), 7);
        assert_eq!(k(16, 128, 1, true), (8, 2, 1, FragLoop::T2, false));
        // 12288 x 768 (384 pairs): w4 would need 3 blocks per SM, the kernel's registers hold 2:
        // w2 (5 per SM), one wave.
        assert_eq!(k(12288, 768, 8, true), (8, 2, 1, FragLoop::T2, false));
    }

    #[test]
    fn one_group_loop_takes_small_k_decode_rows_in_one_wave() {
        let k = h200_choice;
        let on = FragSwitches::ON;
        // The measured shapes (BENCHMARKS.md follow-up 32), every output type: K / 128 warps.
        for m in [1, 4, 8] {
            for bf16 in [true, false] {
                assert_eq!(k(6144, 768, m, bf16, on), (8, 6, 1, FragLoop::G1, false));
                assert_eq!(k(4096, 1024, m, bf16, on), (8, 8, 1, FragLoop::G1, false));
                assert_eq!(k(4096, 512, m, bf16, on), (8, 4, 1, FragLoop::G1, false));
            }
        }
        // An odd tile count: the grid of pairs rounds up. One or two groups: `_t2` (as fast).
        assert_eq!(k(48, 384, 1, true, on), (8, 3, 1, FragLoop::G1, false));
        assert_eq!(k(16, 128, 1, true, on).3, FragLoop::T2);
        assert_eq!(k(2048, 256, 8, true, on).3, FragLoop::T2);
        assert_eq!(FragLoop::G1.blocks_y(7), 4);
        assert_eq!(FragLoop::G1.suffix(), "_g1");
        // Not past 8 rows (on two row tiles it lost at 6144 x 768; `_g1c` there), not past K = 1024.
        assert_eq!(k(6144, 768, 9, true, on).3, FragLoop::G1c);
        assert_eq!(k(4096, 1152, 8, true, on).3, FragLoop::T2);
        assert_eq!(
            k(6144, 6144, 1, true, on).3,
            FragLoop::T2Mixed { pair_blocks: 132 }
        );
        // One wave: 6 warps a block, 21 warps an SM -> 3 blocks an SM, 396 pairs on 132 SMs.
        assert_eq!(k(16 * 2 * 396, 768, 8, true, on).3, FragLoop::G1);
        assert_ne!(k(16 * 2 * 397, 768, 8, true, on).3, FragLoop::G1);
        // The switch off: the loops before it.
        let off = FragSwitches {
            one_group: false,
            ..on
        };
        assert_eq!(
            k(6144, 768, 8, true, off),
            (8, 4, 1, FragLoop::T2Mixed { pair_blocks: 132 }, false)
        );
        assert_eq!(
            k(6144, 768, 8, false, off),
            (8, 3, 1, FragLoop::Plain, false)
        );
    }

    #[test]
    fn sixteen_row_one_group_loop_takes_small_k_where_tiles_fill_one_wave() {
        let k = h200_choice;
        let on = FragSwitches::ON;
        // The measured wins (BENCHMARKS.md follow-up 38), every output type: K / 128 warps.
        for m in [9, 12, 13, 16] {
            for bf16 in [true, false] {
                assert_eq!(k(6144, 768, m, bf16, on), (16, 6, 1, FragLoop::G1c, false));
                assert_eq!(k(4096, 1024, m, bf16, on), (16, 8, 1, FragLoop::G1c, false));
                assert_eq!(k(6144, 512, m, bf16, on), (16, 4, 1, FragLoop::G1c, false));
                assert_eq!(k(8192, 384, m, bf16, on), (16, 3, 1, FragLoop::G1c, false));
            }
        }
        assert_eq!(FragLoop::G1c.blocks_y(7), 7);
        assert_eq!(FragLoop::G1c.suffix(), "_g1c");
        // Below 1.25 tiles an SM (1536 x 768, 2048 x 896, 2112 x 768: it lost) and past one wave
        // (12672 x 768: 792 tiles of 6 warps, 3 blocks an SM hold 396): the loops before it.
        assert_ne!(k(1536, 768, 16, true, on).3, FragLoop::G1c);
        assert_ne!(k(2048, 896, 16, true, on).3, FragLoop::G1c);
        assert_ne!(k(2112, 768, 16, true, on).3, FragLoop::G1c);
        assert_eq!(k(16 * 165, 768, 16, true, on).3, FragLoop::G1c);
        assert_ne!(k(16 * 164, 768, 16, true, on).3, FragLoop::G1c);
        assert_eq!(k(3072, 640, 16, true, on), (16, 5, 1, FragLoop::G1c, false));
        assert_eq!(k(16 * 396, 768, 16, true, on).3, FragLoop::G1c);
        assert_ne!(k(16 * 397, 768, 16, true, on).3, FragLoop::G1c);
        assert_ne!(k(12672, 768, 16, true, on).3, FragLoop::G1c);
        // Not at M <= 8 (`_g1`), not past 16 rows or K = 1024, not at one or two groups.
        assert_eq!(k(6144, 768, 8, true, on).3, FragLoop::G1);
        assert_ne!(k(6144, 768, 17, true, on).3, FragLoop::G1c);
        assert_ne!(k(6144, 1152, 16, true, on).3, FragLoop::G1c);
        assert_ne!(k(6144, 256, 16, true, on).3, FragLoop::G1c);
        // The switch off: `_fs` as before.
        let off = FragSwitches {
            one_group_16: false,
            ..on
        };
        assert_eq!(k(6144, 768, 16, true, off).3, FragLoop::Fs);
    }

    #[test]
    fn mixed_grid_takes_between_one_and_one_and_a_half_pairs_an_sm() {
        use super::super::thresholds::FragGemmTable;
        let h200 = FragGemmTable::for_arch("sm_90");
        let lp = |n, kk, m, sw| frag_kernel(n, kk, m, 132, &h200, true, sw).lp;
        let on = FragSwitches::ON;
        let mixed = FragLoop::T2Mixed { pair_blocks: 132 };
        // 6144 x 6144: 384 tiles, 192 pairs. `_t2` puts two pairs on 60 SMs; here 132 pairs take
        // one SM each and 120 single tiles the second wave: y = 384 - 132 = 252 blocks.
        for m in [1, 5, 8] {
            assert_eq!(lp(6144, 6144, m, on), mixed);
        }
        assert_eq!(mixed.blocks_y(384), 252);
        assert_eq!(mixed.suffix(), "_t2h");
        // The edges: 133 pairs (one single), 198 pairs = 396 tiles (132 singles); not at 132
        // pairs (one an SM already) nor at 199 (some SM holds two pairs whatever the grid).
        assert_eq!(lp(16 * 266, 6144, 1, on), mixed);
        assert_eq!(mixed.blocks_y(266), 134);
        assert_eq!(lp(16 * 396, 6144, 1, on), mixed);
        assert_eq!(lp(16 * 264, 6144, 1, on), FragLoop::T2);
        assert_eq!(lp(16 * 398, 6144, 1, on), FragLoop::T2);
        // kernels/tests/gpu_kernels.rs's shape: 331 tiles (a ragged last one) at K = 1536.
        assert_eq!(lp(16 * 331 - 8, 1536, 8, on), mixed);
        // An odd tile count (6160 x 6144: 385 tiles): 132 pairs and 121 singles.
        assert_eq!(lp(6160, 6144, 5, on), mixed);
        assert_eq!(mixed.blocks_y(385), 253);
        // Not past 8 rows, not for another (w, s), not with the switch off.
        assert_eq!(lp(6144, 6144, 9, on), FragLoop::Fs);
        assert_eq!(lp(1536, 6144, 1, on), FragLoop::T2);
        let off = FragSwitches {
            mixed_grid: false,
            ..on
        };
        assert_eq!(lp(6144, 6144, 1, off), FragLoop::T2);
    }
}
