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

// ---------------------------------------------------------------------------------------------
// The packed bf16 path (CUDA sm_80+, T = bf16, 8 elements per lane, the rounded-activation modes
// of the "unrolled" swish form): every op of the unfused graph between two bf16 values runs as one
// bf16x2 instruction on two elements at once. Exact: each such op is a single f32 operation whose
// result the graph rounds to bf16 (r(fl32(a op b))), and fma.rn.bf16x2 rounds the exact a * b + c
// once; the two agree because f32 carries 24 >= 2 * 8 + 2 bits, where double rounding is
// innocuous for + and * (Figueroa), subnormal results included (bf16 and f32 share the exponent
// range and the same argument holds at a fixed absolute grid). A product is fma(a, b, -0): -0
// leaves every product, a zero's sign included, unchanged. The OAI clamps are min.NaN / max.NaN
// (the MX_ACT_MINMAX precondition: both bounds > 0). NaN comes out as the canonical NaN, which
// nothing downstream tells apart (see MX_ACT_MINMAX).
//
// The logistic is the one f32 step: sigma is computed fast (mx_sigmoid_approx: MUFU ex2 + rcp, ~8
// instructions instead of ~19 for the pinned exp and the exact reciprocal) and used only where its
// rounding to bf16 is certain to be that of the pinned sigma (mx_sigmoid_certified); the rest
// (~0.05 % of elements; |z| >= 87, NaN) take mx_sigmoid_pinned. bench/gpu/check.py checks every
// bf16 z and every f32 z in (-87, 87) on the GPU (check_sigmoid_cert).
#if defined(MX_NV_CVT16)
#define MX_SWIGLU_PACKED 1
MX_DEV mx_u32 mx_bf16x2_fma(mx_u32 a, mx_u32 b, mx_u32 c) {
  mx_u32 d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
MX_DEV mx_u32 mx_bf16x2_min_nan(mx_u32 a, mx_u32 b) {
  mx_u32 d;
  asm("min.NaN.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
MX_DEV mx_u32 mx_bf16x2_max_nan(mx_u32 a, mx_u32 b) {
  mx_u32 d;
  asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
MX_DEV mx_u32 mx_bf16x2_round(float lo, float hi) {
  mx_u32 w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}
// Both halves of a bf16x2 word: f32 of the low / high element (exact).
MX_DEV float mx_bf16x2_lo(mx_u32 w) { return mx_bits_f32(w << 16); }
MX_DEV float mx_bf16x2_hi(mx_u32 w) { return mx_bits_f32(w & 0xffff0000u); }
MX_DEV mx_u32 mx_bf16x2_splat(float v_bf16) { return (mx_f32_bits(v_bf16) >> 16) * 0x10001u; }

// sigma(z) = 1 / (1 + e^-z) for |z| < 87, within 2^-21 of the true value: e^x = 2^h e^rho with
// h = fl(x log2 e) and rho = x - h ln2 (two fmas: ln2 as f32 plus its error, so rho is the true
// remainder to ~2^-24 of itself, |rho| < 2^-18), e^rho = 1 + rho to 2^-37. Error budget (CUDA
// documents ex2.approx within 2 ulp, rcp.approx within 1 ulp): e within 2.5 ulp, 1 + e within
// 2.5 * 2^-23 + 2^-24 relative, the reciprocal 2^-23 more: |sa / sigma - 1| < 4 * 2^-23.
MX_DEV float mx_sigmoid_approx(float z) {
  const float x = -z;
  const float h = x * 1.44269504088896341f;
  float rho = fmaf(h, -0.693147182464599609375f, x);  // x - h * fl32(ln2)
  rho = fmaf(h, 1.904654299e-9f, rho);                 // + h * (fl32(ln2) - ln2)
  float e0, s;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e0) : "f"(h));
  const float d = __fadd_rn(fmaf(e0, rho, e0), 1.0f);
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(s) : "f"(d));
  return s;
}

// Whether bf16(sa) is bf16(mx_sigmoid_pinned(z)) for sure: |z| < 87 (else, or NaN, false) and sa is
// more than MX_SIGMOID_ULPS f32 ulps away from a bf16 rounding boundary (low 16 bits 0x8000).
// The pinned sigma is within 2^-22 of the true one (exp within 1 ulp, then two roundings), sa
// within 2^-21: together under 12 * 2^-24 relative, i.e. at most 12 ulps of sa's binade (and of
// the binade below, whose ulps are half as wide but whose values are too). Positive floats order
// like their bits, so every float within 12 ulps rounds to the same bf16 when the bits keep more
// than that from the boundary: ((b - 0x8000 + K) mod 2^16) > 2K, one IMAD (the shift by 16 drops
// the high half) and one compare.
#define MX_SIGMOID_ULPS 13u
MX_DEV bool mx_sigmoid_certified(float z, float sa) {
  const mx_u32 t = mx_f32_bits(sa) * 65536u + ((MX_SIGMOID_ULPS - 0x8000u) << 16);
  return (fabsf(z) < 87.0f) & (t > ((2u * MX_SIGMOID_ULPS) << 16));
}

// The uniform bf16x2 operands of the packed path.
struct MxSwigluPacked {
  mx_u32 alpha, lim, neg_lim, beta;  // r(alpha), r(limit), -r(limit), r(beta), both halves
};

// bf16x2 min / max that drop NaN (a NaN operand gives the other one): the table index clamps.
MX_DEV mx_u32 mx_bf16x2_min(mx_u32 a, mx_u32 b) {
  mx_u32 d;
  asm("min.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
MX_DEV mx_u32 mx_bf16x2_max(mx_u32 a, mx_u32 b) {
  mx_u32 d;
  asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// r(sigma) of both halves of a bf16x2 word of z from the logistic table (swiglu_sigma_table.hip,
// generated and checked for every bf16 z by kernels/src/gpu/sigma_table.rs) in shared memory:
// |z| clamped to [LO, HI] by bf16 min / max (both halves at once; NaN -> HI), minus LO, doubled
// to a byte offset, the sign bit shifted onto the negative half's offset (bit 12), two 16-bit
// loads. Exact for every non-NaN z; a NaN z reads some entry, which the caller makes harmless
// (r(alpha) finite and nonzero: z is NaN only where g is, and r(g * anything) is NaN then).
MX_DEV mx_u32 mx_sigma_lookup2(mx_u32 zw, const mx_u16* tab) {
  const mx_u32 lo2 = MX_SIGMA_LO * 0x10001u, hi2 = MX_SIGMA_HI * 0x10001u;
  const mx_u32 c = mx_bf16x2_max(mx_bf16x2_min(zw & 0x7fff7fffu, hi2), lo2);
  const mx_u32 off = ((c - lo2) << 1) | ((zw >> 3) & 0x10001000u);
  const char* base = reinterpret_cast<const char*>(tab);
  const mx_u32 lo = *reinterpret_cast<const mx_u16*>(base + (off & 0xffffu));
  const mx_u32 hi = *reinterpret_cast<const mx_u16*>(base + (off >> 16));
  return __byte_perm(lo, hi, 0x5410);
}

// gate / up words (two bf16 each, element 2i in the low half of word i) -> the E rounded
// activations as f32, exactly mx_swiglu_n<MxBf16, E, ACT> of the same elements. TAB: r(sigma) from
// the logistic table in shared memory at tab (mx_sigma_lookup2; needs r(alpha) finite and
// nonzero), else the certified fast sigma (tab unused).
template <int E, mx_u32 ACT, bool TAB = false>
MX_DEV void mx_swiglu_packed(mx_u32 g[E / 2], mx_u32 u[E / 2], const MxSwigluPacked& k,
                             const mx_u16* tab, float y[E]) {
  const mx_u32 one = 0x3f803f80u, neg_zero = 0x80008000u;
  if (ACT & MX_F_OAI) {
#pragma unroll
    for (int i = 0; i < E / 2; ++i) {
      g[i] = mx_bf16x2_min_nan(g[i], k.lim);
      u[i] = mx_bf16x2_fma(mx_bf16x2_max_nan(mx_bf16x2_min_nan(u[i], k.lim), k.neg_lim), one, k.beta);
    }
  }
  mx_u32 zw[E / 2], sig[E / 2];
#pragma unroll
  for (int i = 0; i < E / 2; ++i) zw[i] = mx_bf16x2_fma(g[i], k.alpha, neg_zero);  // r(g * r(alpha)); = g for alpha 1
  if (TAB) {
#pragma unroll
    for (int i = 0; i < E / 2; ++i) sig[i] = mx_sigma_lookup2(zw[i], tab);  // r(sigma)
  } else {
    float z[E], s[E];
    bool cert = true;
#pragma unroll
    for (int i = 0; i < E / 2; ++i) {
      z[2 * i] = mx_bf16x2_lo(zw[i]);
      z[2 * i + 1] = mx_bf16x2_hi(zw[i]);
    }
#pragma unroll
    for (int j = 0; j < E; ++j) {
      s[j] = mx_sigmoid_approx(z[j]);
      cert = cert & mx_sigmoid_certified(z[j], s[j]);
    }
    // Rare (~1 % of warps on N(0, 8^2) data): the lane recomputes all its sigmas exactly (the
    // certified ones round the same either way; not keeping per-element flags saves registers
    // and predicate shuffling on the hot path).
    if (!cert) {
#pragma unroll
      for (int j = 0; j < E; ++j) s[j] = mx_sigmoid_pinned(z[j]);
    }
#pragma unroll
    for (int i = 0; i < E / 2; ++i) sig[i] = mx_bf16x2_round(s[2 * i], s[2 * i + 1]);  // r(sigma)
  }
#pragma unroll
  for (int i = 0; i < E / 2; ++i) {
    const mx_u32 sw = mx_bf16x2_fma(g[i], sig[i], neg_zero);  // r(g * r(sigma))
    const mx_u32 act = mx_bf16x2_fma(sw, u[i], neg_zero);     // r(sw * u)
    y[2 * i] = mx_bf16x2_lo(act);
    y[2 * i + 1] = mx_bf16x2_hi(act);
  }
}

// fp32 activation (vLLM's kernel), bf16 inputs, E per lane: y = (g * sigma(alpha g)) * u in f32
// with the fast sigma, exactly the arithmetic of mx_swiglu_n otherwise. Nothing is rounded to bf16
// here, so the certificate sits on the quantizer's output instead (mx_quant_group_certified);
// this returns false unless every 2^-100 <= |z| < 87 (not for z = 0 or NaN either). The lower
// bound keeps g * sigma a normal float (|g| >= 2^-106 with |alpha| <= 64, the caller's condition;
// near z = -87, |g| >= 87 / 64 and sigma >= e^-87), so its relative error is that of sigma plus
// two roundings: a subnormal product would turn sigma's relative error into an absolute one.
// One LEA + one compare: 2 |z|'s bits (the shift drops the sign) in one unsigned range.
MX_DEV bool mx_swiglu_fp32_z_ok(float z) {
  return mx_f32_bits(z) * 2u - 0x1b000000u < 0x855c0000u - 0x1b000000u;  // 2 * bits(2^-100 / 87)
}
template <int E, mx_u32 ACT>
MX_DEV bool mx_swiglu_fp32_approx(const mx_u32 gw[E / 2], const mx_u32 uw[E / 2],
                                  const MxSwigluParams& p, float y[E]) {
  bool ok = true;
#pragma unroll
  for (int j = 0; j < E; ++j) {
    float g = j & 1 ? mx_bf16x2_hi(gw[j / 2]) : mx_bf16x2_lo(gw[j / 2]);
    float u = j & 1 ? mx_bf16x2_hi(uw[j / 2]) : mx_bf16x2_lo(uw[j / 2]);
    if (ACT & MX_F_OAI) {
      mx_oai_clamp<ACT>(g, u, p.limit);
      u = u + p.beta;
    }
    const float z = p.alpha * g;
    ok = ok & mx_swiglu_fp32_z_ok(z);
    y[j] = g * mx_sigmoid_approx(z) * u;
  }
  return ok;
}

// mx_quant_group<E> of activations computed with the fast sigma, plus the certificate that the
// result is the one the pinned sigma gives; ok is and-ed with it. The pinned activation lies
// within 2^-19 (relative) of v: sigma within 12 ulps (<= 12 * 2^-23; check_sigmoid_cert's maximum
// over every f32 z), and two roundings on each side. So the E4M3 codes are certain where those of
// v * inv * (1 -+ 2^-19) agree (rounding to E4M3 is monotonic, saturation included), and the scale
// where the block's abs-max (rceil: fl32(amax / 448)) keeps more than 40 ulps from a power of
// two and is >= 2^-90 (so relative errors stay relative and every element too small to matter
// quantizes to a zero of the same sign either way). Non-finite blocks do not depend on sigma.
template <int E>
MX_DEV mx_u32 mx_quant_group_certified(const float v[E], mx_u32 flags, mx_u32 q[E / 4], bool& ok) {
  const bool ignore = (flags & MX_F_NAN_IGNORE) != 0;
  const mx_u32 key = mx_group_key<E>(v, flags);
  if (!ignore && key >= 0x7f800000u) {
#pragma unroll
    for (int j = 0; j < E / 4; ++j) q[j] = 0x7f7f7f7fu;
    return 255u;
  }
  const float amax = mx_bits_f32(key);
  const mx_u32 scale = mx_scale_byte(amax, flags);
  const float inv = mx_scale_inverse(scale);
  if (key < 0x7f800000u) {
    const mx_u32 m = flags & MX_F_RCEIL ? mx_f32_bits(amax * (1.0f / 448.0f)) : key;
    // floor_f16: the float16 rounding of amax * 2^-8 moves the boundaries off the powers of
    // two (below 2^-6, and for an amax between float16 values), so the scale is certain where
    // the rule gives the same byte at both ends of the pinned activation's interval (the rule
    // is monotonic).
    const bool f16_ok =
        !(flags & MX_F_SCALE_F16) || mx_scale_byte(amax * (1.0f - 0x1p-19f), flags) ==
                                         mx_scale_byte(amax * (1.0f + 0x1p-19f), flags);
    ok = ok & f16_ok & (key >= 0x12800000u) & (((m + 40u) & 0x7fffffu) > 80u);
  }
  const float lo = inv * (1.0f - 0x1p-19f), hi = inv * (1.0f + 0x1p-19f);
#pragma unroll
  for (int j = 0; j < E / 4; ++j) {
    q[j] = mx_e4m3x4_sat(v[4 * j] * lo, v[4 * j + 1] * lo, v[4 * j + 2] * lo, v[4 * j + 3] * lo, ignore);
    const mx_u32 qh =
        mx_e4m3x4_sat(v[4 * j] * hi, v[4 * j + 1] * hi, v[4 * j + 2] * hi, v[4 * j + 3] * hi, ignore);
    ok = ok & (q[j] == qh);
  }
  return scale;
}
#endif

// Whether the lane takes the packed path: bf16, 8 per lane, rounded activation, unrolled
// swish, and for OAI the min/max clamps (limit > 0).
template <class T, int E, mx_u32 ACT>
struct MxSwigluPackedPath {
  static constexpr bool value = false;
};
// Whether the lane takes the certified fast sigma with fp32 activations: bf16, 8 per lane.
template <class T, int E, mx_u32 ACT>
struct MxSwigluFp32Path {
  static constexpr bool value = false;
};
#if defined(MX_SWIGLU_PACKED)
template <int E, mx_u32 ACT>
struct MxSwigluPackedPath<MxBf16, E, ACT> {
  static constexpr bool value = E == 8 && !(ACT & (MX_F_FP32_ACT | MX_ACT_SINGLE)) &&
                                (!(ACT & MX_F_OAI) || (ACT & MX_ACT_MINMAX));
};
template <int E, mx_u32 ACT>
struct MxSwigluFp32Path<MxBf16, E, ACT> {
  static constexpr bool value = E == 8 && (ACT & MX_F_FP32_ACT) != 0;
};
#endif

#if defined(MX_SWIGLU_PACKED)
// l / d for l < 2^24, 4 <= d < 2^24 (both exact in f32) by a float reciprocal: the product is
// within 2^-22 of l / d < 2^22, so off by at most one, fixed by the remainder; ~12 instructions
// instead of the ~20 of an unsigned division.
MX_DEV mx_u32 mx_div_small(mx_u32 l, mx_u32 d) {
  float rcp;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(rcp) : "f"((float)d));
  const int q = (int)((float)l * rcp);
  const int r = (int)l - q * (int)d;
  return (mx_u32)(r < 0 ? q - 1 : (r >= (int)d ? q + 1 : q));
}

// A lane's 8 gate / up elements as bf16x2 words (element 2i in the low half of word i), the
// elements mx_load reads for the same lane: straight from the 16-byte loads, interleaved inputs
// (g0 u0 g1 u1 ...) regrouped by byte permutes. Only split halves needs the lane's row.
MX_DEV void mx_swiglu_load_words(const mx_u16* __restrict__ gate, const mx_u16* __restrict__ up,
                                 long long lane, long long lanes, int I, int layout, mx_u32 gw[4],
                                 mx_u32 uw[4]) {
  const mx_u16* g;
  const mx_u16* u;
  if (layout == MX_LAYOUT_SPLIT_HALVES) {
    const int per_row = I / 8;
    if (lanes <= (1 << 24) && lanes * 16 <= 0x7fffffffLL) {
      // Most tensors: the row by a float reciprocal (mx_div_small) instead of the ~25-instruction
      // integer division, and 32-bit element offsets (the tensor's 2 * 8 * lanes elements fit):
      // ~12 instructions instead of ~45.
      const unsigned l = (unsigned)lane;
      const unsigned row = mx_div_small(l, (unsigned)per_row);
      g = gate + (unsigned)(8 * l + row * (unsigned)I);  // row * 2I + 8 * col
    } else {  // 32-bit division when it fits (a 64-bit one is ~70 instructions)
      const long long row = lanes < 0x7fffffffLL ? (long long)((unsigned)lane / (unsigned)per_row)
                                                 : lane / per_row;
      g = gate + 8 * lane + row * I;  // row * 2I + 8 * (lane - row * per_row)
    }
    u = g + I;
  } else if (layout == MX_LAYOUT_SEPARATE) {
    g = gate + 8 * lane;
    u = up + 8 * lane;
  } else {
    g = gate + 16 * lane;
    u = g + 8;
  }
  const uint4 a = *reinterpret_cast<const uint4*>(g);
  const uint4 b = *reinterpret_cast<const uint4*>(u);
  if (layout == MX_LAYOUT_INTERLEAVED) {
    const mx_u32 w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      gw[i] = __byte_perm(w[2 * i], w[2 * i + 1], 0x5410);
      uw[i] = __byte_perm(w[2 * i], w[2 * i + 1], 0x7632);
    }
  } else {
    gw[0] = a.x; gw[1] = a.y; gw[2] = a.z; gw[3] = a.w;
    uw[0] = b.x; uw[1] = b.y; uw[2] = b.z; uw[3] = b.w;
  }
}
#endif

#if defined(MX_SWIGLU_PACKED)
// The table kernels (bf16, 8 per lane, rounded activation, unrolled swish; no other dispatch
// compiled in): the logistic from the table in shared memory (mx_sigma_lookup2). The runtime's
// kernel from the device's `table_from` outputs on (kernels/src/gpu/swiglu_table_kernel.rs), grid
// capped at the resident blocks by the occupancy query: each block copies the table
// (MX_SIGMA_ENTRIES * 2 bytes, 487 16-byte pieces): each lane loads up to two pieces before the
// PDL wait (the table is constant: under programmatic launch this overlaps the previous kernel's
// tail), stores them once its first input loads are issued (and copies what is left where blocks
// have < 244 lanes), then one __syncthreads. A block loops over chunks of blockDim lanes with a
// stride of gridDim (uniform per block): a grid of one block per chunk copies the table once per
// chunk (at 256 lanes a block as many bytes from L2 as the chunk's inputs), a capped grid once per
// resident block. The caller guarantees the preconditions the default kernels test at their entry
// (OAI: limit > 0 and r(limit) > 0, the min / max clamps; r(alpha) finite and nonzero); the kernel
// traps otherwise (the runtime's test: swiglu_table_kernel.rs `refusal`; bench/gpu/mxgpu.py
// `swiglu_table_ok`).
// Tried and dropped (bench-only kernels removed in session 17; BENCHMARKS.md issue 6 follow-ups 7
// and 9): this loop with the certified fast sigma instead of the table (`_pk`, slower than the
// table from M = 192); its loads and stores alone (`_floor`, the access pattern's floor: 4.7 us at
// M = 8192); the split loop with the next chunk's loads issued first or two chunks an iteration
// (`_tpipe`, `_ttwo`: 40 registers; 4 % faster at OAI M = 8192, mixed at SiLU M = 2048-4096,
// slower at small M) and at 8 resident blocks a SM
// (`_table8`, `_tsr8`: no faster).

// The split-halves loop (swiglu_table_split_loop, BENCHMARKS.md issue 6 follow-up 9): split halves
// with 32-bit offsets (lanes <= 2^23 and the grid's lanes <= 2^22, so every lane id a chunk two
// strides past the end has stays below 2^24, mx_div_small's range, and every offset fits) and the
// quantizer's floor rule and "propagate" (the runtime's flags): the row / column of the next chunk
// from the previous one (the stride of gridDim * blockDim lanes is constant: its rows and columns
// are computed once), no layout test in the loop, the first chunk's loads peeled before the table
// copy. Other layouts and flags take the generic loop of swiglu_mxquant_blocks (any layout, 64-bit
// lane ids, the row by a float reciprocal every chunk).

// Where a lane's chunks lie in split halves (gate row r = elements [r * 2I, r * 2I + I), up the
// next I): the element offset of the lane's 8 gate elements and its column of 8 in the row.
// advance() moves both by the constant stride (dc columns and dstep elements, the row carry
// adding I: one row on is 2I elements, a row's columns are I elements).
struct MxSplitCursor {
  mx_u32 off, col;
  MX_DEV void advance(mx_u32 dc, mx_u32 dstep, mx_u32 per_row, mx_u32 I) {
    col += dc;
    const bool carry = col >= per_row;
    col = carry ? col - per_row : col;
    off += carry ? dstep + I : dstep;
  }
};

// One chunk's words (gate and up, 16 bytes each) at the cursor.
MX_DEV void mx_split_load(const mx_u16* __restrict__ gate, mx_u32 off, mx_u32 I, mx_u32 gw[4],
                          mx_u32 uw[4]) {
  const uint4 a = *reinterpret_cast<const uint4*>(gate + off);
  const uint4 b = *reinterpret_cast<const uint4*>(gate + (off + I));
  gw[0] = a.x; gw[1] = a.y; gw[2] = a.z; gw[3] = a.w;
  uw[0] = b.x; uw[1] = b.y; uw[2] = b.z; uw[3] = b.w;
}

// The table path's arithmetic and stores of one chunk (8 outputs a lane).
template <mx_u32 A>
MX_DEV void mx_table_chunk(mx_u32 gw[4], mx_u32 uw[4], const MxSwigluPacked& k, const mx_u16* tab,
                           mx_u32 flags, mx_u8* __restrict__ q, mx_u8* __restrict__ scale,
                           mx_u32 lane, bool live) {
  float y[8];
  mx_u32 w[2];
  mx_swiglu_packed<8, A, true>(gw, uw, k, tab, y);
  const mx_u32 sb = mx_quant_group<8>(y, flags, w);
  if (live) {
    reinterpret_cast<uint2*>(q)[lane] = make_uint2(w[0], w[1]);
    if ((lane & 3u) == 0) scale[lane >> 2] = (mx_u8)sb;
  }
}

// The split-halves loop of the table kernels. QF: the quantizer's flags (MX_F_RCEIL |
// MX_F_NAN_IGNORE) as a constant, so that its rule and NaN tests leave the loop (~10 instructions
// a chunk; only 0 is instantiated: floor and "propagate", the runtime's; other flags take the
// generic loop). tab16 / ta / tb: the block's shared table and this lane's pieces of it loaded
// before the PDL wait (stored here after the first chunk's loads are issued). Block-uniform trip
// count (chunk start < lanes); lanes past the end load the tensor's first chunk instead of a
// branch around their loads (whole groups of 4 lanes: per_row is a multiple of 4), compute on it
// and store nothing.
template <mx_u32 A, mx_u32 QF>
MX_DEV void swiglu_table_split_loop(const mx_u16* __restrict__ gate, mx_u8* __restrict__ q,
                                    mx_u8* __restrict__ scale, mx_u32 lanes, mx_u32 I,
                                    const MxSwigluPacked& k, uint4* tab16, uint4 ta, uint4 tb) {
  constexpr int pieces = MX_SIGMA_ENTRIES / 8;
  const mx_u32 per_row = I / 8u, t = threadIdx.x, nb = blockDim.x;
  const mx_u32 stride = gridDim.x * nb;  // lanes from one chunk of the block to its next
  const mx_u32 dr = mx_div_small(stride, per_row), dc = stride - dr * per_row;
  const mx_u32 dstep = dr * 2u * I + 8u * dc;
  mx_u32 lane = blockIdx.x * nb + t;
  MxSplitCursor cur;
  mx_u32 gw[4], uw[4];
  {
    const mx_u32 row = mx_div_small(lane, per_row);
    cur.col = lane - row * per_row;
    cur.off = row * 2u * I + 8u * cur.col;
    mx_split_load(gate, lane < lanes ? cur.off : 0u, I, gw, uw);
  }
  if (t < pieces) tab16[t] = ta;
  if (t + nb < pieces) tab16[t + nb] = tb;
  const uint4* src = reinterpret_cast<const uint4*>(mx_sigma_table);
  for (int i = t + 2 * nb; i < pieces; i += nb) tab16[i] = __ldg(src + i);
  __syncthreads();
  const mx_u16* tab = reinterpret_cast<const mx_u16*>(tab16);
  while (true) {
    mx_table_chunk<A>(gw, uw, k, tab, QF, q, scale, lane, lane < lanes);
    lane += stride;
    if (lane - t >= lanes) return;  // block-uniform
    cur.advance(dc, dstep, per_row, I);
    mx_split_load(gate, lane < lanes ? cur.off : 0u, I, gw, uw);
  }
}

template <mx_u32 ACT>
MX_DEV void swiglu_mxquant_blocks(const mx_u16* __restrict__ gate, const mx_u16* __restrict__ up,
                                  mx_u8* __restrict__ q, mx_u8* __restrict__ scale, long long rows,
                                  int I, int layout, const MxSwigluParams& p, mx_u32 flags) {
  constexpr mx_u32 A = (ACT & MX_F_OAI) ? ACT | MX_ACT_MINMAX : ACT;
  static_assert(MxSwigluPackedPath<MxBf16, 8, A>::value, "the packed path's modes only");
  const bool oai_ok = !(ACT & MX_F_OAI) || (p.limit > 0.0f && p.limit_r > 0.0f);
  const bool tab_ok = fabsf(p.alpha_r) < __int_as_float(0x7f800000) && p.alpha_r != 0.0f;
  if (!(oai_ok && tab_ok) || p.single_op) __trap();
  constexpr int pieces = MX_SIGMA_ENTRIES / 8;
  __shared__ uint4 tab16[pieces];
  const uint4* src = reinterpret_cast<const uint4*>(mx_sigma_table);
  const int t = threadIdx.x, nb = blockDim.x;
  uint4 ta = make_uint4(0u, 0u, 0u, 0u), tb = ta;
  if (t < pieces) ta = __ldg(src + t);
  if (t + nb < pieces) tb = __ldg(src + t + nb);
  MX_PDL_ENTRY();
  const long long lanes = rows * (I / 8);
  const MxSwigluPacked k = {mx_bf16x2_splat(p.alpha_r), mx_bf16x2_splat(p.limit_r),
                            mx_bf16x2_splat(-p.limit_r), mx_bf16x2_splat(p.beta_r)};
  if (layout == MX_LAYOUT_SPLIT_HALVES && lanes <= (1 << 23) &&
      (long long)gridDim.x * blockDim.x <= (1 << 22) &&
      !(flags & (MX_F_RCEIL | MX_F_NAN_IGNORE | MX_F_SCALE_F16))) {
    swiglu_table_split_loop<A, 0u>(gate, q, scale, (mx_u32)lanes, (mx_u32)I, k, tab16, ta, tb);
    return;
  }
  bool first = true;
  for (long long blk = blockIdx.x; blk * blockDim.x < lanes; blk += gridDim.x) {
    const long long lane_id = blk * blockDim.x + threadIdx.x;
    const bool live = lane_id < lanes;
    mx_u32 gw[4] = {0u, 0u, 0u, 0u}, uw[4] = {0u, 0u, 0u, 0u};
    if (live) mx_swiglu_load_words(gate, up, lane_id, lanes, I, layout, gw, uw);
    if (first) {
      if (t < pieces) tab16[t] = ta;
      if (t + nb < pieces) tab16[t + nb] = tb;
      for (int i = t + 2 * nb; i < pieces; i += nb) tab16[i] = __ldg(src + i);
      __syncthreads();
      first = false;
    }
    mx_u32 w[2];
    float y[8];
    mx_swiglu_packed<8, A, true>(gw, uw, k, reinterpret_cast<const mx_u16*>(tab16), y);
    const mx_u32 sb = mx_quant_group<8>(y, flags, w);
    if (live) mx_store_group<8>(q, scale, lane_id, w, sb);
  }
}
#define MX_DEFINE_SWIGLU_TABLE(NAME, ACT)                                                       \
  extern "C" __global__ void MX_SWIGLU_BF16_E8_BOUNDS NAME(                                   \
      const mx_u16* gate, const mx_u16* up, mx_u8* q, mx_u8* scale, long long rows, int I,     \
      int layout, float alpha, float limit, float beta, unsigned flags) {                     \
    MxSwigluParams p = {alpha, limit, beta, mx_round<MxBf16>(alpha), mx_round<MxBf16>(limit), \
                        mx_round<MxBf16>(beta), (flags & MX_F_SWISH_SINGLE) != 0};            \
    swiglu_mxquant_blocks<ACT>(gate, up, q, scale, rows, I, layout, p, flags);                \
  }
#endif

// E elements per lane (8, or 2 / 1 for small tensors: shorter per-lane chains, more lanes).
template <class T, int E, mx_u32 ACT>
MX_DEV void swiglu_mxquant_lane(const typename T::storage* __restrict__ gate,
                                const typename T::storage* __restrict__ up, mx_u8* __restrict__ q,
                                mx_u8* __restrict__ scale, long long rows, int I, int layout,
                                MxSwigluParams p, mx_u32 flags) {
  const long long lane_id = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const int per_row = I / E;
  const long long lanes = rows * per_row;
  const bool live = lane_id < lanes;
  float y[E];
  mx_u32 w[(E + 3) / 4];
  mx_u32 sb;
  // The certified fast logistic where the kernel has it, unless the launch asks for the pinned one
  // (MX_F_SIGMA_PINNED: grids of about one wave).
  bool done = false;
#if defined(MX_SWIGLU_PACKED)
  if constexpr (MxSwigluPackedPath<T, E, ACT>::value || MxSwigluFp32Path<T, E, ACT>::value) {
    done = !(flags & MX_F_SIGMA_PINNED);
    if (done) {
      // Lanes past the end compute on zeros (sigma(0) = 1/2 on every path: certified).
      mx_u32 gw[4] = {0u, 0u, 0u, 0u}, uw[4] = {0u, 0u, 0u, 0u};
      if (live) mx_swiglu_load_words(gate, up, lane_id, lanes, I, layout, gw, uw);
      if constexpr (MxSwigluPackedPath<T, E, ACT>::value) {
        const MxSwigluPacked k = {mx_bf16x2_splat(p.alpha_r), mx_bf16x2_splat(p.limit_r),
                                  mx_bf16x2_splat(-p.limit_r), mx_bf16x2_splat(p.beta_r)};
        mx_swiglu_packed<E, ACT>(gw, uw, k, nullptr, y);
        sb = mx_quant_group<E>(y, flags, w);
      } else {
        bool exact = true;
        if (fabsf(p.alpha) <= 64.0f) {  // uniform: see mx_swiglu_fp32_approx
          bool ok = mx_swiglu_fp32_approx<E, ACT>(gw, uw, p, y) | !live;  // dead lanes: zeros
          sb = mx_quant_group_certified<E>(y, flags, w, ok);
          exact = __any_sync(0xffffffffu, !ok);  // rare: the whole warp (it shuffles) redoes it
        }
        if (exact) {
          float g[E], u[E];
#pragma unroll
          for (int i = 0; i < E / 2; ++i) {
            g[2 * i] = mx_bf16x2_lo(gw[i]); g[2 * i + 1] = mx_bf16x2_hi(gw[i]);
            u[2 * i] = mx_bf16x2_lo(uw[i]); u[2 * i + 1] = mx_bf16x2_hi(uw[i]);
          }
          mx_swiglu_n<T, E, ACT>(g, u, p, y);
          sb = mx_quant_group<E>(y, flags, w);
        }
      }
    }
  }
#endif
  if (!done) {  // the pinned logistic on every element
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
      mx_swiglu_n<T, E, ACT>(g, u, p, y);
    } else {
#pragma unroll
      for (int i = 0; i < E; ++i) y[i] = 0.0f;
    }
    sb = mx_quant_group<E>(y, flags, w);
  }
  if (live) mx_store_group<E>(q, scale, lane_id, w, sb);
}

// Kernel entry: resolves the uniform choices that would otherwise be tested per element: the OAI
// kernels take the min/max clamps where both bounds are > 0 (always, in practice: 7.0), the
// rounded-activation kernels the swish form.
template <class T, int E, mx_u32 ACT>
MX_DEV void swiglu_mxquant_dispatch2(const typename T::storage* __restrict__ gate,
                                     const typename T::storage* __restrict__ up,
                                     mx_u8* __restrict__ q, mx_u8* __restrict__ scale,
                                     long long rows, int I, int layout, MxSwigluParams p,
                                     mx_u32 flags) {
  if (!(ACT & MX_F_FP32_ACT) && p.single_op) {
    swiglu_mxquant_lane<T, E, ACT | MX_ACT_SINGLE>(gate, up, q, scale, rows, I, layout, p,
                                                         flags);
    return;
  }
  swiglu_mxquant_lane<T, E, ACT>(gate, up, q, scale, rows, I, layout, p, flags);
}

template <class T, int E, mx_u32 ACT>
MX_DEV void swiglu_mxquant_dispatch(const typename T::storage* __restrict__ gate,
                                    const typename T::storage* __restrict__ up,
                                    mx_u8* __restrict__ q, mx_u8* __restrict__ scale,
                                    long long rows, int I, int layout, MxSwigluParams p,
                                    mx_u32 flags) {
#if defined(MX_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  if ((ACT & MX_F_OAI) && p.limit > 0.0f && p.limit_r > 0.0f) {
    swiglu_mxquant_dispatch2<T, E, ACT | MX_ACT_MINMAX>(gate, up, q, scale, rows, I, layout,
                                                              p, flags);
    return;
  }
#endif
  swiglu_mxquant_dispatch2<T, E, ACT>(gate, up, q, scale, rows, I, layout, p, flags);
}

// Kernel names: mx_swiglu_quant_<T>_e<E>_a<A>, E = 8, 2, 1, A = (oai ? 1 : 0) + (fp32_activation ? 2 : 0).
#define MX_DEFINE_SWIGLU1(NAME, T, E, ACT) MX_DEFINE_SWIGLU1LB(NAME, T, E, ACT, )
#define MX_DEFINE_SWIGLU1LB(NAME, T, E, ACT, LB)                                               \
  extern "C" __global__ void LB NAME(const T::storage* gate, const T::storage* up, mx_u8* q,   \
                                  mx_u8* scale, long long rows, int I, int layout, float alpha, \
                                  float limit, float beta, unsigned flags) {                    \
    MX_PDL_ENTRY();                                                                             \
    MxSwigluParams p = {alpha, limit, beta, mx_round<T>(alpha), mx_round<T>(limit),            \
                        mx_round<T>(beta), (flags & MX_F_SWISH_SINGLE) != 0};                   \
    swiglu_mxquant_dispatch<T, E, ACT>(gate, up, q, scale, rows, I, layout, p, flags);          \
  }
// LB: launch bounds of every activation but SiLU + fp32 activation (a2), which spilled 108 bytes
// under the bf16 cap and ran 1.3x slower (14.9 vs 11.2 us at M = 8192).
#define MX_DEFINE_SWIGLU_E(NAME, T, E, LB)                                                     \
  MX_DEFINE_SWIGLU1LB(NAME##_a0, T, E, 0u, LB)                                                 \
  MX_DEFINE_SWIGLU1LB(NAME##_a1, T, E, MX_F_OAI, LB)                                           \
  MX_DEFINE_SWIGLU1(NAME##_a2, T, E, MX_F_FP32_ACT)                                            \
  MX_DEFINE_SWIGLU1LB(NAME##_a3, T, E, MX_F_OAI | MX_F_FP32_ACT, LB)
#define MX_DEFINE_SWIGLU(NAME, T, LB8)                                                         \
  MX_DEFINE_SWIGLU_E(NAME##_e8, T, 8, LB8) MX_DEFINE_SWIGLU_E(NAME##_e2, T, 2, )               \
  MX_DEFINE_SWIGLU_E(NAME##_e1, T, 1, )

// The bf16 8-per-lane kernels (the packed / certified paths) capped at 40 registers (6 blocks of
// 256 lanes or 12 of 128 per SM): H200, M = 8192, OAI: 10.06 vs 10.73 us rounded, 11.23 vs 11.71
// fp32 (8-48 bytes spill, on the cold paths); a 32-register cap (16 blocks of 128) was no faster
// rounded and slower fp32 (12.56). BENCHMARKS.md, issue 6 follow-up 6. So these kernels launch
// with at most 256 lanes a block (kernels::gpu::SwiGluLaunchTable keeps to that).
#if defined(MX_CUDA)
#define MX_SWIGLU_BF16_E8_BOUNDS __launch_bounds__(256, 6)
#else
#define MX_SWIGLU_BF16_E8_BOUNDS
#endif
MX_DEFINE_SWIGLU(mx_swiglu_quant_bf16, MxBf16, MX_SWIGLU_BF16_E8_BOUNDS)
MX_DEFINE_SWIGLU(mx_swiglu_quant_f16, MxF16, )
MX_DEFINE_SWIGLU(mx_swiglu_quant_f32, MxF32, )

// The table kernels (swiglu_mxquant_blocks, any grid): the runtime's SwiGLU kernel for bf16,
// rounded activation, unrolled swish from the device's `table_from` outputs on (CUDA sm_80+).
// The split-halves loop: on the H200 at M = 8192 OAI 9.34 -> 7.43 us, SiLU 8.38 -> 6.86 us against
// the generic loop (BENCHMARKS.md issue 6 follow-up 9).
#if defined(MX_SWIGLU_PACKED)
MX_DEFINE_SWIGLU_TABLE(mx_swiglu_quant_bf16_e8_a0_table, 0u)
MX_DEFINE_SWIGLU_TABLE(mx_swiglu_quant_bf16_e8_a1_table, MX_F_OAI)
#endif

// Bench-only (bench/gpu/check.py check_sigma_table, CUDA): for every bf16 z (two per lane, one
// bf16x2 word as the packed path forms it), out[0] counts the non-NaN z whose table lookup
// (mx_sigma_lookup2, table in shared memory) differs from bf16(mx_sigmoid_pinned(z)), out[1] the
// z looked up.
#if defined(MX_SWIGLU_PACKED)
extern "C" __global__ void mx_test_sigma_table(unsigned* out) {
  __shared__ uint4 tab16[MX_SIGMA_ENTRIES / 8];
  const uint4* src = reinterpret_cast<const uint4*>(mx_sigma_table);
  for (int i = threadIdx.x; i < MX_SIGMA_ENTRIES / 8; i += blockDim.x) tab16[i] = src[i];
  __syncthreads();
  const mx_u32 i = blockIdx.x * blockDim.x + threadIdx.x;  // 32768 lanes: z = 2i, 2i + 1
  mx_u32 bad = 0u, seen = 0u;
  if (i < 32768u) {
    const mx_u32 zw = (2u * i) | ((2u * i + 1u) << 16);
    const mx_u32 sw = mx_sigma_lookup2(zw, reinterpret_cast<const mx_u16*>(tab16));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const mx_u32 zb = h ? zw >> 16 : zw & 0xffffu;
      const float z = mx_bits_f32(zb << 16);
      const mx_u32 want = MxBf16::from_f32(mx_sigmoid_pinned(z));
      const mx_u32 got = h ? sw >> 16 : sw & 0xffffu;
      const bool nan = !(z == z);
      bad += !nan && got != want;
      seen += !nan;
    }
  }
  bad = __reduce_add_sync(0xffffffffu, bad);
  seen = __reduce_add_sync(0xffffffffu, seen);
  if ((threadIdx.x & 31u) == 0u) {
    atomicAdd(&out[0], bad);
    atomicAdd(&out[1], seen);
  }
}
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

// Bench-only (bench/gpu/check.py check_sigmoid_cert, CUDA): over z = the floats with bits
// start + i (bf16: (start + i) << 16), i < n, and |z| < 87: out[0] counts the z that
// mx_sigmoid_certified accepts although bf16(approx) != bf16(pinned) (must stay 0), out[1] the z
// it refuses (the exact fallback's rate), out[2] is the largest |bits(approx) - bits(pinned)|
// (mx_quant_group_certified assumes <= 12).
#if defined(MX_SWIGLU_PACKED)
extern "C" __global__ void mx_test_sigmoid_cert(unsigned start, long long n, int bf16, unsigned* out) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const mx_u32 bits = bf16 ? (start + (mx_u32)i) << 16 : start + (mx_u32)i;
  const float z = mx_bits_f32(bits);
  mx_u32 wrong = 0u, refused = 0u, ad = 0u;
  if (i < n && fabsf(z) < 87.0f) {
    const float sa = mx_sigmoid_approx(z), sp = mx_sigmoid_pinned(z);
    const bool cert = mx_sigmoid_certified(z, sa);
    wrong = cert && MxBf16::from_f32(sa) != MxBf16::from_f32(sp);
    refused = !cert;
    const int diff = (int)mx_f32_bits(sa) - (int)mx_f32_bits(sp);
    ad = (mx_u32)(diff < 0 ? -diff : diff);
  }
  // One atomic per warp (2^31 values).
  wrong = __reduce_add_sync(0xffffffffu, wrong);
  refused = __reduce_add_sync(0xffffffffu, refused);
  ad = __reduce_max_sync(0xffffffffu, ad);
  if ((threadIdx.x & 31u) == 0u) {
    if (wrong) atomicAdd(&out[0], wrong);
    if (refused) atomicAdd(&out[1], refused);
    atomicMax(&out[2], ad);
  }
}
#endif
