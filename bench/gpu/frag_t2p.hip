// Issue 6 follow-up 24 (bench-only): the runtime's two-tile m8 loop `_t2` with an L2 prefetch PFD
// groups ahead of each weight stream (mx_matmul_frag.hip mx_matmul_frag_t2<W, 1, S, PFD>); bits
// equal to `_t2` at the same (W, S). Appended to the GEMM module's text by bench/gpu/ab_t2p.py;
// the runtime never compiles it. Launch as `_t2`.
#define MX_T2P1(W, S, D, ATTR)                                                                    \
  extern "C" __global__ void __launch_bounds__(32 * W, 1)                                        \
      ATTR mx_matmul_frag_m8_bf16_w##W##_s##S##_t2p##D(const mx_u8* aq, const mx_u8* as,         \
                                                       const uint4* wf, const mx_u32* wsf,       \
                                                       MxBf16::storage* y, int M, int N, int K,  \
                                                       int pre, MxEpi ep) {                      \
    mx_matmul_frag_t2<W, 1, S, D>(aq, as, wf, wsf, y, M, N, K, pre, ep);                         \
  }
#define MX_T2P(D)                                    \
  MX_T2P1(4, 1, D, )                                 \
  MX_T2P1(8, 1, D, )                                 \
  MX_T2P1(8, 2, D, __cluster_dims__(2, 1, 1))
MX_T2P(2)
MX_T2P(4)
MX_T2P(8)
