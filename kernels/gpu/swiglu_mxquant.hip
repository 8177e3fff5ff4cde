// com.mxfuse SwiGluMxQuant: SwiGLU / SwiGLU-OAI feeding the MXFP8 quantizer.
//
// One lane per E outputs; 32 / E consecutive lanes form one 32-element scale block (rows are a
// multiple of 32 long, so a group never straddles two rows). The grid covers rows * I / 8 lanes exactly
// (rounded up to whole blocks); lanes past the end compute on zeros so that the group shuffles
// stay convergent.

#define MX_LAYOUT_SEPARATE 0
#define MX_LAYOUT_SPLIT_HALVES 1
#define MX_LAYOUT_INTERLEAVED 2

// act = gate * sigmoid(alpha * gate) * up  (OAI: gate = min(gate, limit), up = clamp(up) + beta),
// exactly kernels::reference::swiglu_value: with MX_F_FP32_ACT nothing is rounded; otherwise every
// op the unfused graph materialises is rounded to T (r), its constants too: z = alpha == 1 ? g :
// r(g * r(alpha)), sw = r(g * r(sigmoid(z))) (single_op: r(g * sigmoid(alpha * g))), OAI
// u = r(clamp(up, r(limit)) + r(beta)), act = r(sw * u). Comparisons keep NaN (fminf would drop
// it). ACT holds the MX_F_OAI / MX_F_FP32_ACT bits as a template constant: resolved at compile
// time, the per-element flag tests vanish (the kernel is issue-bound at large sizes).
struct MxSwigluParams {
  float alpha, limit, beta;     // the attributes
  float alpha_r, limit_r, beta_r;  // the attributes rounded to T (the graph's constants)
  bool single_op;
};

// Internal ACT bit: the OAI clamps as NaN-propagating min/max (CUDA sm_80+ min.NaN / max.NaN, one
// instruction each instead of compare + select pairs that ptxas turned into a branch per element).
// Only where both bounds are > 0 (the kernel entry checks): then min(g, lim) is the select form
// g > lim ? lim : g, and max(min(u, lim), -lim) its two-sided clamp, including the zero signs
// (no tie with a nonzero bound); a limit <= 0 or NaN keeps the select form. A NaN comes out as
// the canonical NaN instead of the input's payload, which nothing downstream sees: the rounding to
// T, the quantizer's NaN handling and the E4M3 code 0x7F ignore sign and payload.
#define MX_ACT_MINMAX 0x10000u
// Internal ACT bit: swish_form "single_op" (else "unrolled"), resolved at the kernel entry so that
// no lane tests it per element.
#define MX_ACT_SINGLE 0x20000u

MX_DEV float mx_min_keep_nan(float a, float b) {
#if defined(MX_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a > b ? b : a;
#endif
}
MX_DEV float mx_max_keep_nan(float a, float b) {
#if defined(MX_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a < b ? b : a;
#endif
}

// The OAI clamps: g = min(g, lim), u = clamp(u, -lim, lim), NaN kept.
template <mx_u32 ACT>
MX_DEV void mx_oai_clamp(float& g, float& u, float lim) {
  if (ACT & MX_ACT_MINMAX) {
    g = mx_min_keep_nan(g, lim);
    u = mx_max_keep_nan(mx_min_keep_nan(u, lim), -lim);
  } else {
    g = g > lim ? lim : g;
    u = u > lim ? lim : (u < -lim ? -lim : u);
  }
}

// Rounds E values to T. bf16 on sm_80+: two values per cvt.rn.bf16x2.f32 (the same RNE rounding
// as cvt.rn.bf16.f32, NaN to a NaN), each widened back by a mask or a shift: 3 instructions per
// pair instead of 4.
template <class T, int E>
MX_DEV void mx_round_n(float v[E]) {
#pragma unroll
  for (int i = 0; i < E; ++i) v[i] = mx_round<T>(v[i]);
}
#if defined(MX_NV_CVT16)
template <int E>
struct MxRoundBf16 {
  static MX_DEV void run(float v[E]) {
#pragma unroll
    for (int i = 0; i + 1 < E; i += 2) {
      mx_u32 w;
      asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(v[i + 1]), "f"(v[i]));  // v[i] low
      v[i] = mx_bits_f32(w << 16);
      v[i + 1] = mx_bits_f32(w & 0xffff0000u);
    }
    if (E & 1) v[E - 1] = mx_round<MxBf16>(v[E - 1]);
  }
};
template <>
MX_DEV void mx_round_n<MxBf16, 8>(float v[8]) { MxRoundBf16<8>::run(v); }
template <>
MX_DEV void mx_round_n<MxBf16, 2>(float v[2]) { MxRoundBf16<2>::run(v); }
#endif

// The activation of a lane's E values, one stage at a time over all of them: the roundings pair
// up (mx_round_n), and the logistics run on the fast path (mx_sigmoid_fast) with one test for the
// rare exact fallback per lane instead of range selects and a division slow-path branch per
// element.
template <class T, int E, mx_u32 ACT>
MX_DEV void mx_swiglu_n(float g[E], float u[E], const MxSwigluParams& p, float y[E]) {
  const bool fp32 = (ACT & MX_F_FP32_ACT) != 0;
  float z[E], sig[E];
  if (ACT & MX_F_OAI) {
#pragma unroll
    for (int i = 0; i < E; ++i) {
      mx_oai_clamp<ACT>(g[i], u[i], fp32 ? p.limit : p.limit_r);
      u[i] = u[i] + (fp32 ? p.beta : p.beta_r);
    }
    if (!fp32) mx_round_n<T, E>(u);
  }
  if (fp32 || (ACT & MX_ACT_SINGLE)) {
#pragma unroll
    for (int i = 0; i < E; ++i) z[i] = p.alpha * g[i];
  } else {
    // The graph's z = alpha == 1 ? g : r(g * r(alpha)) without the per-element test: g is a T
    // value (or NaN) here, so for alpha == 1 (r(alpha) = 1) r(g * 1) = g as well.
#pragma unroll
    for (int i = 0; i < E; ++i) z[i] = g[i] * p.alpha_r;
    mx_round_n<T, E>(z);
  }
  bool ok = true;
#pragma unroll
  for (int i = 0; i < E; ++i) {
    ok = ok & mx_sigmoid_fast_ok(z[i]);
    sig[i] = mx_sigmoid_fast(z[i]);
  }
  if (!ok) {
#pragma unroll
    for (int i = 0; i < E; ++i) sig[i] = mx_sigmoid_fast_ok(z[i]) ? sig[i] : mx_sigmoid_pinned(z[i]);
  }
  if (fp32) {
#pragma unroll
    for (int i = 0; i < E; ++i) y[i] = g[i] * sig[i] * u[i];
    return;
  }
  if (!(ACT & MX_ACT_SINGLE)) mx_round_n<T, E>(sig);  // sw = r(g * r(sigma)); single: r(g * sigma)
#pragma unroll
  for (int i = 0; i < E; ++i) y[i] = g[i] * sig[i];
  mx_round_n<T, E>(y);
#pragma unroll
  for (int i = 0; i < E; ++i) y[i] = y[i] * u[i];
  mx_round_n<T, E>(y);
}

// Bench-only options (template constant OPT): stage timestamps (block 0 lane 0, clock64) and the
// shuffle-tree group max where the group is a whole warp (the kernel before redux.sync).
#define MX_SWIGLU_TIMED 1
#define MX_SWIGLU_SHFL 2
#if defined(MX_CUDA)
__device__ long long mx_swiglu_stamps[8];
#endif
template <int OPT>
MX_DEV void mx_swiglu_stamp(int i, float dep) {
#if defined(MX_CUDA)
  if (OPT & MX_SWIGLU_TIMED) {
    asm volatile("" ::"f"(dep));
    if (blockIdx.x == 0 && threadIdx.x == 0) mx_swiglu_stamps[i] = clock64();
  }
#endif
}

// E elements per lane (8, or 2 / 1 for small tensors: shorter per-lane chains, more lanes).
template <class T, int E, mx_u32 ACT, int OPT = 0>
MX_DEV void swiglu_mxquant_lane(const typename T::storage* __restrict__ gate,
                                const typename T::storage* __restrict__ up, mx_u8* __restrict__ q,
                                mx_u8* __restrict__ scale, long long rows, int I, int layout,
                                MxSwigluParams p, mx_u32 flags) {
  mx_swiglu_stamp<OPT>(0, 0.0f);
  const long long lane_id = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const int per_row = I / E;
  const long long lanes = rows * per_row;
  const bool live = lane_id < lanes;
  float y[E];
  if (live) {
    // 32-bit division when it fits (a 64-bit one is a ~70-instruction subroutine).
    const long long row = lanes < 0x7fffffffLL ? (long long)((unsigned)lane_id / (unsigned)per_row)
                                               : lane_id / per_row;
    const long long c = lane_id - row * per_row;
    float g[E], u[E];
    if (layout == MX_LAYOUT_SEPARATE) {
      mx_load<T, E>(gate + row * I + E * c, g);
      mx_load<T, E>(up + row * I + E * c, u);
    } else if (layout == MX_LAYOUT_SPLIT_HALVES) {
      mx_load<T, E>(gate + row * 2 * I + E * c, g);
      mx_load<T, E>(gate + row * 2 * I + I + E * c, u);
    } else if (E == 1) {  // interleaved, one output: the pair (gate, up)
      mx_load<T, 1>(gate + row * 2 * I + 2 * c, g);
      mx_load<T, 1>(gate + row * 2 * I + 2 * c + 1, u);
    } else {  // interleaved: gate = even, up = odd elements of 2E consecutive inputs
      float a[E], b[E];
      mx_load<T, E>(gate + row * 2 * I + 2 * E * c, a);
      mx_load<T, E>(gate + row * 2 * I + 2 * E * c + E, b);
#pragma unroll
      for (int i = 0; i < E / 2; ++i) {
        g[i] = a[2 * i]; u[i] = a[2 * i + 1];
        g[E / 2 + i] = b[2 * i]; u[E / 2 + i] = b[2 * i + 1];
      }
    }
    mx_swiglu_stamp<OPT>(1, g[0] + u[0]);
    mx_swiglu_n<T, E, ACT>(g, u, p, y);
    mx_swiglu_stamp<OPT>(2, y[0]);
  } else {
#pragma unroll
    for (int i = 0; i < E; ++i) y[i] = 0.0f;
  }
  mx_u32 w[(E + 3) / 4];
  const mx_u32 sb = mx_quant_group<E, !(OPT & MX_SWIGLU_SHFL)>(y, flags, w);
  mx_swiglu_stamp<OPT>(3, __uint_as_float(sb ^ w[0]));
  if (live) mx_store_group<E>(q, scale, lane_id, w, sb);
  mx_swiglu_stamp<OPT>(4, 0.0f);
}

// Kernel entry: resolves the uniform choices that would otherwise be tested per element: the OAI
// kernels take the min/max clamps where both bounds are > 0 (always, in practice: 7.0), the
// rounded-activation kernels the swish form.
template <class T, int E, mx_u32 ACT, int OPT>
MX_DEV void swiglu_mxquant_dispatch2(const typename T::storage* __restrict__ gate,
                                     const typename T::storage* __restrict__ up,
                                     mx_u8* __restrict__ q, mx_u8* __restrict__ scale,
                                     long long rows, int I, int layout, MxSwigluParams p,
                                     mx_u32 flags) {
  if (!(ACT & MX_F_FP32_ACT) && p.single_op) {
    swiglu_mxquant_lane<T, E, ACT | MX_ACT_SINGLE, OPT>(gate, up, q, scale, rows, I, layout, p,
                                                         flags);
    return;
  }
  swiglu_mxquant_lane<T, E, ACT, OPT>(gate, up, q, scale, rows, I, layout, p, flags);
}

template <class T, int E, mx_u32 ACT, int OPT>
MX_DEV void swiglu_mxquant_dispatch(const typename T::storage* __restrict__ gate,
                                    const typename T::storage* __restrict__ up,
                                    mx_u8* __restrict__ q, mx_u8* __restrict__ scale,
                                    long long rows, int I, int layout, MxSwigluParams p,
                                    mx_u32 flags) {
#if defined(MX_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  if ((ACT & MX_F_OAI) && p.limit > 0.0f && p.limit_r > 0.0f) {
    swiglu_mxquant_dispatch2<T, E, ACT | MX_ACT_MINMAX, OPT>(gate, up, q, scale, rows, I, layout,
                                                              p, flags);
    return;
  }
#endif
  swiglu_mxquant_dispatch2<T, E, ACT, OPT>(gate, up, q, scale, rows, I, layout, p, flags);
}

// Kernel names: mx_swiglu_quant_<T>_e<E>_a<A>, E = 8, 2, 1, A = (oai ? 1 : 0) + (fp32_activation ? 2 : 0).
#define MX_DEFINE_SWIGLU1(NAME, T, E, ACT) MX_DEFINE_SWIGLU1T(NAME, T, E, ACT, 0)
#define MX_DEFINE_SWIGLU1T(NAME, T, E, ACT, OPT)                                               \
  extern "C" __global__ void NAME(const T::storage* gate, const T::storage* up, mx_u8* q,      \
                                  mx_u8* scale, long long rows, int I, int layout, float alpha, \
                                  float limit, float beta, unsigned flags) {                    \
    MX_PDL_ENTRY();                                                                             \
    MxSwigluParams p = {alpha, limit, beta, mx_round<T>(alpha), mx_round<T>(limit),            \
                        mx_round<T>(beta), (flags & MX_F_SWISH_SINGLE) != 0};                   \
    swiglu_mxquant_dispatch<T, E, ACT, OPT>(gate, up, q, scale, rows, I, layout, p, flags);     \
  }
#define MX_DEFINE_SWIGLU_E(NAME, T, E)                                                         \
  MX_DEFINE_SWIGLU1(NAME##_a0, T, E, 0u)                                                       \
  MX_DEFINE_SWIGLU1(NAME##_a1, T, E, MX_F_OAI)                                                 \
  MX_DEFINE_SWIGLU1(NAME##_a2, T, E, MX_F_FP32_ACT)                                            \
  MX_DEFINE_SWIGLU1(NAME##_a3, T, E, MX_F_OAI | MX_F_FP32_ACT)
#define MX_DEFINE_SWIGLU(NAME, T)                                                              \
  MX_DEFINE_SWIGLU_E(NAME##_e8, T, 8) MX_DEFINE_SWIGLU_E(NAME##_e2, T, 2)                      \
  MX_DEFINE_SWIGLU_E(NAME##_e1, T, 1)

MX_DEFINE_SWIGLU(mx_swiglu_quant_bf16, MxBf16)
MX_DEFINE_SWIGLU(mx_swiglu_quant_f16, MxF16)
MX_DEFINE_SWIGLU(mx_swiglu_quant_f32, MxF32)

// Bench-only (bench/gpu/bench.py, CUDA), OAI + fp32 activation, 1 output per lane: stage timing
// (_t: entry, inputs loaded, activation, quantized, stores issued) and the shuffle-tree group max
// (_sh, _sht timed).
#if defined(MX_CUDA)
MX_DEFINE_SWIGLU1T(mx_swiglu_quant_bf16_e1_a3_t, MxBf16, 1, MX_F_OAI | MX_F_FP32_ACT, MX_SWIGLU_TIMED)
MX_DEFINE_SWIGLU1T(mx_swiglu_quant_bf16_e1_a3_sh, MxBf16, 1, MX_F_OAI | MX_F_FP32_ACT, MX_SWIGLU_SHFL)
MX_DEFINE_SWIGLU1T(mx_swiglu_quant_bf16_e1_a3_sht, MxBf16, 1, MX_F_OAI | MX_F_FP32_ACT, MX_SWIGLU_SHFL | MX_SWIGLU_TIMED)
#endif

// Bench-only (bench/gpu/check.py check_rcp, CUDA): counts the d[i] where mx_rcp_fast differs in
// any bit from the IEEE 1.0f / d, and records the first such d.
#if defined(MX_CUDA)
extern "C" __global__ void mx_test_rcp(const float* d, long long n, unsigned* bad, float* first) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = d[i];
  if (__float_as_uint(mx_rcp_fast(v)) != __float_as_uint(1.0f / v)) {
    if (atomicAdd(bad, 1u) == 0u) *first = v;
  }
}
#endif
