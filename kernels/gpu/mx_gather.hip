// com.mxfuse MxGatherDequantize and MxGatherMatMul (docs/ops.md): stacked MX weights (MoE
// experts, embedding tables) read only where an index selects them.
//
// Why on the device: without these kernels a device placement dequantized every expert every
// step (MxDequantize of the whole stack) and left the Gather and the bmm to ORT's CPU EP, copying
// the dequantized stack to the host: for a real MoE most of the step's time. Here a step reads the
// selected experts' bytes once, in place.
//
// Indices (int32 or int64, `idx64`) are checked on the device: one out of [-D, D) makes the kernel
// write NaN where it would have read, and record the offending value in err[1] and a flag in
// err[0] (several bad indices: which value is kept is unspecified). The host reads err after the
// step's synchronization and fails the run with that value; it never reads out of bounds.

// MxGatherDequantize: y = Gather(DequantizeLinear(x, scale), idx, axis g). x is seen as
// [outer, D, inner] around the gathered axis and y as [outer, I, inner] (I indices); output
// element (o, j, r) is x's element (o, idx[j], r) dequantized with its own scale, through x's
// scale map (mx_dequantize_at): the bits of MxDequantize then Gather.
template <class T, int FMT>
MX_DEV void mx_gather_dequantize_body(const mx_u8* __restrict__ x, const mx_u8* __restrict__ scale,
                                      const void* __restrict__ idx, int idx64,
                                      typename T::storage* __restrict__ y, long long elements,
                                      long long count, long long d, long long inner_g,
                                      long long axis_len, long long inner, long long block,
                                      long long so, long long sb, long long si, mx_u64* err) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < elements; e += stride) {
    const long long t = e / inner_g;
    const long long r = e - t * inner_g;
    const long long o = t / count;
    const long long j = t - o * count;
    const long long at = mx_gather_index(idx, idx64, j, d, err);
    y[e] = T::from_f32(at < 0 ? mx_bits_f32(0x7fc00000u)
                              : mx_dequantize_at<FMT>(x, scale, (o * d + at) * inner_g + r,
                                                      axis_len, inner, block, so, sb, si));
  }
}

// Kernel names: mx_gather_dequantize_<e4m3|e5m2|e2m1>_<T>.
#define MX_DEFINE_GDEQ1(NAME, T, FMT)                                                           \
  extern "C" __global__ void NAME(const mx_u8* x, const mx_u8* scale, const void* idx,         \
                                  int idx64, T::storage* y, long long elements, long long count, \
                                  long long d, long long inner_g, long long axis_len,           \
                                  long long inner, long long block, long long so, long long sb, \
                                  long long si, mx_u64* err) {                                  \
    MX_PDL_ENTRY();                                                                             \
    mx_gather_dequantize_body<T, FMT>(x, scale, idx, idx64, y, elements, count, d, inner_g,     \
                                      axis_len, inner, block, so, sb, si, err);                 \
  }
#define MX_DEFINE_GDEQ(T, NAME)                             \
  MX_DEFINE_GDEQ1(mx_gather_dequantize_e4m3_##NAME, T, 0)   \
  MX_DEFINE_GDEQ1(mx_gather_dequantize_e5m2_##NAME, T, 1)   \
  MX_DEFINE_GDEQ1(mx_gather_dequantize_e2m1_##NAME, T, 2)

MX_DEFINE_GDEQ(MxBf16, bf16)
MX_DEFINE_GDEQ(MxF16, f16)
MX_DEFINE_GDEQ(MxF32, f32)

// ---------------------------------------------------------------------------------------------
// MxGatherMatMul: y[s] = W[idx[s]] a[s] (weight first: a [S, K, 1], y [S, N, 1]) or a[s] W[idx[s]]
// (weight second: a [S, P, K], y [S, P, N]), a float, W MX with blocks of 32 along K. The
// sample dim broadcasts (a_one: a has one sample; idx_one: one index for every sample).
// Numerics: f32 products of the activation and the dequantized weight, f32 sums, the MxMatMul
// epilogue (mx_epilogue: none for the gathered op), one rounding to TO; only the summation order
// differs from the CPU kernels (docs/ops.md's GEMM tolerance).
//
// The same kernels are the weight-only MxMatMul (a float a [M, K] times one MX weight [N, K] or
// [K, N], `mx_matmul_float_a_*` below): one sample, no indices, M rows.

// The rows p0 .. p0 + MX_GMM_ROWS - 1 of sample s's activation a warp multiplies at once.
#define MX_GMM_ROWS 8
// Weight loads (16 bytes a lane) a lane issues before it uses the first of them.
#define MX_GMM_UNROLL 4
// Warps a block (one output column each).
#define MX_GMM_WARPS 8

// Sixteen E4M3 bytes (byte i -> out[i]) as fp32, exact (0x7F / 0xFF -> NaN). sm_89+: eight
// pair converts to f16x2 and sixteen f16 -> f32 converts instead of the bit routine.
MX_DEV void mx_e4m3x16_to_f32(uint4 q, float out[16]) {
  const mx_u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#if defined(MX_NV_CVT_E4M3)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx_u32 f2;
      asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(f2) : "h"((unsigned short)(w[i] >> (16 * h))));
      out[4 * i + 2 * h] = MxF16::to_f32((mx_u16)(f2 & 0xffffu));
      out[4 * i + 2 * h + 1] = MxF16::to_f32((mx_u16)(f2 >> 16));
    }
#else
#pragma unroll
    for (int j = 0; j < 4; ++j) out[4 * i + j] = mx_e4m3_to_f32((w[i] >> (8 * j)) & 0xffu);
#endif
  }
}

// Weights in the `[E, N, K]` E4M3 layout (the provider's prepack: FP4 widened, `[E, K, N]`
// transposed): one warp per output column n of one sample and up to MX_GMM_ROWS activation rows.
// A lane takes 16 consecutive weight bytes a step (one 16-byte load, inside one k-block: one
// scale) and issues MX_GMM_UNROLL such loads before it uses the first (the decode GEMV is bound
// by the weight bytes in flight: one load a lane kept a 1536-column grid at 17 % of HBM), then for
// each row its 16 activations and the block-partial dot times the scale. Grid: x = sample (the
// samples of one column tile run together, so samples that chose the same expert read its rows
// from L2), y = column tile of MX_GMM_WARPS, z = row chunk.
template <class TA, class TO>
MX_DEV void mx_gather_matmul_nk(const typename TA::storage* __restrict__ a,
                                const mx_u8* __restrict__ b, const mx_u8* __restrict__ bs,
                                const void* __restrict__ idx, int idx64,
                                typename TO::storage* __restrict__ y, int P, int K, int E, int N,
                                int a_one, int idx_one, mx_u64* err, MxEpi ep) {
  const int lane = threadIdx.x % MX_WARP, warp = threadIdx.x / MX_WARP;
  const int s = blockIdx.x, n = blockIdx.y * MX_GMM_WARPS + warp, p0 = blockIdx.z * MX_GMM_ROWS;
  if (n >= N) return;
  const int rows = min(MX_GMM_ROWS, P - p0);
  const long long e = mx_gather_index(idx, idx64, idx_one ? 0 : s, E, err);
  const long long sa = a_one ? 0 : s;
  typename TO::storage* yp = y + ((long long)s * P + p0) * N + n;
  if (e < 0) {
    if (lane == 0)
      for (int r = 0; r < rows; ++r) yp[(long long)r * N] = TO::from_f32(mx_bits_f32(0x7fc00000u));
    return;
  }
  const mx_u8* w = b + (e * N + n) * (long long)K;
  const mx_u8* ws = bs + (e * N + n) * (long long)(K >> 5);
  const typename TA::storage* ap = a + (sa * P + p0) * (long long)K;
  float acc[MX_GMM_ROWS];
#pragma unroll
  for (int r = 0; r < MX_GMM_ROWS; ++r) acc[r] = 0.0f;
  constexpr int STEP = 16 * MX_WARP;
  for (int k0 = 16 * lane; k0 < K; k0 += STEP * MX_GMM_UNROLL) {
    uint4 q[MX_GMM_UNROLL];
    mx_u32 sb[MX_GMM_UNROLL];
#pragma unroll
    for (int u = 0; u < MX_GMM_UNROLL; ++u) {
      const int k = k0 + u * STEP;
      if (k < K) {
        q[u] = *reinterpret_cast<const uint4*>(w + k);
        sb[u] = ws[k >> 5];
      }
    }
#pragma unroll
    for (int u = 0; u < MX_GMM_UNROLL; ++u) {
      const int k = k0 + u * STEP;
      if (k < K) {
        float wv[16];
        mx_e4m3x16_to_f32(q[u], wv);
        const float sc = mx_e8m0_to_f32(sb[u]);
#pragma unroll
        for (int r = 0; r < MX_GMM_ROWS; ++r) {
          if (r < rows) {
            float av[16];
            mx_load<TA, 8>(ap + (long long)r * K + k, av);
            mx_load<TA, 8>(ap + (long long)r * K + k + 8, av + 8);
            float part = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; ++i) part = fmaf(av[i], wv[i], part);
            acc[r] = fmaf(part, sc, acc[r]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < MX_GMM_ROWS; ++r) {
#pragma unroll
    for (int off = MX_WARP / 2; off > 0; off >>= 1) acc[r] += MX_SHFL_XOR(acc[r], off);
  }
  if (lane == 0)
    for (int r = 0; r < rows; ++r)
      yp[(long long)r * N] = TO::from_f32(mx_epilogue<TO>(ep, (long long)s * P + p0 + r, n, acc[r]));
}

// Any weight layout and format (experts that are not session constants): one thread per output
// element, K walked serially. `nk`: b [E, N, K] + [E, N, K/32], else [E, K, N] + [E, K/32, N]
// (then neighbouring threads read neighbouring bytes); FMT 0 = E4M3, 2 = E2M1 (two a byte, the
// low nibble first). Grid: x = column tile of blockDim, y = sample, z = activation row.
template <class TA, class TO>
MX_DEV void mx_gather_matmul_any(const typename TA::storage* __restrict__ a,
                                 const mx_u8* __restrict__ b, const mx_u8* __restrict__ bs,
                                 const void* __restrict__ idx, int idx64,
                                 typename TO::storage* __restrict__ y, int P, int K, int E, int N,
                                 int a_one, int idx_one, int nk, int fp4, mx_u64* err,
                                 MxEpi ep) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y, p = blockIdx.z;
  if (n >= N) return;
  typename TO::storage* yp = y + ((long long)s * P + p) * N + n;
  const long long e = mx_gather_index(idx, idx64, idx_one ? 0 : s, E, err);
  if (e < 0) {
    *yp = TO::from_f32(mx_bits_f32(0x7fc00000u));
    return;
  }
  const typename TA::storage* ap = a + ((a_one ? 0 : (long long)s) * P + p) * (long long)K;
  const long long base = e * N * (long long)K, sbase = base >> 5;
  float acc = 0.0f;
  for (int kb = 0; kb < (K >> 5); ++kb) {
    const long long si = sbase + (nk ? (long long)n * (K >> 5) + kb : (long long)kb * N + n);
    float part = 0.0f;
    for (int i = 0; i < 32; ++i) {
      const int k = 32 * kb + i;
      const long long at = base + (nk ? (long long)n * K + k : (long long)k * N + n);
      const float v = fp4 ? mx_e2m1_to_f32((mx_u32)(b[at >> 1] >> ((at & 1) * 4)))
                          : mx_e4m3_to_f32(b[at]);
      part = fmaf(TA::to_f32(ap[k]), v, part);
    }
    acc = fmaf(part, mx_e8m0_to_f32(bs[si]), acc);
  }
  *yp = TO::from_f32(mx_epilogue<TO>(ep, (long long)s * P + p, n, acc));
}

// Kernel names: mx_gather_matmul_<nk|any>_<TA>_<TO> and the weight-only MxMatMul's
// mx_matmul_float_a_<nk|any>_<TA>_<TO> (the same bodies on one weight: grid x = 1, no indices).
#define MX_DEFINE_GMM1(TA, NA, TO, NO)                                                          \
  extern "C" __global__ void __launch_bounds__(MX_GMM_WARPS * MX_WARP)                          \
      mx_gather_matmul_nk_##NA##_##NO(const TA::storage* a, const mx_u8* b, const mx_u8* bs,     \
                                      const void* idx, int idx64, TO::storage* y, int P, int K, \
                                      int E, int N, int a_one, int idx_one, mx_u64* err) {       \
    MX_PDL_ENTRY();                                                                             \
    const MxEpi none = {nullptr, 0, 0, 1.0f, 1.0f};                                             \
    mx_gather_matmul_nk<TA, TO>(a, b, bs, idx, idx64, y, P, K, E, N, a_one, idx_one, err,       \
                                none);                                                          \
  }                                                                                             \
  extern "C" __global__ void mx_gather_matmul_any_##NA##_##NO(                                  \
      const TA::storage* a, const mx_u8* b, const mx_u8* bs, const void* idx, int idx64,        \
      TO::storage* y, int P, int K, int E, int N, int a_one, int idx_one, int nk, int fp4,      \
      mx_u64* err) {                                                                            \
    MX_PDL_ENTRY();                                                                             \
    const MxEpi none = {nullptr, 0, 0, 1.0f, 1.0f};                                             \
    mx_gather_matmul_any<TA, TO>(a, b, bs, idx, idx64, y, P, K, E, N, a_one, idx_one, nk, fp4,  \
                                 err, none);                                                    \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(MX_GMM_WARPS * MX_WARP)                          \
      mx_matmul_float_a_nk_##NA##_##NO(const TA::storage* a, const mx_u8* b, const mx_u8* bs,    \
                                       TO::storage* y, int M, int K, int N, MxEpi ep) {          \
    MX_PDL_ENTRY();                                                                             \
    mx_gather_matmul_nk<TA, TO>(a, b, bs, nullptr, 0, y, M, K, 1, N, 1, 1, nullptr, ep);        \
  }                                                                                             \
  extern "C" __global__ void mx_matmul_float_a_any_##NA##_##NO(                                 \
      const TA::storage* a, const mx_u8* b, const mx_u8* bs, TO::storage* y, int M, int K,      \
      int N, int nk, int fp4, MxEpi ep) {                                                       \
    MX_PDL_ENTRY();                                                                             \
    mx_gather_matmul_any<TA, TO>(a, b, bs, nullptr, 0, y, M, K, 1, N, 1, 1, nk, fp4, nullptr,   \
                                 ep);                                                           \
  }
#define MX_DEFINE_GMM(TA, NA)              \
  MX_DEFINE_GMM1(TA, NA, MxBf16, bf16)     \
  MX_DEFINE_GMM1(TA, NA, MxF16, f16)       \
  MX_DEFINE_GMM1(TA, NA, MxF32, f32)

MX_DEFINE_GMM(MxBf16, bf16)
MX_DEFINE_GMM(MxF16, f16)
MX_DEFINE_GMM(MxF32, f32)
