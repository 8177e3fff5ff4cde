// com.mxfuse MxQuantizeLinear: y = fp8(x / 2^(s - 127)), ONNX QuantizeLinear-24 with an E8M0
// scale, to E4M3FN or E5M2 with ONNX's saturate. One thread per element, grid-stride; x is seen as
// [outer, axis_len, inner] and element (o, d, i) reads scale[o * so + (d / block) * sb + i * si]
// (kernels::ScaleMap, as mx_dequantize). Exactly kernels::reference::mx_quantize_linear: the
// quotient is x times the exact 2^(127 - s) in fp32 (the correctly rounded x / 2^(s-127)), a NaN
// x gives NaN with x's sign and a NaN scale +NaN otherwise, then the codecs below, bit for bit with
// kernels::codec::f32_to_e4m3 / f32_to_e5m2 (NaN keeps its sign: 0x7F/0xFF, 0x7E/0xFE).

// fp32 -> E4M3FN, RNE; beyond 448 (the 464 tie rounds to 448) and +-Inf: +-448 if saturate, else
// NaN with the sign.
MX_DEV mx_u32 mx_f32_to_e4m3_onnx(float v, bool saturate) {
  const mx_u32 b = mx_f32_bits(v);
  const mx_u32 sign = (b >> 24) & 0x80u, a = b & 0x7fffffffu;
  const mx_u32 over = sign | (saturate ? 0x7eu : 0x7fu);
  if (a > 0x7f800000u) return sign | 0x7fu;
  if (a == 0x7f800000u) return over;
  if (a < 0x3c800000u) return sign | (mx_u32)rintf(mx_bits_f32(a) * 512.0f);  // m * 2^-9
  const mx_u32 r = ((a + 0x7ffffu + ((a >> 20) & 1u)) >> 20) - (120u << 3);
  return r > 0x7eu ? over : (sign | r);
}

// fp32 -> E5M2, RNE; from the 61440 tie on and +-Inf: +-57344 if saturate, else +-Inf.
MX_DEV mx_u32 mx_f32_to_e5m2_onnx(float v, bool saturate) {
  const mx_u32 b = mx_f32_bits(v);
  const mx_u32 sign = (b >> 24) & 0x80u, a = b & 0x7fffffffu;
  const mx_u32 over = sign | (saturate ? 0x7bu : 0x7cu);
  if (a > 0x7f800000u) return sign | 0x7eu;
  if (a == 0x7f800000u) return over;
  if (a < 0x38800000u) return sign | (mx_u32)rintf(mx_bits_f32(a) * 65536.0f);  // m * 2^-16
  const mx_u32 r = ((a + 0xfffffu + ((a >> 21) & 1u)) >> 21) - (112u << 2);
  return r > 0x7bu ? over : (sign | r);
}

template <class T, bool E5M2>
MX_DEV void mx_quantize_linear_body(const typename T::storage* __restrict__ x,
                                    const mx_u8* __restrict__ scale, mx_u8* __restrict__ y,
                                    long long elements, long long axis_len, long long inner,
                                    long long block, long long so, long long sb, long long si,
                                    int saturate) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < elements; e += stride) {
    const long long row = e / inner;
    const long long i = e - row * inner;
    const long long o = row / axis_len;
    const long long d = row - o * axis_len;
    const mx_u32 s = scale[o * so + (d / block) * sb + i * si];
    const typename T::storage raw = x[e];
    const float v = T::to_f32(raw);
    // A NaN x stays NaN with its own sign, whatever the scale. Spelled out: NVIDIA's cvt.f32.f16
    // and FMUL return the canonical +NaN, where the reference (x86) keeps the sign.
    mx_u32 neg;
    if constexpr (sizeof(typename T::storage) == 2) {
      neg = ((mx_u32)raw >> 15) & 1u;
    } else {
      neg = mx_f32_bits(v) >> 31;
    }
    const float q = v != v    ? mx_bits_f32((neg << 31) | 0x7fc00000u)
                    : s == 255u ? mx_bits_f32(0x7fc00000u)
                                : v * mx_scale_inverse(s);
    y[e] = (mx_u8)(E5M2 ? mx_f32_to_e5m2_onnx(q, saturate != 0) : mx_f32_to_e4m3_onnx(q, saturate != 0));
  }
}

// Kernel names: mx_quantize_linear_<T>_<e4m3|e5m2>.
#define MX_DEFINE_QL1(NAME, T, E5)                                                              \
  extern "C" __global__ void NAME(const T::storage* x, const mx_u8* scale, mx_u8* y,            \
                                  long long elements, long long axis_len, long long inner,      \
                                  long long block, long long so, long long sb, long long si,    \
                                  int saturate) {                                               \
    MX_PDL_ENTRY();                                                                             \
    mx_quantize_linear_body<T, E5>(x, scale, y, elements, axis_len, inner, block, so, sb, si,   \
                                   saturate);                                                   \
  }
#define MX_DEFINE_QL(T, NAME)                                  \
  MX_DEFINE_QL1(mx_quantize_linear_##NAME##_e4m3, T, false) \
  MX_DEFINE_QL1(mx_quantize_linear_##NAME##_e5m2, T, true)

MX_DEFINE_QL(MxBf16, bf16)
MX_DEFINE_QL(MxF16, f16)
MX_DEFINE_QL(MxF32, f32)
