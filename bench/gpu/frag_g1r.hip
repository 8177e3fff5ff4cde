// Issue 6 follow-up 41, bench only (appended to the GEMM module's text by ab_g1.py with
// AB_G1R=1): the runtime's 16-row one-group kernels under a register cap, so that blocks of the
// next PDL launch fit beside a full grid's (6144 x 768: 384 blocks of 6 warps, 2.9 an SM; at the
// runtime's 91 registers no fourth block fits, so the next launch's weight loads wait for this
// launch's blocks to exit). `_g1c` (weights converted before the wait) and `_g1` on 16 rows
// (converted after), capped at B blocks an SM.
// Names: mx_matmul_frag_m16_bf16_w<W>_s1_<g1c|g1n>b<B>.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
#define MX_G1R(W, B)                                                                             \
  extern "C" __global__ void __launch_bounds__(32 * W, B)                                        \
      mx_matmul_frag_m16_bf16_w##W##_s1_g1cb##B(MX_FRAG_ARGS(MxBf16)) {                          \
    mx_matmul_frag_g1<MxBf16, W, 2, 1, true>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre); \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(32 * W, B)                                        \
      mx_matmul_frag_m16_bf16_w##W##_s1_g1nb##B(MX_FRAG_ARGS(MxBf16)) {                          \
    mx_matmul_frag_g1<MxBf16, W, 2, 1, false>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre); \
  }
MX_G1R(6, 3)
MX_G1R(6, 4)
MX_G1R(6, 5)
MX_G1R(4, 6)
MX_G1R(4, 7)
MX_G1R(8, 3)
MX_G1R(8, 4)
#endif
