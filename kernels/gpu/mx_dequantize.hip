// com.mxfuse MxDequantize: y = decode(x) * 2^(s - 127), ONNX DequantizeLinear-24 with an E8M0
// scale, for E4M3FN or E5M2 values. One thread per element, grid-stride. x is seen as
// [outer, axis_len, inner]; element (o, d, i) reads scale[o * so + (d / block) * sb + i * si]
// (kernels::ScaleMap: per-tensor, per-axis and blocked scales). The fp32 product is exact or
// +-Inf for every value and scale byte, so T::from_f32 is the only rounding: the same bits as the
// CPU kernels (a NaN's sign and payload are not specified).

// E5M2 -> fp32 (exact): an E5M2 byte is the top byte of an f16 (+-Inf and NaN included).
MX_DEV float mx_e5m2_to_f32(mx_u32 v) { return MxF16::to_f32((mx_u16)(v << 8)); }

template <class T, bool E5M2>
MX_DEV void mx_dequantize_body(const mx_u8* __restrict__ x, const mx_u8* __restrict__ scale,
                               typename T::storage* __restrict__ y, long long elements,
                               long long axis_len, long long inner, long long block, long long so,
                               long long sb, long long si) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < elements; e += stride) {
    const long long row = e / inner;
    const long long i = e - row * inner;
    const long long o = row / axis_len;
    const long long d = row - o * axis_len;
    const float s = mx_e8m0_to_f32(scale[o * so + (d / block) * sb + i * si]);
    const float v = E5M2 ? mx_e5m2_to_f32(x[e]) : mx_e4m3_to_f32(x[e]);
    y[e] = T::from_f32(v * s);
  }
}

// Kernel names: mx_dequantize_<e4m3|e5m2>_<T>.
#define MX_DEFINE_DEQ1(NAME, T, E5)                                                             \
  extern "C" __global__ void NAME(const mx_u8* x, const mx_u8* scale, T::storage* y,           \
                                  long long elements, long long axis_len, long long inner,      \
                                  long long block, long long so, long long sb, long long si) {  \
    MX_PDL_ENTRY();                                                                             \
    mx_dequantize_body<T, E5>(x, scale, y, elements, axis_len, inner, block, so, sb, si);       \
  }
#define MX_DEFINE_DEQ(T, NAME) \
  MX_DEFINE_DEQ1(mx_dequantize_e4m3_##NAME, T, false) MX_DEFINE_DEQ1(mx_dequantize_e5m2_##NAME, T, true)

MX_DEFINE_DEQ(MxBf16, bf16)
MX_DEFINE_DEQ(MxF16, f16)
MX_DEFINE_DEQ(MxF32, f32)
