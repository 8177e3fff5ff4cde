// com.mxfuse SwiGluMxQuant: SwiGLU / SwiGLU-OAI feeding the MXFP8 quantizer.
//
// One lane per 8 outputs; 4 consecutive lanes form one 32-element scale block (rows are a multiple
// of 32 long, so a group never straddles two rows). The grid covers rows * I / 8 lanes exactly
// (rounded up to whole blocks); lanes past the end compute on zeros so that the group shuffles
// stay convergent.

#define MX_LAYOUT_SEPARATE 0
#define MX_LAYOUT_SPLIT_HALVES 1
#define MX_LAYOUT_INTERLEAVED 2

struct MxSwigluParams {
  float alpha, limit, beta;
};

// act = gate * sigmoid(alpha * gate) * up  (OAI: gate = min(gate, limit), up = clamp(up) + beta).
// Without MX_F_FP32_ACT every intermediate the unfused ONNX graph materialises is rounded to T:
// alpha*g, sigmoid, g*sigmoid, up+beta, the product. Comparisons keep NaN (fminf would drop it).
template <class T>
MX_DEV float mx_swiglu(float g, float u, const MxSwigluParams& p, mx_u32 flags) {
  const bool rnd = !(flags & MX_F_FP32_ACT);
  if (flags & MX_F_OAI) {
    g = g > p.limit ? p.limit : g;
    u = u > p.limit ? p.limit : (u < -p.limit ? -p.limit : u);
  }
  float t = p.alpha * g;
  if (rnd) t = mx_round<T>(t);
  float sg = 1.0f / (1.0f + expf(-t));
  if (rnd) sg = mx_round<T>(sg);
  float glu = g * sg;
  if (rnd) glu = mx_round<T>(glu);
  if (flags & MX_F_OAI) {
    u = u + p.beta;
    if (rnd) u = mx_round<T>(u);
  }
  float a = glu * u;
  return rnd ? mx_round<T>(a) : a;
}

template <class T>
MX_DEV void swiglu_mxquant_lane(const typename T::storage* __restrict__ gate,
                                const typename T::storage* __restrict__ up, mx_u8* __restrict__ q,
                                mx_u8* __restrict__ scale, long long rows, int I, int layout,
                                MxSwigluParams p, mx_u32 flags) {
  const long long lane_id = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long per_row = I >> 3;
  const bool live = lane_id < rows * per_row;
  float y[8];
  if (live) {
    const long long row = lane_id / per_row, c = lane_id - row * per_row;
    float g[8], u[8];
    if (layout == MX_LAYOUT_SEPARATE) {
      MxVec8<T>::load(gate + row * I + 8 * c, g);
      MxVec8<T>::load(up + row * I + 8 * c, u);
    } else if (layout == MX_LAYOUT_SPLIT_HALVES) {
      MxVec8<T>::load(gate + row * 2 * I + 8 * c, g);
      MxVec8<T>::load(gate + row * 2 * I + I + 8 * c, u);
    } else {  // interleaved: gate = even, up = odd elements of 16 consecutive inputs
      float a[8], b[8];
      MxVec8<T>::load(gate + row * 2 * I + 16 * c, a);
      MxVec8<T>::load(gate + row * 2 * I + 16 * c + 8, b);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        g[i] = a[2 * i]; u[i] = a[2 * i + 1];
        g[4 + i] = b[2 * i]; u[4 + i] = b[2 * i + 1];
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = mx_swiglu<T>(g[i], u[i], p, flags);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = 0.0f;
  }
  mx_u32 lo, hi, sb;
  mx_quant_group8(y, flags, lo, hi, sb);
  if (live) mx_store_group8(q, scale, lane_id, lo, hi, sb);
}

#define MX_DEFINE_SWIGLU(NAME, T)                                                              \
  extern "C" __global__ void NAME(const T::storage* gate, const T::storage* up, mx_u8* q,      \
                                  mx_u8* scale, long long rows, int I, int layout, float alpha, \
                                  float limit, float beta, unsigned flags) {                    \
    MxSwigluParams p = {alpha, limit, beta};                                                    \
    swiglu_mxquant_lane<T>(gate, up, q, scale, rows, I, layout, p, flags);                      \
  }
MX_DEFINE_SWIGLU(mx_swiglu_quant_bf16, MxBf16)
MX_DEFINE_SWIGLU(mx_swiglu_quant_f16, MxF16)
MX_DEFINE_SWIGLU(mx_swiglu_quant_f32, MxF32)
