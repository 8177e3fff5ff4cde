// Issue 6 follow-up 36, bench only (appended to the GEMM module's text by ab_het.py with
// AB_BENCH=1): the runtime's `_t2h` (mx_matmul_frag.hip) at other warp counts, capped for two
// blocks an SM. Why: on the mixed grid the SM's time is its pair block's, a chain of K / (128 W)
// double-buffered iterations a warp; more warps shorten it if two blocks still fit an SM.
// Names: mx_matmul_frag_m8_bf16_w<W>_s1_t2hb. (W = 5 under __launch_bounds__(160, 2) got 168
// registers and spills from ptxas; __maxnreg__ asks for the 200 that two blocks allow.)
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
#define MX_T2HB(W, ATTR)                                                                         \
  extern "C" __global__ void ATTR mx_matmul_frag_m8_bf16_w##W##_s1_t2hb(MX_FRAG_ARGS(MxBf16)) {  \
    const int np = (N + 15) / 16 - (int)gridDim.y;                                               \
    if ((int)blockIdx.y < np)                                                                    \
      mx_matmul_frag_t2<W, 1, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre);            \
    else                                                                                         \
      mx_matmul_frag_t1h<W, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre, np);          \
  }
MX_T2HB(4, __launch_bounds__(128, 2))
MX_T2HB(5, __maxnreg__(200))  // two blocks: 10 warps of 200 registers
MX_T2HB(6, __launch_bounds__(192, 2))
#endif

// `_t2h` w4 whose pair warps first ask L2 for the last (8 - PF) / 8 of their K range of both tiles
// (cp.async.bulk.prefetch.L2, before the PDL wait: the weights are constants). Why: on the mixed
// grid the singles finish at about half time and the pair blocks' chain of DRAM round trips sets
// the SM's time while HBM has room; the prefetch turns the chain's tail into L2 hits.
// Names: mx_matmul_frag_m8_bf16_w4_s1_t2hp<PF>.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
#define MX_T2HP(PF)                                                                              \
  extern "C" __global__ void __launch_bounds__(128, 1)                                           \
      mx_matmul_frag_m8_bf16_w4_s1_t2hp##PF(MX_FRAG_ARGS(MxBf16)) {                              \
    const int np = (N + 15) / 16 - (int)gridDim.y;                                               \
    if ((int)blockIdx.y < np) {                                                                  \
      const MxFragWarp<4, 1, 1, 2> f(aq, as, wf, wsf, M, K);                                     \
      const int from = f.gb + (f.ge - f.gb) * PF / 8;                                            \
      mx_frag_prefetch_l2(wf, wsf, 2 * blockIdx.y, K, from, f.ge);                               \
      mx_frag_prefetch_l2(wf, wsf, 2 * blockIdx.y + 1, K, from, f.ge);                           \
      mx_matmul_frag_t2<4, 1, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre);            \
    } else {                                                                                     \
      mx_matmul_frag_t1h<4, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre, np);          \
    }                                                                                            \
  }
MX_T2HP(2)
MX_T2HP(4)
MX_T2HP(6)
#endif

// Every tile a one-tile block (`_t2h`'s singles only, np = 0, grid y = tiles), capped for three
// blocks an SM (168 registers). Why: the mixed grid's time is its pair blocks' chain of
// K / 512 iterations; singles take half of it, and at three blocks an SM 6144^2's 384 tiles fit one
// wave (2.9 an SM). Name: mx_matmul_frag_m8_bf16_w4_s1_t2h1.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
extern "C" __global__ void __launch_bounds__(128, 3) mx_matmul_frag_m8_bf16_w4_s1_t2h1(MX_FRAG_ARGS(MxBf16)) {
  mx_matmul_frag_t1h<4, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre, 0);
}
#endif

// `_t2h` whose one-tile blocks are the m8 kernel's (mx_matmul_frag, W = 4, U groups a batch) on
// the shifted weights: U = 1 keeps half a pair warp's bytes in flight, so a single ends with the
// pair beside it instead of at half time, leaving the pair more of the bandwidth early; U = 2 is
// the runtime's m8 kernel. Names: mx_matmul_frag_m8_bf16_w4_s1_t2hm<U>.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
#define MX_T2HM(U)                                                                               \
  extern "C" __global__ void __launch_bounds__(128, 1)                                           \
      mx_matmul_frag_m8_bf16_w4_s1_t2hm##U(MX_FRAG_ARGS(MxBf16)) {                               \
    const int np = (N + 15) / 16 - (int)gridDim.y;                                               \
    if ((int)blockIdx.y < np) {                                                                  \
      mx_matmul_frag_t2<4, 1, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre);            \
    } else {                                                                                     \
      const auto o = MX_FRAG_OUT(MxBf16);                                                        \
      mx_matmul_frag<MxBf16, 4, 1, 1, U>(aq, as, wf + (long long)np * (K >> 5) * 32,             \
                                         wsf + (long long)np * (K >> 7) * 16,                    \
                                         MxShiftOut<decltype(o)>{o, 16 * np}, M, K, pre);        \
    }                                                                                            \
  }
MX_T2HM(1)
MX_T2HM(2)
#endif
