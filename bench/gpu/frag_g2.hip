// Issue 6 follow-up 42, bench only (appended to the GEMM module's text by ab_g1.py with
// AB_G2=1): the one-group kernels on two groups a warp (mx_matmul_frag.hip mx_matmul_frag_g1, GP
// = 2): W = K / 256 warps a block, every weight byte still requested before the PDL wait, half
// the warps of `_g1c` / `_g1`. Why: at 6144 x 768 M = 16 `_g1c`'s 384 blocks of 6 warps (91
// registers) fill the SMs (2.9 blocks an SM, room for 3), so the next PDL launch's blocks (and
// their weight loads) wait for this launch's to exit; at M <= 8 `_g1`'s 192 pair blocks leave
// room. Same arithmetic as the m16 / m8 kernel at W = K / 256: the same bits.
// Names: mx_matmul_frag_m16_bf16_w<W>_s1_g2 (one tile a warp), mx_matmul_frag_m8_bf16_w<W>_s1_g2
// (tile pairs).
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
#define MX_G2(W)                                                                                 \
  extern "C" __global__ void __launch_bounds__(32 * W)                                           \
      mx_matmul_frag_m16_bf16_w##W##_s1_g2(MX_FRAG_ARGS(MxBf16)) {                               \
    mx_matmul_frag_g1<MxBf16, W, 2, 1, false, 2>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre); \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(32 * W)                                           \
      mx_matmul_frag_m8_bf16_w##W##_s1_g2(MX_FRAG_ARGS(MxBf16)) {                                \
    mx_matmul_frag_g1<MxBf16, W, 1, 2, false, 2>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre); \
  }
MX_G2(2)
MX_G2(3)
MX_G2(4)
#endif
