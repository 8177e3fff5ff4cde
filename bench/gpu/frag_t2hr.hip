// Bench only (issue 6 follow-up 46; appended to the GEMM module's text by ab_het.py, AB_BENCH=r):
// `_t2h` whose pair warps ask L2 for the first P groups of their range after the one the prologue
// loads (cp.async.bulk.prefetch.L2, before the PDL wait). Why: at 6144² a launch's one-tile blocks
// exit at about half time, and the next launch's first pair blocks take their place and wait there
// with one group loaded, while the SMs stream only the pair blocks' 4 warps. Asking L2 for P more
// groups then moves part of the next launch's weight stream into that half. (Session 16's ramp
// prefetch on the m8 kernel, whose blocks leave no room for the next launch's, was within noise.)
// Same arithmetic and bits as `_t2h`.
template <int P>
MX_DEV void mx_t2_ramp(const uint4* wf, const mx_u32* wsf, int N, int K) {
  // MxFragWarp's range at W = 4, S = 1; the pair's tiles 2 blockIdx.y and the next.
  const int warp = threadIdx.x >> 5, G = K >> 7, per = (G + 3) / 4;
  const int gb = min(G, warp * per), ge = min(G, gb + per), tile = 2 * blockIdx.y;
  mx_frag_prefetch_l2(wf, wsf, tile, K, gb + 1, min(ge, gb + 1 + P));
  if (tile + 1 < (N + 15) / 16) mx_frag_prefetch_l2(wf, wsf, tile + 1, K, gb + 1, min(ge, gb + 1 + P));
}
#define MX_DEFINE_T2HR(P)                                                                        \
  extern "C" __global__ void __launch_bounds__(128, 1) MX_FRAG(m8_bf16_w4_s1_t2hr##P)(MX_FRAG_ARGS(MxBf16)) { \
    const int np = (N + 15) / 16 - (int)gridDim.y;                                               \
    if ((int)blockIdx.y < np) {                                                                  \
      if (pre & 1) mx_t2_ramp<P>(wf, wsf, N, K);                                                 \
      mx_matmul_frag_t2<4, 1, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre);            \
    } else {                                                                                     \
      mx_matmul_frag_t1h<4, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre, np);          \
    }                                                                                            \
  }
MX_DEFINE_T2HR(2)
MX_DEFINE_T2HR(4)
MX_DEFINE_T2HR(6)
MX_DEFINE_T2HR(11)
