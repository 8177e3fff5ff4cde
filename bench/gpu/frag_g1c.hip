// Issue 6 follow-up 38, bench only (appended to the GEMM module's text by ab_g1.py with
// AB_G1C=1): `_g1` (one group of 4 k-blocks a warp, two tiles a warp; mx_matmul_frag.hip) with the
// weights converted to the f16 mma fragments before the PDL wait. Why: at small K every weight
// byte of `_g1` is requested before the wait, so after it a warp's critical path is the
// activation load, the converts of both (64 a tile for the weights), the mmas and the block
// reduction; the weights are constants, so their converts can run while the previous kernel
// still does, once their loads land. The next kernel may launch before them (the trigger moves
// ahead of the converts). Same arithmetic as mx_mma_group4 (the bits of `_g1`).
// Names: mx_matmul_frag_m<8 MT>_bf16_w<W>_s1_g1c.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)

// A lane's weights of one group as the f16 A fragments of mx_mma_group4_h: k-block u, mma 0's a0-a3
// then mma 1's.
struct MxWConv {
  mx_u32 h[4][8];
};
MX_DEV void mx_conv_w(const uint4 w[4], MxWConv& c) {
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    c.h[u][0] = mx_e4m3x2_to_f16x2(w[u].x);
    c.h[u][1] = mx_e4m3x2_to_f16x2(w[u].z);
    c.h[u][2] = mx_e4m3x2_hi_to_f16x2<true>(w[u].x);
    c.h[u][3] = mx_e4m3x2_hi_to_f16x2<true>(w[u].z);
    c.h[u][4] = mx_e4m3x2_to_f16x2(w[u].y);
    c.h[u][5] = mx_e4m3x2_to_f16x2(w[u].w);
    c.h[u][6] = mx_e4m3x2_hi_to_f16x2<true>(w[u].y);
    c.h[u][7] = mx_e4m3x2_hi_to_f16x2<true>(w[u].w);
  }
}

// mx_mma_group4 on converted weights.
template <int MT>
MX_DEV void mx_mma_group4_wc(float acc[MT][4], const MxWConv& wc, const uint4 bh[MT][4], mx_u32 swA,
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
  if (bad) {
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
    const mx_u32* a = wc.h[u];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      float d[4];
      mx_mma_f16(d, a[0], a[1], a[2], a[3], bh[mt][u].x, bh[mt][u].y, zero);
      mx_mma_f16(d, a[4], a[5], a[6], a[7], bh[mt][u].z, bh[mt][u].w, d);
      acc[mt][0] += d[0] * fA[u] * f0[mt][u];
      acc[mt][1] += d[1] * fA[u] * f1[mt][u];
      acc[mt][2] += d[2] * fB[u] * f0[mt][u];
      acc[mt][3] += d[3] * fB[u] * f1[mt][u];
    }
  }
}

template <int W, int MT, int NT, class Out>
MX_DEV void mx_matmul_frag_g1c(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                               const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                               const Out& out, int M, int N, int K, int pre) {
  const MxFragWarp<W, MT, 1, NT> f(aq, as, wf, wsf, M, K);
  const int gb = f.gb, ge = f.ge;
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
  MxWConv wc[NT];
  mx_u32 sA[NT], sB[NT];
  float acc[NT][MT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[nt][mt][c] = 0.0f;
  if (!(pre & 1)) MX_PDL_WAIT();
  if (gb < ge) {
    uint4 w[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int j = 0; j < 4; ++j) w[nt][j] = mx_ldg_once16(wp[nt] + 32 * j);
      sA[nt] = swp[nt][0];
      sB[nt] = swp[nt][8];
    }
    MX_PDL_LAUNCH();
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mx_conv_w(w[nt], wc[nt]);
  } else {
    MX_PDL_LAUNCH();
  }
  if (pre & 1) MX_PDL_WAIT();
  if (gb < ge) {
    uint2 a[MT][4];
    mx_u32 s0[MT], s1[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int j = 0; j < 4; ++j) a[mt][j] = *reinterpret_cast<const uint2*>(f.ap[mt] + 128 * gb + 32 * j);
      s0[mt] = f.sp0[mt][gb];
      s1[mt] = f.sp1[mt][gb];
    }
    uint4 bh[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int u = 0; u < 4; ++u) bh[mt][u] = mx_e4m3x8_to_frag<true>(a[mt][u]);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mx_mma_group4_wc<MT>(acc[nt], wc[nt], bh, sA[nt], sB[nt], s0, s1);
  }
  mx_frag_reduce_to<MxBf16, W, MT, 1, NT>(acc, out, MxRowsBelow{M});
}
// NT tiles a warp (SFX g1c: 2, g1ct1: 1).
#define MX_G1C(ROWS, MT, W, NT, SFX)                                                             \
  extern "C" __global__ void __launch_bounds__(32 * W)                                           \
      mx_matmul_frag_m##ROWS##_bf16_w##W##_s1_##SFX(MX_FRAG_ARGS(MxBf16)) {                      \
    mx_matmul_frag_g1c<W, MT, NT>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre);           \
  }
#define MX_G1C_W(W)                                                                              \
  MX_G1C(8, 1, W, 2, g1c)                                                                        \
  MX_G1C(16, 2, W, 2, g1c)                                                                       \
  MX_G1C(16, 2, W, 1, g1ct1)
MX_G1C_W(3)
MX_G1C_W(4)
MX_G1C_W(5)
MX_G1C_W(6)
MX_G1C_W(7)
MX_G1C_W(8)
#endif
