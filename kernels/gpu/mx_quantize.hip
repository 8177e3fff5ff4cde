// com.mxfuse MxQuantize: standalone MXFP8 quantization of a [..., K] tensor (K % 32 == 0).
// One lane per 8 elements, 4 lanes per 32-element scale block; lanes past the end quantize zeros so
// the group shuffles stay convergent.

template <class T>
MX_DEV void mx_quantize_lane(const typename T::storage* __restrict__ x, mx_u8* __restrict__ q,
                             mx_u8* __restrict__ scale, long long elements, mx_u32 flags) {
  const long long lane_id = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const bool live = lane_id < (elements >> 3);
  float y[8];
  if (live) {
    MxVec8<T>::load(x + 8 * lane_id, y);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = 0.0f;
  }
  mx_u32 lo, hi, sb;
  mx_quant_group8(y, flags, lo, hi, sb);
  if (live) mx_store_group8(q, scale, lane_id, lo, hi, sb);
}

#define MX_DEFINE_QUANT(NAME, T)                                                               \
  extern "C" __global__ void NAME(const T::storage* x, mx_u8* q, mx_u8* scale,                 \
                                  long long elements, unsigned flags) {                         \
    mx_quantize_lane<T>(x, q, scale, elements, flags);                                          \
  }


MX_DEFINE_QUANT(mx_quantize_bf16, MxBf16)
MX_DEFINE_QUANT(mx_quantize_f16, MxF16)
MX_DEFINE_QUANT(mx_quantize_f32, MxF32)
