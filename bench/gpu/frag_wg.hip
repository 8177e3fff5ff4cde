// Issue 6 follow-up 33 (bench only, appended to the GEMM module's text by ab_wg.py, compiled for
// sm_90a): the decode GEMM on the fp8 tensor core with the weights as wgmma's *register* operand.
//
// Why: sm_90 has no fp8 mma.sync, so the fragment kernels convert every weight byte to f16 (and
// every activation byte, once per tile) before an f16 mma: 64 of the `_fs` loop's 356
// instructions a group, and at 12-16 rows the activations' converts are repeated for each of
// the 384 tiles of 6144 x 768. wgmma.m64nNk32.e4m3 takes A (64 rows x 32 k) from registers, and
// the packed fragment weights (wf, kernels::gpu::pack_frag_weights) already hold a lane's 16
// bytes of a k-block as rows g / g + 8: reordered (.x .z .y .w) they are exactly wgmma's e4m3 A
// fragment under a permutation of the 32 k positions (logical 4t + i <- byte 8t + i, logical
// 16 + 4t + i <- byte 8t + 4 + i), so the same packed weights feed it unconverted. B (the
// activation rows, N = 8 or 16) must sit in shared memory: each block stages its K range once,
// permuted the same way, in the no-swizzle K-major core-matrix layout [k-block][k-half][8-row
// group][8 rows][16 bytes] (leading byte offset = the k-half stride, stride byte offset = the
// 8-row-group stride, as the dropped shared-memory wgmma kernel of follow-up 4 established).
//
// Shape: a block is one warpgroup on 4 neighbouring 16-column tiles (warp w: tile 4 y + w), over
// K range `split` of S (a cluster of S blocks along x; partial sums added in rank order through
// distributed shared memory). One wgmma per k-block into fresh accumulators, scaled by
// 2^sw 2^sa and added in f32 (as mx_mma_group4_h). Weights double-buffered in registers, U
// groups of 4 k-blocks a batch, the first batch requested before the PDL wait.
// Numerics: Hopper's fp8 tensor core sums a k-block's 32 exact products with fewer bits than
// f32 (follow-up 4 measured 1e-4 relative at f32 output); bf16 output only here.
// Measured (session 30, BENCHMARKS.md follow-up 33): outputs within about one bf16 ulp of the
// runtime kernel's, but 13-75 % slower at every shape (6144 x 768 M = 16 4.86 against 3.33 us,
// 6144^2 M = 1 13.95 against 12.31): the shared-memory step for B lengthens each launch's
// critical path. Kept as the record of the form; the runtime never compiles it.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && defined(MX_NV_CLUSTER)

MX_DEV unsigned long long mx_wg_desc(mx_u32 saddr, mx_u32 lbo, mx_u32 sbo) {
  return (unsigned long long)((saddr & 0x3ffffu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32);
}
MX_DEV void mx_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
MX_DEV void mx_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most P of this warp's committed wgmma groups are pending.
template <int P>
MX_DEV void mx_wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(P) : "memory");
}
// Keeps the compiler from moving uses of an accumulator across the wait (CUTLASS's
// warpgroup_fence_operand).
MX_DEV void mx_wg_pin(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// d (fresh) = A (this warp's 16 weight rows x 32 k, e4m3, registers) * B (32 k x 8 NB activation
// rows, shared memory descriptor).
template <int NB>
MX_DEV void mx_wg_mma(float (&d)[4 * NB], const uint4& w, unsigned long long desc);
template <>
MX_DEV void mx_wg_mma<1>(float (&d)[4], const uint4& w, unsigned long long desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(w.x), "r"(w.z), "r"(w.y), "r"(w.w), "l"(desc), "r"(0));
}
template <>
MX_DEV void mx_wg_mma<2>(float (&d)[8], const uint4& w, unsigned long long desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7}, "
      "{%8,%9,%10,%11}, %12, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(w.x), "r"(w.z), "r"(w.y), "r"(w.w), "l"(desc), "r"(0));
}

template <int NB, int S, int KBR, int U>
MX_DEV void mx_matmul_wg(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                         const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                         MxBf16::storage* __restrict__ y, int M, int N, int K, int pre) {
  static_assert(U >= 1 && U <= 4, "the waits below name up to four groups");
  constexpr int GR = KBR / 4;  // groups of this block's K range
  constexpr int ROWS = 8 * NB;
  __shared__ __align__(128) mx_u8 sb[KBR * NB * 256];
  __shared__ float red[S > 1 ? 128 * 4 * NB : 1];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int split = blockIdx.x % S;
  const int tile = 4 * blockIdx.y + warp;
  const int KB = K >> 5, G = K >> 7;
  const int gb = split * GR;
  // A warp past the last tile (N % 64 != 0) still takes part in the warpgroup's wgmmas: it reads
  // the last tile again and stores nothing.
  const int wtile = min(tile, (N + 15) / 16 - 1);
  const uint4* wp = wf + ((long long)wtile * KB + 4 * gb) * 32 + lane;
  const mx_u32* swp = wsf + ((long long)wtile * G + gb) * 16;

  uint4 cw[U][4], nw[U][4];
  mx_u32 csA[U], csB[U], nsA[U], nsB[U];
  auto load_w = [&](uint4 (&w)[U][4], mx_u32 (&sA)[U], mx_u32 (&sB)[U], int i) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i + u < GR) {
#pragma unroll
        for (int j = 0; j < 4; ++j) w[u][j] = mx_ldg_once16(wp + (4 * (i + u) + j) * 32);
        sA[u] = swp[16 * (i + u) + g];
        sB[u] = swp[16 * (i + u) + g + 8];
      }
  };
  if (!(pre & 1)) MX_PDL_WAIT();
  load_w(cw, csA, csB, 0);
  if (pre & 1) MX_PDL_WAIT();
  MX_PDL_LAUNCH();

  // Stage the activation rows of this K range: 8-byte piece q of k-block kb of row n holds bytes
  // 8q .. 8q + 7, logical k 4q .. 4q + 3 (k-half 0) and 16 + 4q .. (k-half 1). Rows >= M: zero.
  const mx_u32 sbase = (mx_u32)__cvta_generic_to_shared(sb);
  for (int p = tid; p < ROWS * KBR * 4; p += 128) {
    const int n = p / (KBR * 4), r = p % (KBR * 4), kb = r >> 2, q = r & 3;
    uint2 v = make_uint2(0u, 0u);
    if (n < M) v = *reinterpret_cast<const uint2*>(aq + (long long)n * K + (4 * gb + kb) * 32 + 8 * q);
    mx_u8* base = sb + kb * NB * 256 + (n >> 3) * 128 + (n & 7) * 16 + 4 * q;
    *reinterpret_cast<mx_u32*>(base) = v.x;
    *reinterpret_cast<mx_u32*>(base + NB * 128) = v.y;
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  // Activation scale words: D column c = 8 jn + 2t + e is activation row c (rows >= M read
  // row M - 1: their outputs are not stored).
  const mx_u32* sp[NB][2];
#pragma unroll
  for (int jn = 0; jn < NB; ++jn)
#pragma unroll
    for (int e = 0; e < 2; ++e)
      sp[jn][e] = reinterpret_cast<const mx_u32*>(as + (long long)min(8 * jn + 2 * t + e, M - 1) * KB) + gb;

  float acc[4 * NB];
#pragma unroll
  for (int c = 0; c < 4 * NB; ++c) acc[c] = 0.0f;
  float d[U][4][4 * NB];
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4 * NB; ++c) d[u][j][c] = 0.0f;

#pragma unroll 1
  for (int i = 0; i < GR; i += U) {
    if (i + U < GR) load_w(nw, nsA, nsB, i + U);
    mx_wg_fence();
    // One commit group a group of 4 k-blocks, so group u's rescale below overlaps the tensor
    // core's work on the later ones.
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (i + u < GR)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          mx_wg_mma<NB>(d[u][j], cw[u][j], mx_wg_desc(sbase + (4 * (i + u) + j) * NB * 256, NB * 128, 128));
      mx_wg_commit();
    }
    mx_u32 s[U][NB][2];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int jn = 0; jn < NB; ++jn)
#pragma unroll
        for (int e = 0; e < 2; ++e) s[u][jn][e] = (i + u < GR) ? sp[jn][e][i + u] : 0x7f7f7f7fu;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (u == 0) mx_wg_wait<U - 1>();
      if (u == 1) mx_wg_wait<(U > 1 ? U - 2 : 0)>();
      if (u == 2) mx_wg_wait<(U > 2 ? U - 3 : 0)>();
      if (u == 3) mx_wg_wait<0>();
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4 * NB; ++c) mx_wg_pin(d[u][j][c]);
      if (i + u >= GR) break;
      float fA[4], fB[4], f[NB][2][4];
      mx_u32 bad = mx_has_byte_00_or_ff(csA[u]) | mx_has_byte_00_or_ff(csB[u]);
      mx_e8m0x4_fast(csA[u], fA);
      mx_e8m0x4_fast(csB[u], fB);
#pragma unroll
      for (int jn = 0; jn < NB; ++jn)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          bad |= mx_has_byte_00_or_ff(s[u][jn][e]);
          mx_e8m0x4_fast(s[u][jn][e], f[jn][e]);
        }
      if (bad) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          fA[j] = mx_e8m0_to_f32((csA[u] >> (8 * j)) & 0xffu);
          fB[j] = mx_e8m0_to_f32((csB[u] >> (8 * j)) & 0xffu);
#pragma unroll
          for (int jn = 0; jn < NB; ++jn)
#pragma unroll
            for (int e = 0; e < 2; ++e) f[jn][e][j] = mx_e8m0_to_f32((s[u][jn][e] >> (8 * j)) & 0xffu);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int jn = 0; jn < NB; ++jn) {
          // D fragment 4 jn + c: weight row g (c < 2) or g + 8, activation row 8 jn + 2t + (c & 1).
          acc[4 * jn + 0] += d[u][j][4 * jn + 0] * fA[j] * f[jn][0][j];
          acc[4 * jn + 1] += d[u][j][4 * jn + 1] * fA[j] * f[jn][1][j];
          acc[4 * jn + 2] += d[u][j][4 * jn + 2] * fB[j] * f[jn][0][j];
          acc[4 * jn + 3] += d[u][j][4 * jn + 3] * fB[j] * f[jn][1][j];
        }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      csA[u] = nsA[u];
      csB[u] = nsB[u];
#pragma unroll
      for (int j = 0; j < 4; ++j) cw[u][j] = nw[u][j];
    }
  }

  auto store = [&](int c, float v) {
    const int n = 16 * tile + g + (c & 2 ? 8 : 0), m = 8 * (c >> 2) + 2 * t + (c & 1);
    if (m < M && n < N) y[(long long)m * N + n] = MxBf16::from_f32(v);
  };
  if (S == 1) {
#pragma unroll
    for (int c = 0; c < 4 * NB; ++c) store(c, acc[c]);
  } else {
#pragma unroll
    for (int c = 0; c < 4 * NB; ++c) red[c * 128 + tid] = acc[c];
    mx_cluster_sync();
    if (split == 0) {
#pragma unroll
      for (int c = 0; c < 4 * NB; ++c) {
        float v = acc[c];
        for (int r = 1; r < S; ++r) v += mx_dsmem_load(red + c * 128 + tid, (mx_u32)r);
        store(c, v);
      }
    }
    mx_cluster_sync();
  }
}

// mx_matmul_wg_n<8|16>_s<S>_kb<KBR>_u<U>: grid (S, ceil(N / 64)), 128 threads, K = 32 S KBR.
#define MX_WG1(NB, S, KBR, U, ATTR)                                                              \
  extern "C" __global__ void __launch_bounds__(128) ATTR                                         \
      mx_matmul_wg_n##NB##_s##S##_kb##KBR##_u##U(MX_FRAG_ARGS(MxBf16)) {                         \
    mx_matmul_wg<NB, S, KBR, U>(aq, as, wf, wsf, y, M, N, K, pre);                               \
  }
#define MX_WG(S, KBR, U, ATTR) \
  MX_WG1(1, S, KBR, U, ATTR)   \
  MX_WG1(2, S, KBR, U, ATTR)
// 6144 x 768 (KB = 24)
MX_WG(1, 24, 2, )
MX_WG(2, 12, 2, __cluster_dims__(2, 1, 1))
MX_WG(3, 8, 2, __cluster_dims__(3, 1, 1))
MX_WG(6, 4, 1, __cluster_dims__(6, 1, 1))
// 6144^2 and 1536 x 6144 (KB = 192)
MX_WG(3, 64, 2, __cluster_dims__(3, 1, 1))
MX_WG(4, 48, 2, __cluster_dims__(4, 1, 1))
MX_WG(6, 32, 2, __cluster_dims__(6, 1, 1))
MX_WG(8, 24, 2, __cluster_dims__(8, 1, 1))
#endif
