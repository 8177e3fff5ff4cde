// mxfuse GPU numerics shared by every kernel: element types, exact conversions and the MXFP8
// block quantizer. Everything here is integer/bit arithmetic or correctly rounded fp32 operations,
// so the results are bit-identical to the CPU reference (docs/ops.md,
// ../shared/spec/mxfp8-numerics.md) on any device that keeps fp32 denormals (NVRTC's default;
// no fast-math flags are ever passed).
#pragma once

// Flag bits shared by the quantizing kernels (kernels/src/gpu/launch.rs mirrors them).
#define MX_F_RCEIL 1u        // scale_rule "rceil" (else "floor")
#define MX_F_NAN_IGNORE 2u   // nan_policy "ignore" (else "propagate")
#define MX_F_GEMMA 4u        // add_rmsnorm: weight = 1 + gamma
#define MX_F_GAMMA_F32 8u    // add_rmsnorm: y = round_T(n * g) (else round_T(round_T(n) * g))
#define MX_F_INV_DIV 16u     // add_rmsnorm: n = s / sqrt(v + eps) (else s * (1 / sqrt(v + eps)))
#define MX_F_OAI 32u         // swiglu: SwiGLU-OAI clamp + (up + beta)
#define MX_F_FP32_ACT 64u    // swiglu: no rounding of intermediates to T
#define MX_F_NO_ROUND_SUM 128u  // add_rmsnorm: normalise the f32 sum x + r (residual_out still round_T)
#define MX_F_SWISH_SINGLE 256u  // swiglu: swish_form "single_op" (g * sigmoid(alpha * g) rounded once)
// swiglu launch choice, not an op attribute: the pinned logistic on every element instead of the
// certified fast one (same bits). For grids of about one wave, where the kernel lasts as long as
// its slowest warp and a warp's rare exact redo is that warp.
#define MX_F_SIGMA_PINNED 512u
#define MX_F_SCALE_F16 1024u  // scale_rule "floor_f16": amax * 2^-8 rounded to float16 first

// ---------------------------------------------------------------------------------------------
// Element types: a tag struct per ONNX float type with its storage and exact conversions.

MX_DEV float mx_bits_f32(mx_u32 b) { return __uint_as_float(b); }
MX_DEV mx_u32 mx_f32_bits(float f) { return __float_as_uint(f); }

struct MxF32 {
  typedef float storage;
  static MX_DEV float to_f32(float v) { return v; }
  static MX_DEV float from_f32(float v) { return v; }
};

struct MxBf16 {
  typedef mx_u16 storage;
  static MX_DEV float to_f32(mx_u16 v) { return mx_bits_f32(((mx_u32)v) << 16); }
  // Round to nearest even; NaN stays a (quiet) NaN.
  static MX_DEV mx_u16 from_f32(float f) {
#if defined(MX_NV_CVT16)
    mx_u16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
#endif
    mx_u32 b = mx_f32_bits(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (mx_u16)((b >> 16) | 0x40u);
    return (mx_u16)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
  }
};

struct MxF16 {
  typedef mx_u16 storage;
  static MX_DEV float to_f32(mx_u16 h) {
#if defined(MX_NV_CVT16)
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
    return r;
#endif
    mx_u32 sign = ((mx_u32)h & 0x8000u) << 16;
    mx_u32 e = ((mx_u32)h >> 10) & 0x1fu, m = (mx_u32)h & 0x3ffu;
    if (e == 0) {  // zero or subnormal: m * 2^-24, exact in fp32
      float f = (float)m * 5.9604644775390625e-8f;
      return sign ? -f : f;
    }
    if (e == 31) return mx_bits_f32(sign | 0x7f800000u | (m << 13));
    return mx_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
  }
  static MX_DEV mx_u16 from_f32(float f) {
#if defined(MX_NV_CVT16)
    mx_u16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
#endif
    mx_u32 b = mx_f32_bits(f);
    mx_u32 sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return (mx_u16)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (mx_u16)(sign | 0x7c00u);  // rounds to infinity
    if (a >= 0x38800000u) {                                   // normal half
      mx_u32 r = (a + 0xfffu + ((a >> 13) & 1u)) >> 13;
      return (mx_u16)(sign | (r - (112u << 10)));
    }
    // Subnormal half m * 2^-24: the scaling by 2^24 is exact, rintf rounds half to even.
    return (mx_u16)(sign | (mx_u32)rintf(mx_bits_f32(a) * 16777216.0f));
  }
};

template <class T>
MX_DEV float mx_round(float v) {
  return T::to_f32(T::from_f32(v));
}

// The MxMatMul epilogue (docs/ops.md): y = round_T(fl(fl(alpha * acc) + fl(beta * c))) with c the
// bias (type TO, nullable) at row m, column n: c[m * ld + n * cs] (ld = 0: one row broadcast,
// cs = 0: one column broadcast). The _rn intrinsics keep the compiler from contracting an FMA the
// CPU kernels do not have. Passed by value; kernels/src/gpu/launch.rs `EpilogueParams` mirrors it.
struct MxEpi {
  const void* bias;
  int ld;
  int cs;
  float alpha;
  float beta;
};

template <class TO>
MX_DEV float mx_epilogue(const MxEpi& e, long long m, long long n, float acc) {
  const float t = __fmul_rn(e.alpha, acc);
  if (e.bias == nullptr) return t;
  const typename TO::storage* c = static_cast<const typename TO::storage*>(e.bias);
  return __fadd_rn(t, __fmul_rn(e.beta, TO::to_f32(c[m * e.ld + n * e.cs])));
}

// Loads / stores of 8 consecutive elements (16 bytes for 16-bit types, 32 bytes for fp32). The
// callers guarantee 8-element alignment (every length is a multiple of 32).
template <class T>
struct MxVec8 {
  static MX_DEV void load(const mx_u16* p, float out[8]) {
    unpack(*reinterpret_cast<const uint4*>(p), out);
  }
  // 8 16-bit elements already in registers -> fp32.
  static MX_DEV void unpack(uint4 u, float out[8]) {
    mx_u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = T::to_f32((mx_u16)(w[i] & 0xffffu));
      out[2 * i + 1] = T::to_f32((mx_u16)(w[i] >> 16));
    }
  }
  static MX_DEV void store(mx_u16* p, const float v[8]) {
    mx_u32 w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] = (mx_u32)T::from_f32(v[2 * i]) | ((mx_u32)T::from_f32(v[2 * i + 1]) << 16);
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  }
};

template <>
struct MxVec8<MxF32> {
  static MX_DEV void load(const float* p, float out[8]) {
    float4 a = *reinterpret_cast<const float4*>(p);
    float4 b = *reinterpret_cast<const float4*>(p + 4);
    out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
    out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
  }
  static MX_DEV void store(float* p, const float v[8]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4*>(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
  }
};

// The pinned f32 exponential and logistic of kernels::reference::math (docs/ops.md): Cody-Waite
// reduction + the cephes degree-6 polynomial, every step one correctly rounded fma (fmaf is fused
// on CUDA and HIP alike; the CPU side uses f32::mul_add / _mm256_fmadd_ps), so the bits match the
// CPU reference. The two plain operations left (the 2^n scaling and 1 + e) use the _rn intrinsics
// so that the compiler cannot contract them into an FMA the reference does not have.
// Branch-free (SwiGLU at large M is issue-bound): t = fl(x log2 e + 1.5 * 2^23) in one fma is
// n + 1.5 * 2^23 with n = rint(x log2 e) (exact product, ties to even) for |x log2 e| < 2^22, and
// leaves n in the low mantissa bits (no FRND / F2I); the range cases are selected at the end, the
// polynomial's result for them (finite garbage) is discarded. A NaN x comes out as a NaN from the
// arithmetic itself (no select; its sign and payload may differ from x, which no consumer sees:
// the logistic, the rounding to T and the quantizer treat every NaN alike).
// The arithmetic of mx_exp_pinned without the range handling: the same bits for -87 <= x <= 88,
// anything elsewhere. For callers that test the range once per group of values (SwiGLU).
MX_DEV float mx_exp_core(float x) {
  const float t = fmaf(x, 1.44269504088896341f, 12582912.0f);
  const float n = __fsub_rn(t, 12582912.0f);
  const int j = __float_as_int(t) - 0x4B400000;
  float r = fmaf(n, -0.693359375f, x);  // exact: n * C1 has <= 17 bits, the difference cancels
  r = fmaf(n, 2.12194440e-4f, r);
  // exp(r) = 1 + r (1 + r (1/2 + r P(r))), Horner all the way down (one fma per coefficient).
  float p = 1.9875691e-4f;
  p = fmaf(p, r, 1.3981999e-3f);
  p = fmaf(p, r, 8.3334520e-3f);
  p = fmaf(p, r, 4.1665796e-2f);
  p = fmaf(p, r, 1.6666665e-1f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  const float y = fmaf(p, r, 1.0f);
  return __fmul_rn(y, mx_bits_f32((mx_u32)(j + 127) << 23));
}

MX_DEV float mx_exp_pinned(float x) {
  const float e = x < -87.0f ? 0.0f : mx_exp_core(x);
  return x > 88.0f ? __int_as_float(0x7f800000) : e;
}

// 1 / d, correctly rounded, for d in [1, 2^126) (d = 1 + exp(-z)); mx_rcp_ok says where it holds.
// CUDA: exactly the fast path that NVCC / NVRTC emit for the IEEE `1.0f / d` (MUFU.RCP, then one
// fma Newton step), which they take for every normal d below 2^126 and guard only by that range
// check and its slow-path call, so it gives the division's bits there (bench/gpu/check.py
// check_rcp compares it with `1.0f / d` on the GPU for every d in [1, 2) and [2^125, 2^126)).
// The caller takes 1.0f / d where !mx_rcp_ok(d) (+Inf, NaN, 1/d subnormal: rare), once per group
// of values. HIP: the IEEE division as written.
MX_DEV bool mx_rcp_ok(float d) { return d < 8.5070592e37f; }  // 2^126; false for NaN
MX_DEV float mx_rcp_fast(float d) {
#if defined(MX_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(d));
  return fmaf(y, fmaf(-d, y, 1.0f), y);
#else
  return 1.0f / d;
#endif
}

MX_DEV float mx_sigmoid_pinned(float z) {
  const float d = __fadd_rn(1.0f, mx_exp_pinned(-z));  // _rn: never contracted into an fma
  return mx_rcp_ok(d) ? mx_rcp_fast(d) : 1.0f / d;
}

// mx_sigmoid_pinned for |z| < 87 (mx_sigmoid_fast_ok): no range selects in the exp (the range
// is inside [-87, 88]), and 1 + exp(-z) < 1 + e^87 < 2^126, so the fast reciprocal holds. The
// caller takes mx_sigmoid_pinned where the test fails (large |z|, Inf, NaN: rare), once per group.
MX_DEV bool mx_sigmoid_fast_ok(float z) { return fabsf(z) < 87.0f; }  // false for NaN
MX_DEV float mx_sigmoid_fast(float z) { return mx_rcp_fast(__fadd_rn(1.0f, mx_exp_core(-z))); }

// ---------------------------------------------------------------------------------------------
// FP8 E4M3FN and E8M0.

// fp32 -> E4M3FN, round to nearest even, saturating for finite values (|v| >= 448 -> +-448);
// NaN -> 0x7F and +-Inf -> 0x7F / 0xFF (docs/ops.md: non-finite elements follow nan_policy; the
// quantizer only lets them through under "ignore", where vLLM's cast is non-saturating).
MX_DEV mx_u32 mx_e4m3_sat(float v) {
  mx_u32 b = mx_f32_bits(v);
  mx_u32 sign = (b >> 24) & 0x80u, a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fu;
  if (a == 0x7f800000u) return sign | 0x7fu;
  if (a >= 0x43e00000u) return sign | 0x7eu;  // >= 448
  if (a < 0x3c800000u) {                      // below 2^-6: E4M3 subnormal m * 2^-9, m = 0..8
    return sign | (mx_u32)rintf(mx_bits_f32(a) * 512.0f);
  }
  // Normal: keep 3 mantissa bits with round-half-even; a carry into the exponent is correct.
  mx_u32 r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
  r -= 120u << 3;  // rebias 127 -> 7
  return sign | (r > 0x7eu ? 0x7eu : r);
}

// Four values -> four E4M3 bytes as mx_e4m3_sat, little-endian. may_be_nonfinite = false: the
// caller guarantees four finite values (the quantizer under "propagate" has already returned for
// any block with a NaN or Inf), which skips the per-value finiteness test of the CUDA path.
MX_DEV mx_u32 mx_e4m3x4_sat(float a, float b, float c, float d, bool may_be_nonfinite = true) {
#if defined(MX_NV_CVT_E4M3)
  // cvt ... e4m3x2 puts its first source in the high byte. satfinite is mx_e4m3_sat for finite
  // values; non-finite ones (rare) take the software path.
  mx_u16 lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(b), "f"(a));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(d), "f"(c));
  mx_u32 r = (mx_u32)lo | ((mx_u32)hi << 16);
  if (may_be_nonfinite) {
    const float inf = __int_as_float(0x7f800000);
    if (!(fabsf(a) < inf) | !(fabsf(b) < inf) | !(fabsf(c) < inf) | !(fabsf(d) < inf))
      r = mx_e4m3_sat(a) | (mx_e4m3_sat(b) << 8) | (mx_e4m3_sat(c) << 16) | (mx_e4m3_sat(d) << 24);
  }
  return r;
#else
  return mx_e4m3_sat(a) | (mx_e4m3_sat(b) << 8) | (mx_e4m3_sat(c) << 16) | (mx_e4m3_sat(d) << 24);
#endif
}

// E4M3FN -> fp32 (exact; 0x7F/0xFF -> NaN).
MX_DEV float mx_e4m3_to_f32(mx_u32 v) {
  mx_u32 em = v & 0x7fu;
  float f = (em >> 3) ? mx_bits_f32((em + (120u << 3)) << 20) : (float)em * 0.001953125f;
  if (em == 0x7fu) f = __int_as_float(0x7fc00000);
  return (v & 0x80u) ? -f : f;
}

// E8M0 byte -> fp32 power of two (0 -> 2^-127, a denormal; 255 -> NaN). Integer selects, not
// branches: the decode GEMMs convert 4 scale bytes per k-block, and ptxas turned the early
// returns into a branch + reconvergence (~9 instructions) each.
MX_DEV float mx_e8m0_to_f32(mx_u32 s) {
  return mx_bits_f32(s == 0u ? 0x00400000u : (s == 255u ? 0x7fc00000u : s << 23));
}

// Scale byte from a block's abs-max (>= 0, not NaN; Inf allowed -> 254, the E8M0 saturation),
// exactly kernels::codec::ScaleRule::scale_byte:
// "floor": the biased exponent of fl32(amax * 2^-8) (a subnormal product gives 0), at most 254.
// "rceil": E8M0 round-up of q = fl32(amax * fl32(1/448)); a subnormal q gives 1 if q > 2^-127.
// "floor_f16" (MX_F_SCALE_F16): "floor" of amax * 2^-8 rounded to float16 (RNE, subnormals; +Inf
// above its range), as a float16 graph computes it.
MX_DEV mx_u32 mx_scale_byte(float amax, mx_u32 flags) {
  mx_u32 a = mx_f32_bits(amax);
  if (a >= 0x7f800000u) return 254u;
  if (flags & MX_F_RCEIL) {
    mx_u32 q = mx_f32_bits(amax * (1.0f / 448.0f));
    mx_u32 e = q >> 23, m = q & 0x7fffffu;
    if (e == 0u) return m > 0x400000u ? 1u : 0u;
    mx_u32 r = e + (m != 0u ? 1u : 0u);
    return r > 254u ? 254u : r;
  }
  float p = amax * 0.00390625f;
  if (flags & MX_F_SCALE_F16) p = MxF16::to_f32(MxF16::from_f32(p));
  const mx_u32 e = mx_f32_bits(p) >> 23;
  return e > 254u ? 254u : e;
}

// 2^(127 - byte): the exact multiplier that maps a block onto the E4M3 grid. byte 254 needs the
// denormal 2^-127.
MX_DEV float mx_scale_inverse(mx_u32 s) {
  return s >= 254u ? mx_bits_f32(0x00400000u) : mx_bits_f32((254u - s) << 23);
}

// The block's abs-max key (mx_quant_group's first step): the bits of max |v| over the group of
// 32 / E lanes, in every lane of it. Every lane of the warp must call it (it shuffles).
// The redux.sync form measured 1.58 vs 1.65 us for the shuffle tree at M = 8 (SwiGLU, 1 output
// a lane; BENCHMARKS.md issue 6 follow-up 2).
template <int E>
MX_DEV mx_u32 mx_group_key(const float v[E], mx_u32 flags) {
  // The block's abs-max as the integer max of the |v| bit patterns (the same order as the floats
  // for non-negative values), one shuffle per level: under "ignore" NaN counts as 0 (fmaxf's amax,
  // Inf kept); under "propagate" a maximum >= Inf's pattern means a NaN or +-Inf in the block.
  const bool ignore = (flags & MX_F_NAN_IGNORE) != 0;
  mx_u32 key = 0u;
#pragma unroll
  for (int i = 0; i < E; ++i) {
    mx_u32 a = mx_f32_bits(v[i]) & 0x7fffffffu;
    a = ignore && a > 0x7f800000u ? 0u : a;
    key = a > key ? a : key;
  }
#if defined(MX_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  if (32 / E == MX_WARP) {  // the group is the whole warp: one warp reduction (sm_80+)
    asm("redux.sync.max.u32 %0, %0, 0xffffffff;" : "+r"(key));
  } else
#endif
  {
#pragma unroll
    for (int o = 1; o < 32 / E; o <<= 1) {
      const mx_u32 other = MX_SHFL_XOR(key, o);
      key = other > key ? other : key;
    }
  }
  return key;
}

// The MXFP8 block quantizer: one 32-element block per aligned group of 32 / E consecutive lanes, E
// elements per lane (E = 8: 4 lanes; E = 2: 16 lanes, for short per-lane chains at small sizes).
// Every lane of the warp must call it (it shuffles); lanes without data pass zeros and ignore the
// result. Writes the lane's E E4M3 bytes packed little-endian into q[] and returns the block's
// scale byte.
template <int E>
MX_DEV mx_u32 mx_quant_group(const float v[E], mx_u32 flags, mx_u32 q[(E + 3) / 4]) {
  const bool ignore = (flags & MX_F_NAN_IGNORE) != 0;
  const mx_u32 key = mx_group_key<E>(v, flags);
  // "propagate": a NaN or +-Inf in the block gives the NaN scale and every value NaN.
  if (!ignore && key >= 0x7f800000u) {
#pragma unroll
    for (int j = 0; j < (E + 3) / 4; ++j) q[j] = 0x7f7f7f7fu;
    return 255u;
  }
  const float amax = mx_bits_f32(key);
  const mx_u32 scale = mx_scale_byte(amax, flags);
  const float inv = mx_scale_inverse(scale);
  // The products are exact (power-of-two scaling); NaN stays NaN, +-Inf stays +-Inf. They are
  // all finite under "propagate" (the non-finite blocks returned above; a finite v times inv is
  // at most ~2^9): only "ignore" needs the non-finite test of mx_e4m3x4_sat.
  if (E >= 4) {
#pragma unroll
    for (int j = 0; j < E / 4; ++j)
      q[j] = mx_e4m3x4_sat(v[4 * j] * inv, v[4 * j + 1] * inv, v[4 * j + 2] * inv,
                           v[4 * j + 3] * inv, ignore);
  } else {
    float w[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < E; ++i) w[i] = v[i] * inv;
    q[0] = mx_e4m3x4_sat(w[0], w[1], w[2], w[3], ignore);
  }
  return scale;
}

// The E = 8 case with the two words named (used where the words are mma fragments).
MX_DEV void mx_quant_group8(const float v[8], mx_u32 flags, mx_u32& lo, mx_u32& hi, mx_u32& scale) {
  mx_u32 q[2];
  scale = mx_quant_group<8>(v, flags, q);
  lo = q[0];
  hi = q[1];
}

// Writes one lane's quantizer output: E bytes of values at q + E * idx and, from the first lane of
// its group, the scale byte at scale[idx / (32 / E)] (idx = index of this lane's E elements in the
// row-major tensor; rows are a multiple of 32 long).
template <int E>
MX_DEV void mx_store_group(mx_u8* q, mx_u8* scale, long long idx, const mx_u32 w[(E + 3) / 4],
                           mx_u32 s) {
  if (E == 8) {
    *reinterpret_cast<uint2*>(q + 8 * idx) = make_uint2(w[0], w[(E + 3) / 4 - 1]);
  } else if (E == 4) {
    *reinterpret_cast<mx_u32*>(q + 4 * idx) = w[0];
  } else if (E == 2) {
    *reinterpret_cast<mx_u16*>(q + 2 * idx) = (mx_u16)w[0];
  } else {
    q[idx] = (mx_u8)w[0];
  }
  if ((idx & (32 / E - 1)) == 0) scale[idx / (32 / E)] = (mx_u8)s;
}

MX_DEV void mx_store_group8(mx_u8* q, mx_u8* scale, long long chunk, mx_u32 lo, mx_u32 hi, mx_u32 s) {
  const mx_u32 w[2] = {lo, hi};
  mx_store_group<8>(q, scale, chunk, w, s);
}

// E consecutive elements -> fp32 (16-byte vector loads for E = 8).
template <class T, int E>
MX_DEV void mx_load(const typename T::storage* p, float out[E]) {
  if (E == 8) {
    MxVec8<T>::load(p, out);
  } else {
#pragma unroll
    for (int i = 0; i < E; ++i) out[i] = T::to_f32(p[i]);
  }
}

// ---------------------------------------------------------------------------------------------
// Hopper thread-block clusters: the blocks of a cluster (__cluster_dims__) synchronise and read
// each other's shared memory (split rows / split K; see add_rmsnorm_mxquant.hip and
// mx_matmul_splitk.hip).
#if defined(MX_NV_CLUSTER)
MX_DEV void mx_cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
MX_DEV void mx_cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// Arrival without ordering (nothing written yet needs publishing), e.g. "this block has started".
MX_DEV void mx_cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
// Cluster-wide barrier: releases this block's shared-memory writes, acquires the others'.
MX_DEV void mx_cluster_sync() {
  mx_cluster_arrive();
  mx_cluster_wait();
}
// The shared-memory address of `local` in block `rank` of this cluster.
MX_DEV mx_u32 mx_dsmem_addr(const void* local, mx_u32 rank) {
  const mx_u32 a = (mx_u32)__cvta_generic_to_shared(local);
  mx_u32 remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(a), "r"(rank));
  return remote;
}
MX_DEV float mx_dsmem_load(const float* local, mx_u32 rank) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(mx_dsmem_addr(local, rank)) : "memory");
  return v;
}
MX_DEV double mx_dsmem_load(const double* local, mx_u32 rank) {
  double v;
  asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(mx_dsmem_addr(local, rank)) : "memory");
  return v;
}
// Transaction barriers (mbarrier) for one-way signalling between the blocks of a cluster: a block
// initialises its barrier expecting N bytes, the others store into its shared memory with st.async,
// each store completing its bytes on that barrier, and the block waits for the phase (no cluster
// barrier, no memory fence). The init must reach the other blocks before their first st.async:
// mx_fence_mbar_init, then a cluster arrive (relaxed is enough) that they wait for.
MX_DEV void mx_mbar_init_expect(mx_u64* bar, mx_u32 bytes) {
  const mx_u32 a = (mx_u32)__cvta_generic_to_shared(bar);
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n"
               "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(a), "r"(bytes)
               : "memory");
}
MX_DEV void mx_fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Waits until the barrier's phase `parity` has completed; acquires the bytes stored by the
// st.async operations that completed it.
MX_DEV void mx_mbar_wait(mx_u64* bar, mx_u32 parity) {
  const mx_u32 a = (mx_u32)__cvta_generic_to_shared(bar);
  mx_u32 done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(a), "r"(parity) : "memory");
  }
}
// Stores v at `local`'s address in block `rank`'s shared memory and completes 8 bytes on the
// barrier at `bar`'s address in that block.
MX_DEV void mx_st_async_f64(double* local, mx_u64* bar, mx_u32 rank, double v) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];\n" ::"r"(
                   mx_dsmem_addr(local, rank)),
               "l"(__double_as_longlong(v)), "r"(mx_dsmem_addr(bar, rank))
               : "memory");
}
#endif

// The gathered kernels (mx_gather.hip, mx_matmul_frag_wo.hip) check their indices on the device:
// an index out of range is recorded in err ([flag, value]; kernels::gpu::gather) and the kernel
// writes NaN instead of reading.
// Index j as a position in [0, n), or -1 (recorded in err) when out of range. No indices
// (idx null: the weight-only MxMatMul, one "expert"): 0.
MX_DEV long long mx_gather_index(const void* idx, int idx64, long long j, long long n,
                                 mx_u64* err) {
  if (idx == nullptr) return 0;
  const long long v = idx64 ? reinterpret_cast<const long long*>(idx)[j]
                            : (long long)reinterpret_cast<const int*>(idx)[j];
  if (v < -n || v >= n) {
    atomicExch(err + 1, (mx_u64)v);
    atomicExch(err, 1ull);
    return -1;
  }
  return v < 0 ? v + n : v;
}
