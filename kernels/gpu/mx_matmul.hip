// com.mxfuse MxMatMul: y[M, N] = deq(a)[M, K] . deq(b) with fp32 accumulation.
//
// Two kernels:
// * mx_matmul_tc_*: the decode GEMM (M <= 16 per block row; bound by weight bandwidth) for e4m3
//   weights b [N, K] + b_scale [N, K/32] (trans_b = 1), on NVIDIA tensor cores (sm_89+). The
//   activations are either given quantized (a_q, a_scale) or as bf16/f16 and quantized in the
//   kernel ("in-GEMM quant"): each lane quantizes 8 activation elements with the group-of-4
//   quantizer, which is exactly the mma B-fragment it needs, so the quantized A never leaves
//   registers.
// * mx_matmul_generic_*: a portable scalar kernel for every layout of docs/ops.md (e4m3 b with
//   trans_b 0 or 1, or bf16/f16/f32 b [K, N] or [N, K]); AMD builds use it until an MFMA path exists.

#define MX_GEMM_UNROLL 4
#define MX_GEMM_MAX_WARPS 16
#define MX_A_E4M3 0  // a given as e4m3 + e8m0 scales
#define MX_A_QUANT 1 // a given as T, quantized in the kernel

// b modes of the generic kernel.
#define MX_B_E4M3_KN 0
#define MX_B_E4M3_NK 1
#define MX_B_BF16 2
#define MX_B_F16 3
#define MX_B_F32 4
#define MX_B_TRANS 8  // or-ed into a float mode: b is [N, K] (trans_b = 1)

#if defined(MX_NV_FP8_MMA)
// The scale bytes of k-blocks kbase .. kbase + 3 of one row (byte u = k-block kbase + u; 127, i.e.
// 1.0, past the end or for rows out of range). One aligned 32-bit load when KB % 4 == 0.
MX_DEV mx_u32 mx_load_scales4(const mx_u8* row, int kbase, int KB, bool ok, bool words) {
  if (!ok) return 0x7f7f7f7fu;
  if (words) return *reinterpret_cast<const mx_u32*>(row + kbase);
  mx_u32 w = 0;
#pragma unroll
  for (int u = 0; u < 4; ++u) w |= (kbase + u < KB ? (mx_u32)row[kbase + u] : 127u) << (8 * u);
  return w;
}

// One pipeline step of weights: MX_GEMM_UNROLL k-blocks of the two 8-row halves of the tile.
struct MxWeightStep {
  uint2 wa[MX_GEMM_UNROLL], wb[MX_GEMM_UNROLL];
  mx_u32 swa, swb;
};

MX_DEV void mx_load_weights(MxWeightStep& st, const mx_u8* wA, const mx_u8* wB, const mx_u8* sA,
                            const mx_u8* sB, int kbase, int KB, bool okA, bool okB, bool words) {
  st.swa = mx_load_scales4(sA, kbase, KB, okA, words);
  st.swb = mx_load_scales4(sB, kbase, KB, okB, words);
#pragma unroll
  for (int u = 0; u < MX_GEMM_UNROLL; ++u) {
    const int kb = kbase + u;
    const bool ok = kb < KB;
    st.wa[u] = (ok && okA) ? *reinterpret_cast<const uint2*>(wA + 32 * kb) : make_uint2(0u, 0u);
    st.wb[u] = (ok && okB) ? *reinterpret_cast<const uint2*>(wB + 32 * kb) : make_uint2(0u, 0u);
  }
}

// D (16x8 fp32) = A (16x32 e4m3, row) * B (32x8 e4m3, col). Fragments (PTX ISA, m16n8k32 .e4m3):
// lane = 4 * g + t; a0/a2: row g, a1/a3: row g + 8; a0/a1 hold k = 4t..4t+3, a2/a3 k = 16+4t..;
// b0 holds k = 4t..4t+3 of column g, b1 k = 16+4t..; d0/d1: (row g, col 2t/2t+1), d2/d3: row g+8.
MX_DEV void mx_mma_e4m3(float d[4], mx_u32 a0, mx_u32 a1, mx_u32 a2, mx_u32 a3, mx_u32 b0,
                        mx_u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}

// "Swap AB": the weight tile (16 output columns n x 32 k) is the mma's A operand and the
// activations (32 k x 8 rows m) its B operand, so M <= 8 wastes nothing. Within a 32-element scale
// block the logical k order of the fragments is permuted (logical 4t+i <-> physical 8t+i, logical
// 16+4t+i <-> physical 8t+4+i) identically for both operands, which leaves each dot product
// unchanged and lets every lane read 8 contiguous bytes. One mma covers exactly one scale block,
// so its fresh fp32 result is scaled by 2^(sw) * 2^(sa) and added to the accumulators.
// Block = W warps (blockDim.x / 32) on the same 16 columns, splitting K; the warps' partial sums
// meet in shared memory.
template <int AMODE, class TA, int MT, class TO, bool PF>
MX_DEV void mx_matmul_tc(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                         const typename TA::storage* __restrict__ af, const mx_u8* __restrict__ w,
                         const mx_u8* __restrict__ ws, typename TO::storage* __restrict__ y, int M,
                         int N, int K, mx_u32 flags, const MxEpi& ep) {
  const int warps = blockDim.x >> 5;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * 16, m0 = blockIdx.y * (8 * MT);
  const int KB = K >> 5;
  const bool okA = n0 + g < N, okB = n0 + g + 8 < N;
  const mx_u8* wA = w + (long long)(okA ? n0 + g : 0) * K + 8 * t;
  const mx_u8* wB = w + (long long)(okB ? n0 + g + 8 : 0) * K + 8 * t;
  const mx_u8* sA = ws + (long long)(okA ? n0 + g : 0) * KB;
  const mx_u8* sB = ws + (long long)(okB ? n0 + g + 8 : 0) * KB;

  float acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[mt][c] = 0.0f;

  // Warp w takes the groups of MX_GEMM_UNROLL consecutive k-blocks w, w + W, ...: the 4 scale
  // bytes of a group are one aligned 32-bit load (when KB % 4 == 0), and a row's 4 weight loads
  // share one 128-byte line. L1 wavefronts, not DRAM, bound this kernel (ncu), so fewer
  // load instructions per byte is what counts.
  // PF (software pipeline): the next group's weights (DRAM) are requested before this group's mma
  // work, so a warp waits on DRAM once, not once per group. It costs ~35 registers, which halves
  // occupancy: the host takes it only when the grid has fewer blocks than the device has SMs.
  const bool scale_words = (KB & 3) == 0;
  const int groups = (KB + MX_GEMM_UNROLL - 1) / MX_GEMM_UNROLL;
  MxWeightStep cur, nxt;
  if (PF && warp < groups)
    mx_load_weights(cur, wA, wB, sA, sB, warp * MX_GEMM_UNROLL, KB, okA, okB, scale_words);
  for (int grp = warp; grp < groups; grp += warps) {
    const int kbase = grp * MX_GEMM_UNROLL;
    if (!PF) mx_load_weights(cur, wA, wB, sA, sB, kbase, KB, okA, okB, scale_words);
    uint4 araw[MT][MX_GEMM_UNROLL];  // MX_A_E4M3: 8 bytes in .x/.y; MX_A_QUANT: 8 activations
    mx_u32 sa0[MT], sa1[MT];         // MX_A_E4M3: scale words of output rows 2t and 2t + 1
#pragma unroll
    for (int u = 0; u < MX_GEMM_UNROLL; ++u) {
      const int kb = kbase + u;
      const bool ok = kb < KB;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int mrow = m0 + mt * 8 + g;  // the activation row this lane feeds (B column g)
        if (AMODE == MX_A_E4M3) {
          const uint2 b = (ok && mrow < M)
              ? *reinterpret_cast<const uint2*>(aq + (long long)mrow * K + 32 * kb + 8 * t)
              : make_uint2(0u, 0u);
          araw[mt][u] = make_uint4(b.x, b.y, 0u, 0u);
        } else {
          araw[mt][u] = (ok && mrow < M)
              ? *reinterpret_cast<const uint4*>(af + (long long)mrow * K + 32 * kb + 8 * t)
              : make_uint4(0u, 0u, 0u, 0u);
        }
      }
    }
    if (AMODE == MX_A_E4M3) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int mc = m0 + mt * 8 + 2 * t;  // output rows of d0/d2 (mc) and d1/d3 (mc + 1)
        sa0[mt] = mx_load_scales4(as + (long long)mc * KB, kbase, KB, mc < M, scale_words);
        sa1[mt] = mx_load_scales4(as + (long long)(mc + 1) * KB, kbase, KB, mc + 1 < M, scale_words);
      }
    }
    if (PF && grp + warps < groups)
      mx_load_weights(nxt, wA, wB, sA, sB, (grp + warps) * MX_GEMM_UNROLL, KB, okA, okB, scale_words);
    const mx_u32 swa = cur.swa, swb = cur.swb;
#pragma unroll
    for (int u = 0; u < MX_GEMM_UNROLL; ++u) {
      if (kbase + u >= KB) break;  // uniform across the warp
      const float fA = mx_e8m0_to_f32((swa >> (8 * u)) & 0xffu);
      const float fB = mx_e8m0_to_f32((swb >> (8 * u)) & 0xffu);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mx_u32 b0, b1, s0, s1;
        if (AMODE == MX_A_E4M3) {
          b0 = araw[mt][u].x;
          b1 = araw[mt][u].y;
          s0 = (sa0[mt] >> (8 * u)) & 0xffu;
          s1 = (sa1[mt] >> (8 * u)) & 0xffu;
        } else {
          float v[8];
          MxVec8<TA>::unpack(araw[mt][u], v);
          mx_u32 sb;
          mx_quant_group8(v, flags, b0, b1, sb);
          s0 = MX_SHFL(sb, 8 * t);      // lane 4 * (2t) holds row 2t's scale
          s1 = MX_SHFL(sb, 8 * t + 4);  // lane 4 * (2t + 1)
        }
        float d[4];
        mx_mma_e4m3(d, cur.wa[u].x, cur.wb[u].x, cur.wa[u].y, cur.wb[u].y, b0, b1);
        const float f0 = mx_e8m0_to_f32(s0), f1 = mx_e8m0_to_f32(s1);
        acc[mt][0] += d[0] * fA * f0;
        acc[mt][1] += d[1] * fA * f1;
        acc[mt][2] += d[2] * fB * f0;
        acc[mt][3] += d[3] * fB * f1;
      }
    }
    if (PF) cur = nxt;
  }

  __shared__ float red[MX_GEMM_MAX_WARPS][MT * 4][32];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) red[warp][mt * 4 + c][lane] = acc[mt][c];
  __syncthreads();
  for (int idx = threadIdx.x; idx < MT * 4 * 32; idx += blockDim.x) {
    const int mc = idx >> 5, l = idx & 31;
    float sum = 0.0f;
    for (int v = 0; v < warps; ++v) sum += red[v][mc][l];
    const int mt = mc >> 2, c = mc & 3;
    const int n = n0 + (l >> 2) + (c >= 2 ? 8 : 0);
    const int m = m0 + mt * 8 + 2 * (l & 3) + (c & 1);
    if (n < N && m < M) y[(long long)m * N + n] = TO::from_f32(mx_epilogue<TO>(ep, m, n, sum));
  }
}

// Kernel names: mx_matmul_tc_<e4m3|qbf16|qf16>_m<8|16>_<out>[_pf].
#define MX_DEFINE_TC(NAME, AMODE, TA, MT, TO, PF)                                              \
  extern "C" __global__ void __launch_bounds__(512)                                            \
      NAME(const mx_u8* aq, const mx_u8* as, const TA::storage* af, const mx_u8* w,             \
           const mx_u8* ws, TO::storage* y, int M, int N, int K, unsigned flags, MxEpi ep) {   \
    MX_PDL_ENTRY();                                                                            \
    mx_matmul_tc<AMODE, TA, MT, TO, PF>(aq, as, af, w, ws, y, M, N, K, flags, ep);              \
  }
#define MX_DEFINE_TC_PF(NAME, AMODE, TA, MT, TO)                                               \
  MX_DEFINE_TC(NAME, AMODE, TA, MT, TO, false) MX_DEFINE_TC(NAME##_pf, AMODE, TA, MT, TO, true)
#define MX_DEFINE_TC_OUTS(PREFIX, AMODE, TA, MT)                                               \
  MX_DEFINE_TC_PF(PREFIX##_bf16, AMODE, TA, MT, MxBf16)                                        \
  MX_DEFINE_TC_PF(PREFIX##_f16, AMODE, TA, MT, MxF16)                                          \
  MX_DEFINE_TC_PF(PREFIX##_f32, AMODE, TA, MT, MxF32)

MX_DEFINE_TC_OUTS(mx_matmul_tc_e4m3_m8, MX_A_E4M3, MxBf16, 1)
MX_DEFINE_TC_OUTS(mx_matmul_tc_e4m3_m16, MX_A_E4M3, MxBf16, 2)
MX_DEFINE_TC_OUTS(mx_matmul_tc_qbf16_m8, MX_A_QUANT, MxBf16, 1)
MX_DEFINE_TC_OUTS(mx_matmul_tc_qbf16_m16, MX_A_QUANT, MxBf16, 2)
MX_DEFINE_TC_OUTS(mx_matmul_tc_qf16_m8, MX_A_QUANT, MxF16, 1)
MX_DEFINE_TC_OUTS(mx_matmul_tc_qf16_m16, MX_A_QUANT, MxF16, 2)
#endif  // MX_NV_FP8_MMA

// Portable kernel: one lane per output element (m = blockIdx.y, n along the block), so lanes read
// consecutive n of a [K, N] b. Each 32-element block's products are summed first and then scaled,
// the same order as the tensor-core kernel.
template <class TO>
MX_DEV void mx_matmul_generic(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                              const void* __restrict__ b, const mx_u8* __restrict__ bs,
                              typename TO::storage* __restrict__ y, int M, int N, int K,
                              int bmode, const MxEpi& ep) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const long long m = blockIdx.y;
  if (n >= N || m >= M) return;
  const int KB = K >> 5;
  const mx_u8* b8 = static_cast<const mx_u8*>(b);
  float acc = 0.0f;
  for (int kb = 0; kb < KB; ++kb) {
    float blk = 0.0f;
    for (int i = 0; i < 32; ++i) {
      const long long k = 32 * kb + i;
      const float a = mx_e4m3_to_f32(aq[m * K + k]);
      const long long bi = (bmode & MX_B_TRANS) ? (long long)n * K + k : k * N + n;
      float bv;
      switch (bmode & ~MX_B_TRANS) {
        case MX_B_E4M3_KN: bv = mx_e4m3_to_f32(b8[k * N + n]); break;
        case MX_B_E4M3_NK: bv = mx_e4m3_to_f32(b8[(long long)n * K + k]); break;
        case MX_B_BF16: bv = MxBf16::to_f32(static_cast<const mx_u16*>(b)[bi]); break;
        case MX_B_F16: bv = MxF16::to_f32(static_cast<const mx_u16*>(b)[bi]); break;
        default: bv = static_cast<const float*>(b)[bi]; break;
      }
      blk += a * bv;
    }
    float sb = 1.0f;
    if (bmode == MX_B_E4M3_KN) sb = mx_e8m0_to_f32(bs[(long long)kb * N + n]);
    if (bmode == MX_B_E4M3_NK) sb = mx_e8m0_to_f32(bs[(long long)n * KB + kb]);
    acc += blk * sb * mx_e8m0_to_f32(as[m * KB + kb]);
  }
  y[m * N + n] = TO::from_f32(mx_epilogue<TO>(ep, m, n, acc));
}

#define MX_DEFINE_GENERIC(NAME, TO)                                                            \
  extern "C" __global__ void NAME(const mx_u8* aq, const mx_u8* as, const void* b,            \
                                  const mx_u8* bs, TO::storage* y, int M, int N, int K,        \
                                  int bmode, MxEpi ep) {                                       \
    MX_PDL_ENTRY();                                                                            \
    mx_matmul_generic<TO>(aq, as, b, bs, y, M, N, K, bmode, ep);                               \
  }
MX_DEFINE_GENERIC(mx_matmul_generic_bf16, MxBf16)
MX_DEFINE_GENERIC(mx_matmul_generic_f16, MxF16)
MX_DEFINE_GENERIC(mx_matmul_generic_f32, MxF32)
