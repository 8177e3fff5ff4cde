// com.mxfuse MxMatMul, decode GEMM v4 (NVIDIA sm_90) on fragment-packed weights: pre-quantized
// e4m3 activations a [M, K] + a_scale [M, K/32] (row-major, as every producer writes them), and
// constant weights packed once by kernels::gpu::pack_frag_weights (bench: mxgpu.pack_frag):
//   wf  [N16][K/32][32 lanes][16 bytes]: lane (g, t) = bytes 8t .. 8t + 7 of the k-block of
//       weight rows 16 n16 + g, then of row 16 n16 + g + 8 (rows past N are zero);
//   wsf [N16][K/128][16 rows][4 bytes]: byte u of row r's word = the E8M0 scale of k-block
//       4 grp + u of weight row 16 n16 + r (rows past N: 127).
// K % 128 == 0.
//
// Why a fourth kernel: the decode GEMM moves N K bytes of weights and does almost no arithmetic per
// byte, so it is bound by how many weight bytes are in flight. Packed, one k-block of a warp's 16
// rows is 512 contiguous bytes and each lane's 16 bytes are exactly its two k16 mma fragments, so a
// weight load is one fully coalesced 16-byte LDG per lane, straight into registers: no shared
// memory staging (mx_matmul_pipe.hip), no 8-byte fragment loads spread over 8 rows (mx_matmul.hip),
// no shuffles. Each warp double-buffers U groups of 4 k-blocks (the next batch's loads are issued
// before the current batch's mmas). The W warps of a block and the S blocks of a cluster split K
// of one 16-column tile; partial sums are added in warp order, then in cluster-rank order through
// distributed shared memory (deterministic, no workspace, one launch).
//
// PDL (mx_portability.h): with pre & 1 the first batch of weights (constants) is loaded before
// MX_PDL_WAIT, so under a programmatic launch the weight stream starts while the previous kernel
// still runs; activations are read only after it. pre & 1 = 0 waits first (weights written by an
// earlier kernel of the stream). pre & 2: the L2 prefetch of the warp's weights (below).
// Grid: (ceil(M / (8 MT)) * S, ceil(N / 16)), block 32 W threads (MxFragBlock).
// Outputs go through MxFragOut (one matrix); compiled with MX_FRAG_GROUPED
// (mx_matmul_frag_grouped.hip) the same kernels take a segment table instead (MxFragSegOut: the
// consumers of one activation, weights packed one after another, one launch).

#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)

// 16 bytes of a stream read once: not allocated in L1.
MX_DEV uint4 mx_ldg_once16(const uint4* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// pre & 2: the warp asks L2 for its whole share of the weight tile (2 KB of fragments + 64
// bytes of scale words a group), one bulk prefetch a group spread over the lanes
// (cp.async.bulk.prefetch.L2, sm_90: no registers, nothing to wait on), before the PDL wait when
// pre & 1. Why: the register double buffer keeps only two groups of a warp in flight, so a warp's
// stream is a chain of DRAM round trips; where the tiles leave SMs idle (1536 x 6144: 96 blocks)
// the prefetch starts the whole stream at once, overlapping the previous kernel. Where every SM
// is busy it costs (L2 churn; measured, BENCHMARKS.md follow-up 12), so the host asks for it only
// there. A prefetch inside the loop (a distance of D groups) was slower: its predicate and
// address cost registers the capped loop does not have. No "memory" clobber: it would pin the
// loads around it. Results cannot change.
MX_DEV void mx_frag_prefetch_l2(const uint4* wf, const mx_u32* wsf, int tile, int K, int gb, int ge) {
  const int lane = threadIdx.x & 31;
  const mx_u8* w = reinterpret_cast<const mx_u8*>(wf + (long long)tile * (K >> 5) * 32);
  const mx_u8* s = reinterpret_cast<const mx_u8*>(wsf + (long long)tile * (K >> 7) * 16);
  for (int i = gb + lane; i < ge; i += 32) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], 2048;" ::"l"(w + 2048LL * i));
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], 64;" ::"l"(s + 64LL * i));
  }
}

// Block -> (16-column tile, K split, first activation row): blockIdx.x = m-tile * S +
// split (the S blocks of a cluster are consecutive in x), blockIdx.y = tile, so the m-tiles of
// one weight tile run together and share its weights through L2 (at prefill sizes every m-tile
// re-reads the tile; the other order, tiles along x, was slower there: BENCHMARKS.md).
// NT > 1 (`_t2`): blockIdx.y = a run of NT neighbouring tiles; `tile` is its first.
template <int MT, int S, int NT = 1>
struct MxFragBlock {
  int tile, split, m0;
  MX_DEV MxFragBlock()
      : tile(NT * blockIdx.y), split(blockIdx.x % S), m0(8 * MT * (blockIdx.x / S)) {}
};

// The start of every fragment loop: the first weights (`load_first`: constants) before the PDL
// wait when pre & 1, else after it, with the L2 prefetch (pre & 2) ahead of them; then the next
// kernel may launch. Activations are read only after this.
template <int MT, int S, int NT = 1, class F>
MX_DEV void mx_frag_prologue(int pre, const uint4* wf, const mx_u32* wsf, int K, int gb, int ge,
                             F load_first) {
  if (!(pre & 1)) MX_PDL_WAIT();
  // The two-tile kernel takes no prefetch: its second tile may lie past the weights, and it was
  // measured without one.
  if (NT == 1 && (pre & 2)) mx_frag_prefetch_l2(wf, wsf, MxFragBlock<MT, S, NT>().tile, K, gb, ge);
  if (gb < ge) load_first();
  if (pre & 1) MX_PDL_WAIT();
  MX_PDL_LAUNCH();
}

// Output rows of the fragment kernels' stores: row m of the block's tiles is output row m when
// m < M, else not stored (-1). (A gathered kernel maps its rows to samples instead.)
struct MxRowsBelow {
  int M;
  MX_DEV int operator()(int m) const { return m < M ? m : -1; }
};

// The end of both kernels: the W warps' accumulators added in warp order, then (S > 1) the
// cluster's blocks in rank order through distributed shared memory; rank 0 stores row m (of the
// block's tiles, from MxFragBlock's m0) to output row rows(m), where that is not -1.
// Where a fragment kernel's outputs go: one `[M, N]` matrix with its epilogue (MxFragOut), or, in
// the module compiled with MX_FRAG_GROUPED (mx_matmul_frag_grouped.hip), the several consumers of
// one activation whose packed weights lie one after another, tile after tile (MxFragSegOut). `n`
// is the column of the packed weights.
template <class TO>
struct MxFragOut {
  typename TO::storage* y;
  int N;
  MxEpi ep;
  MX_DEV void put(int m, int n, float v) const {
    if (n < N) y[(long long)m * N + n] = TO::from_f32(mx_epilogue<TO>(ep, m, n, v));
  }
};

// Up to MX_FRAG_SEGS outputs of one grouped launch (kernels::gpu::launch FragSegsParams): segment
// s holds the packed tiles tile0[s] .. tile0[s + 1] - 1 and writes y[s] `[M, n[s]]` with ep[s].
#define MX_FRAG_SEGS 4
struct MxFragSegs {
  int count;
  int tile0[MX_FRAG_SEGS + 1];
  int n[MX_FRAG_SEGS];
  void* y[MX_FRAG_SEGS];
  MxEpi ep[MX_FRAG_SEGS];
};

template <class TO>
struct MxFragSegOut {
  const MxFragSegs& s;
  MX_DEV void put(int m, int n, float v) const {
    // The segment's fields by unrolled selects: a dynamic index into the kernel parameter would
    // copy it to local memory.
    const int tile = n >> 4;
    int n0 = 0, nk = s.n[0];
    void* y = s.y[0];
    MxEpi ep = s.ep[0];
#pragma unroll
    for (int j = 1; j < MX_FRAG_SEGS; ++j)
      if (j < s.count && tile >= s.tile0[j]) {
        n0 = 16 * s.tile0[j];
        nk = s.n[j];
        y = s.y[j];
        ep = s.ep[j];
      }
    const int ln = n - n0;
    if (ln < nk)
      static_cast<typename TO::storage*>(y)[(long long)m * nk + ln] = TO::from_f32(mx_epilogue<TO>(ep, m, ln, v));
  }
};

// U > 1 (`_t2h`'s one-tile blocks): a warp holds U sets of accumulators (acc[u NT + nt]), added
// as if set u were warp u W + warp.
template <class TO, int W, int MT, int S, int NT = 1, int U = 1, class Out, class Rows = MxRowsBelow>
MX_DEV void mx_frag_reduce_to(const float (*acc)[MT][4], const Out& out, Rows rows) {
  constexpr int E = NT * MT * 4 * 32;  // accumulator elements of a warp
  __shared__ float part[U * W * E];
  __shared__ float red[S > 1 ? E : 1];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const MxFragBlock<MT, S, NT> blk;
  const int n0 = 16 * blk.tile, m0 = blk.m0, split = blk.split;
  // Element e = ((nt * MT + mt) * 4 + c) * 32 + lane of a warp: D fragment c of lane's row
  // tile mt of column tile nt.
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          part[(u * W + warp) * E + ((nt * MT + mt) * 4 + c) * 32 + lane] = acc[u * NT + nt][mt][c];
  __syncthreads();
  auto store = [&](int e, float v) {
    // d0/d1: column n0 + g, rows 2t / 2t + 1 of tile mt; d2/d3: column n0 + g + 8.
    const int mt = (e >> 7) % MT, c = (e >> 5) & 3, ln = e & 31;
    const int n = n0 + 16 * (e / (128 * MT)) + (ln >> 2) + (c >= 2 ? 8 : 0);
    const int m = rows(m0 + 8 * mt + 2 * (ln & 3) + (c & 1));
    if (m >= 0) out.put(m, n, v);
  };
  for (int e = tid; e < E; e += 32 * W) {
    float v = part[e];
#pragma unroll
    for (int w = 1; w < U * W; ++w) v += part[w * E + e];
    if (S == 1) {
      store(e, v);
    } else {
      red[e] = v;
    }
  }
  if (S > 1) {
    mx_cluster_sync();  // every block's red[] written and visible cluster-wide
    if (split == 0) {
      // The cluster's blocks are S consecutive blockIdx.x of one tile: rank r did split r.
      for (int e = tid; e < E; e += 32 * W) {
        float v = red[e];
        for (int r = 1; r < S; ++r) v += mx_dsmem_load(red + e, (mx_u32)r);
        store(e, v);
      }
    }
    mx_cluster_sync();  // the other blocks' shared memory stays alive until read
  }
}
// One output matrix: rows(m) as mapped (the gathered kernels' samples), or m < M.
template <class TO, int W, int MT, int S, int NT = 1, class Rows = MxRowsBelow>
MX_DEV void mx_frag_reduce_store(const float (*acc)[MT][4], typename TO::storage* __restrict__ y,
                                 int N, const MxEpi& ep, Rows rows) {
  mx_frag_reduce_to<TO, W, MT, S, NT>(acc, MxFragOut<TO>{y, N, ep}, rows);
}
template <class TO, int W, int MT, int S, int NT = 1>
MX_DEV void mx_frag_reduce_store(const float (*acc)[MT][4], typename TO::storage* __restrict__ y,
                                 int M, int N, const MxEpi& ep) {
  mx_frag_reduce_store<TO, W, MT, S, NT>(acc, y, N, ep, MxRowsBelow{M});
}

// The entry points of the kernels below, in the plain module (one output: y, N, ep) and in the
// grouped one (MX_FRAG_GROUPED: the segments; N = 16 x the packed tiles of all of them). Names:
// mx_matmul_frag_* and mx_matmul_fragg_*.
#ifdef MX_FRAG_GROUPED
#define MX_FRAG(x) mx_matmul_fragg_##x
#define MX_FRAG_ARGS(TO)                                                                         \
  const mx_u8 *aq, const mx_u8 *as, const uint4 *wf, const mx_u32 *wsf, MxFragSegs segs, int M, \
      int N, int K, int pre
#define MX_FRAG_OUT(TO) (MxFragSegOut<TO>{segs})
#else
#define MX_FRAG(x) mx_matmul_frag_##x
#define MX_FRAG_ARGS(TO)                                                                         \
  const mx_u8 *aq, const mx_u8 *as, const uint4 *wf, const mx_u32 *wsf, TO::storage *y, int M,  \
      int N, int K, int pre, MxEpi ep
#define MX_FRAG_OUT(TO) (MxFragOut<TO>{y, N, ep})
#endif

// A warp's share of the work: groups gb .. ge - 1 (part split * W + warp of S * W contiguous
// ranges of the K / 128 groups) of the block's 16-column tile, and its load addresses.
template <int W, int MT, int S, int NT = 1>
struct MxFragWarp {
  int g, gb, ge;
  const uint4* wp;     // + (4 i + j) * 32: k-block j of group i, this lane's 16 bytes
  const mx_u32* swp;   // + 16 i + row: scale word of group i
  const mx_u8* ap[MT];  // + 128 i + 32 j: activation row 8 mt + g, this lane's 8 bytes
  const mx_u32 *sp0[MT], *sp1[MT];  // + i: scale words of activation rows 8 mt + 2t, 2t + 1
  MX_DEV MxFragWarp(const mx_u8* aq, const mx_u8* as, const uint4* wf, const mx_u32* wsf, int M,
                    int K) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
    const MxFragBlock<MT, S, NT> blk;
    const int tile = blk.tile, split = blk.split, m0 = blk.m0;
    const int KB = K >> 5, G = K >> 7;
    const int per = (G + S * W - 1) / (S * W);
    g = lane >> 2;
    gb = min(G, (split * W + warp) * per);
    ge = min(G, gb + per);
    wp = wf + (long long)tile * KB * 32 + lane;
    swp = wsf + (long long)tile * G * 16;
    // Rows past M read row M - 1: they only reach outputs past M, which are not stored.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      ap[mt] = aq + (long long)min(m0 + 8 * mt + g, M - 1) * K + 8 * t;
      sp0[mt] = reinterpret_cast<const mx_u32*>(as + (long long)min(m0 + 8 * mt + 2 * t, M - 1) * KB);
      sp1[mt] = reinterpret_cast<const mx_u32*>(as + (long long)min(m0 + 8 * mt + 2 * t + 1, M - 1) * KB);
    }
  }
};

// The weight stream of the `_fs` / `_fsa` loops: from group gb of a warp's share, one group a
// call (this lane's 16 bytes of each of its 4 k-blocks and the scale words of rows g, g + 8),
// every load at an immediate offset from two pointers bumped once a group.
struct MxFragWeights {
  const uint4* wp;
  const mx_u32* swp;
  template <class FragWarp>  // MxFragWarp<W, MT, S>
  MX_DEV explicit MxFragWeights(const FragWarp& f)
      : wp(f.wp + 128 * f.gb), swp(f.swp + 16 * f.gb + f.g) {}
  MX_DEV void next(uint4 w[4], mx_u32& sA, mx_u32& sB) {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = mx_ldg_once16(wp + 32 * j);
    sA = swp[0];
    sB = swp[8];
    wp += 128;
    swp += 16;
  }
};

// One warp's registers for U groups of 4 k-blocks.
template <int MT, int U>
struct MxFragBatch {
  uint4 w[U][4];        // k-block j of group u: rows g (.x .y) and g + 8 (.z .w)
  mx_u32 sA[U], sB[U];  // weight scale words of rows g, g + 8
  uint2 a[U][MT][4];    // activation row 8 mt + g, bytes 8t .. 8t + 7 of k-block j
  mx_u32 s0[U][MT], s1[U][MT];  // activation scale words of rows 8 mt + 2t, 2t + 1
};

// mx_mma_group4 on a lane's packed weights of one group: w[j] = its 16 bytes of k-block j, rows g
// (.x .y) and g + 8 (.z .w).
template <int MT, bool HW = false>
MX_DEV void mx_frag_mma(float acc[MT][4], const uint4 w[4], const uint2 b[MT][4], mx_u32 swA,
                        mx_u32 swB, const mx_u32 s0[MT], const mx_u32 s1[MT]) {
  uint2 wa[4], wb[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    wa[j] = make_uint2(w[j].x, w[j].y);
    wb[j] = make_uint2(w[j].z, w[j].w);
  }
  mx_mma_group4<MT, HW>(acc, wa, wb, b, swA, swB, s0, s1);
}
// A lane's packed weights of one group (w[j] as in mx_frag_mma) as f16 mma fragments.
MX_DEV void mx_frag_wfrag(const uint4 w[4], MxWFrag& f) {
#pragma unroll
  for (int j = 0; j < 4; ++j) mx_w_frag<true>(make_uint2(w[j].x, w[j].y), make_uint2(w[j].z, w[j].w), f.h[j]);
}

template <class TO, int W, int MT, int S, int U, class Out>
MX_DEV void mx_matmul_frag(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                           const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                           const Out& out, int M, int K, int pre) {
  const MxFragWarp<W, MT, S> f(aq, as, wf, wsf, M, K);
  const int g = f.g, gb = f.gb, ge = f.ge;
  const uint4* wp = f.wp;
  const mx_u32* swp = f.swp;
  typedef MxFragBatch<MT, U> Batch;
  auto load_w = [&](Batch& bt, int i) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i + u < ge) {
#pragma unroll
        for (int j = 0; j < 4; ++j) bt.w[u][j] = mx_ldg_once16(wp + (4 * (i + u) + j) * 32);
        bt.sA[u] = swp[16 * (i + u) + g];
        bt.sB[u] = swp[16 * (i + u) + g + 8];
      }
  };
  auto load_a = [&](Batch& bt, int i) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i + u < ge) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int j = 0; j < 4; ++j)
            bt.a[u][mt][j] = *reinterpret_cast<const uint2*>(f.ap[mt] + 128 * (i + u) + 32 * j);
          bt.s0[u][mt] = f.sp0[mt][i + u];
          bt.s1[u][mt] = f.sp1[mt][i + u];
        }
      }
  };

  float acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[mt][c] = 0.0f;
  Batch cur;
  mx_frag_prologue<MT, S>(pre, wf, wsf, K, gb, ge, [&] { load_w(cur, gb); });
  if (gb < ge) load_a(cur, gb);
  for (int i = gb; i < ge; i += U) {
    Batch nxt;
    if (i + U < ge) {
      load_w(nxt, i + U);
      load_a(nxt, i + U);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i + u < ge)
        mx_frag_mma<MT>(acc, cur.w[u], cur.a[u], cur.sA[u], cur.sB[u], cur.s0[u], cur.s1[u]);
    cur = nxt;
  }

  mx_frag_reduce_to<TO, W, MT, S>(&acc, out, MxRowsBelow{M});
}

// Kernel names: mx_matmul_frag_m<8|16>_<out>_w<W>_s<S>, U = 2 groups per batch at 8 rows, 1 at 16
// (registers: 157 / 156 at W = 4). Measured and dropped (BENCHMARKS.md): U = 1 at 8 rows (no
// faster; U = 4 spills), and a per-lane cp.async ring of 4 / 8 stages in dynamic shared memory
// instead of the register double buffer (79 registers, but 1.1-2x slower: the 12 small cp.asyncs
// per lane per group); W warps on W neighbouring tiles over one K range sharing the block's
// activations converted once to f16 in shared memory (1.15-1.5x slower: the staging pass before
// the weight stream); weights by bulk copies (cp.async.bulk + mbarrier) into a ring of 2-5 stages
// per warp, activations a register double buffer (80 registers, 1.1-2x slower). ncu at 6144 x
// 6144, M = 8 (w4 s1): 53 % of DRAM under ncu's cache flush, issue slots 33 % busy, 42 % of stall
// cycles on global loads, 12 warps per SM (160 registers). Block 32 W threads.
#define MX_DEFINE_FRAG1(NAME, TO, W, MT, S, U, ATTR)                                             \
  extern "C" __global__ void __launch_bounds__(32 * W) ATTR NAME(MX_FRAG_ARGS(TO)) {             \
    mx_matmul_frag<TO, W, MT, S, U>(aq, as, wf, wsf, MX_FRAG_OUT(TO), M, K, pre);                \
  }
#define MX_DEFINE_FRAG_S(NAME, TO, W, MT, U, SFX)                                                \
  MX_DEFINE_FRAG1(NAME##_s1##SFX, TO, W, MT, 1, U, )                                             \
  MX_DEFINE_FRAG1(NAME##_s2##SFX, TO, W, MT, 2, U, __cluster_dims__(2, 1, 1))                    \
  MX_DEFINE_FRAG1(NAME##_s4##SFX, TO, W, MT, 4, U, __cluster_dims__(4, 1, 1))                    \
  MX_DEFINE_FRAG1(NAME##_s8##SFX, TO, W, MT, 8, U, __cluster_dims__(8, 1, 1))
#define MX_DEFINE_FRAG_W(NAME, TO, MT, U, SFX)                                                   \
  MX_DEFINE_FRAG_S(NAME##_w2, TO, 2, MT, U, SFX)                                                 \
  MX_DEFINE_FRAG_S(NAME##_w4, TO, 4, MT, U, SFX)                                                 \
  MX_DEFINE_FRAG_S(NAME##_w8, TO, 8, MT, U, SFX)
#define MX_DEFINE_FRAG_OUTS(PREFIX, MT, U)                                                       \
  MX_DEFINE_FRAG_W(PREFIX##_bf16, MxBf16, MT, U, )                                               \
  MX_DEFINE_FRAG_W(PREFIX##_f16, MxF16, MT, U, )                                                 \
  MX_DEFINE_FRAG_W(PREFIX##_f32, MxF32, MT, U, )

// (The name prefix expands before MX_DEFINE_FRAG_OUTS pastes suffixes onto it.)
#define MX_DEFINE_FRAG_OUTS_X(PREFIX, MT, U) MX_DEFINE_FRAG_OUTS(PREFIX, MT, U)
MX_DEFINE_FRAG_OUTS_X(MX_FRAG(m8), 1, 2)
MX_DEFINE_FRAG_OUTS_X(MX_FRAG(m16), 2, 1)
// m8 at W = 3, S = 1 (issue 6 follow-up 17; kernels/src/gpu/shapes.rs trim_idle_warp): where
// ceil(G / 3) groups a warp equals ceil(G / 4) (K = 768: 6 groups, 2 a warp either way) the
// fourth warp of a block has nothing to do yet holds its registers. On 3 warps: 6144 x 768 M = 1 /
// 4 / 8 2.73 / 2.87 / 3.01 against 2.93 / 2.99 / 3.16 us, up to 20 % at K = 1152. `_fs` loses with
// 3 warps (3.37-3.43 against 3.26-3.29 us at M = 12-16).
MX_DEFINE_FRAG1(MX_FRAG(m8_bf16_w3_s1), MxBf16, 3, 1, 1, 2, )
MX_DEFINE_FRAG1(MX_FRAG(m8_f16_w3_s1), MxF16, 3, 1, 1, 2, )
MX_DEFINE_FRAG1(MX_FRAG(m8_f32_w3_s1), MxF32, 3, 1, 1, 2, )

// mx_matmul_frag_m16_bf16_w<W>_s<S>_fs (issue 6 follow-up 11; the runtime's kernel for 9-16 rows
// with bf16 output, and for M <= 8 where the grid leaves SMs idle: kernels/src/gpu/shapes.rs
// frag_kernel): the m16 loop after a SASS walk (BENCHMARKS.md). Per group of 4 k-blocks a lane of the loop above spends 356
// instructions on the fast path (sm_90, w4 s1): 64 converts, 16 mmas, 32 FMUL + 32 FFMA of the
// rescale, 18 loads, and 186 integer ones, of which about 55 are address math (64-bit address
// per load from the group index), 25 IMAD.MOV (the `cur = nxt` register copy of the double
// buffer) and the guards `i + u < ge`, and 32 SHF that shift a word's upper two e4m3 down for
// their convert. Here the same arithmetic (mx_mma_group4, so the outputs are bit-identical to the
// kernel above; its converts read the high halves directly, HW = true) runs on two register buffers in a loop unrolled by two
// (no copy), every load takes its address from six pointers bumped once per group plus
// immediate offsets, and no load is guarded inside a batch. Two buffers take 184 registers
// (w4) uncapped; capped at 168 (below) they are faster (follow-up 11's `_fsr`).
template <int W, int S, class Out>
MX_DEV void mx_matmul_frag_m16_fs(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                                  const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                                  const Out& out, int M, int K, int pre) {
  constexpr int MT = 2;
  const MxFragWarp<W, MT, S> f(aq, as, wf, wsf, M, K);
  const int g = f.g, gb = f.gb, ge = f.ge;
  // The weights and activations from group gb, each pointer bumped by one group after its batch
  // is loaded.
  MxFragWeights wts(f);
  const mx_u8* ap[MT];
  const mx_u32 *sp0[MT], *sp1[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    ap[mt] = f.ap[mt] + 128 * gb;
    sp0[mt] = f.sp0[mt] + gb;
    sp1[mt] = f.sp1[mt] + gb;
  }
  typedef MxFragBatch<MT, 1> Batch;
  auto load_w = [&](Batch& bt) { wts.next(bt.w[0], bt.sA[0], bt.sB[0]); };
  auto load_a = [&](Batch& bt) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int j = 0; j < 4; ++j) bt.a[0][mt][j] = *reinterpret_cast<const uint2*>(ap[mt] + 32 * j);
      bt.s0[0][mt] = *sp0[mt];
      bt.s1[0][mt] = *sp1[mt];
      ap[mt] += 128;
      sp0[mt] += 1;
      sp1[mt] += 1;
    }
  };
  float acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[mt][c] = 0.0f;
  auto mma = [&](const Batch& bt) {
    mx_frag_mma<MT, true>(acc, bt.w[0], bt.a[0], bt.sA[0], bt.sB[0], bt.s0[0], bt.s1[0]);
  };
  Batch b0, b1;
  mx_frag_prologue<MT, S>(pre, wf, wsf, K, gb, ge, [&] { load_w(b0); });
  if (gb < ge) load_a(b0);
  // b0 holds group i, b1 group i + 1: each is refilled two groups ahead right after its mmas'
  // operands are consumed (the loads of one buffer overlap the mmas of the other). Loading b1's
  // weights before the PDL wait too was slower at every measured shape (BENCHMARKS.md
  // follow-up 12).
  for (int i = gb; i < ge; i += 2) {
    if (i + 1 < ge) {
      load_w(b1);
      load_a(b1);
    }
    mma(b0);
    if (i + 1 == ge) break;
    if (i + 2 < ge) {
      load_w(b0);
      load_a(b0);
    }
    mma(b1);
  }
  mx_frag_reduce_to<MxBf16, W, MT, S>(&acc, out, MxRowsBelow{M});
}
// At most 168 registers at W = 2, 4 (12 warps per SM, like the m8 / m16 kernels; ptxas spills 48
// bytes).
#define MX_DEFINE_FRAG_FS1(W, S, ATTR)                                                           \
  extern "C" __global__ void __launch_bounds__(32 * W, (W < 8 ? 12 / W : 1))                    \
      ATTR MX_FRAG(m16_bf16_w##W##_s##S##_fs)(MX_FRAG_ARGS(MxBf16)) {                            \
    mx_matmul_frag_m16_fs<W, S>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, K, pre);                \
  }
#define MX_DEFINE_FRAG_FS(W)                                                                     \
  MX_DEFINE_FRAG_FS1(W, 1, )                                                                     \
  MX_DEFINE_FRAG_FS1(W, 2, __cluster_dims__(2, 1, 1))                                            \
  MX_DEFINE_FRAG_FS1(W, 4, __cluster_dims__(4, 1, 1))                                            \
  MX_DEFINE_FRAG_FS1(W, 8, __cluster_dims__(8, 1, 1))
MX_DEFINE_FRAG_FS(2)
MX_DEFINE_FRAG_FS(4)
MX_DEFINE_FRAG_FS(8)

// mx_matmul_frag_m8_bf16_w<W>_s<S>_t2 (issue 6 follow-ups 20-21; the runtime's kernel for M <= 8
// with bf16 output, and at 9-16 rows on two 8-row tiles where kernels/src/gpu/shapes.rs
// frag_kernel says so): the `_fs` loop on 8 rows with each warp on two neighbouring 16-column
// tiles over its K range, so one load (and one convert) of the activations feeds both tiles' mmas
// and a block holds twice the weight loads in flight. Per tile the arithmetic of the m8 kernel at
// the same (W, S): the outputs are bit-identical to it. H200, M = 1 / 8: 6144 x 768 2.65 / 2.93
// against 2.74 / 3.07 us, 1536 x 6144 4.75 / 5.03 against 5.00 / 5.25 (BENCHMARKS.md). At 12-16
// rows it loses to `_fs` on the measured MiniMax shapes (6144 x 768, 6144 x 6144, 1536 x 6144)
// and wins on shapes such as 4096 x 4096 or 8192 x 2048 (follow-up 21): frag_kernel decides.
template <int W, int MT, int S, class Out>
MX_DEV void mx_matmul_frag_t2(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                              const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                              const Out& out, int M, int N, int K, int pre) {
  constexpr int NT = 2;
  const MxFragWarp<W, MT, S, NT> f(aq, as, wf, wsf, M, K);
  const int gb = f.gb, ge = f.ge;
  MxFragWeights wts0(f), wts1(f);
  // The second tile (past the last tile: the first's weights again; its outputs are not stored).
  if (MxFragBlock<MT, S, NT>().tile + 1 < (N + 15) / 16) {
    wts1.wp += (long long)(K >> 5) * 32;
    wts1.swp += (long long)(K >> 7) * 16;
  }
  const mx_u8* ap[MT];
  const mx_u32 *sp0[MT], *sp1[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    ap[mt] = f.ap[mt] + 128 * gb;
    sp0[mt] = f.sp0[mt] + gb;
    sp1[mt] = f.sp1[mt] + gb;
  }
  struct Batch {
    uint4 w[NT][4];
    mx_u32 sA[NT], sB[NT];
    uint2 a[MT][4];
    mx_u32 s0[MT], s1[MT];
  };
  auto load_w = [&](Batch& bt) {
    wts0.next(bt.w[0], bt.sA[0], bt.sB[0]);
    wts1.next(bt.w[1], bt.sA[1], bt.sB[1]);
  };
  auto load_a = [&](Batch& bt) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int j = 0; j < 4; ++j) bt.a[mt][j] = *reinterpret_cast<const uint2*>(ap[mt] + 32 * j);
      bt.s0[mt] = *sp0[mt];
      bt.s1[mt] = *sp1[mt];
      ap[mt] += 128;
      sp0[mt] += 1;
      sp1[mt] += 1;
    }
  };
  float acc[NT][MT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[nt][mt][c] = 0.0f;
  auto mma = [&](const Batch& bt) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      mx_frag_mma<MT, true>(acc[nt], bt.w[nt], bt.a, bt.sA[nt], bt.sB[nt], bt.s0, bt.s1);
  };
  Batch b0, b1;
  mx_frag_prologue<MT, S, NT>(pre, wf, wsf, K, gb, ge, [&] { load_w(b0); });
  if (gb < ge) load_a(b0);
  for (int i = gb; i < ge; i += 2) {
    if (i + 1 < ge) {
      load_w(b1);
      load_a(b1);
    }
    mma(b0);
    if (i + 1 == ge) break;
    if (i + 2 < ge) {
      load_w(b0);
      load_a(b0);
    }
    mma(b1);
  }
  mx_frag_reduce_to<MxBf16, W, MT, S, NT>(acc, out, MxRowsBelow{M});
}
#define MX_DEFINE_FRAG_T2_1(W, S, ATTR)                                                          \
  extern "C" __global__ void __launch_bounds__(32 * W, 1)                                        \
      ATTR MX_FRAG(m8_bf16_w##W##_s##S##_t2)(MX_FRAG_ARGS(MxBf16)) {                             \
    mx_matmul_frag_t2<W, 1, S>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre);              \
  }
#define MX_DEFINE_FRAG_T2(W)                                                                     \
  MX_DEFINE_FRAG_T2_1(W, 1, )                                                                    \
  MX_DEFINE_FRAG_T2_1(W, 2, __cluster_dims__(2, 1, 1))                                           \
  MX_DEFINE_FRAG_T2_1(W, 4, __cluster_dims__(4, 1, 1))                                           \
  MX_DEFINE_FRAG_T2_1(W, 8, __cluster_dims__(8, 1, 1))
MX_DEFINE_FRAG_T2(2)
MX_DEFINE_FRAG_T2(4)
MX_DEFINE_FRAG_T2(8)

// mx_matmul_frag_m8_bf16_w4_s1_t2h (issue 6 follow-up 36; the runtime's kernel at M <= 8 with bf16
// output where `_t2`'s tile pairs number between one and one and a half a multiprocessor:
// kernels/src/gpu/shapes.rs frag_kernel): `_t2` on a mixed grid of Y blocks, the first
// np = tiles - Y of them `_t2`'s pair blocks (tiles 2y, 2y + 1: the same code, the same bits),
// the other ns = 2Y - tiles one tile each (tile np + y). Why: at 6144^2 `_t2`'s 192 pair blocks put
// two pairs (4 tiles) on 60 of the 132 SMs and one on the rest, and the doubly loaded SMs set the
// time (74 % of HBM; follow-up 34), while the mean is 2.9 tiles an SM. With np = SMs the pairs take
// the first wave, one an SM, and the singles the second, so no SM holds more than 3 tiles; no tile
// is split between blocks (stream-K, follow-up 35, needed a cross-block fix-up that cost ~2 us).
// A one-tile block keeps a pair block's bytes in flight a warp (mx_matmul_frag_t1h). The host
// sizes the grid (Y = pairs gives `_t2`'s pairs, with an odd last tile as a single).
// One tile, two K ranges a warp: the W warps split the tile's K / 128 groups into 2W contiguous
// ranges and warp w runs ranges w and W + w at once in the two register sets `_t2` gives its two
// tiles (two activation loads an item where `_t2` has one). Its sums: the 2W ranges in order, as
// the m8 kernel's 2W warps add theirs, so a one-tile block gives the m8 kernel's bits at W = 8
// (and a pair block `_t2`'s, the m8 kernel's at W = 4).
// mx_frag_reduce_to stores a one-tile block's outputs from tile blockIdx.y; its tile is np + that.
template <class Out>
struct MxShiftOut {
  const Out& o;
  int dn;
  MX_DEV void put(int m, int n, float v) const { o.put(m, n + dn, v); }
};
template <int W, int MT, class Out>
MX_DEV void mx_matmul_frag_t1h(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                               const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                               const Out& out, int M, int N, int K, int pre, int np) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int KB = K >> 5, G = K >> 7, tile = np + blockIdx.y, m0 = 8 * MT * blockIdx.x;
  const int per = (G + 2 * W - 1) / (2 * W);
  int gs[2], cnt[2];  // register set s: groups gs[s] .. gs[s] + cnt[s] - 1 (cnt[1] <= cnt[0])
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    gs[s] = min(G, (s * W + warp) * per);
    cnt[s] = min(G, gs[s] + per) - gs[s];
  }
  const int n = cnt[0];
  const uint4* wp[2];
  const mx_u32* sw[2];
  const mx_u8* ap[2][MT];
  const mx_u32 *sp0[2][MT], *sp1[2][MT];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    wp[s] = wf + (long long)tile * KB * 32 + lane + 128 * gs[s];
    sw[s] = wsf + (long long)tile * G * 16 + 16 * gs[s] + g;
    // Rows past M read row M - 1: they only reach outputs past M, which are not stored.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      ap[s][mt] = aq + (long long)min(m0 + 8 * mt + g, M - 1) * K + 8 * t + 128 * gs[s];
      sp0[s][mt] = reinterpret_cast<const mx_u32*>(as + (long long)min(m0 + 8 * mt + 2 * t, M - 1) * KB) + gs[s];
      sp1[s][mt] = reinterpret_cast<const mx_u32*>(as + (long long)min(m0 + 8 * mt + 2 * t + 1, M - 1) * KB) + gs[s];
    }
  }
  struct Batch {
    uint4 w[2][4];
    mx_u32 sA[2], sB[2];
    uint2 a[2][MT][4];
    mx_u32 s0[2][MT], s1[2][MT];
  };
  int li = 0, mi = 0;  // the next item to load, to multiply
  // Set 1's last items are skipped where it has fewer (uniform over the warp).
  auto load_w = [&](Batch& bt) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      if (s == 1 && li >= cnt[1]) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) bt.w[s][j] = mx_ldg_once16(wp[s] + 32 * j);
      bt.sA[s] = sw[s][0];
      bt.sB[s] = sw[s][8];
      wp[s] += 128;
      sw[s] += 16;
    }
  };
  auto load_a = [&](Batch& bt) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      if (s == 1 && li >= cnt[1]) continue;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int j = 0; j < 4; ++j) bt.a[s][mt][j] = *reinterpret_cast<const uint2*>(ap[s][mt] + 32 * j);
        bt.s0[s][mt] = *sp0[s][mt];
        bt.s1[s][mt] = *sp1[s][mt];
        ap[s][mt] += 128;
        sp0[s][mt] += 1;
        sp1[s][mt] += 1;
      }
    }
    ++li;
  };
  float acc[2][MT][4];
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[s][mt][c] = 0.0f;
  auto mma = [&](const Batch& bt) {
    mx_frag_mma<MT, true>(acc[0], bt.w[0], bt.a[0], bt.sA[0], bt.sB[0], bt.s0[0], bt.s1[0]);
    if (mi < cnt[1]) mx_frag_mma<MT, true>(acc[1], bt.w[1], bt.a[1], bt.sA[1], bt.sB[1], bt.s0[1], bt.s1[1]);
    ++mi;
  };
  Batch b0, b1;
  mx_frag_prologue<MT, 1, 2>(pre, wf, wsf, K, 0, n, [&] { load_w(b0); });
  if (n > 0) load_a(b0);
  for (int i = 0; i < n; i += 2) {
    if (i + 1 < n) {
      load_w(b1);
      load_a(b1);
    }
    mma(b0);
    if (i + 1 == n) break;
    if (i + 2 < n) {
      load_w(b0);
      load_a(b0);
    }
    mma(b1);
  }
  mx_frag_reduce_to<MxBf16, W, MT, 1, 1, 2>(acc, MxShiftOut<Out>{out, 16 * np}, MxRowsBelow{M});
}
extern "C" __global__ void __launch_bounds__(128, 1) MX_FRAG(m8_bf16_w4_s1_t2h)(MX_FRAG_ARGS(MxBf16)) {
  const int np = (N + 15) / 16 - (int)gridDim.y;  // the pair blocks (the host keeps 2 Y >= tiles)
  if ((int)blockIdx.y < np) {
    mx_matmul_frag_t2<4, 1, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre);
  } else {
    mx_matmul_frag_t1h<4, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre, np);
  }
}

// mx_matmul_frag_m8_<out>_w<W>_s1_g1 (issue 6 follow-up 32; the runtime's kernel at M <= 8 where
// K / 128 <= 8 and the grid of tile pairs fits one wave: kernels/src/gpu/shapes.rs frag_kernel):
// one group of 4 k-blocks a warp, W = K / 128 warps a block, each on two neighbouring 16-column
// tiles (one activation load feeding both, as `_t2`). Why: at small K the other loops give a warp
// two or more groups one after the other (6144 x 768, `_t2` w4: warps 0-2 two groups each, warp 3
// none), so a block's critical path is two DRAM round trips and two mma chains; here every
// weight byte of the grid is requested before the PDL wait, no loop, no second buffer (97
// registers: 21 warps an SM). H200, M = 1 / 4 / 8: 6144 x 768 2.31 / 2.39 / 2.46 against `_t2`'s
// 2.67 / 2.87 / 3.11 us, 4096 x 1024 2.19 / - / 2.42 against 2.43 / 2.75, 4096 x 512 1.75 / 2.06
// against 2.21 / 2.22 (BENCHMARKS.md follow-up 32; on two row tiles at 9-16 rows it lost at 6144
// x 768, 4.12 against 3.28, and one group on 16 rows tied `_fs`). Per tile the arithmetic of the
// m8 kernel at W = K / 128, S = 1 (one group a warp, warp-order sums): the same bits.
// PC (`_g1c`): the weights converted to their f16 mma fragments before the PDL wait, once their
// loads land (the next kernel may launch before that), so after the wait a warp only loads and
// converts its activations, multiplies and adds; same arithmetic, same bits.
// AH (with PC): the activation rows' addresses and the weights' scale decode (MxWScale) ahead of
// the PDL wait as well; mx_pin keeps each where it was computed.
template <class TO, int W, int MT, int NT, bool PC = false, bool AH = false, class Out>
MX_DEV void mx_matmul_frag_g1(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                              const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                              const Out& out, int M, int N, int K, int pre) {
  static_assert(PC || !AH, "the weights' scales are decoded ahead only with their converts");
  const MxFragWarp<W, MT, 1, NT> f(aq, as, wf, wsf, M, K);
  const int gb = f.gb, ge = f.ge;  // ge - gb <= 1: launched only where K / 128 <= W
  // This lane's weights of group gb of each tile (MxFragWeights' addresses); a tile past the last
  // reads the first's weights again (its outputs are not stored).
  const MxFragWeights w0(f);
  const int tiles = (N + 15) / 16, tile = MxFragBlock<MT, 1, NT>().tile;
  const uint4* wp[NT];
  const mx_u32* swp[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const long long o = tile + nt < tiles ? nt : 0;
    wp[nt] = w0.wp + o * (K >> 5) * 32;
    swp[nt] = w0.swp + o * (K >> 7) * 16;
  }
  uint4 w[NT][4];
  MxWFrag wc[PC ? NT : 1];
  mx_u32 sA[NT], sB[NT];
  float acc[NT][MT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[nt][mt][c] = 0.0f;
  auto load_w = [&] {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int j = 0; j < 4; ++j) w[nt][j] = mx_ldg_once16(wp[nt] + 32 * j);
      sA[nt] = swp[nt][0];
      sB[nt] = swp[nt][8];
    }
  };
  // This warp's group of the activation rows, and the weights' scales (AH: before the wait).
  const mx_u8* ap[MT];
  const mx_u32 *sp0[MT], *sp1[MT];
  MxWScale ws[AH ? NT : 1];
  if (PC) {  // mx_frag_prologue's order with the converts between the trigger and the wait
    if (!(pre & 1)) MX_PDL_WAIT();
    if (gb < ge) load_w();
    MX_PDL_LAUNCH();
    if (gb < ge)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mx_frag_wfrag(w[nt], wc[PC ? nt : 0]);
    if (AH) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ap[mt] = f.ap[mt] + 128 * gb;
        sp0[mt] = f.sp0[mt] + gb;
        sp1[mt] = f.sp1[mt] + gb;
        mx_pin(ap[mt]);
        mx_pin(sp0[mt]);
        mx_pin(sp1[mt]);
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        ws[nt] = MxWScale(sA[nt], sB[nt]);
        mx_pin(ws[nt].bad);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          mx_pin(ws[nt].fA[u]);
          mx_pin(ws[nt].fB[u]);
        }
      }
    }
    if (pre & 1) MX_PDL_WAIT();
  } else {
    mx_frag_prologue<MT, 1, NT>(pre, wf, wsf, K, gb, ge, load_w);
  }
  if (gb < ge) {
    uint2 a[MT][4];
    mx_u32 s0[MT], s1[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        a[mt][j] = *reinterpret_cast<const uint2*>(AH ? ap[mt] + 32 * j : f.ap[mt] + 128 * gb + 32 * j);
      s0[mt] = AH ? *sp0[mt] : f.sp0[mt][gb];
      s1[mt] = AH ? *sp1[mt] : f.sp1[mt][gb];
    }
    if (PC) {
      uint4 bh[MT][4];
      mx_b_frag<MT, true>(a, bh);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const MxWFrag& c = wc[PC ? nt : 0];
        auto frag = [&](int u, mx_u32 a[8]) {
#pragma unroll
          for (int i = 0; i < 8; ++i) a[i] = c.h[u][i];
        };
        if (AH)
          mx_mma_group4_ws<MT>(acc[nt], frag, bh, ws[AH ? nt : 0], sA[nt], sB[nt], s0, s1);
        else
          mx_mma_group4_wf<MT>(acc[nt], frag, bh, sA[nt], sB[nt], s0, s1);
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mx_frag_mma<MT, true>(acc[nt], w[nt], a, sA[nt], sB[nt], s0, s1);
    }
  }
  mx_frag_reduce_to<TO, W, MT, 1, NT>(acc, out, MxRowsBelow{M});
}
#define MX_DEFINE_FRAG_G1_1(TO, OUT, W)                                                          \
  extern "C" __global__ void __launch_bounds__(32 * W)                                           \
      MX_FRAG(m8_##OUT##_w##W##_s1_g1)(MX_FRAG_ARGS(TO)) {                                       \
    mx_matmul_frag_g1<TO, W, 1, 2>(aq, as, wf, wsf, MX_FRAG_OUT(TO), M, N, K, pre);              \
  }
#define MX_DEFINE_FRAG_G1(TO, OUT)                                                               \
  MX_DEFINE_FRAG_G1_1(TO, OUT, 1)                                                                \
  MX_DEFINE_FRAG_G1_1(TO, OUT, 2)                                                                \
  MX_DEFINE_FRAG_G1_1(TO, OUT, 3)                                                                \
  MX_DEFINE_FRAG_G1_1(TO, OUT, 4)                                                                \
  MX_DEFINE_FRAG_G1_1(TO, OUT, 5)                                                                \
  MX_DEFINE_FRAG_G1_1(TO, OUT, 6)                                                                \
  MX_DEFINE_FRAG_G1_1(TO, OUT, 7)                                                                \
  MX_DEFINE_FRAG_G1_1(TO, OUT, 8)
MX_DEFINE_FRAG_G1(MxBf16, bf16)
MX_DEFINE_FRAG_G1(MxF16, f16)
MX_DEFINE_FRAG_G1(MxF32, f32)

// mx_matmul_frag_m16_<out>_w<W>_s1_g1c (issue 6 follow-up 38; the runtime's kernel at 9-16 rows
// where K / 128 <= 8 and the grid of tiles fills one wave: kernels/src/gpu/shapes.rs
// frag_kernel): `_g1` on 16 rows and one tile a warp, the weights converted before the PDL wait
// (PC above). Why: at 9-16 rows the converts of `_fs` / `_t2` sit on the critical path after the
// wait; here only the activations' do (91-96 registers: 21 warps an SM). H200, M = 9 / 12 / 16:
// 6144 x 768 3.07 / 3.12 / 3.22 against `_fs`'s 3.21 / 3.22 / 3.29 us, 4096 x 1024 M = 16 2.83
// against `_t2`'s 3.04, 6144 x 512 2.68 against 2.82 (BENCHMARKS.md follow-up 38; on two tiles a
// warp, 166 registers, it won at 12 rows and lost at 13-16). Per tile the arithmetic of the m16
// kernel at W = K / 128, S = 1: the same bits.
// Where `_g1c` moves more ahead of the wait than the converts (AH above): at W = 3, 6, 8 the rows'
// addresses and the weights' scale decode, which cut a warp's path from the wait to the block's
// barrier from 276 to 221 instructions at W = 6 (SASS); H200, M = 16: 6144 x 768 3.11-3.14 against
// 3.19-3.24 us, 8192 x 384 2.84 against 2.97, 4096 x 1024 1-2 % (BENCHMARKS.md follow-up 43). At
// W = 4 and 5 (6144 x 512, 3072 x 640) it lost in one call of two or both, and at W = 7 (1 %
// faster at 4096 x 896) it takes 97 registers, which leave room for 2 blocks an SM instead of the
// 3 that shapes::frag_kernel's one-wave bound counts on: nothing moved there.
#define MX_G1C_AHEAD(W) ((W) == 3 || (W) == 6 || (W) == 8)
#define MX_DEFINE_FRAG_G1C_1(TO, OUT, W)                                                         \
  extern "C" __global__ void __launch_bounds__(32 * W)                                           \
      MX_FRAG(m16_##OUT##_w##W##_s1_g1c)(MX_FRAG_ARGS(TO)) {                                     \
    mx_matmul_frag_g1<TO, W, 2, 1, true, MX_G1C_AHEAD(W)>(aq, as, wf, wsf, MX_FRAG_OUT(TO), M, N, K, \
                                                        pre);                                    \
  }
#define MX_DEFINE_FRAG_G1C(TO, OUT)                                                              \
  MX_DEFINE_FRAG_G1C_1(TO, OUT, 3)                                                               \
  MX_DEFINE_FRAG_G1C_1(TO, OUT, 4)                                                               \
  MX_DEFINE_FRAG_G1C_1(TO, OUT, 5)                                                               \
  MX_DEFINE_FRAG_G1C_1(TO, OUT, 6)                                                               \
  MX_DEFINE_FRAG_G1C_1(TO, OUT, 7)                                                               \
  MX_DEFINE_FRAG_G1C_1(TO, OUT, 8)
MX_DEFINE_FRAG_G1C(MxBf16, bf16)
MX_DEFINE_FRAG_G1C(MxF16, f16)
MX_DEFINE_FRAG_G1C(MxF32, f32)

// mx_matmul_frag_m16_bf16_w<W>_s<S>_fsa (issue 6 follow-up 13; the runtime's kernel from 13 rows
// with bf16 output where the grid leaves SMs idle: kernels/src/gpu/shapes.rs frag_kernel): `_fs`
// with the activations staged through shared memory. Why: at 12-16 rows the register loads of
// `_fs` take 8-byte pieces of 8 rows per instruction (8 L1 wavefronts each, ~80 a group of a warp against 18
// for its weights), and 1536 x 6144 gets 23 % slower from M = 12 to 16 where only rows 12-15 stop
// being a broadcast of row 11. Here each warp copies its group's 16 activation rows x 128 bytes
// with four 16-byte cp.async a lane (4 rows a request: 16 wavefronts a group) plus the rows' scale
// words into a two-stage buffer, k-block j of row r at slot j ^ (r & 3) (the fragment reads, 8
// bytes at row g, k-block j, byte 8 t, are then free of bank conflicts in each half-warp; padding
// the rows instead would not fit 8 warps in 48 KB), and the mma operands come from
// LDS; the weights stay in the register double buffer, and the activation registers of `_fs`
// (2 x 20) are freed. Same per-group arithmetic (mx_mma_group4): the bits of `_fs`.
struct MxFsaStage {
  static constexpr int ROW = 128;              // bytes between activation rows
  static constexpr int SC = 16 * ROW;          // the 16 rows' scale words
  static constexpr int BYTES = SC + 16 * 4;    // one stage of one warp
};
MX_DEV void mx_cp_async16_nc(mx_u32 smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(gmem));
}
MX_DEV void mx_cp_async4_nc(mx_u32 smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem), "l"(gmem));
}

template <int W, int S, class Out>
MX_DEV void mx_matmul_frag_m16_fsa(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                                   const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                                   const Out& out, int M, int K, int pre) {
  constexpr int MT = 2;
  typedef MxFsaStage L;
  __shared__ __align__(16) mx_u8 abuf[W][2][L::BYTES];
  const MxFragWarp<W, MT, S> f(aq, as, wf, wsf, M, K);
  const int g = f.g, gb = f.gb, ge = f.ge;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
  const int m0 = MxFragBlock<MT, S>().m0, KB = K >> 5;
  MxFragWeights wts(f);
  // This lane's copies: 16-byte chunk (lane & 7) of rows (lane >> 3) + 4 c, c = 0..3, and (lanes
  // 0-15) the scale word of row lane. Rows past M are not copied (below); the clamp only keeps
  // their never-used source pointers inside the activations.
  const mx_u8* ac[4];
#pragma unroll
  for (int c = 0; c < 4; ++c)
    ac[c] = aq + (long long)min(m0 + (lane >> 3) + 4 * c, M - 1) * K + 128 * gb + 16 * (lane & 7);
  const mx_u8* sc = as + (long long)min(m0 + (lane & 15), M - 1) * KB + 4 * gb;
  const mx_u32 st0 = (mx_u32)__cvta_generic_to_shared(&abuf[warp][0][0]);
  // chunk q of row r at q ^ 2 (r & 3) (k-block slot j ^ (r & 3)); r & 3 = lane >> 3 for all 4 c
  const mx_u32 cdst = (lane >> 3) * L::ROW + 16 * ((lane & 7) ^ (2 * (lane >> 3)));
  // Rows past M are never copied: both stages hold zeros and scale 2^0 there from the start (they
  // reach only outputs that are not stored). Copying row M - 1 into them instead had every warp
  // of the grid read the same lines (M = 1: 8.0 against 5.0 us at 1536 x 6144).
  const int rows = M - m0;
  const bool sc_ok = (lane & 15) < rows;
#pragma unroll
  for (int st = 0; st < 2; ++st) {
    mx_u8* sb = &abuf[warp][st][0];
#pragma unroll
    for (int c = 0; c < 4; ++c)
      if ((lane >> 3) + 4 * c >= rows)
        *reinterpret_cast<uint4*>(sb + cdst + 4 * c * L::ROW) = make_uint4(0u, 0u, 0u, 0u);
    if (lane < 16 && !sc_ok) *reinterpret_cast<mx_u32*>(sb + L::SC + 4 * lane) = 0x7f7f7f7fu;
  }
  auto stage_a = [&](int st) {
    const mx_u32 base = st0 + st * L::BYTES;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if ((lane >> 3) + 4 * c < rows) mx_cp_async16_nc(base + cdst + 4 * c * L::ROW, ac[c]);
      ac[c] += 128;
    }
    if (lane < 16 && sc_ok) mx_cp_async4_nc(base + L::SC + 4 * lane, sc);
    sc += 4;
  };
  struct Wt {
    uint4 w[4];
    mx_u32 sA, sB;
  };
  auto load_w = [&](Wt& bt) { wts.next(bt.w, bt.sA, bt.sB); };
  float acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[mt][c] = 0.0f;
  auto mma = [&](const Wt& bt, int st) {
    const mx_u8* sb = &abuf[warp][st][0];
    uint2 a[MT][4];
    mx_u32 s0[MT], s1[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        a[mt][j] = *reinterpret_cast<const uint2*>(sb + (8 * mt + g) * L::ROW + 32 * (j ^ (g & 3)) + 8 * t);
      s0[mt] = *reinterpret_cast<const mx_u32*>(sb + L::SC + 4 * (8 * mt + 2 * t));
      s1[mt] = *reinterpret_cast<const mx_u32*>(sb + L::SC + 4 * (8 * mt + 2 * t + 1));
    }
    mx_frag_mma<MT, true>(acc, bt.w, a, bt.sA, bt.sB, s0, s1);
  };
  Wt b0, b1;
  mx_frag_prologue<MT, S>(pre, wf, wsf, K, gb, ge, [&] { load_w(b0); });
  if (gb < ge) stage_a(0);
  mx_cp_async_commit();
  // Stage 0 holds group i's activations, stage 1 group i + 1's; one commit group per stage fill
  // (empty ones included), so wait_group 1 leaves only the newest in flight. __syncwarp: the
  // copies of every lane visible to all (after the wait), and a stage's reads done before it is
  // refilled.
  for (int i = gb; i < ge; i += 2) {
    __syncwarp();
    if (i + 1 < ge) {
      load_w(b1);
      stage_a(1);
    }
    mx_cp_async_commit();
    mx_cp_async_wait<1>();
    __syncwarp();
    mma(b0, 0);
    if (i + 1 == ge) break;
    __syncwarp();
    if (i + 2 < ge) {
      load_w(b0);
      stage_a(0);
    }
    mx_cp_async_commit();
    mx_cp_async_wait<1>();
    __syncwarp();
    mma(b1, 1);
  }
  mx_cp_async_wait<0>();
  mx_frag_reduce_to<MxBf16, W, MT, S>(&acc, out, MxRowsBelow{M});
}
#define MX_DEFINE_FRAG_FSA1(W, S, ATTR)                                                          \
  extern "C" __global__ void __launch_bounds__(32 * W, (W < 8 ? 12 / W : 1))                    \
      ATTR MX_FRAG(m16_bf16_w##W##_s##S##_fsa)(MX_FRAG_ARGS(MxBf16)) {                           \
    mx_matmul_frag_m16_fsa<W, S>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, K, pre);               \
  }
#define MX_DEFINE_FRAG_FSA(W)                                                                    \
  MX_DEFINE_FRAG_FSA1(W, 1, )                                                                    \
  MX_DEFINE_FRAG_FSA1(W, 2, __cluster_dims__(2, 1, 1))                                           \
  MX_DEFINE_FRAG_FSA1(W, 4, __cluster_dims__(4, 1, 1))                                           \
  MX_DEFINE_FRAG_FSA1(W, 8, __cluster_dims__(8, 1, 1))
MX_DEFINE_FRAG_FSA(2)
MX_DEFINE_FRAG_FSA(4)
MX_DEFINE_FRAG_FSA(8)
#endif  // MX_NV_FP8_MMA && MX_NV_CLUSTER
