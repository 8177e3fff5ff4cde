// Issue 6 follow-up 40, bench only (appended to the GEMM module's text by ab_g1.py with
// AB_G1X=1): the runtime's one-group kernels with the activations by 16-byte loads and one
// 8-byte trade between lanes t and t ^ 2 (mx_matmul_frag.hip mx_matmul_frag_g1, XL = true):
// `_g1c` on 16 rows (against the runtime's `_g1c`) and `_g1` on 8-row tile pairs (against its `_g1`).
// Names: mx_matmul_frag_m16_bf16_w<W>_s1_g1x, mx_matmul_frag_m8_bf16_w<W>_s1_g1x.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
#define MX_G1XL(W)                                                                               \
  extern "C" __global__ void __launch_bounds__(32 * W)                                           \
      mx_matmul_frag_m16_bf16_w##W##_s1_g1x(MX_FRAG_ARGS(MxBf16)) {                              \
    mx_matmul_frag_g1<MxBf16, W, 2, 1, true, true>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre); \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(32 * W)                                           \
      mx_matmul_frag_m8_bf16_w##W##_s1_g1x(MX_FRAG_ARGS(MxBf16)) {                               \
    mx_matmul_frag_g1<MxBf16, W, 1, 2, false, true>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre); \
  }
MX_G1XL(3)
MX_G1XL(4)
MX_G1XL(5)
MX_G1XL(6)
MX_G1XL(7)
MX_G1XL(8)
#endif
