// Bench-only (issue 6 follow-up 22, not launched by the runtime): the fragment GEMM loops `_fs`
// (16 rows) and `_t2` (8 rows, two 16-column tiles a warp) of mx_matmul_frag.hip with the weights
// streamed global -> shared memory by per-lane 16-byte cp.async (LDGSTS: no registers held while
// the bytes are in flight, L1 bypassed) into a per-warp ring of D groups, instead of the register
// double buffer. Same packed layout (mx_matmul_frag.hip's header), same launch grid and arguments
// as `_fs` / `_t2`.
//
// Why: the register double buffer keeps at most two groups (2 x 2 KB a tile) of a warp in flight
// and makes `_fs` need 168 registers (12 warps an SM: under PDL the next launch's blocks cannot be
// co-resident), `_t2` 200. Here a warp issues as many groups as its ring holds before the PDL wait
// (weights are constants: pre & 1), the activations are read after it with the plain register
// loads of `_fs` / `_t2` (cp.async / bulk copies of activations after the wait were measured
// slower: BENCHMARKS.md follow-ups 13, 16), and per group: cp.async.wait_group for the oldest
// group, then exactly the per-group arithmetic of `_fs` / the m8 kernel with each k-block's
// fragment read by one LDS.128 (lane-contiguous: conflict-free) where it is used (mx_ring_mma:
// mx_mma_group4's operations on acc in the same order; groups in the same order;
// mx_frag_reduce_store), so the outputs are bit-identical to `_fs` / `_t2` at the same (W, S);
// then the slot is refilled D groups ahead.
//
// Ring slot of a tile's group (MxRingSlot): the 32 lanes' 16 bytes of k-blocks 0-3 (byte
// 16 (32 j + lane): lane copies and reads its own bytes), then the 16 rows' scale words (lanes
// 0-15 copy one each, 4-byte cp.async; read by the lanes of rows g and g + 8, hence __syncwarp).
// Shared memory: W D NT 2112 bytes of ring + mx_frag_reduce_store's W NT MT 512 (+ 512 NT MT at
// S > 1), static, kept under 48 KB (which (W, D) exist: below).

#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)

struct MxRingSlot {
  static constexpr int FRAG = 4 * 32 * 16;   // 4 k-blocks x 32 lanes x 16 bytes
  static constexpr int BYTES = FRAG + 16 * 4;  // + the 16 rows' scale words
};
// Weights are constants: the copies need no ordering against the PDL wait, only the "memory"
// clobber that keeps them after the shared-memory reads of the slot they refill.
MX_DEV void mx_ring_cp16(mx_u32 smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(gmem) : "memory");
}
MX_DEV void mx_ring_cp4(mx_u32 smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem), "l"(gmem) : "memory");
}

// mx_mma_group4<MT, true> (the per-group arithmetic of `_fs` / `_t2`, same operations in the same
// order on acc, so the same bits) with the weights read from the ring slot one k-block at a time
// (w = this lane's 16 bytes of k-block 0 of the slot; k-block u at + 512 u) and each activation
// fragment converted where it is used: a schedule that needs fewer registers than converting the
// whole group first.
template <int MT>
MX_DEV void mx_ring_mma(float acc[MT][4], const uint4* w, const uint2 b[MT][4], mx_u32 swA,
                        mx_u32 swB, const mx_u32 s0[MT], const mx_u32 s1[MT]) {
  float fA[4], fB[4], f0[MT][4], f1[MT][4];
  mx_u32 bad = mx_has_byte_00_or_ff(swA) | mx_has_byte_00_or_ff(swB);
  mx_e8m0x4_fast(swA, fA);
  mx_e8m0x4_fast(swB, fB);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    bad |= mx_has_byte_00_or_ff(s0[mt]) | mx_has_byte_00_or_ff(s1[mt]);
    mx_e8m0x4_fast(s0[mt], f0[mt]);
    mx_e8m0x4_fast(s1[mt], f1[mt]);
  }
  if (bad) {  // a code 0 (2^-127) or 255 (NaN) in this group: the exact decode
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      fA[u] = mx_e8m0_to_f32((swA >> (8 * u)) & 0xffu);
      fB[u] = mx_e8m0_to_f32((swB >> (8 * u)) & 0xffu);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        f0[mt][u] = mx_e8m0_to_f32((s0[mt] >> (8 * u)) & 0xffu);
        f1[mt][u] = mx_e8m0_to_f32((s1[mt] >> (8 * u)) & 0xffu);
      }
    }
  }
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const uint4 wu = w[32 * u];  // rows g (.x .y) and g + 8 (.z .w)
    const mx_u32 a00 = mx_e4m3x2_to_f16x2(wu.x), a02 = mx_e4m3x2_hi_to_f16x2<true>(wu.x);
    const mx_u32 a01 = mx_e4m3x2_to_f16x2(wu.z), a03 = mx_e4m3x2_hi_to_f16x2<true>(wu.z);
    const mx_u32 a10 = mx_e4m3x2_to_f16x2(wu.y), a12 = mx_e4m3x2_hi_to_f16x2<true>(wu.y);
    const mx_u32 a11 = mx_e4m3x2_to_f16x2(wu.w), a13 = mx_e4m3x2_hi_to_f16x2<true>(wu.w);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const uint4 bh = mx_e4m3x8_to_frag<true>(b[mt][u]);
      const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      float d[4];
      mx_mma_f16(d, a00, a01, a02, a03, bh.x, bh.y, zero);
      mx_mma_f16(d, a10, a11, a12, a13, bh.z, bh.w, d);
      acc[mt][0] += d[0] * fA[u] * f0[mt][u];
      acc[mt][1] += d[1] * fA[u] * f1[mt][u];
      acc[mt][2] += d[2] * fB[u] * f0[mt][u];
      acc[mt][3] += d[3] * fB[u] * f1[mt][u];
    }
  }
}

// W warps, MT 8-row tiles, S cluster blocks, NT neighbouring 16-column tiles a warp, D ring slots.
template <int W, int MT, int S, int NT, int D>
MX_DEV void mx_matmul_frag_ring(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                                const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                                MxBf16::storage* __restrict__ y, int M, int N, int K, int pre,
                                const MxEpi& ep) {
  typedef MxRingSlot L;
  constexpr int SLOT = NT * L::BYTES;
  static_assert(W * D * SLOT <= 36 * 1024, "ring over the static shared-memory budget");
  __shared__ __align__(16) mx_u8 ring[W][D][SLOT];
  const MxFragWarp<W, MT, S, NT> f(aq, as, wf, wsf, M, K);
  const int g = f.g, gb = f.gb, ge = f.ge;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Copy sources from group gb: this lane's 16 bytes of k-block 0, scale word (lane & 15).
  const uint4* wsrc[NT];
  const mx_u32* ssrc[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    wsrc[nt] = f.wp + 128 * gb;
    ssrc[nt] = f.swp + 16 * gb + (lane & 15);
  }
  // `_t2`'s second tile (past the last tile: the first's weights again; its outputs are not stored).
  if (NT > 1 && MxFragBlock<MT, S, NT>().tile + 1 < (N + 15) / 16) {
    wsrc[NT - 1] += (long long)(K >> 5) * 32;
    ssrc[NT - 1] += (long long)(K >> 7) * 16;
  }
  const mx_u32 ring0 = (mx_u32)__cvta_generic_to_shared(&ring[warp][0][0]);
  // The next group of every tile into slot `slot`.
  auto issue = [&](int slot) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const mx_u32 d = ring0 + slot * SLOT + nt * L::BYTES;
#pragma unroll
      for (int j = 0; j < 4; ++j) mx_ring_cp16(d + 16 * (32 * j + lane), wsrc[nt] + 32 * j);
      if (lane < 16) mx_ring_cp4(d + L::FRAG + 4 * lane, ssrc[nt]);
      wsrc[nt] += 128;
      ssrc[nt] += 16;
    }
  };
  const mx_u8* ap[MT];
  const mx_u32 *sp0[MT], *sp1[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    ap[mt] = f.ap[mt] + 128 * gb;
    sp0[mt] = f.sp0[mt] + gb;
    sp1[mt] = f.sp1[mt] + gb;
  }
  struct Act {
    uint2 a[MT][4];
    mx_u32 s0[MT], s1[MT];
  };
  auto load_a = [&](Act& bt) {
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
  // One commit group per slot fill (empty ones included): before group i's step gb + D + (i - gb)
  // groups are committed, so wait_group D - 1 leaves group i landed.
  mx_frag_prologue<MT, S, NT>(pre, wf, wsf, K, gb, ge, [&] {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (gb + d < ge) issue(d);
      mx_cp_async_commit();
    }
  });
  int slot = 0;
  auto step = [&](const Act& a, int i) {
    mx_cp_async_wait<D - 1>();
    __syncwarp();  // every lane's scale-word copy of group i visible to the warp
    const mx_u8* sb = &ring[warp][slot][0];
    mx_u32 sA[NT], sB[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      sA[nt] = *reinterpret_cast<const mx_u32*>(sb + nt * L::BYTES + L::FRAG + 4 * g);
      sB[nt] = *reinterpret_cast<const mx_u32*>(sb + nt * L::BYTES + L::FRAG + 4 * (g + 8));
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      mx_ring_mma<MT>(acc[nt], reinterpret_cast<const uint4*>(sb + nt * L::BYTES) + lane, a.a, sA[nt],
                      sB[nt], a.s0, a.s1);
    __syncwarp();  // the slot's reads done in every lane before any lane refills it
    if (i + D < ge) issue(slot);
    mx_cp_async_commit();
    slot = slot + 1 == D ? 0 : slot + 1;
  };
  Act a0, a1;
  if (gb < ge) load_a(a0);
  // a0 holds group i's activations, a1 group i + 1's (the `_fs` order: the next group's
  // activation loads are issued before this group's mmas).
  for (int i = gb; i < ge; i += 2) {
    if (i + 1 < ge) load_a(a1);
    step(a0, i);
    if (i + 1 == ge) break;
    if (i + 2 < ge) load_a(a0);
    step(a1, i + 1);
  }
  mx_cp_async_wait<0>();
  mx_frag_reduce_store<MxBf16, W, MT, S, NT>(acc, y, M, N, ep);
}

// mx_matmul_ring_m16_bf16_w<W>_s<S>_fsc<D>: `_fs` through the ring (MT = 2, NT = 1);
// mx_matmul_ring_m8_bf16_w<W>_s<S>_t2c<D>: `_t2` through the ring (MT = 1, NT = 2). Grid and
// arguments as `_fs` / `_t2`. Register cap: 16 warps an SM (__launch_bounds__ minimum 16 / W
// blocks: 128 registers), so a block of the next launch fits beside a full grid of 12 warps an
// SM; `_fscr` / `_t2cr`: no minimum (the registers the loop wants; 8 warps: 1 block).
#define MX_DEFINE_RING1(NAME, MT, NT, W, S, D, MINB, ATTR)                                     \
  extern "C" __global__ void __launch_bounds__(32 * W, MINB) ATTR NAME(                        \
      const mx_u8* aq, const mx_u8* as, const uint4* wf, const mx_u32* wsf, MxBf16::storage* y, \
      int M, int N, int K, int pre, MxEpi ep) {                                                 \
    mx_matmul_frag_ring<W, MT, S, NT, D>(aq, as, wf, wsf, y, M, N, K, pre, ep);                 \
  }
#define MX_DEFINE_RING_S(PRE, MT, NT, W, D, SFX, MINB)                                         \
  MX_DEFINE_RING1(PRE##_w##W##_s1_##SFX, MT, NT, W, 1, D, MINB, )                               \
  MX_DEFINE_RING1(PRE##_w##W##_s2_##SFX, MT, NT, W, 2, D, MINB, __cluster_dims__(2, 1, 1))      \
  MX_DEFINE_RING1(PRE##_w##W##_s4_##SFX, MT, NT, W, 4, D, MINB, __cluster_dims__(4, 1, 1))      \
  MX_DEFINE_RING1(PRE##_w##W##_s8_##SFX, MT, NT, W, 8, D, MINB, __cluster_dims__(8, 1, 1))
#define MX_DEFINE_FSC(W, D)                                                                    \
  MX_DEFINE_RING_S(mx_matmul_ring_m16_bf16, 2, 1, W, D, fsc##D, 16 / W)                         \
  MX_DEFINE_RING_S(mx_matmul_ring_m16_bf16, 2, 1, W, D, fscr##D, 1)
#define MX_DEFINE_T2C(W, D)                                                                    \
  MX_DEFINE_RING_S(mx_matmul_ring_m8_bf16, 1, 2, W, D, t2c##D, 16 / W)                          \
  MX_DEFINE_RING_S(mx_matmul_ring_m8_bf16, 1, 2, W, D, t2cr##D, 1)
// (W, D) with W D NT <= 16 (ring <= 33 KB a block).
MX_DEFINE_FSC(2, 2)
MX_DEFINE_FSC(2, 4)
MX_DEFINE_FSC(4, 2)
MX_DEFINE_FSC(4, 3)
MX_DEFINE_FSC(4, 4)
MX_DEFINE_FSC(8, 2)
MX_DEFINE_T2C(2, 2)
MX_DEFINE_T2C(2, 4)
MX_DEFINE_T2C(4, 2)
#endif  // MX_NV_FP8_MMA && MX_NV_CLUSTER
