// com.mxfuse MxQuantize: standalone MXFP8 quantization of a [..., K] tensor (K % 32 == 0).
// One lane per E elements (8, or 2 for small tensors), 32 / E lanes per 32-element scale block; lanes past the end quantize zeros so
// the group shuffles stay convergent.

template <class T, int E>
MX_DEV void mx_quantize_lane(const typename T::storage* __restrict__ x, mx_u8* __restrict__ q,
                             mx_u8* __restrict__ scale, long long elements, mx_u32 flags) {
  const long long lane_id = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const bool live = lane_id < elements / E;
  float y[E];
  if (live) {
    mx_load<T, E>(x + E * lane_id, y);
  } else {
#pragma unroll
    for (int i = 0; i < E; ++i) y[i] = 0.0f;
  }
  mx_u32 w[(E + 3) / 4];
  const mx_u32 sb = mx_quant_group<E>(y, flags, w);
  if (live) mx_store_group<E>(q, scale, lane_id, w, sb);
}

// Kernel names: mx_quantize_<T>_e<E>.
#define MX_DEFINE_QUANT1(NAME, T, E)                                                           \
  extern "C" __global__ void NAME(const T::storage* x, mx_u8* q, mx_u8* scale,                 \
                                  long long elements, unsigned flags) {                         \
    MX_PDL_ENTRY();                                                                             \
    mx_quantize_lane<T, E>(x, q, scale, elements, flags);                                       \
  }
#define MX_DEFINE_QUANT(NAME, T) MX_DEFINE_QUANT1(NAME##_e8, T, 8) MX_DEFINE_QUANT1(NAME##_e2, T, 2)

MX_DEFINE_QUANT(mx_quantize_bf16, MxBf16)
MX_DEFINE_QUANT(mx_quantize_f16, MxF16)
MX_DEFINE_QUANT(mx_quantize_f32, MxF32)
