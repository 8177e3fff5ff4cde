// Issue 6 follow-up 30 (bench only, appended to the GEMM module's text by ab_sf.py): `_t2` and
// `_fs` with each batch's scale words requested before its weights, through the non-coherent
// path (mx_matmul_frag.hip MxFragWeightsT<true>): `_t2s`, `_fss`. Same arithmetic: same bits.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
#define MX_SF_T2(W, S, ATTR)                                                                     \
  extern "C" __global__ void __launch_bounds__(32 * W, 1)                                        \
      ATTR mx_matmul_frag_m8_bf16_w##W##_s##S##_t2s(const mx_u8* aq, const mx_u8* as,            \
                                                     const uint4* wf, const mx_u32* wsf,         \
                                                     MxBf16::storage* y, int M, int N, int K,    \
                                                     int pre, MxEpi ep) {                        \
    mx_matmul_frag_t2<W, 1, S, true>(aq, as, wf, wsf, y, M, N, K, pre, ep);                      \
  }
#define MX_SF_FS(W, S, ATTR)                                                                     \
  extern "C" __global__ void __launch_bounds__(32 * W, (W < 8 ? 12 / W : 1))                    \
      ATTR mx_matmul_frag_m16_bf16_w##W##_s##S##_fss(                                            \
          const mx_u8* aq, const mx_u8* as, const uint4* wf, const mx_u32* wsf,                  \
          MxBf16::storage* y, int M, int N, int K, int pre, MxEpi ep) {                          \
    mx_matmul_frag_m16_fs<W, S, true>(aq, as, wf, wsf, y, M, N, K, pre, ep);                     \
  }
MX_SF_T2(2, 1, )
MX_SF_T2(4, 1, )
MX_SF_T2(8, 1, )
MX_SF_T2(4, 2, __cluster_dims__(2, 1, 1))
MX_SF_T2(8, 2, __cluster_dims__(2, 1, 1))
MX_SF_FS(2, 1, )
MX_SF_FS(4, 1, )
MX_SF_FS(8, 1, )
#endif
