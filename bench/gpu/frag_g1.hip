// Issue 6 follow-up 32 (bench only, appended to the GEMM module's text by ab_g1.py): one group of
// 4 k-blocks per warp. At K = 768 (6 groups) the runtime's 9-16-row kernel `_fs` w4 gives warps
// 0-2 two groups each and warp 3 none, so a block's critical path is two groups' loads and
// arithmetic one after the other (the double buffer overlaps the second group's loads with the
// first's mmas, not the two mma chains). Here W = G warps each take exactly one group, whose
// weights are all requested before the PDL wait (the whole weight stream of the grid issued at
// once), with no second buffer, so the kernel needs far fewer registers (3 blocks of 6 warps an
// SM: 384 tiles in one wave). Same per-group arithmetic (mx_frag_mma) and the same warp-order
// reduction as `_fs` / `_t2`, so the outputs must be bit-identical to theirs where both split K
// into the same groups. NT = 2: each warp on two neighbouring tiles, one activation load feeding
// both (as `_t2`).
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
template <int W, int MT, int S, int NT, class Out>
MX_DEV void mx_matmul_frag_g1(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                              const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                              const Out& out, int M, int N, int K, int pre) {
  const MxFragWarp<W, MT, S, NT> f(aq, as, wf, wsf, M, K);
  const int gb = f.gb, ge = f.ge;  // ge - gb <= 1: the host launches it only where G <= W S
  // This lane's weights of group gb of each tile (MxFragWeights' addresses); the tile past the
  // last reads the first's weights again (its outputs are not stored).
  const MxFragWeights w0(f);
  const int tiles = (N + 15) / 16, tile = MxFragBlock<MT, S, NT>().tile;
  const uint4* wp[NT];
  const mx_u32* swp[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const long long o = tile + nt < tiles ? nt : 0;
    wp[nt] = w0.wp + o * (K >> 5) * 32;
    swp[nt] = w0.swp + o * (K >> 7) * 16;
  }
  uint4 w[NT][4];
  mx_u32 sA[NT], sB[NT];
  float acc[NT][MT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[nt][mt][c] = 0.0f;
  mx_frag_prologue<MT, S, NT>(pre, wf, wsf, K, gb, ge, [&] {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int j = 0; j < 4; ++j) w[nt][j] = mx_ldg_once16(wp[nt] + 32 * j);
      sA[nt] = swp[nt][0];
      sB[nt] = swp[nt][8];
    }
  });
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
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mx_frag_mma<MT, true>(acc[nt], w[nt], a, sA[nt], sB[nt], s0, s1);
  }
  mx_frag_reduce_to<MxBf16, W, MT, S, NT>(acc, out, MxRowsBelow{M});
}
// mx_matmul_frag_m<8|16>_bf16_w<W>_s1_g1[t2][_b<B>]: B = minimum blocks an SM (register cap).
#define MX_G1(ROWS, MT, NT, W, B, SFX)                                                           \
  extern "C" __global__ void __launch_bounds__(32 * W, B)                                        \
      mx_matmul_frag_m##ROWS##_bf16_w##W##_s1_##SFX(MX_FRAG_ARGS(MxBf16)) {                      \
    mx_matmul_frag_g1<W, MT, 1, NT>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre);        \
  }
MX_G1(16, 2, 1, 6, 3, g1)
MX_G1(16, 2, 2, 6, 2, g1t2)
MX_G1(8, 1, 1, 6, 3, g1)
MX_G1(8, 1, 2, 6, 2, g1t2)
MX_G1(8, 1, 3, 6, 2, g1t3)
MX_G1(8, 1, 4, 6, 1, g1t4)
MX_G1(8, 1, 2, 8, 2, g1t2)
MX_G1(8, 1, 2, 4, 3, g1t2)
// `_t2` on 6 warps a block, capped for two blocks an SM (6144^2: 192 tile pairs in one wave, 8
// groups a warp against w4's 12; uncapped it takes 200 registers, one block an SM).
#define MX_T2B(W, B)                                                                             \
  extern "C" __global__ void __launch_bounds__(32 * W, B)                                        \
      mx_matmul_frag_m8_bf16_w##W##_s1_t2b##B(MX_FRAG_ARGS(MxBf16)) {                            \
    mx_matmul_frag_t2<W, 1, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre);              \
  }
MX_T2B(6, 2)
MX_T2B(6, 1)
#endif
