// Issue 6 follow-up 26 (bench only, appended to the GEMM module's text by ab_lv.py): the `_t2` and
// `_fs` decode GEMM loops with their weight loads under cache policy LV = 1..5
// (mx_matmul_frag.hip mx_ldg_w16). Same arithmetic and launch bounds as the runtime's kernels, so
// the same bits.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
#define MX_LV_T2_1(W, S, LV, ATTR)                                                               \
  extern "C" __global__ void __launch_bounds__(32 * W, 1)                                        \
      ATTR mx_matmul_frag_m8_bf16_w##W##_s##S##_t2L##LV(const mx_u8* aq, const mx_u8* as,        \
                                                         const uint4* wf, const mx_u32* wsf,     \
                                                         MxBf16::storage* y, int M, int N, int K, \
                                                         int pre, MxEpi ep) {                    \
    mx_matmul_frag_t2<W, 1, S, LV>(aq, as, wf, wsf, y, M, N, K, pre, ep);                        \
  }
#define MX_LV_FS_1(W, S, LV, ATTR)                                                               \
  extern "C" __global__ void __launch_bounds__(32 * W, (W < 8 ? 12 / W : 1))                    \
      ATTR mx_matmul_frag_m16_bf16_w##W##_s##S##_fsL##LV(                                        \
          const mx_u8* aq, const mx_u8* as, const uint4* wf, const mx_u32* wsf,                  \
          MxBf16::storage* y, int M, int N, int K, int pre, MxEpi ep) {                          \
    mx_matmul_frag_m16_fs<W, S, LV>(aq, as, wf, wsf, y, M, N, K, pre, ep);                       \
  }
#define MX_LV_ALL(LV)                                 \
  MX_LV_T2_1(2, 1, LV, )                              \
  MX_LV_T2_1(4, 1, LV, )                              \
  MX_LV_T2_1(8, 1, LV, )                              \
  MX_LV_T2_1(4, 2, LV, __cluster_dims__(2, 1, 1))     \
  MX_LV_T2_1(8, 2, LV, __cluster_dims__(2, 1, 1))     \
  MX_LV_FS_1(2, 1, LV, )                              \
  MX_LV_FS_1(4, 1, LV, )                              \
  MX_LV_FS_1(8, 1, LV, )
MX_LV_ALL(1)
MX_LV_ALL(2)
MX_LV_ALL(3)
MX_LV_ALL(4)
MX_LV_ALL(5)
#endif
