// com.mxfuse AddRmsNormMxQuant: [AllReduce (identity at world size 1)] -> residual Add -> RMSNorm
// (plain or Gemma) -> MXFP8 quantize, with the optional residual_out and normed (bf16) outputs.
//
// One block per row. Lane j of the block owns the 8-element chunks j, j + B, ... (B = blockDim.x,
// a multiple of the warp and so of 4), at most NCH of them (a template parameter, so the arrays
// stay in registers), kept between the sum-of-squares pass and the output pass, so every input byte
// is read once. The chunks stay packed in their storage type between the passes (4 registers per
// 8 bf16/f16 values instead of 8 floats; the f32 values are re-derived with exact conversions), so
// a block of few lanes with several chunks each fits several times into an SM's registers: many
// rows' loads in flight per SM at large M. gamma is loaded with x, so its latency overlaps the
// reduction. Small M wants many lanes per row (short per-lane chains); large M wants several rows
// per SM: the host picks NCH and B (kernels/src/gpu/launch.rs + thresholds.rs, bench/gpu/mxgpu.py).
// S > 1 (Hopper, a cluster of S blocks per row): each block takes 1/S of the row's chunks, so a
// few rows still spread over many SMs (a lone SM issues a whole 6144-wide row's work); every warp
// pushes its partial sum of squares into every block's shared memory with st.async, which completes
// the bytes on that block's transaction barrier (mbarrier); each block waits for its S x warps
// partials and adds them in (rank, warp) order, so all compute the same v. No block sum, no cluster
// barrier and no memory fence on the way (the previous release / acquire cluster barrier brought a
// MEMBAR.ALL.GPU: ~850 cycles at M = 8). A block leaves only after every partial has arrived in its
// own shared memory, so no barrier at exit either. The latency-bound small-M kernels also store
// residual_out in the first pass, and the output math is select-based (one branch per flag set
// instead of three per element).
// Semantics (docs/ops.md): s = round_T(x + r) (or the f32 sum); v = f32(sum_f64(s^2) / H); n = s * (1 / sqrt(v + eps))
// (or s / sqrt(v + eps)); y = round_T(n * g) (or round_T(round_T(n) * g)); q/scale quantize y as T.

// Tried and dropped (bench-only kernels removed in session 17): streaming (evict-first) stores, no
// gain at M = 8192 (`_cs`, BENCHMARKS.md issue 6 follow-up, 2026-11-30); the previous split-row
// exchange (block sum, DSMEM stores, release / acquire cluster barrier), 2.76 vs 2.64 us at M = 8
// (`_x`, follow-up 2).

// The lean split-row kernel (`_s8_lean`, issue 6 follow-up 10; launch.rs takes it for exactly this case): the M = 8 case
// as compile-time constants -- H = LH (template), these flags, residual / residual_out / normed all
// present, B = LH / (8 S) lanes (a whole number of warps, every lane live), 32-bit offsets (M * H <
// 2^31) -- so the flag tests, the live predicates, the 64-bit index math and the generic partial-sum
// loop leave the SASS. Same arithmetic in the same order: bit-identical to the generic kernel.
#define MX_NORM_LEAN_FLAGS (MX_F_GEMMA | MX_F_GAMMA_F32)

// Eight consecutive elements in their storage type, as 32-bit words (4 for bf16/f16, 8 for f32).
template <class T>
struct MxRaw8 {
  static constexpr int W = (int)sizeof(typename T::storage) * 2;
  mx_u32 w[W];
  MX_DEV void load(const typename T::storage* p) {
    const uint4* v = reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int j = 0; j < W / 4; ++j) {
      const uint4 u = v[j];
      w[4 * j] = u.x; w[4 * j + 1] = u.y; w[4 * j + 2] = u.z; w[4 * j + 3] = u.w;
    }
  }
  MX_DEV void store(typename T::storage* p) const {
    uint4* v = reinterpret_cast<uint4*>(p);
#pragma unroll
    for (int j = 0; j < W / 4; ++j) v[j] = make_uint4(w[4 * j], w[4 * j + 1], w[4 * j + 2], w[4 * j + 3]);
  }
  // Exact widening to f32.
  MX_DEV void unpack(float out[8]) const {
    if constexpr (W == 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        out[2 * i] = T::to_f32((mx_u16)(w[i] & 0xffffu));
        out[2 * i + 1] = T::to_f32((mx_u16)(w[i] >> 16));
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) out[i] = mx_bits_f32(w[i]);
    }
  }
  // Round to T (T::from_f32, as MxVec8<T>::store).
  MX_DEV void pack(const float v[8]) {
    if constexpr (W == 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        w[i] = (mx_u32)T::from_f32(v[2 * i]) | ((mx_u32)T::from_f32(v[2 * i + 1]) << 16);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) w[i] = mx_f32_bits(v[i]);
    }
  }
  // Hides the words' values from the compiler, so the f32 values are re-derived from the packed
  // registers after a barrier instead of being kept alive across it (register pressure).
  MX_DEV void opaque() {
#pragma unroll
    for (int i = 0; i < W; ++i) {
#if defined(MX_HIP)
      asm volatile("" : "+v"(w[i]));  // a vector register: "r" is a scalar one on AMDGPU
#else
      asm volatile("" : "+r"(w[i]));
#endif
    }
  }
};

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
  // so every lane gets the same total (a serial loop over 24 warps costs ~1000 cycles; skipping
  // the levels above the warp count and broadcasting lane 0 measured slower on the H200).
  const int warps = (blockDim.x + MX_WARP - 1) / MX_WARP;
  double total = lane < warps ? warp_sums[lane] : 0.0;
#pragma unroll
  for (int o = MX_WARP / 2; o > 0; o >>= 1) total += MX_SHFL_XOR(total, o);
  return total;
}

template <class T, class G, int NCH, int S, int LH = 0>
MX_DEV void add_rmsnorm_mxquant_row(const typename T::storage* __restrict__ x,
                                    const typename T::storage* __restrict__ res,
                                    const typename G::storage* __restrict__ gamma,
                                    mx_u8* __restrict__ q, mx_u8* __restrict__ scale,
                                    typename T::storage* __restrict__ res_out,
                                    typename T::storage* __restrict__ normed, int H_arg, float eps,
                                    mx_u32 flags_arg) {
  // LH > 0: the lean kernel (see MX_NORM_LEAN_FLAGS); the shape, flags and outputs are constants.
  constexpr bool LEAN = LH > 0;
  static_assert(!LEAN || (NCH == 1 && LH % (8 * S * MX_WARP) == 0), "lean: whole warps, one chunk");
  const int H = LEAN ? LH : H_arg;
  const mx_u32 flags = LEAN ? (mx_u32)MX_NORM_LEAN_FLAGS : flags_arg;
#if defined(MX_NV_CLUSTER)
  // Partials of the push exchange (split rows): slot rank * warps + warp (<= 32 warps a block).
  __shared__ __align__(16) double push_parts[S > 1 ? S * 32 : 2];
  __shared__ mx_u64 push_bar;
  if (S > 1) {
    if (threadIdx.x == 0) {
      mx_mbar_init_expect(&push_bar, S * (LEAN ? LH / (8 * S * MX_WARP) : blockDim.x / MX_WARP) * 8);
      mx_fence_mbar_init();
    }
    // Arrival at entry, waited for before the first remote store: every block of the cluster has
    // started (its shared memory exists, its barrier is initialised) before anyone writes into it.
    mx_cluster_arrive_relaxed();
  }
#endif
  const long long row = blockIdx.x / S;
  // This block's chunks: [c0, c0 + chunks); the host makes H / 32 a multiple of S, so whole
  // quantizer groups stay in one block.
  const int chunks = (H >> 3) / S;
  const int c0 = (int)(blockIdx.x % S) * chunks;
  const int B = LEAN ? LH / (8 * S) : (int)blockDim.x;
  if (LEAN) {  // 32-bit offsets
    const int off = (int)row * LH + 8 * c0;
    x += off;
    res += off;
    res_out += off;
    normed += off;
    q += off;
    scale += off >> 5;
  } else {
    x += row * H + 8 * c0;
    if (res) res += row * H + 8 * c0;
    if (res_out) res_out += row * H + 8 * c0;
    if (normed) normed += row * H + 8 * c0;
    q += row * H + 8 * c0;
    scale += row * (H >> 5) + c0 / 4;
  }
  gamma += 8 * c0;
  const bool has_res = LEAN || res != nullptr;
  const bool has_res_out = LEAN || res_out != nullptr;
  const bool has_normed = LEAN || normed != nullptr;
  const bool round_sum = !(flags & MX_F_NO_ROUND_SUM);

  MxRaw8<T> xa[NCH], ra[NCH];
  MxRaw8<G> ga[NCH];
#pragma unroll
  for (int k = 0; k < NCH; ++k) {
    const int c = threadIdx.x + k * B;
    if (LEAN || c < chunks) {
      xa[k].load(x + 8 * c);
      if (has_res) ra[k].load(res + 8 * c);
      ga[k].load(gamma + 8 * c);
    }
  }
  // s = x + r (rounded to T unless MX_F_NO_ROUND_SUM; then packed back into xa) and the lane's
  // f64 sum of the f32 squares (the graph's f32 Pow), chunk by chunk, a pairwise tree within a chunk.
  // NCH = 1: residual_out is stored here (the store drains while the row's sum is exchanged).
  double ss = 0.0;
#pragma unroll
  for (int k = 0; k < NCH; ++k) {
    if (LEAN || (int)threadIdx.x + k * B < chunks) {
      float s[8];
      xa[k].unpack(s);
      if (has_res) {
        float r[8];
        ra[k].unpack(r);
#pragma unroll
        for (int i = 0; i < 8; ++i) s[i] = s[i] + r[i];
        if (round_sum) {
          xa[k].pack(s);  // round_T(x + r), which is also residual_out
          xa[k].unpack(s);
        }
      }
      if (NCH == 1 && has_res_out) {
        if (has_res && round_sum) {
          xa[k].store(res_out + 8 * ((int)threadIdx.x + k * B));
        } else {
          MxRaw8<T> o;
          o.pack(s);
          o.store(res_out + 8 * ((int)threadIdx.x + k * B));
        }
      }
      if (NCH == 1) {  // a pairwise tree: a shorter dependent chain (latency-bound small M)
        double q[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) q[i] = (double)__fmul_rn(s[i], s[i]);
        ss += ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
      } else {  // element order (fewer live registers with several chunks a lane)
#pragma unroll
        for (int i = 0; i < 8; ++i) ss += (double)__fmul_rn(s[i], s[i]);
      }
    }
  }
  double total;
#if defined(MX_NV_CLUSTER)
  if (S > 1) {
    // Warp sum (every lane gets it), then lane r < S of every warp stores it into block r.
#pragma unroll
    for (int o = MX_WARP / 2; o > 0; o >>= 1) ss += MX_SHFL_XOR(ss, o);
    const int warps = B / MX_WARP, lane = threadIdx.x % MX_WARP;
    const int slot = (int)(blockIdx.x % S) * warps + (int)threadIdx.x / MX_WARP;
    mx_cluster_wait();  // the entry arrival: every block has started and set up its barrier
    if (lane < S) mx_st_async_f64(&push_parts[slot], &push_bar, lane, ss);
    mx_mbar_wait(&push_bar, 0);
    // n = S * warps partials (even), in slot order over four accumulators; slots past n (at most 2,
    // inside the array) are read but not added.
    const int n = S * warps;
    const double2* p2 = reinterpret_cast<const double2*>(push_parts);
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    for (int i = 0; i < n; i += 4) {
      const double2 u = p2[i / 2], w = p2[i / 2 + 1];
      a0 += u.x;
      a1 += u.y;
      a2 += i + 2 < n ? w.x : 0.0;  // partials are >= +0 or NaN: adding +0 changes nothing
      a3 += i + 2 < n ? w.y : 0.0;
    }
    total = (a0 + a1) + (a2 + a3);
  } else
#endif
  {
  __shared__ double warp_sums[1024 / 32];
  total = mx_norm_block_sum(ss, warp_sums);
  }

  // The output pass: residual_out, normed, q and scales of the lane's chunks.
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
    const bool live = LEAN || c < chunks;
    float y[8];
    if (live) {
      if (NCH > 1) {
        xa[k].opaque();
        ra[k].opaque();
        ga[k].opaque();
      }
      float s[8], g[8];
      xa[k].unpack(s);
      if (has_res && !round_sum) {  // the f32 sum of pass 1, again
        float r[8];
        ra[k].unpack(r);
#pragma unroll
        for (int i = 0; i < 8; ++i) s[i] = s[i] + r[i];
      }
      if (NCH > 1 && has_res_out) {
        if (has_res && round_sum) {
          xa[k].store(res_out + 8 * c);
        } else {
          MxRaw8<T> o;
          o.pack(s);
          o.store(res_out + 8 * c);
        }
      }
      ga[k].unpack(g);
      if (NCH > 1) {  // several chunks a lane (large M): the per-element form, fewer live registers
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float n = use_div ? s[i] / root : s[i] * inv;
          const float w = !gemma ? g[i] : gamma_f32 ? 1.0f + g[i] : mx_round<G>(1.0f + g[i]);
          y[i] = gamma_f32 ? mx_round<T>(n * w) : mx_round<T>(mx_round<T>(n) * w);
        }
      } else {
      float n[8];
      if (use_div) {
#pragma unroll
        for (int i = 0; i < 8; ++i) n[i] = s[i] / root;
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) n[i] = s[i] * inv;
      }
      // w = !gemma ? g : gamma_f32 ? 1 + g : round_G(1 + g) (Gemma with gamma_in_f32 = 0: the graph
      // adds 1 in gamma's own dtype); y = gamma_f32 ? round_T(n * w) : round_T(round_T(n) * w).
      // Both sides of every choice are computed and selected: no branches per element.
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float w1 = 1.0f + g[i];
        const float wg = gamma_f32 ? w1 : mx_round<G>(w1);
        const float w = gemma ? wg : g[i];
        const float nn = gamma_f32 ? n[i] : mx_round<T>(n[i]);
        y[i] = mx_round<T>(nn * w);
      }
      }
      if (has_normed) {
        MxRaw8<T> o;
        o.pack(y);
        o.store(normed + 8 * c);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) y[i] = 0.0f;
    }
    mx_u32 lo, hi, sb;
    mx_quant_group8(y, flags, lo, hi, sb);
    if (live) mx_store_group8(q, scale, c, lo, hi, sb);
  }
}

// Kernel names: mx_add_rmsnorm_quant_<T>[_gf32]_c<NCH>, NCH = 1, 2, 4 (B <= 1024: H <= 8192,
// 16384, 32768) and 3 (B <= 512: H <= 12288; fewer lanes per row, more rows per SM). NCH = 1 with
// 16-bit x and gamma asks for two blocks per SM (<= 32 registers, no spills): two 768-lane rows
// per SM at H = 6144 (41 registers allowed only one). The host's
// choice: kernels/src/gpu/launch.rs with the per-device table of kernels/src/gpu/thresholds.rs.
#define MX_NORM_PARAMS(T, G)                                                                   \
  const T::storage *x, const T::storage *res, const G::storage *gamma, mx_u8 *q, mx_u8 *scale, \
      T::storage *res_out, T::storage *normed, int H, float eps, unsigned flags
#define MX_NORM_MINB(T, G, NCH) (NCH == 1 && sizeof(T::storage) == 2 && sizeof(G::storage) == 2 ? 2 : 1)
#define MX_DEFINE_NORM1(NAME, T, G, NCH, MAXB)                                                 \
  extern "C" __global__ void __launch_bounds__(MAXB, MX_NORM_MINB(T, G, NCH)) NAME(MX_NORM_PARAMS(T, G)) { \
    MX_PDL_ENTRY();                                                                                        \
    add_rmsnorm_mxquant_row<T, G, NCH, 1>(x, res, gamma, q, scale, res_out, normed, H, eps,   \
                                          flags);                                              \
  }
#define MX_DEFINE_NORM(NAME, T, G)                                                              \
  MX_DEFINE_NORM1(NAME##_c1, T, G, 1, 1024)                                                     \
  MX_DEFINE_NORM1(NAME##_c2, T, G, 2, 1024)                                                     \
  MX_DEFINE_NORM1(NAME##_c3, T, G, 3, 512)                                                      \
  MX_DEFINE_NORM1(NAME##_c4, T, G, 4, 1024)

// Split rows (one chunk per lane, a cluster of S blocks per row): NAME_c1_s<S>, S = 2, 4, 8; grid
// rows * S, B = H / (8 S) rounded up to the warp.
#if defined(MX_NV_CLUSTER)
#define MX_DEFINE_NORM_S1(NAME, T, G, S)                                                        \
  extern "C" __global__ void __launch_bounds__(1024) __cluster_dims__(S, 1, 1)                 \
      NAME(MX_NORM_PARAMS(T, G)) {                                                              \
    MX_PDL_ENTRY();                                                                             \
    add_rmsnorm_mxquant_row<T, G, 1, S>(x, res, gamma, q, scale, res_out, normed, H, eps,      \
                                        flags);                                                 \
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

// The lean split-8 kernel (MX_NORM_LEAN_FLAGS): H = 6144, B = 96, Gemma + gamma_in_f32, floor,
// propagate, residual / residual_out / normed present (bench.py's norm case): the runtime's kernel
// for exactly that case (launch.rs; MXFUSE_GPU_NORM_LEAN=0 keeps the generic one).
#if defined(MX_NV_CLUSTER)
#define MX_DEFINE_NORM_LEAN(NAME, T, G, S, LH)                                                  \
  extern "C" __global__ void __launch_bounds__(LH / (8 * S)) __cluster_dims__(S, 1, 1)         \
      NAME(MX_NORM_PARAMS(T, G)) {                                                              \
    MX_PDL_ENTRY();                                                                             \
    add_rmsnorm_mxquant_row<T, G, 1, S, LH>(x, res, gamma, q, scale, res_out, normed, H, eps,  \
                                            flags);                                             \
  }
MX_DEFINE_NORM_LEAN(mx_add_rmsnorm_quant_bf16_c1_s8_lean, MxBf16, MxBf16, 8, 6144)
#endif
