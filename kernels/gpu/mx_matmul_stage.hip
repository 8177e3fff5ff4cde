// com.mxfuse MxMatMul, decode GEMM v5 (NVIDIA sm_90) on the fragment-packed weights of
// mx_matmul_frag.hip (same layout, same packing, same operands): the weight stream goes through a
// ring of shared-memory slots filled by bulk copies (cp.async.bulk + mbarrier) instead of registers.
//
// Why: the fragment GEMM keeps its weights in flight in registers (a double buffer of 1-2 groups
// per warp), so bytes in flight per SM are capped by the register file (12 warps at 160
// registers): small shapes make one or two DRAM round trips per warp after the launch, and at
// M = 16 (one group per batch) twice as many as at M = 8. Here one producer lane per block keeps R
// chunks of W groups (R W 2 KiB) in flight per block with a handful of large copies, the first R
// chunks issued before the PDL wait (constant weights), so a launch's weights stream in while the
// previous kernel finishes; the activation rows of each chunk come by bulk copies too (after the
// wait), the activation scales are staged once. Consumers read their fragments from shared memory
// (conflict-free: 512 contiguous bytes per k-block; activation rows padded by 16 bytes), so
// registers no longer bound the bytes in flight.
//
// Work split: block = one 16-column tile x one of S contiguous K ranges (a cluster of S blocks
// reduces through distributed shared memory, as the fragment GEMM does); chunk c of a block holds
// its groups c W .. c W + W - 1 and warp w takes group c W + w of every chunk. The W warps' sums are
// added in warp order, then the cluster's in rank order: deterministic, no workspace, one launch.
// Block: 32 (W + 1) threads, the last warp is the producer. Dynamic shared memory:
// mx_stage_smem_bytes(W, MT, R, per) (kernels::gpu::shapes, bench/gpu/mxgpu.py mirror it).
// Grid as mx_matmul_frag (MxFragBlock, XO = 0). K % 128 == 0; aq 16-byte aligned.

#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)

MX_DEV mx_u32 mx_smem_addr(const void* p) { return (mx_u32)__cvta_generic_to_shared(p); }

// One bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from global memory
// into this block's shared memory, completing its bytes on `bar`.
MX_DEV void mx_bulk_g2s(void* dst, const void* src, mx_u32 bytes, mx_u64* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          mx_smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(mx_smem_addr(bar))
      : "memory");
}
MX_DEV void mx_mbar_init(mx_u64* bar, mx_u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mx_smem_addr(bar)), "r"(count) : "memory");
}
MX_DEV void mx_mbar_expect(mx_u64* bar, mx_u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mx_smem_addr(bar)), "r"(bytes)
               : "memory");
}
MX_DEV void mx_mbar_arrive(mx_u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(mx_smem_addr(bar)) : "memory");
}
// Waits for phase `parity` of a barrier of this block (acquire at block scope).
MX_DEV void mx_mbar_wait_cta(mx_u64* bar, mx_u32 parity) {
  const mx_u32 a = mx_smem_addr(bar);
  mx_u32 done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(a), "r"(parity) : "memory");
  }
}

// Shared-memory layout of one ring slot (W groups of a 16-column tile and the activation rows).
template <int W, int MT>
struct MxStageSlot {
  static constexpr int APITCH = W * 128 + 16;  // activation row: W groups of 128 bytes + 16 pad
  static constexpr int W_OFF = 0;              // [W][4 k-blocks][32 lanes][16 bytes]
  static constexpr int WS_OFF = W * 2048;      // [W][16 rows] scale words
  static constexpr int A_OFF = WS_OFF + W * 64;  // [8 MT rows][APITCH]
  static constexpr int BYTES = A_OFF + 8 * MT * APITCH;
};

// A block's K range (groups of 4 k-blocks) and its chunks.
struct MxStageRange {
  int gb, ge, nchunk;
  MX_DEV MxStageRange(int G, int S, int split, int W) {
    const int per = (G + S - 1) / S;
    gb = min(G, split * per);
    ge = min(G, gb + per);
    nchunk = (ge - gb + W - 1) / W;
  }
};

template <class TO, int W, int MT, int S>
MX_DEV void mx_matmul_stage(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                            const mx_u8* __restrict__ wf, const mx_u8* __restrict__ wsf,
                            typename TO::storage* __restrict__ y, int M, int N, int K, int pre, int R,
                            const MxEpi& ep) {
  typedef MxStageSlot<W, MT> Slot;
  extern __shared__ __align__(128) mx_u8 mx_stage_smem[];
  __shared__ __align__(8) mx_u64 full[8], empty[8];  // R <= 8
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const MxFragBlock<MT, S, 0> blk;
  const int KB = K >> 5, G = K >> 7, m0 = blk.m0;
  const MxStageRange rg(G, S, blk.split, W);
  const int span = rg.ge - rg.gb;                         // groups of this block
  mx_u32* ascale = reinterpret_cast<mx_u32*>(mx_stage_smem + R * Slot::BYTES);  // [8 MT][span]
  const int rows = max(0, min(8 * MT, M - m0));           // activation rows present
  const mx_u8* wtile = wf + ((long long)blk.tile * KB) * 512;
  const mx_u8* stile = wsf + ((long long)blk.tile * G) * 64;
  const bool producer = warp == W && lane == 0;

  auto groups_of = [&](int c) { return min(W, span - c * W); };
  auto slot_of = [&](int c) { return mx_stage_smem + (c % R) * Slot::BYTES; };
  // Weights and weight scales of chunk c (constants), after the expected byte count.
  auto issue_w = [&](int c) {
    const int ng = groups_of(c), g0 = rg.gb + c * W;
    mx_u8* s = slot_of(c);
    mx_mbar_expect(&full[c % R], (mx_u32)(ng * (2048 + 64 + rows * 128)));
    mx_bulk_g2s(s + Slot::W_OFF, wtile + (long long)g0 * 2048, ng * 2048, &full[c % R]);
    mx_bulk_g2s(s + Slot::WS_OFF, stile + (long long)g0 * 64, ng * 64, &full[c % R]);
  };
  auto issue_a = [&](int c) {
    const int ng = groups_of(c), g0 = rg.gb + c * W;
    mx_u8* s = slot_of(c);
    for (int r = 0; r < rows; ++r)
      mx_bulk_g2s(s + Slot::A_OFF + r * Slot::APITCH, aq + (long long)(m0 + r) * K + g0 * 128, ng * 128,
                  &full[c % R]);
  };

  if (tid == 0) {
    for (int i = 0; i < R; ++i) {
      mx_mbar_init(&full[i], 1);
      mx_mbar_init(&empty[i], W);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int first = min(R, rg.nchunk);
  if (producer && pre)
    for (int c = 0; c < first; ++c) issue_w(c);
  MX_PDL_WAIT();
  MX_PDL_LAUNCH();
  if (producer) {
    for (int c = 0; c < first; ++c) {
      if (!pre) issue_w(c);
      issue_a(c);
    }
  }
  // Activation scale words of this block's groups, rows past M read row M - 1 (outputs past M are
  // not stored).
  for (int i = tid; i < 8 * MT * span; i += 32 * (W + 1)) {
    const int r = i / span, gi = i - r * span;
    ascale[i] = reinterpret_cast<const mx_u32*>(as + (long long)min(m0 + r, M - 1) * KB)[rg.gb + gi];
  }
  __syncthreads();

  float acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[mt][c] = 0.0f;

  if (warp < W) {
    for (int c = 0; c < rg.nchunk; ++c) {
      mx_mbar_wait_cta(&full[c % R], (mx_u32)((c / R) & 1));
      const int gi = c * W + warp;  // group of this block
      if (gi < span) {
        const mx_u8* s = slot_of(c);
        uint2 wa[4], wb[4], a[MT][4];
        mx_u32 s0[MT], s1[MT];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint4 v = *reinterpret_cast<const uint4*>(s + Slot::W_OFF + (warp * 4 + j) * 512 + lane * 16);
          wa[j] = make_uint2(v.x, v.y);
          wb[j] = make_uint2(v.z, v.w);
        }
        const mx_u32* ws = reinterpret_cast<const mx_u32*>(s + Slot::WS_OFF + warp * 64);
        const mx_u32 sA = ws[g], sB = ws[g + 8];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int j = 0; j < 4; ++j)
            a[mt][j] = *reinterpret_cast<const uint2*>(s + Slot::A_OFF + (8 * mt + g) * Slot::APITCH +
                                                       warp * 128 + 32 * j + 8 * t);
          s0[mt] = ascale[(8 * mt + 2 * t) * span + gi];
          s1[mt] = ascale[(8 * mt + 2 * t + 1) * span + gi];
        }
        mx_mma_group4<MT>(acc, wa, wb, a, sA, sB, s0, s1);
      }
      __syncwarp();
      if (lane == 0) mx_mbar_arrive(&empty[c % R]);
    }
  } else if (producer) {
    // Refill slot c % R with chunk c once every consumer warp has released chunk c - R.
    for (int c = R; c < rg.nchunk; ++c) {
      mx_mbar_wait_cta(&empty[c % R], (mx_u32)(((c - R) / R) & 1));
      issue_w(c);
      issue_a(c);
    }
  }

  mx_frag_reduce_store<TO, W, MT, S, 0, W + 1>(acc, y, M, N, ep);
}

// Kernel names: mx_matmul_stage_m<8|16>_<out>_w<W>_s<S>; R (ring slots, 1..8) is a launch argument
// and sets the dynamic shared memory.
#define MX_DEFINE_STAGE1(NAME, TO, W, MT, S, ATTR)                                                    \
  extern "C" __global__ void __launch_bounds__(32 * (W + 1)) ATTR                                     \
      NAME(const mx_u8* aq, const mx_u8* as, const mx_u8* wf, const mx_u8* wsf, TO::storage* y, int M, \
           int N, int K, int pre, int R, MxEpi ep) {                                                  \
    mx_matmul_stage<TO, W, MT, S>(aq, as, wf, wsf, y, M, N, K, pre, R, ep);                           \
  }
#define MX_DEFINE_STAGE_S(NAME, TO, W, MT)                          \
  MX_DEFINE_STAGE1(NAME##_s1, TO, W, MT, 1, )                       \
  MX_DEFINE_STAGE1(NAME##_s2, TO, W, MT, 2, __cluster_dims__(2, 1, 1))
#define MX_DEFINE_STAGE_W(NAME, TO, MT)     \
  MX_DEFINE_STAGE_S(NAME##_w4, TO, 4, MT) \
  MX_DEFINE_STAGE_S(NAME##_w8, TO, 8, MT)
#define MX_DEFINE_STAGE_OUTS(PREFIX, MT)              \
  MX_DEFINE_STAGE_W(PREFIX##_bf16, MxBf16, MT)      \
  MX_DEFINE_STAGE_W(PREFIX##_f16, MxF16, MT)        \
  MX_DEFINE_STAGE_W(PREFIX##_f32, MxF32, MT)

MX_DEFINE_STAGE_OUTS(mx_matmul_stage_m8, 1)
MX_DEFINE_STAGE_OUTS(mx_matmul_stage_m16, 2)
#endif  // MX_NV_FP8_MMA && MX_NV_CLUSTER
