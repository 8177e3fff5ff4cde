// com.mxfuse MxMatMul, decode GEMM v2 (NVIDIA sm_90): e4m3 weights b [N, K] + b_scale [N, K/32],
// M <= 16 rows per block row, split over K across the blocks of a thread-block cluster.
//
// Why a second tensor-core kernel (mx_matmul.hip keeps the first as the fallback): the first reads
// 8-byte weight fragments (one load instruction touches 8 rows), runs one block per 16 output
// columns (96 blocks for N = 1536 leave a quarter of the H200's 132 SMs idle) and lets most warps
// of a K = 768 block idle. Here:
// * every weight load is 16 bytes: lane (g, t) reads bytes 16t .. 16t+15 of a 64-byte pair of
//   k-blocks of rows g and g + 8, so lanes t = 0, 1 hold halves of k-block 0 and t = 2, 3 of
//   k-block 1. One m16n8k32 mma must cover exactly one scale block, with 8 bytes of it in every
//   lane, so lanes t and t ^ 2 swap 8 bytes (two shuffles a row): afterwards lane t holds bytes
//   o_t .. o_t + 7 of both k-blocks, o_t = 16 (t & 1) + 8 (t >> 1), and each k-block is one mma,
//   as in the first kernel. Within a k-block the k order is permuted identically for weights and
//   activations (read at the same offsets), which leaves every dot product unchanged.
//   (sm_90 has no fp8 mma.sync: ptxas runs each m16n8k32 e4m3 mma as 2 f16 HMMA.16816 after
//   F2FP unpacks, so instructions per weight byte matter as much as the loads.)
// * the K range of a 16-column tile is split over S blocks of one cluster (S = 1, 2, 4: a
//   template constant, fixed at compile time by __cluster_dims__, so a plain cuLaunchKernel
//   launches it); block rank 0 adds the others' partial sums read from their shared memory
//   (DSMEM) in rank order, so the result is deterministic and no workspace or second launch is
//   needed. The host picks S so that tiles x S fills the SMs.
// * warps of a block take groups of 4 k-blocks (128 bytes of each row) round robin and load the
//   next group's weights before the mmas of the current one (two groups in flight per warp).

#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)

// 16 weight bytes that are read exactly once: not kept in L1.
MX_DEV uint4 mx_ld_stream16(const mx_u8* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// One group of weights: 4 k-blocks (2 pairs) of rows g (wa) and g + 8 (wb), and their scale bytes.
struct MxSplitkStep {
  uint4 wa[2], wb[2];
  mx_u32 swa, swb;
};

MX_DEV void mx_splitk_load_weights(MxSplitkStep& st, const mx_u8* wA, const mx_u8* wB,
                                   const mx_u8* sA, const mx_u8* sB, int grp, int KB, bool okA,
                                   bool okB, bool words, int t) {
  st.swa = mx_load_scales4(sA, 4 * grp, KB, okA, words);
  st.swb = mx_load_scales4(sB, 4 * grp, KB, okB, words);
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const bool ok = 4 * grp + 2 * p + (t >> 1) < KB;  // this lane's k-block exists
    const long long off = 128LL * grp + 64 * p + 16 * t;
    st.wa[p] = (ok && okA) ? mx_ld_stream16(wA + off) : make_uint4(0u, 0u, 0u, 0u);
    st.wb[p] = (ok && okB) ? mx_ld_stream16(wB + off) : make_uint4(0u, 0u, 0u, 0u);
  }
}

// Byte offset, within each k-block, of the 8 bytes lane t feeds to the mma (after the exchange).
MX_DEV int mx_splitk_offset(int t) { return 16 * (t & 1) + 8 * (t >> 1); }

// The lane's 16-byte chunk c of a k-block pair -> its 8 bytes of k-block 0 (k0) and of k-block 1
// (k1) at offset mx_splitk_offset(t): lanes t < 2 keep their low half and receive the partner's
// low half (of k-block 1); lanes t >= 2 keep their high half and receive the partner's high half
// (of k-block 0). Every lane of the warp must call it.
MX_DEV void mx_splitk_exchange(uint4 c, int t, uint2& k0, uint2& k1) {
  const bool first = t < 2;
  const mx_u32 r0 = MX_SHFL_XOR(first ? c.z : c.x, 2);
  const mx_u32 r1 = MX_SHFL_XOR(first ? c.w : c.y, 2);
  k0 = first ? make_uint2(c.x, c.y) : make_uint2(r0, r1);
  k1 = first ? make_uint2(r0, r1) : make_uint2(c.z, c.w);
}

// The activations of one group for the lane's B column (row m0 + 8 mt + g): the e4m3 bytes at
// offset mx_splitk_offset(t) of each of the 4 k-blocks (act[mt][u], k-block 4 grp + u), and the
// scale words (byte u = k-block 4 grp + u) of the output rows 2t and 2t + 1 its accumulators
// belong to. MX_A_QUANT quantizes the lane's 8 elements of each k-block here (4-lane groups = one
// k-block), bit for bit what MxQuantize writes.
template <int AMODE, class TA, int MT>
MX_DEV void mx_splitk_load_acts(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                                const typename TA::storage* __restrict__ af, int M, int K, int KB,
                                int m0, int grp, bool words, mx_u32 flags, int g, int t,
                                uint2 act[MT][4], mx_u32 sa0[MT], mx_u32 sa1[MT]) {
  const int off = mx_splitk_offset(t);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int mrow = m0 + mt * 8 + g;
    if (AMODE == MX_A_E4M3) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const bool ok = mrow < M && 4 * grp + u < KB;
        act[mt][u] = ok ? *reinterpret_cast<const uint2*>(aq + (long long)mrow * K + 128LL * grp +
                                                          32 * u + off)
                        : make_uint2(0u, 0u);
      }
      const int mc = m0 + mt * 8 + 2 * t;
      sa0[mt] = mx_load_scales4(as + (long long)mc * KB, 4 * grp, KB, mc < M, words);
      sa1[mt] = mx_load_scales4(as + (long long)(mc + 1) * KB, 4 * grp, KB, mc + 1 < M, words);
    } else {
      mx_u32 s0 = 0u, s1 = 0u;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const bool ok = mrow < M && 4 * grp + u < KB;
        float v[8];
        if (ok) {
          MxVec8<TA>::load(af + (long long)mrow * K + 128LL * grp + 32 * u + off, v);
        } else {
#pragma unroll
          for (int i = 0; i < 8; ++i) v[i] = 0.0f;
        }
        mx_u32 lo, hi, sb;
        mx_quant_group8(v, flags, lo, hi, sb);
        act[mt][u] = make_uint2(lo, hi);
        // Lane 4r (and 4r + 1..3) holds row r's scale.
        s0 |= (MX_SHFL(sb, 8 * t) & 0xffu) << (8 * u);
        s1 |= (MX_SHFL(sb, 8 * t + 4) & 0xffu) << (8 * u);
      }
      sa0[mt] = s0;
      sa1[mt] = s1;
    }
  }
}

template <int AMODE, class TA, int MT, class TO, int S>
MX_DEV void mx_matmul_splitk(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                             const typename TA::storage* __restrict__ af,
                             const mx_u8* __restrict__ w, const mx_u8* __restrict__ ws,
                             typename TO::storage* __restrict__ y, int M, int N, int K,
                             mx_u32 flags, const MxEpi& ep) {
  const int warps = blockDim.x >> 5;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int split = blockIdx.x % S;
  const int n0 = (blockIdx.x / S) * 16, m0 = blockIdx.y * (8 * MT);
  const int KB = K >> 5;
  const int groups = (KB + 3) >> 2;
  const int per_split = (groups + S - 1) / S;
  const int g_end = min(groups, (split + 1) * per_split);
  const bool okA = n0 + g < N, okB = n0 + g + 8 < N;
  const mx_u8* wA = w + (long long)(okA ? n0 + g : 0) * K;
  const mx_u8* wB = w + (long long)(okB ? n0 + g + 8 : 0) * K;
  const mx_u8* sA = ws + (long long)(okA ? n0 + g : 0) * KB;
  const mx_u8* sB = ws + (long long)(okB ? n0 + g + 8 : 0) * KB;
  const bool words = (KB & 3) == 0;

  float acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[mt][c] = 0.0f;

  MxSplitkStep cur, nxt;
  int grp = split * per_split + warp;
  if (grp < g_end) mx_splitk_load_weights(cur, wA, wB, sA, sB, grp, KB, okA, okB, words, t);
  for (; grp < g_end; grp += warps) {
    uint2 act[MT][4];
    mx_u32 sa0[MT], sa1[MT];
    mx_splitk_load_acts<AMODE, TA, MT>(aq, as, af, M, K, KB, m0, grp, words, flags, g, t, act,
                                        sa0, sa1);
    if (grp + warps < g_end)
      mx_splitk_load_weights(nxt, wA, wB, sA, sB, grp + warps, KB, okA, okB, words, t);
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      uint2 a[2], b[2];  // rows g (a) and g + 8 (b): the lane's 8 bytes of k-blocks 2p, 2p + 1
      mx_splitk_exchange(cur.wa[p], t, a[0], a[1]);
      mx_splitk_exchange(cur.wb[p], t, b[0], b[1]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int u = 2 * p + h;  // k-block 4 grp + u
        const float fA = mx_e8m0_to_f32((cur.swa >> (8 * u)) & 0xffu);
        const float fB = mx_e8m0_to_f32((cur.swb >> (8 * u)) & 0xffu);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          float d[4];
          mx_mma_e4m3(d, a[h].x, b[h].x, a[h].y, b[h].y, act[mt][u].x, act[mt][u].y);
          const float f0 = mx_e8m0_to_f32((sa0[mt] >> (8 * u)) & 0xffu);
          const float f1 = mx_e8m0_to_f32((sa1[mt] >> (8 * u)) & 0xffu);
          acc[mt][0] += d[0] * fA * f0;
          acc[mt][1] += d[1] * fA * f1;
          acc[mt][2] += d[2] * fB * f0;
          acc[mt][3] += d[3] * fB * f1;
        }
      }
    }
    cur = nxt;
  }

  // Warps' partial sums meet in shared memory (fixed warp order), then the cluster's blocks'.
  __shared__ float red[MX_GEMM_MAX_WARPS][MT * 4][32];
  __shared__ float part[MT * 4 * 32];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) red[warp][mt * 4 + c][lane] = acc[mt][c];
  __syncthreads();
  for (int idx = threadIdx.x; idx < MT * 4 * 32; idx += blockDim.x) {
    float sum = 0.0f;
    for (int v = 0; v < warps; ++v) sum += red[v][idx >> 5][idx & 31];
    part[idx] = sum;
  }
  if (S > 1) mx_cluster_sync();  // every block's part[] written and visible cluster-wide
  if (split == 0) {
    for (int idx = threadIdx.x; idx < MT * 4 * 32; idx += blockDim.x) {
      float sum = part[idx];
      // The cluster's blocks are the S consecutive blockIdx.x of one tile: rank r did split r.
      for (int r = 1; r < S; ++r) sum += mx_dsmem_load(part + idx, (mx_u32)r);
      const int mc = idx >> 5, l = idx & 31;
      const int mt = mc >> 2, c = mc & 3;
      const int n = n0 + (l >> 2) + (c >= 2 ? 8 : 0);
      const int m = m0 + mt * 8 + 2 * (l & 3) + (c & 1);
      if (n < N && m < M) y[(long long)m * N + n] = TO::from_f32(mx_epilogue<TO>(ep, m, n, sum));
    }
  }
  if (S > 1) mx_cluster_sync();  // the other blocks' shared memory stays alive until read
}

// Kernel names: mx_matmul_sk_<e4m3|qbf16|qf16>_m<8|16>_<out>_s<S>; grid (ceil(N/16) * S,
// ceil(M / (8 * MT))), any multiple of 32 threads up to 512 (at most MX_GEMM_MAX_WARPS warps).
#define MX_DEFINE_SK1(NAME, AMODE, TA, MT, TO, S, ATTR)                                        \
  extern "C" __global__ void __launch_bounds__(512) ATTR                                       \
      NAME(const mx_u8* aq, const mx_u8* as, const TA::storage* af, const mx_u8* w,             \
           const mx_u8* ws, TO::storage* y, int M, int N, int K, unsigned flags, MxEpi ep) {   \
    MX_PDL_ENTRY();                                                                            \
    mx_matmul_splitk<AMODE, TA, MT, TO, S>(aq, as, af, w, ws, y, M, N, K, flags, ep);           \
  }
#define MX_DEFINE_SK_S(NAME, AMODE, TA, MT, TO)                                                \
  MX_DEFINE_SK1(NAME##_s1, AMODE, TA, MT, TO, 1, )                                             \
  MX_DEFINE_SK1(NAME##_s2, AMODE, TA, MT, TO, 2, __cluster_dims__(2, 1, 1))                    \
  MX_DEFINE_SK1(NAME##_s4, AMODE, TA, MT, TO, 4, __cluster_dims__(4, 1, 1))
#define MX_DEFINE_SK_OUTS(PREFIX, AMODE, TA, MT)                                               \
  MX_DEFINE_SK_S(PREFIX##_bf16, AMODE, TA, MT, MxBf16)                                         \
  MX_DEFINE_SK_S(PREFIX##_f16, AMODE, TA, MT, MxF16)                                           \
  MX_DEFINE_SK_S(PREFIX##_f32, AMODE, TA, MT, MxF32)

MX_DEFINE_SK_OUTS(mx_matmul_sk_e4m3_m8, MX_A_E4M3, MxBf16, 1)
MX_DEFINE_SK_OUTS(mx_matmul_sk_e4m3_m16, MX_A_E4M3, MxBf16, 2)
MX_DEFINE_SK_OUTS(mx_matmul_sk_qbf16_m8, MX_A_QUANT, MxBf16, 1)
MX_DEFINE_SK_OUTS(mx_matmul_sk_qbf16_m16, MX_A_QUANT, MxBf16, 2)
MX_DEFINE_SK_OUTS(mx_matmul_sk_qf16_m8, MX_A_QUANT, MxF16, 1)
MX_DEFINE_SK_OUTS(mx_matmul_sk_qf16_m16, MX_A_QUANT, MxF16, 2)
#endif  // MX_NV_FP8_MMA && MX_NV_CLUSTER
