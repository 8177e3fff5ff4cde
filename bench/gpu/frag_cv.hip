// Issue 6 follow-up 23 (bench-only): the fragment GEMM loops `_fs` (16-row tiles) and `_t2`
// (8-row tiles, two 16-column tiles a warp) with the weights' e4m3 -> f16 conversion done by
// integer ops (CV = 1) and also the activations' (CV = 2), mx_matmul_frag.hip's
// mx_frag_mma_cv; bits equal to the runtime's `_fs` / `_t2` at the same (W, S). Appended to the
// GEMM module's text by bench/gpu/ab_cv.py; the runtime never compiles it.
// Launch as the runtime's kernels; pre & 4: the weights hold e4m3 NaN codes.
#define MX_CV_FS1(W, S, CV, ATTR)                                                                 \
  extern "C" __global__ void __launch_bounds__(32 * W, (W < 8 ? 12 / W : 1))                    \
      ATTR mx_matmul_frag_m16_bf16_w##W##_s##S##_fs_cv##CV(                                      \
          const mx_u8* aq, const mx_u8* as, const uint4* wf, const mx_u32* wsf,                  \
          MxBf16::storage* y, int M, int N, int K, int pre, MxEpi ep) {                          \
    mx_matmul_frag_m16_fs<W, S, CV>(aq, as, wf, wsf, y, M, N, K, pre, ep);                       \
  }
#define MX_CV_T2_1(W, S, CV, ATTR)                                                                \
  extern "C" __global__ void __launch_bounds__(32 * W, 1)                                        \
      ATTR mx_matmul_frag_m8_bf16_w##W##_s##S##_t2_cv##CV(const mx_u8* aq, const mx_u8* as,      \
                                                          const uint4* wf, const mx_u32* wsf,    \
                                                          MxBf16::storage* y, int M, int N,      \
                                                          int K, int pre, MxEpi ep) {            \
    mx_matmul_frag_t2<W, 1, S, CV>(aq, as, wf, wsf, y, M, N, K, pre, ep);                        \
  }
#define MX_CV_BOTH(CV)                                   \
  MX_CV_FS1(2, 1, CV, )                                  \
  MX_CV_FS1(4, 1, CV, )                                  \
  MX_CV_FS1(8, 1, CV, )                                  \
  MX_CV_FS1(4, 2, CV, __cluster_dims__(2, 1, 1))         \
  MX_CV_T2_1(4, 1, CV, )                                 \
  MX_CV_T2_1(8, 1, CV, )                                 \
  MX_CV_T2_1(4, 2, CV, __cluster_dims__(2, 1, 1))        \
  MX_CV_T2_1(8, 2, CV, __cluster_dims__(2, 1, 1))
MX_CV_BOTH(1)
MX_CV_BOTH(2)

// Throughput probes: every lane converts `iters` x 8 independent words; out[] keeps the results
// live. mode 0: cvt.rn.f16x2.e4m3x2 (F2FP, two conversions a word half); mode 1: the integer form
// (PRMT, shift, AND). Lanes x iters x 16 conversions / (time x clock x SMs) = conversions a clock
// an SM.
extern "C" __global__ void mx_cv_probe(mx_u32* out, int iters, int mode) {
  mx_u32 v[8], acc[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    v[i] = (threadIdx.x * 2654435761u) ^ (i * 0x9e3779b9u);
    acc[i] = 0;
  }
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      mx_u32 a, b;
      if (mode == 0) {
        a = mx_e4m3x2_to_f16x2(v[i]);
        b = mx_e4m3x2_hi_to_f16x2<true>(v[i]);
      } else {
        a = mx_e4m3x2_to_f16x2_m8<0, 1>(v[i]);
        b = mx_e4m3x2_to_f16x2_m8<2, 3>(v[i]);
      }
      acc[i] ^= a + b;
      v[i] += 0x01010101u;
    }
  }
  mx_u32 r = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) r ^= acc[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = r;
}
