// Issue 6 follow-up 32 (bench only, appended to the GEMM module's text by ab_g1.py): one group of
// 4 k-blocks a warp (K / 128 warps a block) on other row and tile counts than the runtime's `_g1`
// kernels (mx_matmul_frag.hip: 8 rows, two tiles a warp, whose comment says why), and `_t2` on 6
// warps. Calls 1-2 measured these; the m8 form on two tiles became the runtime's.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
// mx_matmul_frag_m<8|16>_bf16_w<W>_s1_<SFX> with MT row tiles of 8 and NT tiles a warp, at least
// B blocks an SM (register cap).
#define MX_G1X(ROWS, MT, NT, W, B, SFX)                                                          \
  extern "C" __global__ void __launch_bounds__(32 * W, B)                                        \
      mx_matmul_frag_m##ROWS##_bf16_w##W##_s1_##SFX(MX_FRAG_ARGS(MxBf16)) {                      \
    mx_matmul_frag_g1<MxBf16, W, MT, NT>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre);   \
  }
MX_G1X(16, 2, 1, 6, 3, g1)
MX_G1X(16, 2, 2, 6, 2, g1t2)
MX_G1X(8, 1, 1, 6, 3, g1t1)
MX_G1X(8, 1, 3, 6, 2, g1t3)
MX_G1X(8, 1, 4, 6, 1, g1t4)
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
