// Issue 6 follow-up 29 (bench only, appended to the GEMM module's text by ab_grid.py): the `_t2`
// loop on grids the runtime's rule never forms: W warps x S cluster blocks a tile pair with W S =
// 3, 6 or 24, so that every warp of the grid is resident at once (10 warps an SM at 200
// registers) with fewer groups a warp than the rule's W S = 4 / 16 (6144^2 / 1536 x 6144: 768
// warps of 12 / 3 groups).
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
#define MX_G_T2(W, S, ATTR)                                                                      \
  extern "C" __global__ void __launch_bounds__(32 * W, 1)                                        \
      ATTR mx_matmul_frag_m8_bf16_w##W##_s##S##_t2(const mx_u8* aq, const mx_u8* as,             \
                                                   const uint4* wf, const mx_u32* wsf,           \
                                                   MxBf16::storage* y, int M, int N, int K,      \
                                                   int pre, MxEpi ep) {                          \
    mx_matmul_frag_t2<W, 1, S>(aq, as, wf, wsf, MxFragOut<MxBf16>{y, N, ep}, M, N, K, pre);                            \
  }
MX_G_T2(3, 1, )
MX_G_T2(1, 3, __cluster_dims__(3, 1, 1))
MX_G_T2(3, 2, __cluster_dims__(2, 1, 1))
MX_G_T2(2, 3, __cluster_dims__(3, 1, 1))
MX_G_T2(1, 6, __cluster_dims__(6, 1, 1))
MX_G_T2(3, 8, __cluster_dims__(8, 1, 1))
MX_G_T2(6, 4, __cluster_dims__(4, 1, 1))
MX_G_T2(4, 6, __cluster_dims__(6, 1, 1))
#endif
