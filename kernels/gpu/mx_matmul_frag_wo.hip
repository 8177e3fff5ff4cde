// com.mxfuse MxMatMul with a float activation (weight-only MX) on tensor cores (NVIDIA sm_90):
// a f16 or bf16 [M, K] times constant E4M3 weights packed by kernels::gpu::pack_frag_weights, the
// fragment GEMM's layout (mx_matmul_frag.hip: each lane's 16 bytes of a k-block are its two k16
// mma fragments of weight rows g and g + 8).
//
// Why: the CUDA-core kernel of mx_gather.hip (one warp per column) matches cuBLAS bf16 at M = 1
// but pays 16 FMAs per weight byte and row, so from M = 4 cuBLAS was faster (BENCHMARKS.md
// session 21). Here the activation needs no conversion at all: lane t's 8 elements 8t .. 8t + 7 of
// a k-block of row g — one 16-byte load of a 16-bit activation — are exactly the f16 / bf16 B
// fragments the fragment GEMM feeds its two m16n8k16 mmas (k-slots 2t, 2t + 1, 2t + 8, 2t + 9,
// the same permutation as the weights), and the weights' E4M3 -> f16 / bf16 converts are exact,
// so every product is exact in the fp32 accumulator; each k-block's mma result is scaled by its
// weight scale (no activation scale) and added in f32, as the fragment GEMM does. An f32
// activation is split into three bf16 parts (MxWoAct<MxF32>): exact products again, three times
// the mmas.
//
// W warps of a block split K of one 16-column tile of M-row tiles of 16 (grid x = ceil(M / 16),
// y = ceil(N / 16)); each warp double-buffers its groups of 4 k-blocks in registers (the next
// group's loads issued before the current group's mmas); partial sums added in warp order
// (mx_frag_reduce_store, S = 1), the MxMatMul epilogue where it stores.

#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)

// D (16x8 fp32) = A (16x16 bf16, row) * B (16x8 bf16, col) + C.
MX_DEV void mx_mma_bf16(float d[4], mx_u32 a0, mx_u32 a1, mx_u32 a2, mx_u32 a3, mx_u32 b0,
                        mx_u32 b1, const float c[4]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}

// Two E4M3 (low byte -> low half) as the 16-bit type of the activation, exact: f16 directly;
// bf16 through f32 (every E4M3 value is a bf16 value).
template <bool BF>
MX_DEV mx_u32 mx_e4m3x2_to_16x2(mx_u32 v16) {
  const mx_u32 h = mx_e4m3x2_to_f16x2(v16);
  if (!BF) return h;
  const float lo = MxF16::to_f32((mx_u16)(h & 0xffffu)), hi = MxF16::to_f32((mx_u16)(h >> 16));
  mx_u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Whether the activation type is bf16 (its mma and weight converts), else f16.
template <class T>
struct MxIsBf16 {
  static constexpr bool value = false;
};
template <>
struct MxIsBf16<MxBf16> {
  static constexpr bool value = true;
};

// One block's loop: the W warps split the K / 128 groups of weight tile `tile` (16 columns) and
// multiply them by 16 activation rows; ar[mt] = this lane's activation row 8 mt + g (k = 0);
// rows = how many of the 16 reach an output: at most 8 (a decode step's M = 1, most groups of
// the grouped kernel), the second row tile is neither loaded nor multiplied (for an f32
// activation that halves the split work).
// Each warp double-buffers its groups (the next group's loads issued before the current group's
// mmas) and leaves its partial sums in acc.
// The activation side of the loop: a lane's 8 elements 8t .. 8t + 7 of a k-block of one row
// (`raw`) and the B fragments of the k-block's two k16 mmas made of them (`parts`, summed into
// one fp32 result in this order). f16 / bf16: the 16 bytes as they are, one part.
template <class TA>
struct MxWoAct {
  static constexpr int PARTS = 1;
  static constexpr bool BF = MxIsBf16<TA>::value;
  typedef uint4 raw;
  static MX_DEV void load(raw& r, const typename TA::storage* p) {
    r = *reinterpret_cast<const uint4*>(p);
  }
  static MX_DEV void parts(const raw& r, uint4 q[1]) { q[0] = r; }
};

// f32: each element split into three bf16, x = hi + mid + lo exactly for a finite x (hi its top 8
// significant bits, mid the next 8, lo the last 8; hi and mid by truncation, so each remainder is
// exact), summed lo, mid, hi. Each E4M3 x bf16 product is exact in the fp32 accumulator, so the
// result differs from an f32 dot product in summation order only (an f32 x whose low parts lie
// below bf16's normal range, |x| < 2^-110, loses them: far below the order's own error). A
// non-finite x is its hi part alone, so Inf stays Inf and NaN NaN. Three times the mmas and ~7
// operations an element: the price of an f32 activation on tensor cores, against the CUDA-core
// GEMV's 16 FMAs a weight byte and row.
template <>
struct MxWoAct<MxF32> {
  static constexpr int PARTS = 3;
  static constexpr bool BF = true;
  struct raw {
    uint4 a, b;  // elements 8t .. 8t + 3, 8t + 4 .. 8t + 7 as f32 bits
  };
  static MX_DEV void load(raw& r, const float* p) {
    r.a = reinterpret_cast<const uint4*>(p)[0];
    r.b = reinterpret_cast<const uint4*>(p)[1];
  }
  // Bits of the three parts of one element (bf16 in the upper half of each word).
  static MX_DEV void split(mx_u32 x, mx_u32& hi, mx_u32& mid, mx_u32& lo) {
    hi = x & 0xffff0000u;
    const float xf = mx_bits_f32(x);
    const float r1 = (x & 0x7f800000u) != 0x7f800000u ? xf - mx_bits_f32(hi) : 0.0f;
    mid = mx_f32_bits(r1) & 0xffff0000u;
    lo = mx_f32_bits(r1 - mx_bits_f32(mid));
  }
  static MX_DEV void parts(const raw& r, uint4 q[3]) {
    const mx_u32 e[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
    mx_u32 h[8], m[8], l[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) split(e[i], h[i], m[i], l[i]);
    // bf16 pair (element 2i in the low half): the upper halves of two words.
    auto pk = [](const mx_u32* v, int i) { return __byte_perm(v[2 * i], v[2 * i + 1], 0x7632); };
    q[0] = make_uint4(pk(l, 0), pk(l, 1), pk(l, 2), pk(l, 3));
    q[1] = make_uint4(pk(m, 0), pk(m, 1), pk(m, 2), pk(m, 3));
    q[2] = make_uint4(pk(h, 0), pk(h, 1), pk(h, 2), pk(h, 3));
  }
};

// One group of 4 k-blocks: w[j] = this lane's 16 weight bytes of k-block j (rows g: .x .y, g + 8:
// .z .w), b[mt][j] = its 8 activation elements of row 8 mt + g, k-block j (MxWoAct), swA / swB =
// the weight rows' 4 E8M0 scale bytes; !two: only row tile 0 (the block's rows 8-15 are past
// its outputs).
template <int MT, class TA>
MX_DEV void mx_wo_group4(float acc[MT][4], const uint4 w[4],
                         const typename MxWoAct<TA>::raw b[MT][4], mx_u32 swA, mx_u32 swB,
                         bool two) {
  typedef MxWoAct<TA> Act;
  constexpr bool BF = Act::BF;
  float fA[4], fB[4];
  mx_e8m0x4_fast(swA, fA);
  mx_e8m0x4_fast(swB, fB);
  if (mx_has_byte_00_or_ff(swA) | mx_has_byte_00_or_ff(swB)) {  // 2^-127 or NaN: exact decode
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      fA[u] = mx_e8m0_to_f32((swA >> (8 * u)) & 0xffu);
      fB[u] = mx_e8m0_to_f32((swB >> (8 * u)) & 0xffu);
    }
  }
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const mx_u32 a00 = mx_e4m3x2_to_16x2<BF>(w[u].x), a02 = mx_e4m3x2_to_16x2<BF>(w[u].x >> 16);
    const mx_u32 a01 = mx_e4m3x2_to_16x2<BF>(w[u].z), a03 = mx_e4m3x2_to_16x2<BF>(w[u].z >> 16);
    const mx_u32 a10 = mx_e4m3x2_to_16x2<BF>(w[u].y), a12 = mx_e4m3x2_to_16x2<BF>(w[u].y >> 16);
    const mx_u32 a11 = mx_e4m3x2_to_16x2<BF>(w[u].w), a13 = mx_e4m3x2_to_16x2<BF>(w[u].w >> 16);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if (mt > 0 && !two) break;  // rows 8-15 hold nothing to store
      uint4 q[Act::PARTS];
      Act::parts(b[mt][u], q);
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int p = 0; p < Act::PARTS; ++p) {
        if (BF) {
          mx_mma_bf16(d, a00, a01, a02, a03, q[p].x, q[p].y, d);
          mx_mma_bf16(d, a10, a11, a12, a13, q[p].z, q[p].w, d);
        } else {
          mx_mma_f16(d, a00, a01, a02, a03, q[p].x, q[p].y, d);
          mx_mma_f16(d, a10, a11, a12, a13, q[p].z, q[p].w, d);
        }
      }
      acc[mt][0] += d[0] * fA[u];
      acc[mt][1] += d[1] * fA[u];
      acc[mt][2] += d[2] * fB[u];
      acc[mt][3] += d[3] * fB[u];
    }
  }
}

template <class TA, int W>
MX_DEV void mx_frag_wo_loop(const typename TA::storage* const ar[2], const uint4* __restrict__ wf,
                            const mx_u32* __restrict__ wsf, int tile, int K, int rows,
                            float acc[2][4]) {
  constexpr int MT = 2;
  typedef MxWoAct<TA> Act;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int G = K >> 7, per = (G + W - 1) / W;
  const int gb = min(G, warp * per), ge = min(G, gb + per);
  const bool two = rows > 8;
  const uint4* wp = wf + (long long)tile * (K >> 5) * 32 + lane + 128LL * gb;
  const mx_u32* swp = wsf + (long long)tile * G * 16 + 16LL * gb + g;
  const typename TA::storage* ap[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) ap[mt] = ar[mt] + 128LL * gb + 8 * t;
  struct Batch {
    uint4 w[4];
    mx_u32 sA, sB;
    typename Act::raw b[MT][4];
  };
  auto load = [&](Batch& bt) {
#pragma unroll
    for (int j = 0; j < 4; ++j) bt.w[j] = wp[32 * j];
    bt.sA = swp[0];
    bt.sB = swp[8];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      if (mt == 0 || two)
#pragma unroll
        for (int j = 0; j < 4; ++j) Act::load(bt.b[mt][j], ap[mt] + 32 * j);
    wp += 128;
    swp += 16;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) ap[mt] += 128;
  };
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[mt][c] = 0.0f;
  Batch b0, b1;
  if (gb < ge) load(b0);
  for (int i = gb; i < ge; i += 2) {
    if (i + 1 < ge) load(b1);
    mx_wo_group4<MT, TA>(acc, b0.w, b0.b, b0.sA, b0.sB, two);
    if (i + 1 == ge) break;
    if (i + 2 < ge) load(b0);
    mx_wo_group4<MT, TA>(acc, b1.w, b1.b, b1.sA, b1.sB, two);
  }
}

template <class TA, class TO, int W>
MX_DEV void mx_matmul_frag_wo(const typename TA::storage* __restrict__ a,
                              const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                              typename TO::storage* __restrict__ y, int M, int N, int K,
                              const MxEpi& ep) {
  const int g = (threadIdx.x & 31) >> 2, m0 = 16 * blockIdx.x;
  // Rows past M read row M - 1: they reach only outputs past M, which are not stored.
  const typename TA::storage* ar[2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) ar[mt] = a + (long long)min(m0 + 8 * mt + g, M - 1) * K;
  MX_PDL_ENTRY();
  float acc[2][4];
  mx_frag_wo_loop<TA, W>(ar, wf, wsf, blockIdx.y, K, M - m0, acc);
  mx_frag_reduce_store<TO, W, 2, 1>(&acc, y, M, N, ep);
}

// Expert e's packed weights among stacked experts packed one after another: its fragments start
// at e * ceil(N / 16) * (K / 32) * 32 uint4, its scale words at e * ceil(N / 16) * (K / 128) * 16.
struct MxFragExpert {
  const uint4* wf;
  const mx_u32* wsf;
  MX_DEV MxFragExpert(const uint4* wf0, const mx_u32* wsf0, long long e, int N, int K) {
    const long long tiles = (N + 15) / 16;
    wf = wf0 + e * tiles * (K >> 5) * 32;
    wsf = wsf0 + e * tiles * (K >> 7) * 16;
  }
};

// MxGatherMatMul on the same loop (stacked experts, MxFragExpert): sample s = blockIdx.z multiplies its P rows (a [S or 1, P, K])
// by the expert idx[s] (or idx[0]) selects, into y [S, P, N]. An index out of range writes NaN to
// the block's outputs and is recorded in err (mx_gather.hip's contract).
template <class TA, class TO, int W>
MX_DEV void mx_gather_matmul_frag(const typename TA::storage* __restrict__ a,
                                  const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                                  const void* __restrict__ idx, int idx64,
                                  typename TO::storage* __restrict__ y, int P, int N, int K, int E,
                                  int a_one, int idx_one, mx_u64* err) {
  // The indices may come from the previous kernel: wait before reading them.
  MX_PDL_WAIT();
  const int s = blockIdx.z;
  const long long e = mx_gather_index(idx, idx64, idx_one ? 0 : s, E, err);
  typename TO::storage* ys = y + (long long)s * P * N;
  if (e < 0) {
    const int n0 = 16 * blockIdx.y, m0 = 16 * blockIdx.x;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
      const int m = m0 + i / 16, n = n0 + i % 16;
      if (m < P && n < N) ys[(long long)m * N + n] = TO::from_f32(mx_bits_f32(0x7fc00000u));
    }
    MX_PDL_LAUNCH();
    return;
  }
  const MxFragExpert ex(wf, wsf, e, N, K);
  const MxEpi none = {nullptr, 0, 0, 1.0f, 1.0f};
  mx_matmul_frag_wo<TA, TO, W>(a + (a_one ? 0 : (long long)s * P * K), ex.wf, ex.wsf, ys, P, N, K,
                               none);
}

// MxGatherMatMul with the samples grouped by expert (one row a sample: a [S or 1, K], y [S, N]):
// block (slot z, tile) multiplies its 16-column tile of one expert by up to 16 of the samples
// that select it, so each selected expert's weights are read once per 16 of its samples instead
// of once per sample (a MoE decode step of T tokens with top-k routing has up to T samples an
// expert; BENCHMARKS.md session 22). Every block derives the same grouping from the indices on
// its own (no workspace, no second launch): the samples' experts into shared memory (checked as
// mx_gather_index does; an out-of-range sample joins no group), counts per expert, then slot z
// is chunk c of expert e where z falls in e's run of ceil(count / 16) slots in expert order, and
// its samples are those of ranks 16 c .. 16 c + 15 among e's in sample order (a stable
// compaction by ballots, so all tiles agree). A sample's outputs depend only on its own
// activation row and expert, never on its group or its position in the mma's B operand: the bits
// equal mx_gather_matmul_frag's. Blocks past the last group exit; the blocks of slot 0 also write
// NaN rows for the out-of-range samples. NT > 1 (`_t<NT>`): a block takes NT neighbouring tiles
// one after another, its warps' weight ranges of all NT asked of L2 up front (cp.async.bulk
// prefetch), so the grouping prologue is paid once per NT tiles: for short K (the down
// projection's 768), where a tile's stream is shorter than the prologue. Grid: x = slots (an
// upper bound of the groups, host), y = ceil(N / (16 NT)); S <= MX_GROUP_MAX_S,
// E <= MX_GROUP_MAX_E.
#define MX_GROUP_MAX_S 2048
#define MX_GROUP_MAX_E 1024
template <class TA, class TO, int W, int NT>
MX_DEV void mx_gather_matmul_frag_grouped(const typename TA::storage* __restrict__ a,
                                          const uint4* __restrict__ wf,
                                          const mx_u32* __restrict__ wsf, const void* __restrict__ idx,
                                          int idx64, typename TO::storage* __restrict__ y, int S,
                                          int N, int K, int E, int a_one, mx_u64* err) {
  __shared__ int sid[MX_GROUP_MAX_S];  // each sample's expert, -1 when out of range
  __shared__ int cnt[MX_GROUP_MAX_E];  // samples per expert
  __shared__ int rows[16];             // this group's samples, -1 past its count
  __shared__ int grp[3];               // this block's expert (-1: no group), chunk, samples
  __shared__ int bad;                  // any sample out of range
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n0 = 16 * NT * blockIdx.y, z = blockIdx.x;
  for (int e = tid; e < E; e += 32 * W) cnt[e] = 0;
  if (tid < 16) rows[tid] = -1;
  if (tid == 0) grp[0] = -1, bad = 0;
  __syncthreads();
  // The indices may come from the previous kernel: wait before reading them.
  MX_PDL_WAIT();
  for (int s = tid; s < S; s += 32 * W) {
    const int e = (int)mx_gather_index(idx, idx64, s, E, err);
    sid[s] = e;
    if (e >= 0) {
      atomicAdd(&cnt[e], 1);
    } else {
      bad = 1;
    }
  }
  __syncthreads();
  MX_PDL_LAUNCH();
  if (warp == 0) {
    // Slot z in expert order: an inclusive warp scan of ceil(count / 16) over 32 experts a step.
    int base = 0;
    for (int e0 = 0; e0 < E && base <= z; e0 += 32) {
      const int e = e0 + lane;
      const int c = e < E ? (cnt[e] + 15) >> 4 : 0;
      int inc = c;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, inc, d);
        if (lane >= d) inc += v;
      }
      const int first = base + inc - c;
      if (c > 0 && z >= first && z < first + c) grp[0] = e, grp[1] = z - first;
      base += __shfl_sync(0xffffffffu, inc, 31);
    }
    __syncwarp();
    const int ge = grp[0];
    if (ge >= 0) {
      // Ranks 16 c .. 16 c + 15 of expert ge's samples in sample order.
      const int lo = 16 * grp[1];
      int rank = 0;
      for (int s0 = 0; s0 < S && rank < lo + 16; s0 += 32) {
        const int s = s0 + lane;
        const bool hit = s < S && sid[s] == ge;
        const unsigned m = __ballot_sync(0xffffffffu, hit);
        const int r = rank + __popc(m & ((1u << lane) - 1u));
        if (hit && r >= lo && r < lo + 16) rows[r - lo] = s;
        rank += __popc(m);
      }
      if (lane == 0) grp[2] = min(16, rank - lo);
    }
  }
  __syncthreads();
  if (z == 0 && bad) {
    const typename TO::storage nan = TO::from_f32(mx_bits_f32(0x7fc00000u));
    for (int i = tid; i < 16 * NT * S; i += 32 * W) {
      const int s = i / (16 * NT), n = n0 + i % (16 * NT);
      if (sid[s] < 0 && n < N) y[(long long)s * N + n] = nan;
    }
  }
  const int e = grp[0];
  if (e < 0) return;
  const int g = lane >> 2;
  const typename TA::storage* ar[2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    // Rows past the group's count read its first sample: their outputs are not stored.
    const int r = rows[8 * mt + g];
    ar[mt] = a + (a_one ? 0 : (long long)(r >= 0 ? r : rows[0]) * K);
  }
  const int tiles = (N + 15) / 16;
  const MxFragExpert ex(wf, wsf, e, N, K);
  if (NT > 1) {
    const int G = K >> 7, per = (G + W - 1) / W;
    const int gb = min(G, warp * per), ge = min(G, gb + per);
    for (int nt = 1; nt < NT && NT * blockIdx.y + nt < tiles; ++nt)
      mx_frag_prefetch_l2(ex.wf, ex.wsf, NT * blockIdx.y + nt, K, gb, ge);
  }
  float acc[NT][2][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (NT * (int)blockIdx.y + nt < tiles) {
      mx_frag_wo_loop<TA, W>(ar, ex.wf, ex.wsf, NT * blockIdx.y + nt, K, grp[2], acc[nt]);
    } else {  // past the last tile: outputs past N, not stored
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[nt][mt][c] = 0.0f;
    }
  }
  // m0 of the block's rows is 16 z (MxFragBlock): row m is the group's sample m - 16 z.
  struct Rows {
    const int* rows;
    int m0;
    MX_DEV int operator()(int m) const { return rows[m - m0]; }
  };
  const MxEpi none = {nullptr, 0, 0, 1.0f, 1.0f};
  mx_frag_reduce_store<TO, W, 2, 1, NT>(acc, y, N, none, Rows{rows, 16 * z});
}

// Kernel names: mx_matmul_frag_wo_<f16|bf16>_<out>_w<W> and mx_matmul_frag_wo_gather_<a>_<out>_w<W>.
// mx_matmul_frag_wo_ggroup_<a>_<out>_w<W>[_t4]: the grouped kernel.
#define MX_DEFINE_FRAG_WO_GROUP(TA, NA, TO, NO, W, NT, SFX)                                     \
  extern "C" __global__ void __launch_bounds__(32 * W)                                          \
      mx_matmul_frag_wo_ggroup_##NA##_##NO##_w##W##SFX(                                         \
          const TA::storage* a, const uint4* wf, const mx_u32* wsf, const void* idx, int idx64,  \
          TO::storage* y, int S, int N, int K, int E, int a_one, mx_u64* err) {                  \
    mx_gather_matmul_frag_grouped<TA, TO, W, NT>(a, wf, wsf, idx, idx64, y, S, N, K, E, a_one,  \
                                                 err);                                          \
  }
#define MX_DEFINE_FRAG_WO1(TA, NA, TO, NO, W)                                                   \
  extern "C" __global__ void __launch_bounds__(32 * W) mx_matmul_frag_wo_##NA##_##NO##_w##W(     \
      const TA::storage* a, const uint4* wf, const mx_u32* wsf, TO::storage* y, int M, int N,    \
      int K, MxEpi ep) {                                                                        \
    mx_matmul_frag_wo<TA, TO, W>(a, wf, wsf, y, M, N, K, ep);                                   \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(32 * W) mx_matmul_frag_wo_gather_##NA##_##NO##_w##W( \
      const TA::storage* a, const uint4* wf, const mx_u32* wsf, const void* idx, int idx64,      \
      TO::storage* y, int P, int N, int K, int E, int a_one, int idx_one, mx_u64* err) {         \
    mx_gather_matmul_frag<TA, TO, W>(a, wf, wsf, idx, idx64, y, P, N, K, E, a_one, idx_one, err); \
  }                                                                                             \
  MX_DEFINE_FRAG_WO_GROUP(TA, NA, TO, NO, W, 1, )                                                \
  MX_DEFINE_FRAG_WO_GROUP(TA, NA, TO, NO, W, 4, _t4)
#define MX_DEFINE_FRAG_WO(TA, NA, TO, NO) \
  MX_DEFINE_FRAG_WO1(TA, NA, TO, NO, 4)   \
  MX_DEFINE_FRAG_WO1(TA, NA, TO, NO, 8)
MX_DEFINE_FRAG_WO(MxF16, f16, MxF16, f16)
MX_DEFINE_FRAG_WO(MxF16, f16, MxF32, f32)
MX_DEFINE_FRAG_WO(MxBf16, bf16, MxBf16, bf16)
MX_DEFINE_FRAG_WO(MxBf16, bf16, MxF32, f32)
MX_DEFINE_FRAG_WO(MxF32, f32, MxF32, f32)
#endif  // MX_NV_FP8_MMA && MX_NV_CLUSTER
