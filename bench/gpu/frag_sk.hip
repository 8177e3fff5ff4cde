// Issue 6 follow-up 27 (bench only, appended to the GEMM module's text by ab_sk.py): the `_t2`
// and `_fs` decode GEMM loops with parts taken out (mx_matmul_frag.hip, template parameter SK):
// & 1 no arithmetic, & 2 L2-hot weights (every block streams the first tile's), & 4 activations
// loaded for the first two groups only. Same grid, launch bounds and loads otherwise; the outputs
// are meaningless. Timed beside the runtime's kernels, they split its time into its parts.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
#define MX_SK_T2_1(W, S, SK, ATTR)                                                               \
  extern "C" __global__ void __launch_bounds__(32 * W, 1)                                        \
      ATTR mx_matmul_frag_m8_bf16_w##W##_s##S##_t2K##SK(const mx_u8* aq, const mx_u8* as,        \
                                                         const uint4* wf, const mx_u32* wsf,     \
                                                         MxBf16::storage* y, int M, int N, int K, \
                                                         int pre, MxEpi ep) {                    \
    mx_matmul_frag_t2<W, 1, S, SK>(aq, as, wf, wsf, y, M, N, K, pre, ep);                        \
  }
#define MX_SK_FS_1(W, S, SK, ATTR)                                                               \
  extern "C" __global__ void __launch_bounds__(32 * W, (W < 8 ? 12 / W : 1))                    \
      ATTR mx_matmul_frag_m16_bf16_w##W##_s##S##_fsK##SK(                                        \
          const mx_u8* aq, const mx_u8* as, const uint4* wf, const mx_u32* wsf,                  \
          MxBf16::storage* y, int M, int N, int K, int pre, MxEpi ep) {                          \
    mx_matmul_frag_m16_fs<W, S, SK>(aq, as, wf, wsf, y, M, N, K, pre, ep);                       \
  }
#define MX_SK_ALL(SK)                                 \
  MX_SK_T2_1(4, 1, SK, )                              \
  MX_SK_T2_1(8, 1, SK, )                              \
  MX_SK_T2_1(8, 2, SK, __cluster_dims__(2, 1, 1))     \
  MX_SK_FS_1(4, 1, SK, )                              \
  MX_SK_FS_1(8, 1, SK, )
MX_SK_ALL(1)
MX_SK_ALL(2)
MX_SK_ALL(3)
MX_SK_ALL(4)
MX_SK_ALL(5)
MX_SK_ALL(6)
#endif
