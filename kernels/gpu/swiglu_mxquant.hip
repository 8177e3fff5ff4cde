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

template <class T, mx_u32 ACT>
MX_DEV float mx_swiglu(float g, float u, const MxSwigluParams& p) {
  if (ACT & MX_F_FP32_ACT) {
    if (ACT & MX_F_OAI) {
      g = g > p.limit ? p.limit : g;
      u = (u > p.limit ? p.limit : (u < -p.limit ? -p.limit : u)) + p.beta;
    }
    return g * mx_sigmoid_pinned(p.alpha * g) * u;
  }
  if (ACT & MX_F_OAI) {
    g = g > p.limit_r ? p.limit_r : g;
    u = mx_round<T>((u > p.limit_r ? p.limit_r : (u < -p.limit_r ? -p.limit_r : u)) + p.beta_r);
  }
  float sw;
  if (p.single_op) {
    sw = mx_round<T>(g * mx_sigmoid_pinned(p.alpha * g));
  } else {
    const float z = p.alpha == 1.0f ? g : mx_round<T>(g * p.alpha_r);
    sw = mx_round<T>(g * mx_round<T>(mx_sigmoid_pinned(z)));
  }
  return mx_round<T>(sw * u);
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
#pragma unroll
    for (int i = 0; i < E; ++i) y[i] = mx_swiglu<T, ACT>(g[i], u[i], p);
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

// Kernel names: mx_swiglu_quant_<T>_e<E>_a<A>, E = 8, 2, 1, A = (oai ? 1 : 0) + (fp32_activation ? 2 : 0).
#define MX_DEFINE_SWIGLU1(NAME, T, E, ACT) MX_DEFINE_SWIGLU1T(NAME, T, E, ACT, 0)
#define MX_DEFINE_SWIGLU1T(NAME, T, E, ACT, OPT)                                               \
  extern "C" __global__ void NAME(const T::storage* gate, const T::storage* up, mx_u8* q,      \
                                  mx_u8* scale, long long rows, int I, int layout, float alpha, \
                                  float limit, float beta, unsigned flags) {                    \
    MX_PDL_ENTRY();                                                                             \
    MxSwigluParams p = {alpha, limit, beta, mx_round<T>(alpha), mx_round<T>(limit),            \
                        mx_round<T>(beta), (flags & MX_F_SWISH_SINGLE) != 0};                   \
    swiglu_mxquant_lane<T, E, ACT, OPT>(gate, up, q, scale, rows, I, layout, p, flags);         \
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
