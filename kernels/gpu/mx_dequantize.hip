// com.mxfuse MxDequantize: y = decode(x) * 2^(s - 127), ONNX DequantizeLinear-24 with an E8M0
// scale, for E4M3FN, E5M2 or E2M1 (MXFP4, packed two per byte, element 2i in the low nibble of
// byte i) values. One thread per element, grid-stride. x is seen as [outer, axis_len, inner];
// element (o, d, i) reads scale[o * so + (d / block) * sb + i * si] (kernels::ScaleMap:
// per-tensor, per-axis and blocked scales). The fp32 product is exact or +-Inf for every value
// and scale byte, so T::from_f32 is the only rounding: the same bits as the CPU kernels (a NaN's
// sign and payload are not specified).

// E5M2 -> fp32 (exact): an E5M2 byte is the top byte of an f16 (+-Inf and NaN included).
MX_DEV float mx_e5m2_to_f32(mx_u32 v) { return MxF16::to_f32((mx_u16)(v << 8)); }

// E2M1 code (low 4 bits) -> fp32 (exact): +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}, no Inf/NaN.
// |v| = 2^(e-1) * (1 + m/2) for e > 0, m/2 for e = 0: as fp32 bits, exponent e - 1 + 127 and
// the mantissa bit on top; the subnormal 0.5 (code 1) is 2^-1 exactly.
MX_DEV float mx_e2m1_to_f32(mx_u32 c) {
  const mx_u32 e = (c >> 1) & 3u, m = c & 1u;
  const mx_u32 mag = e ? ((e + 126u) << 23) | (m << 22) : (m ? 0x3F000000u : 0u);
  return mx_bits_f32(((c & 8u) << 28) | mag);
}

// Element e of x dequantized: FMT 0 = E4M3FN, 1 = E5M2, 2 = E2M1 (x packed: element e is
// nibble e & 1 of byte e >> 1); x seen as [outer, axis_len, inner], element (o, d, i) reads
// scale[o * so + (d / block) * sb + i * si]. Also MxGatherDequantize's (mx_gather.hip).
template <int FMT>
MX_DEV float mx_dequantize_at(const mx_u8* __restrict__ x, const mx_u8* __restrict__ scale,
                              long long e, long long axis_len, long long inner, long long block,
                              long long so, long long sb, long long si) {
  const long long row = e / inner;
  const long long i = e - row * inner;
  const long long o = row / axis_len;
  const long long d = row - o * axis_len;
  const float s = mx_e8m0_to_f32(scale[o * so + (d / block) * sb + i * si]);
  float v;
  if (FMT == 2) {
    v = mx_e2m1_to_f32((mx_u32)(x[e >> 1] >> ((e & 1) * 4)));
  } else if (FMT == 1) {
    v = mx_e5m2_to_f32(x[e]);
  } else {
    v = mx_e4m3_to_f32(x[e]);
  }
  return v * s;
}

template <class T, int FMT>
MX_DEV void mx_dequantize_body(const mx_u8* __restrict__ x, const mx_u8* __restrict__ scale,
                               typename T::storage* __restrict__ y, long long elements,
                               long long axis_len, long long inner, long long block, long long so,
                               long long sb, long long si) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < elements; e += stride)
    y[e] = T::from_f32(mx_dequantize_at<FMT>(x, scale, e, axis_len, inner, block, so, sb, si));
}

// Kernel names: mx_dequantize_<e4m3|e5m2|e2m1>_<T>.
#define MX_DEFINE_DEQ1(NAME, T, FMT)                                                            \
  extern "C" __global__ void NAME(const mx_u8* x, const mx_u8* scale, T::storage* y,           \
                                  long long elements, long long axis_len, long long inner,      \
                                  long long block, long long so, long long sb, long long si) {  \
    MX_PDL_ENTRY();                                                                             \
    mx_dequantize_body<T, FMT>(x, scale, y, elements, axis_len, inner, block, so, sb, si);      \
  }
#define MX_DEFINE_DEQ(T, NAME)                             \
  MX_DEFINE_DEQ1(mx_dequantize_e4m3_##NAME, T, 0)          \
  MX_DEFINE_DEQ1(mx_dequantize_e5m2_##NAME, T, 1)          \
  MX_DEFINE_DEQ1(mx_dequantize_e2m1_##NAME, T, 2)

MX_DEFINE_DEQ(MxBf16, bf16)
MX_DEFINE_DEQ(MxF16, f16)
MX_DEFINE_DEQ(MxF32, f32)
