// com.mxfuse AddRmsNormMxQuant: [AllReduce (identity at world size 1)] -> residual Add -> RMSNorm
// (plain or Gemma) -> MXFP8 quantize, with the optional residual_out and normed (bf16) outputs.
//
// One block per row. Lane j of the block owns the 8-element chunks j, j + B, ... (B = blockDim.x,
// a multiple of the warp and so of 4), at most NCH of them (a template parameter, so the arrays
// stay in registers), kept between the sum-of-squares pass and the output pass, so every input byte
// is read once. gamma is loaded in the first pass too, so its latency overlaps the reduction.
// Small M wants many lanes per row (short per-lane chains); large M wants few (several blocks per
// SM): the host picks NCH and B (kernels/src/gpu/launch.rs, bench/gpu/mxgpu.py).
// S > 1 (Hopper, a cluster of S blocks per row): each block takes 1/S of the row's chunks, so a
// few rows still spread over many SMs (a lone SM ingests a 6144-wide bf16 row at ~64 B/cycle);
// the blocks exchange their partial sums of squares through distributed shared memory and every
// block adds the S partials in rank order, so all compute the same v.
// Many rows (persistent variant, NAME_p<NCH>): a grid of a few blocks per SM, each looping over
// rows blockIdx.x, + gridDim.x, ...: gamma is loaded once per block, and the next row's x / residual
// loads are issued before this row's block reduction and output pass, so the memory pipe stays busy
// across the barrier.
// Semantics (docs/ops.md): s = round_T(x + r) (or the f32 sum); v = f32(sum_f64(s^2) / H); n = s * (1 / sqrt(v + eps))
// (or s / sqrt(v + eps)); y = round_T(n * g) (or round_T(round_T(n) * g)); q/scale quantize y as T.

// The lane's chunks c = threadIdx.x + k B (k < NCH, c < chunks) of one row: x, and the residual
// when there is one, as fp32 (the loads are issued here and used by mx_norm_sum).
template <class T, int NCH>
MX_DEV void mx_norm_load(const typename T::storage* __restrict__ x,
                         const typename T::storage* __restrict__ res, int chunks, float xa[NCH][8],
                         float ra[NCH][8]) {
#pragma unroll
  for (int k = 0; k < NCH; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < chunks) {
      MxVec8<T>::load(x + 8 * c, xa[k]);
      if (res) MxVec8<T>::load(res + 8 * c, ra[k]);
    }
  }
}

// s = x + r (rounded to T unless MX_F_NO_ROUND_SUM) and the lane's f64 sum of the f32 squares.
template <class T, int NCH>
MX_DEV double mx_norm_sum(const float xa[NCH][8], const float ra[NCH][8], bool has_res, int chunks,
                          mx_u32 flags, float s[NCH][8]) {
  const bool round_sum = !(flags & MX_F_NO_ROUND_SUM);
  double ss = 0.0;
#pragma unroll
  for (int k = 0; k < NCH; ++k) {
    if ((int)threadIdx.x + k * (int)blockDim.x < chunks) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float v = has_res ? xa[k][i] + ra[k][i] : xa[k][i];
        s[k][i] = has_res && round_sum ? mx_round<T>(v) : v;
      }
      // Squares rounded to f32 (the graph's f32 Pow), summed in f64.
#pragma unroll
      for (int i = 0; i < 8; ++i) ss += (double)__fmul_rn(s[k][i], s[k][i]);
    }
  }
  return ss;
}

// The block's total of the lanes' ss (every lane gets it). warp_sums: 32 doubles of shared memory
// that no lane reads or writes between this call's barrier and the next call.
// docs/ops.md pins a 16-lane order (kernels::reference::math::lane_mean); this tree differs, which
// changes v only when the f64 sum is inexact -- never for bf16/f16 rows whose squares span fewer
// than ~24 binades (every check so far is bit-exact).
MX_DEV double mx_norm_block_sum(double ss, double* warp_sums) {
#pragma unroll
  for (int o = MX_WARP / 2; o > 0; o >>= 1) ss += MX_SHFL_XOR(ss, o);
  const int warp = threadIdx.x / MX_WARP, lane = threadIdx.x % MX_WARP;
  if (lane == 0) warp_sums[warp] = ss;
  __syncthreads();
  // Second level in parallel: every warp reduces the per-warp sums with the same shuffle tree,
  // so every lane gets the same total (a serial loop over 24 warps costs ~1000 cycles).
  const int warps = (blockDim.x + MX_WARP - 1) / MX_WARP;
  double total = lane < warps ? warp_sums[lane] : 0.0;
#pragma unroll
  for (int o = MX_WARP / 2; o > 0; o >>= 1) total += MX_SHFL_XOR(total, o);
  return total;
}

// The output pass of one row: residual_out, normed, q and scales of the lane's chunks.
template <class T, class G, int NCH>
MX_DEV void mx_norm_output(const float s[NCH][8], const float g[NCH][8], double total, int H,
                           float eps, mx_u32 flags, int chunks, mx_u8* __restrict__ q,
                           mx_u8* __restrict__ scale, typename T::storage* __restrict__ res_out,
                           typename T::storage* __restrict__ normed) {
  const int B = blockDim.x;
  const float v = (float)(total / (double)H);
  const float root = sqrtf(v + eps);
  const float inv = 1.0f / root;
  const bool use_div = (flags & MX_F_INV_DIV) != 0;
  const bool gemma = (flags & MX_F_GEMMA) != 0;
  const bool gamma_f32 = (flags & MX_F_GAMMA_F32) != 0;
#pragma unroll
  for (int k = 0; k < NCH; ++k) {
    const int c = threadIdx.x + k * B;
    // Whole quantizer groups are either in range or not (chunks % 4 == 0 and B % 4 == 0), but
    // every lane of the warp must reach the shuffles in mx_quant_group8.
    if (k * B >= chunks) break;  // uniform across the block
    const bool live = c < chunks;
    float y[8];
    if (live) {
      if (res_out) MxVec8<T>::store(res_out + 8 * c, s[k]);  // round_T(x + r) either way
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float n = use_div ? s[k][i] / root : s[k][i] * inv;
        // Gemma with gamma_in_f32 = 0: the graph adds 1 in gamma's own dtype.
        const float w = !gemma ? g[k][i] : gamma_f32 ? 1.0f + g[k][i] : mx_round<G>(1.0f + g[k][i]);
        y[i] = gamma_f32 ? mx_round<T>(n * w) : mx_round<T>(mx_round<T>(n) * w);
      }
      if (normed) MxVec8<T>::store(normed + 8 * c, y);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) y[i] = 0.0f;
    }
    mx_u32 lo, hi, sb;
    mx_quant_group8(y, flags, lo, hi, sb);
    if (live) mx_store_group8(q, scale, c, lo, hi, sb);
  }
}

template <class G, int NCH>
MX_DEV void mx_norm_load_gamma(const typename G::storage* __restrict__ gamma, int chunks,
                               float g[NCH][8]) {
#pragma unroll
  for (int k = 0; k < NCH; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < chunks) MxVec8<G>::load(gamma + 8 * c, g[k]);
  }
}

template <class T, class G, int NCH, int S>
MX_DEV void add_rmsnorm_mxquant_row(const typename T::storage* __restrict__ x,
                                    const typename T::storage* __restrict__ res,
                                    const typename G::storage* __restrict__ gamma,
                                    mx_u8* __restrict__ q, mx_u8* __restrict__ scale,
                                    typename T::storage* __restrict__ res_out,
                                    typename T::storage* __restrict__ normed, int H, float eps,
                                    mx_u32 flags) {
  const long long row = blockIdx.x / S;
  // This block's chunks: [c0, c0 + chunks); the host makes H / 32 a multiple of S, so whole
  // quantizer groups stay in one block.
  const int chunks = (H >> 3) / S;
  const int c0 = (int)(blockIdx.x % S) * chunks;
  x += row * H + 8 * c0;
  gamma += 8 * c0;
  if (res) res += row * H + 8 * c0;
  if (res_out) res_out += row * H + 8 * c0;
  if (normed) normed += row * H + 8 * c0;
  q += row * H + 8 * c0;
  scale += row * (H >> 5) + c0 / 4;

  float xa[NCH][8], ra[NCH][8], s[NCH][8], g[NCH][8];
  // gamma first: its latency overlaps the reduction.
  mx_norm_load_gamma<G, NCH>(gamma, chunks, g);
  mx_norm_load<T, NCH>(x, res, chunks, xa, ra);
  const double ss = mx_norm_sum<T, NCH>(xa, ra, res != nullptr, chunks, flags, s);
  __shared__ double warp_sums[1024 / 32];
  double total = mx_norm_block_sum(ss, warp_sums);
#if defined(MX_NV_CLUSTER)
  __shared__ double cluster_part;
  if (S > 1) {
    if (threadIdx.x == 0) cluster_part = total;
    mx_cluster_sync();
    total = 0.0;
    for (int r = 0; r < S; ++r) total += mx_dsmem_load(&cluster_part, (mx_u32)r);
    mx_cluster_arrive();  // done reading the others' cluster_part; waited for at the end
  }
#endif
  mx_norm_output<T, G, NCH>(s, g, total, H, eps, flags, chunks, q, scale, res_out, normed);
#if defined(MX_NV_CLUSTER)
  if (S > 1) mx_cluster_wait();  // no block leaves while another may still read its partial
#endif
}

template <class T, class G, int NCH>
MX_DEV void add_rmsnorm_mxquant_persistent(const typename T::storage* __restrict__ x,
                                           const typename T::storage* __restrict__ res,
                                           const typename G::storage* __restrict__ gamma,
                                           mx_u8* __restrict__ q, mx_u8* __restrict__ scale,
                                           typename T::storage* __restrict__ res_out,
                                           typename T::storage* __restrict__ normed, int H,
                                           float eps, mx_u32 flags, int rows) {
  const int chunks = H >> 3;
  float xa[NCH][8], ra[NCH][8], s[NCH][8], g[NCH][8];
  mx_norm_load_gamma<G, NCH>(gamma, chunks, g);
  // Two reduction buffers, alternating by row, so one barrier per row suffices: a lane writes row
  // i + 1's warp sum after passing row i's barrier, which every lane reaches only once done reading
  // row i - 1's buffer -- the one being overwritten.
  __shared__ double warp_sums[2][1024 / 32];
  long long row = blockIdx.x;
  if (row < rows) mx_norm_load<T, NCH>(x + row * H, res ? res + row * H : res, chunks, xa, ra);
  for (int it = 0; row < rows; row += gridDim.x, ++it) {
    const double ss = mx_norm_sum<T, NCH>(xa, ra, res != nullptr, chunks, flags, s);
    const long long next = row + gridDim.x;
    if (next < rows) mx_norm_load<T, NCH>(x + next * H, res ? res + next * H : res, chunks, xa, ra);
    const double total = mx_norm_block_sum(ss, warp_sums[it & 1]);
    mx_norm_output<T, G, NCH>(s, g, total, H, eps, flags, chunks, q + row * H,
                              scale + row * (H >> 5), res_out ? res_out + row * H : res_out,
                              normed ? normed + row * H : normed);
  }
}

// Kernel names: mx_add_rmsnorm_quant_<T>[_gf32]_c<NCH>; NCH = 1, 2 (B <= 1024), 3 (B <= 256; slower
// than 2 at M = 8192 on the H200, kept for tuning elsewhere), 4 (B <= 1024, up to H = 32768; may
// spill). The host's choice: kernels/src/gpu/launch.rs.
#define MX_DEFINE_NORM1(NAME, T, G, NCH, MAXB)                                                  \
  extern "C" __global__ void __launch_bounds__(MAXB)                                           \
      NAME(const T::storage* x, const T::storage* res, const G::storage* gamma, mx_u8* q,      \
           mx_u8* scale, T::storage* res_out, T::storage* normed, int H, float eps,             \
           unsigned flags) {                                                                    \
    add_rmsnorm_mxquant_row<T, G, NCH, 1>(x, res, gamma, q, scale, res_out, normed, H, eps,    \
                                          flags);                                               \
  }
// Persistent (NAME_p<NCH>, NCH = 1 (B <= 1024), 2 (B <= 512: 1024 would cap registers at 64 and
// spill the next row's buffers)): grid = a few blocks per SM, one more int parameter: rows.
#define MX_DEFINE_NORM_P1(NAME, T, G, NCH, MAXB)                                                \
  extern "C" __global__ void __launch_bounds__(MAXB)                                           \
      NAME(const T::storage* x, const T::storage* res, const G::storage* gamma, mx_u8* q,      \
           mx_u8* scale, T::storage* res_out, T::storage* normed, int H, float eps,             \
           unsigned flags, int rows) {                                                          \
    add_rmsnorm_mxquant_persistent<T, G, NCH>(x, res, gamma, q, scale, res_out, normed, H, eps, \
                                              flags, rows);                                     \
  }
#define MX_DEFINE_NORM(NAME, T, G)                                                              \
  MX_DEFINE_NORM1(NAME##_c1, T, G, 1, 1024)                                                     \
  MX_DEFINE_NORM1(NAME##_c2, T, G, 2, 1024)                                                     \
  MX_DEFINE_NORM1(NAME##_c3, T, G, 3, 256)                                                      \
  MX_DEFINE_NORM1(NAME##_c4, T, G, 4, 1024)                                                     \
  MX_DEFINE_NORM_P1(NAME##_p1, T, G, 1, 1024)                                                   \
  MX_DEFINE_NORM_P1(NAME##_p2, T, G, 2, 512)

// Split rows (one chunk per lane, a cluster of S blocks per row): NAME_c1_s<S>, S = 2, 4, 8; grid
// rows * S, B = H / (8 S) rounded up to the warp.
#if defined(MX_NV_CLUSTER)
#define MX_DEFINE_NORM_S1(NAME, T, G, S)                                                        \
  extern "C" __global__ void __launch_bounds__(1024) __cluster_dims__(S, 1, 1)                 \
      NAME(const T::storage* x, const T::storage* res, const G::storage* gamma, mx_u8* q,      \
           mx_u8* scale, T::storage* res_out, T::storage* normed, int H, float eps,             \
           unsigned flags) {                                                                    \
    add_rmsnorm_mxquant_row<T, G, 1, S>(x, res, gamma, q, scale, res_out, normed, H, eps, flags); \
  }
#define MX_DEFINE_NORM_SPLIT(NAME, T, G)                                                        \
  MX_DEFINE_NORM_S1(NAME##_c1_s2, T, G, 2)                                                      \
  MX_DEFINE_NORM_S1(NAME##_c1_s4, T, G, 4)                                                      \
  MX_DEFINE_NORM_S1(NAME##_c1_s8, T, G, 8)
#else
#define MX_DEFINE_NORM_SPLIT(NAME, T, G)
#endif
#define MX_DEFINE_NORM_ALL(NAME, T, G) MX_DEFINE_NORM(NAME, T, G) MX_DEFINE_NORM_SPLIT(NAME, T, G)

MX_DEFINE_NORM_ALL(mx_add_rmsnorm_quant_bf16, MxBf16, MxBf16)
MX_DEFINE_NORM_ALL(mx_add_rmsnorm_quant_bf16_gf32, MxBf16, MxF32)
MX_DEFINE_NORM_ALL(mx_add_rmsnorm_quant_f16, MxF16, MxF16)
MX_DEFINE_NORM_ALL(mx_add_rmsnorm_quant_f16_gf32, MxF16, MxF32)
MX_DEFINE_NORM_ALL(mx_add_rmsnorm_quant_f32, MxF32, MxF32)
