// com.mxfuse MxMatMul at prefill sizes (kernels/src/gpu/prefill.rs). The decode GEMMs stream each
// weight tile once per 16 activation rows, so from a few dozen rows on they fall far behind a
// GEMM library (BENCHMARKS.md: 2-7x cuBLAS bf16 at M = 64-2048). Hopper has no block-scaled MMA,
// so the runtime dequantizes both operands to bf16 once per call (these kernels), hands the
// product to the vendor's bf16 GEMM (f32 accumulation), and checks exactness on the way.
//
// Why bf16 holds the dequantized values exactly: an E4M3 value is a multiple of 2^-9 with at most
// 4 significant bits, so v * 2^(s - 127) is a multiple of 2^(s - 136) with at most 4 significant
// bits; bf16 has f32's exponent range, so it is exact for every scale byte s >= 3, and where it
// overflows f32 overflows alike (both +-Inf). NaN values and the NaN scale (255) stay NaN.
//
// What the library may do differently from the f32 reference: tensor cores can flush subnormal
// inputs and products that the reference keeps. A block whose scale byte lies outside [73, 182]
// (values outside 2^-63 .. 2^63.8, so a product could leave f32's normal range) and that holds a
// nonzero value therefore sets *flag, and mx_prefill_exact_* (launched after the library's GEMM,
// returning at once while the flag is clear) recomputes the whole product by the documented f32
// arithmetic. Two flag words alternate between calls so that no launch is spent clearing one:
// the guard of call i clears the word call i + 1 uses. Real weights and activations never come near those scales; zero blocks (scale byte
// 0 under the floor rule) do not set it.
//
// Float activations (the weight-only MxMatMul of an f16 or f32 graph) go through the same bf16
// GEMM as a sum of bf16 parts, hi first: an f16 value is exactly the sum of 2 (its 11 significant
// bits in two 8-bit pieces; its whole range is normal in bf16), an f32 value of 3 (24 bits), each
// part the rounding of what the previous ones left. Every product of a part and a weight is exact
// in the f32 accumulation, so the split costs 2-3 GEMMs and nothing in accuracy beyond the
// summation order; the f32 GEMM it replaces ran on CUDA cores at ~1/8 of the bf16 rate. After a
// non-finite part (Inf, NaN, or an f32 beyond bf16's largest finite) the later parts are zero.

#define MX_PREFILL_SCALE_LO 73u
#define MX_PREFILL_SCALE_HI 182u

// The element type the weights are dequantized to: bf16 (f16 = 0), or f16 with every value
// times 2^shift (f16 = 1: kernels/src/gpu/pack.rs `f16_weight_shift` chose the shift on the host
// so that every block is exact in f16; the GEMM scales its result by 2^-shift).
struct MxPrefillTo {
  int f16;
  int shift;
};

// Whether a block of scale byte s whose 8 bytes here are (lo, hi) needs the exact recompute: for
// bf16 outside [73, 182] (the header), for f16 when v 2^(s - 127 + shift) leaves f16's exact
// range (exponent in [-15, 7]: a stale or wrong shift costs speed, never a result).
MX_DEV bool mx_prefill_unsafe(mx_u32 s, mx_u32 lo, mx_u32 hi, MxPrefillTo to) {
  const int e = (int)s - 127 + to.shift;
  const bool out = to.f16 ? (e < -15 || e > 7)
                          : (s < MX_PREFILL_SCALE_LO || s > MX_PREFILL_SCALE_HI);
  return out && s != 255u && ((lo | hi) & 0x7f7f7f7fu) != 0u;
}

// 8 E4M3 values (lo: bytes 0-3, hi: 4-7) times 2^(s - 127) as 8 bf16, or times 2^(s - 127 +
// shift) as 8 f16 (16 bytes), exact where mx_prefill_unsafe holds.
MX_DEV uint4 mx_prefill_x8(mx_u32 lo, mx_u32 hi, mx_u32 s, MxPrefillTo to) {
  const float sf = to.f16 ? ldexpf(mx_e8m0_to_f32(s), to.shift) : mx_e8m0_to_f32(s);
  mx_u32 out[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const mx_u32 w = j < 2 ? lo : hi, sh = 16u * (j & 1);
    const float a = mx_e4m3_to_f32((w >> sh) & 0xffu) * sf;
    const float b = mx_e4m3_to_f32((w >> (sh + 8u)) & 0xffu) * sf;
    out[j] = to.f16 ? (mx_u32)MxF16::from_f32(a) | ((mx_u32)MxF16::from_f32(b) << 16)
                    : (mx_u32)MxBf16::from_f32(a) | ((mx_u32)MxBf16::from_f32(b) << 16);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// Row-major E4M3 x [rows, K] + E8M0 scales [rows, K/32] -> y [rows, K] (`to`): the activations,
// and weights kept as plain [N, K]. Thread `i` of `n` takes 8 values at a time, grid-stride.
MX_DEV bool mx_prefill_rows(const mx_u8* __restrict__ x, const mx_u8* __restrict__ scale,
                            mx_u16* y, long long rows, int K, long long i, long long n,
                            MxPrefillTo to) {
  const long long chunks = rows * (K / 8);
  bool bad = false;
  for (long long c = i; c < chunks; c += n) {
    const uint2 v = reinterpret_cast<const uint2*>(x)[c];
    const mx_u32 s = scale[c >> 2];  // 4 chunks of 8 values a block of 32
    bad |= mx_prefill_unsafe(s, v.x, v.y, to);
    *reinterpret_cast<uint4*>(y + 8 * c) = mx_prefill_x8(v.x, v.y, s, to);
  }
  return bad;
}

// Fragment-packed weights (kernels/src/gpu/pack.rs: wf [tiles][K/32][32 lanes][16 bytes], lane
// 4g + t holding bytes 8t .. 8t + 7 of its k-block of rows 16 tile + g and + g + 8; wsf
// [tiles][K/128][16 rows][4 bytes]) -> y [N, K] (`to`). Thread `i` of `n` takes a lane's 16
// bytes at a time, grid-stride.
MX_DEV bool mx_prefill_frag(const uint4* __restrict__ wf, const mx_u8* __restrict__ wsf,
                            mx_u16* y, int N, int K, long long i, long long n, MxPrefillTo to) {
  const int kb = K / 32;
  const long long lanes = (long long)((N + 15) / 16) * kb * 32;
  bool bad = false;
  for (long long c = i; c < lanes; c += n) {
    const int lane = (int)(c & 31), g = lane >> 2, t = lane & 3;
    const long long tb = c >> 5;  // tile * kb + blk
    const int blk = (int)(tb % kb);
    const long long tile = tb / kb;
    const uint4 v = wf[c];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long row = 16 * tile + 8 * h + g;
      if (row >= N) continue;
      const mx_u32 s = wsf[((tile * (kb / 4) + blk / 4) * 16 + 8 * h + g) * 4 + (blk & 3)];
      const mx_u32 lo = h ? v.z : v.x, hi = h ? v.w : v.y;
      bad |= mx_prefill_unsafe(s, lo, hi, to);
      *reinterpret_cast<uint4*>(y + row * K + 32 * blk + 8 * t) = mx_prefill_x8(lo, hi, s, to);
    }
  }
  return bad;
}

// Weights w [N, K] (wmode 0: plain + [N, K/32] scales; 1: fragment-packed) -> y (`to`), for
// thread i of n.
MX_DEV bool mx_prefill_weights(const mx_u8* w, const mx_u8* ws, mx_u16* y, int N, int K,
                               int wmode, long long i, long long n, MxPrefillTo to) {
  return wmode == 0 ? mx_prefill_rows(w, ws, y, N, K, i, n, to)
                    : mx_prefill_frag(reinterpret_cast<const uint4*>(w), ws, y, N, K, i, n, to);
}

// Activation modes (amode) of the route: 0 MXFP8 (dequantized, one part), 1 bf16 (read as it is),
// 2 f16 (two bf16 parts), 3 f32 (three).
#define MX_PREFILL_A_MX 0
#define MX_PREFILL_A_BF16 1
#define MX_PREFILL_A_F16 2
#define MX_PREFILL_A_F32 3

// v as `parts` bf16 (header: hi first, each the rounding of the rest; zero after a non-finite).
MX_DEV void mx_prefill_split1(float v, int parts, mx_u16 out[3]) {
  float r = v;
#pragma unroll
  for (int p = 0; p < 3; ++p) {
    if (p >= parts) break;
    out[p] = MxBf16::from_f32(r);
    const float h = MxBf16::to_f32(out[p]);
    r = isfinite(h) ? __fsub_rn(r, h) : 0.0f;
  }
}

// Float activations x [rows, K] (f16 when amode 2, f32 when 3) -> `parts` bf16 arrays, part p at
// y + p * part_stride. Thread `i` of `n` takes 8 values at a time, grid-stride.
MX_DEV void mx_prefill_split_rows(const void* __restrict__ x, int amode, mx_u16* y,
                                  long long part_stride, long long elems, long long i,
                                  long long n) {
  const int parts = amode == MX_PREFILL_A_F32 ? 3 : 2;
  for (long long c = i; c < elems / 8; c += n) {
    float v[8];
    if (amode == MX_PREFILL_A_F32) {
      const float4* p = reinterpret_cast<const float4*>(x) + 2 * c;
      const float4 u = p[0], w = p[1];
      v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w, v[4] = w.x, v[5] = w.y, v[6] = w.z, v[7] = w.w;
    } else {
      MxVec8<MxF16>::unpack(reinterpret_cast<const uint4*>(x)[c], v);
    }
    mx_u32 out[3][4];
#pragma unroll
    for (int j = 0; j < 8; j += 2) {
      mx_u16 lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
      mx_prefill_split1(v[j], parts, lo);
      mx_prefill_split1(v[j + 1], parts, hi);
#pragma unroll
      for (int p = 0; p < 3; ++p) out[p][j / 2] = (mx_u32)lo[p] | ((mx_u32)hi[p] << 16);
    }
    for (int p = 0; p < parts; ++p)
      *reinterpret_cast<uint4*>(y + p * part_stride + 8 * c) =
          make_uint4(out[p][0], out[p][1], out[p][2], out[p][3]);
  }
}

// Both operands in one launch: blocks [0, blocks_a) prepare the activations a [M, K] (amode 0:
// MXFP8 aq + as dequantized to bf16 at a16, or to f16 (unshifted) when w_f16 — the f16 GEMM of
// an f16 output; 2 / 3: f16 / f32 aq split into bf16 parts at a16, M K elements apart; blocks_a
// = 0 for bf16 a and for f16 a read as it is), the rest dequantize the weights w [N, K] to bf16
// at w16, or to f16 times 2^w_shift when w_f16. A block that met an out-of-range scale sets
// *flag.
extern "C" __global__ void mx_prefill_dequant(const void* __restrict__ aq,
                                              const mx_u8* __restrict__ as, mx_u16* a16,
                                              long long M, const mx_u8* __restrict__ w,
                                              const mx_u8* __restrict__ ws, mx_u16* w16, int N,
                                              int wmode, int K, int blocks_a, int amode,
                                              int w_f16, int w_shift, unsigned int* flag) {
  MX_PDL_ENTRY();
  bool bad = false;
  if ((int)blockIdx.x < blocks_a) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long n = (long long)blocks_a * blockDim.x;
    if (amode == MX_PREFILL_A_MX)
      bad = mx_prefill_rows(static_cast<const mx_u8*>(aq), as, a16, M, K, i, n,
                            MxPrefillTo{w_f16, 0});
    else
      mx_prefill_split_rows(aq, amode, a16, M * K, M * K, i, n);
  } else {
    const long long i = (long long)(blockIdx.x - blocks_a) * blockDim.x + threadIdx.x;
    const long long n = (long long)(gridDim.x - blocks_a) * blockDim.x;
    bad = mx_prefill_weights(w, ws, w16, N, K, wmode, i, n, MxPrefillTo{w_f16, w_shift});
  }
  if (bad) atomicOr(flag, 1u);
}

// Row-by-column launches (mx_prefill_bias_*, mx_prefill_finish_f16; prefill.rs `row_grid`):
// column (or column pair) blockIdx.x * blockDim.x + threadIdx.x, rows blockIdx.y, + gridDim.y, ...
// (gridDim.y is at most 65535), so that no element index is divided by N.

// y[m, n] = c[m * ld + n * cs] (the bias, y's type): the library's GEMM then adds alpha * acc
// with beta = 1, so y = fl(fl(alpha * acc) + c) as the epilogue says (beta = 1 only).
template <class TO>
MX_DEV void mx_prefill_bias_body(typename TO::storage* __restrict__ y, long long M, int N,
                                 const MxEpi ep) {
  const typename TO::storage* c = static_cast<const typename TO::storage*>(ep.bias);
  const long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  for (long long m = blockIdx.y; m < M; m += gridDim.y) y[m * N + n] = c[m * ep.ld + n * ep.cs];
}

// The exact product (only while *flag is set): acc = sum_k deq(a)[m, k] * deq(w)[n, k] in f32, k
// ascending, then the epilogue, as the CPU reference computes it. amode 0: a is E4M3 aq + E8M0
// as [M, K/32]; 1 / 2 / 3: a is bf16 / f16 / f32 [M, K] at aq (the weight-only MxMatMul; as
// unused). wmode 0: w
// plain [N, K] + [N, K/32]; 1: fragment-packed (as mx_prefill_frag reads it). One thread per
// output. Slow (CUDA cores, no reuse), and only for scales no real model has.
template <class TO>
MX_DEV void mx_prefill_exact_body(const unsigned int* flag, unsigned int* next_flag, int amode,
                                  const mx_u8* __restrict__ aq,
                                  const mx_u8* __restrict__ as, const mx_u8* __restrict__ w,
                                  const mx_u8* __restrict__ ws, int wmode,
                                  typename TO::storage* __restrict__ y, long long M, int N, int K,
                                  const MxEpi ep) {
  // The next call's flag word (the other of the two; its last reader finished before this
  // launch began) starts clear.
  if (blockIdx.x == 0 && threadIdx.x == 0) *next_flag = 0u;
  if (*flag == 0u) return;
  const int kb = K / 32;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < M * N; e += stride) {
    const long long m = e / N, n = e - m * N;
    float acc = 0.0f;
    for (int b = 0; b < kb; ++b) {
      const float sa = amode == MX_PREFILL_A_MX ? mx_e8m0_to_f32(as[m * kb + b]) : 1.0f;
      long long wrow;  // byte offset of element k = 32 b + j of row n is wrow + (j / 8) * wstep + j % 8
      long long wstep;
      mx_u32 swb;
      if (wmode == 0) {
        wrow = n * K + 32 * b;
        wstep = 8;
        swb = ws[n * kb + b];
      } else {
        const long long tile = n / 16;
        const int r = (int)(n % 16), g = r % 8, h = r / 8;
        wrow = ((tile * kb + b) * 32 + 4 * g) * 16 + 8 * h;
        wstep = 16;  // lane 4g + t, t = j / 8
        swb = ws[((tile * (kb / 4) + b / 4) * 16 + r) * 4 + (b & 3)];
      }
      const float sw = mx_e8m0_to_f32(swb);
      for (int j = 0; j < 32; ++j) {
        const long long ai = m * K + 32 * b + j;
        const mx_u16* a16 = reinterpret_cast<const mx_u16*>(aq);
        const float av = amode == MX_PREFILL_A_MX     ? __fmul_rn(mx_e4m3_to_f32(aq[ai]), sa)
                         : amode == MX_PREFILL_A_BF16 ? MxBf16::to_f32(a16[ai])
                         : amode == MX_PREFILL_A_F16  ? MxF16::to_f32(a16[ai])
                                                      : reinterpret_cast<const float*>(aq)[ai];
        const float wv = __fmul_rn(mx_e4m3_to_f32(w[wrow + (j / 8) * wstep + (j % 8)]), sw);
        acc = __fadd_rn(acc, __fmul_rn(av, wv));
      }
    }
    y[e] = TO::from_f32(mx_epilogue<TO>(ep, m, n, acc));
  }
}

// Rows [m0, m0 + rows) of f16 y [*, N] from the f32 accumulators t [rows, N] the library wrote
// (alpha 1): y = f16(epilogue(acc)) — for outputs the library's bf16 GEMM cannot write. Only f16
// is written this way: bf16 and f32 outputs come from the library's GEMM directly. Each thread
// takes columns n, n + 1 (n = 2 (blockIdx.x * blockDim.x + threadIdx.x)) of its rows: one 8-byte
// load and one 4-byte store when N is even and t, y are 8- / 4-byte aligned, else one element at
// a time (the same values either way).
extern "C" __global__ void mx_prefill_finish_f16(const float* __restrict__ t, long long m0,
                                                 long long rows, int N, mx_u16* __restrict__ y,
                                                 const MxEpi ep) {
  MX_PDL_ENTRY();
  const long long n = 2 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
  if (n >= N) return;
  const bool pair = (N & 1) == 0 && (reinterpret_cast<mx_u64>(t) & 7u) == 0u &&
                    (reinterpret_cast<mx_u64>(y) & 3u) == 0u;
  for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
    const long long m = m0 + r;
    const float* tr = t + r * N;
    mx_u16* yr = y + m * N;
    if (pair) {
      const float2 v = *reinterpret_cast<const float2*>(tr + n);
      const mx_u32 lo = MxF16::from_f32(mx_epilogue<MxF16>(ep, m, n, v.x));
      const mx_u32 hi = MxF16::from_f32(mx_epilogue<MxF16>(ep, m, n + 1, v.y));
      *reinterpret_cast<mx_u32*>(yr + n) = lo | (hi << 16);
    } else {
      yr[n] = MxF16::from_f32(mx_epilogue<MxF16>(ep, m, n, tr[n]));
      if (n + 1 < N) yr[n + 1] = MxF16::from_f32(mx_epilogue<MxF16>(ep, m, n + 1, tr[n + 1]));
    }
  }
}

#define MX_DEFINE_PREFILL(TO, NAME)                                                                \
  extern "C" __global__ void mx_prefill_bias_##NAME(TO::storage* y, long long M, int N,          \
                                                     const MxEpi ep) {                           \
    MX_PDL_ENTRY();                                                                              \
    mx_prefill_bias_body<TO>(y, M, N, ep);                                                       \
  }                                                                                              \
  extern "C" __global__ void mx_prefill_exact_##NAME(                                            \
      const unsigned int* flag, unsigned int* next_flag, int amode, const mx_u8* aq,             \
      const mx_u8* as,                                                                           \
      const mx_u8* w, const mx_u8* ws, int wmode, TO::storage* y, long long M, int N, int K,      \
      const MxEpi ep) {                                                                          \
    MX_PDL_ENTRY();                                                                              \
    mx_prefill_exact_body<TO>(flag, next_flag, amode, aq, as, w, ws, wmode, y, M, N, K, ep);     \
  }

MX_DEFINE_PREFILL(MxBf16, bf16)
MX_DEFINE_PREFILL(MxF32, f32)
MX_DEFINE_PREFILL(MxF16, f16)

// ---- MxGatherMatMul at prefill sizes (kernels/src/gpu/prefill_moe.rs): the samples sorted by
// expert so that each selected expert is one library GEMM over its rows. A sample's output
// depends only on its own row and expert, so the order within an expert does not matter.

// The expert of sample s: idx[s] (int32 or int64), negative counted from the end; -1 when out of
// range [-E, E).
MX_DEV int mx_moe_expert(const void* idx, int idx64, long long s, int E) {
  long long v = idx64 ? static_cast<const long long*>(idx)[s] : static_cast<const int*>(idx)[s];
  if (v < 0) v += E;
  return (v < 0 || v >= E) ? -1 : (int)v;
}

// counts[e] += samples of expert e; counts[E] = 1 when an index is out of range.
extern "C" __global__ void mx_prefill_moe_count(const void* idx, int idx64, long long S, int E,
                                                unsigned int* counts) {
  MX_PDL_ENTRY();
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x; s < S; s += stride) {
    const int e = mx_moe_expert(idx, idx64, s, E);
    atomicAdd(&counts[e < 0 ? E : e], 1u);
  }
}

// One block a sample: its slot pos from its expert's cursor (the expert's first row, advanced),
// perm[pos] = s, and its row of K activations to row pos of a16: 16-bit values copied (amode 1:
// bf16, or f16 read as it is on f16 experts; 16 bytes a lane), f16 / f32 split into bf16 parts
// (amode 2 / 3; part p at a16 + p * part_stride).
extern "C" __global__ void mx_prefill_moe_scatter(const void* idx, int idx64, int E,
                                                  unsigned int* cursor, unsigned int* perm,
                                                  const void* __restrict__ a,
                                                  mx_u16* __restrict__ a16, int K, int amode,
                                                  long long part_stride) {
  MX_PDL_ENTRY();
  __shared__ unsigned int pos;
  const long long s = blockIdx.x;
  if (threadIdx.x == 0) {
    const int e = mx_moe_expert(idx, idx64, s, E);
    pos = atomicAdd(&cursor[e], 1u);  // the host ran this only with every index in range
    perm[pos] = (unsigned int)s;
  }
  __syncthreads();
  if (amode == MX_PREFILL_A_BF16) {
    const int chunks = K / 8;
    const uint4* src = static_cast<const uint4*>(a) + s * chunks;
    uint4* dst = reinterpret_cast<uint4*>(a16) + (long long)pos * chunks;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) dst[c] = src[c];
    return;
  }
  const int esize = amode == MX_PREFILL_A_F32 ? 4 : 2;
  mx_prefill_split_rows(static_cast<const mx_u8*>(a) + s * K * esize, amode,
                        a16 + (long long)pos * K, part_stride, K, threadIdx.x, blockDim.x);
}

// The `count` experts ids[0..count) of the fragment-packed stack (each expert ceil(N/16) * 16 * K
// value bytes and a 32nd of that in scales, one after another) -> y [count, N, K]: bf16, or f16
// times 2^w_shift when w_f16 (the stack's f16_weight_shift). A block that met a scale out of its
// type's safe range (mx_prefill_unsafe) sets *flag.
extern "C" __global__ void mx_prefill_dequant_experts(const mx_u8* __restrict__ wf,
                                                      const mx_u8* __restrict__ wsf,
                                                      const unsigned int* ids, int count,
                                                      mx_u16* y, int N, int K, int w_f16,
                                                      int w_shift, unsigned int* flag) {
  MX_PDL_ENTRY();
  const long long ebytes = (long long)((N + 15) / 16) * 16 * K;
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long n = (long long)gridDim.x * blockDim.x;
  bool bad = false;
  for (int j = 0; j < count; ++j) {
    const long long e = ids[j];
    const uint4* we = reinterpret_cast<const uint4*>(wf + e * ebytes);
    const mx_u8* se = wsf + e * (ebytes / 32);
    const long long off = (long long)j * N * K;
    bad |= mx_prefill_frag(we, se, y + off, N, K, i, n, MxPrefillTo{w_f16, w_shift});
  }
  if (bad) atomicOr(flag, 1u);
}

// y[perm[pos]] = t[pos]: rows of N elements, copied when t and y have the same element size
// `bytes` (2 or 4; 16 bytes a lane when N * bytes is a multiple of 16, else one 16-bit word a
// lane), else (to_f16) f32 t rounded to f16 y.
extern "C" __global__ void mx_prefill_moe_unpermute(const unsigned int* perm,
                                                    const mx_u8* __restrict__ t,
                                                    mx_u8* __restrict__ y, int N, int bytes,
                                                    int to_f16) {
  MX_PDL_ENTRY();
  const long long pos = blockIdx.x;
  if (to_f16) {
    const float* src = reinterpret_cast<const float*>(t) + pos * N;
    mx_u16* dst = reinterpret_cast<mx_u16*>(y) + (long long)perm[pos] * N;
    for (int c = threadIdx.x; c < N; c += blockDim.x) dst[c] = MxF16::from_f32(src[c]);
    return;
  }
  const long long row = (long long)N * bytes;
  const mx_u8* src = t + pos * row;
  mx_u8* dst = y + (long long)perm[pos] * row;
  if (row % 16 == 0) {
    for (long long c = threadIdx.x; c < row / 16; c += blockDim.x)
      reinterpret_cast<uint4*>(dst)[c] = reinterpret_cast<const uint4*>(src)[c];
  } else {
    for (long long c = threadIdx.x; c < row / 2; c += blockDim.x)
      reinterpret_cast<mx_u16*>(dst)[c] = reinterpret_cast<const mx_u16*>(src)[c];
  }
}
