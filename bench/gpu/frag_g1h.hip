// Issue 6 follow-up 43, bench only (appended to the GEMM module's text by ab_g1.py with
// AB_G1H=1): the runtime's `_g1c` with more of its work moved ahead of the PDL wait
// (mx_matmul_frag.hip mx_matmul_frag_g1, HO): the activation rows' addresses (HO 1, ~50 integer
// instructions a warp that ptxas otherwise places after the wait), the weights' scale decode (HO 2),
// or both (HO 3). Why: in `_g1c`'s SASS a warp runs ~280 instructions from the wait to the
// block's barrier, and two groups a warp (frag_g2.hip) or an exchange of 8 bytes between lanes
// (session 34 call 1) lost 0.1-0.5 us there: the path after the wait is issue-bound. Same
// arithmetic: the same bits. Names: mx_matmul_frag_m16_bf16_w<W>_s1_g1h<HO>.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
#define MX_G1H(W, HO)                                                                            \
  extern "C" __global__ void __launch_bounds__(32 * W)                                           \
      mx_matmul_frag_m16_bf16_w##W##_s1_g1h##HO(MX_FRAG_ARGS(MxBf16)) {                          \
    mx_matmul_frag_g1<MxBf16, W, 2, 1, true, 1, HO>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre); \
  }
#define MX_G1H_W(W) MX_G1H(W, 1) MX_G1H(W, 2) MX_G1H(W, 3)
MX_G1H_W(3)
MX_G1H_W(4)
MX_G1H_W(5)
MX_G1H_W(6)
MX_G1H_W(7)
MX_G1H_W(8)
#endif
// The runtime's 8-row `_g1` (tile pairs, weights converted after the wait) with the activation
// rows' addresses computed before the wait (HO 1): mx_matmul_frag_m8_bf16_w<W>_s1_g1h1.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
#define MX_G1H8(W)                                                                               \
  extern "C" __global__ void __launch_bounds__(32 * W)                                           \
      mx_matmul_frag_m8_bf16_w##W##_s1_g1h1(MX_FRAG_ARGS(MxBf16)) {                              \
    mx_matmul_frag_g1<MxBf16, W, 1, 2, false, 1, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre); \
  }
MX_G1H8(3)
MX_G1H8(4)
MX_G1H8(5)
MX_G1H8(6)
MX_G1H8(7)
MX_G1H8(8)
#endif
