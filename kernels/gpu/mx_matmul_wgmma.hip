// com.mxfuse MxMatMul, decode GEMM v5 (NVIDIA sm_90a, experimental): warpgroup MMA (wgmma) on
// e4m3 operands straight from shared memory, weights streamed by the bulk-copy engine.
//
// Why: the fragment kernel (mx_matmul_frag.hip) holds the weight bytes in flight in registers
// (160 per thread, 12 warps per SM), and ncu says the bytes in flight bound it. Here the weights
// travel global -> shared memory with cp.async.bulk into a ring of R stages (no registers, no
// per-lane address math; one elected thread issues one copy per stage), and wgmma reads both
// operands from shared memory: no e4m3 -> f16 conversions, one instruction per k-block per warpgroup.
//
// "Swap AB": the 64 weight rows of a tile (output columns n) are wgmma's M = 64 (operand A), the
// activation rows (tokens m) its N = NT = 8 or 16 (operand B, both K-major, as fp8 wgmma requires).
// One wgmma covers exactly one 32-element scale block; its fresh fp32 result (scale-d = 0) is
// scaled by 2^(sw) * 2^(sa) and added to the accumulators, as in the other decode kernels.
//
// Constant weights, packed once (bench: mxgpu.pack_wg): wg [N64][K/128][MX_WG_CHUNK] with a chunk =
// 4 k-blocks of 64 rows in the no-swizzle core-matrix layout (k-block kb: [8 row groups][2 k
// halves][8 rows][16 bytes], 2048 bytes) followed by the 64 rows' scale words (byte u = k-block u).
// Rows past N: zero weights, scale 127. K % 128 == 0.
// Activations a [M, K] e4m3 + a_scale [M, K/32] row-major are copied into shared memory once per
// block (after the PDL wait) in the same core-matrix layout.
// Grid: (ceil(M / NT) * S, ceil(N / 64)), block 128 threads (one warpgroup), cluster (S, 1, 1): the
// S blocks of a cluster split K of one tile and add their partial sums in rank order through
// distributed shared memory. Dynamic shared memory: mx_wg_smem_bytes (host: mxgpu.wg_smem).

#if defined(MX_CUDA) && defined(__CUDA_ARCH_FEAT_SM90_ALL) && defined(MX_NV_CLUSTER)
#define MX_NV_WGMMA 1
#endif

#if defined(MX_NV_WGMMA)

#define MX_WG_KBS 4                                          // k-blocks per stage
#define MX_WG_KB_BYTES 2048                                  // one k-block of 64 weight rows
#define MX_WG_CHUNK (MX_WG_KBS * MX_WG_KB_BYTES + 64 * 4)  // one stage: weights + scale words

// Shared-memory matrix descriptor (PTX ISA "matrix descriptor"), no swizzle: start address,
// leading-dimension byte offset (bits 16-29) and stride-dimension byte offset (bits 32-45), all
// in 16-byte units. A core matrix is 8 rows x 16 bytes, contiguous.
MX_DEV mx_u64 mx_wg_desc(const void* smem, mx_u32 lbo, mx_u32 sbo) {
  const mx_u32 a = (mx_u32)__cvta_generic_to_shared(smem);
  return (mx_u64)((a & 0x3ffffu) >> 4) | ((mx_u64)(lbo >> 4) << 16) | ((mx_u64)(sbo >> 4) << 32);
}

MX_DEV void mx_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
MX_DEV void mx_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
MX_DEV void mx_wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// After mx_wg_wait0: tells the compiler the register changes here, so no read of it moves above
// the wait (the wgmma's register writes are invisible to it).
MX_DEV void mx_wg_pin(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// d = A (64 x 32 e4m3, desc da) * B (32 x NT e4m3, desc db), the previous d ignored (scale-d 0).
// The registers are written asynchronously: read them only after mx_wg_wait0 + mx_wg_pin.
MX_DEV void mx_wgmma_e4m3(float (&d)[4], mx_u64 da, mx_u64 db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "l"(da), "l"(db), "r"(0));
}
MX_DEV void mx_wgmma_e4m3(float (&d)[8], mx_u64 da, mx_u64 db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, "
      "%9, p, 1, 1;\n}\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
        "=f"(d[7])
      : "l"(da), "l"(db), "r"(0));
}

// One bulk copy global -> this block's shared memory completing `bytes` on barrier `bar`.
MX_DEV void mx_bulk_load(void* smem, const void* gmem, mx_u32 bytes, mx_u64* bar) {
  const mx_u32 s = (mx_u32)__cvta_generic_to_shared(smem);
  const mx_u32 b = (mx_u32)__cvta_generic_to_shared(bar);
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(s),
      "l"(gmem), "r"(bytes), "r"(b)
      : "memory");
}

// The 4 E8M0 bytes of a word as floats, exact (the fast decode unless a byte is 0 or 255).
MX_DEV void mx_e8m0x4(mx_u32 w, float f[4]) {
  mx_e8m0x4_fast(w, f);
  if (mx_has_byte_00_or_ff(w)) {
#pragma unroll
    for (int u = 0; u < 4; ++u) f[u] = mx_e8m0_to_f32((w >> (8 * u)) & 0xffu);
  }
}

// Dynamic shared memory of one block: the ring, the block's activations and their scale words,
// the cluster reduction buffer, the ring's barriers.
struct MxWgSmem {
  int ring, act, ascl, red, bars, total;
  MX_DEV MxWgSmem(int R, int NT, int per, int S) {
    ring = 0;
    act = ring + R * MX_WG_CHUNK;
    ascl = act + per * MX_WG_KBS * NT * 32;
    red = ascl + per * NT * 4;
    bars = red + (S > 1 ? 128 * (NT / 2) * 4 : 0);
    total = bars + R * 8;
  }
};

template <class TO, int NT, int S, int R>
MX_DEV void mx_matmul_wgmma(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                            const mx_u8* __restrict__ wg, typename TO::storage* __restrict__ y,
                            int M, int N, int K, int pre, int swap_desc) {
  extern __shared__ __align__(128) mx_u8 smem[];
  constexpr int NH = NT / 2;  // accumulators per thread
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.y, split = blockIdx.x % S, m0 = NT * (blockIdx.x / S);
  const int KB = K >> 5, G = K >> 7;
  const int per = (G + S - 1) / S;
  const int sb = min(G, split * per), ns = min(G, sb + per) - sb;
  const MxWgSmem L(R, NT, per, S);
  mx_u8* ring = smem + L.ring;
  mx_u8* act = smem + L.act;
  mx_u32* ascl = reinterpret_cast<mx_u32*>(smem + L.ascl);
  mx_u64* bars = reinterpret_cast<mx_u64*>(smem + L.bars);
  const mx_u8* src = wg + ((long long)tile * G + sb) * MX_WG_CHUNK;

  if (tid == 0) {
    for (int r = 0; r < R; ++r) {
      const mx_u32 b = (mx_u32)__cvta_generic_to_shared(bars + r);
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(b) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // The weights are constants: with pre = 1 their stream starts before the PDL wait.
  auto issue = [&](int s) {
    mx_bulk_load(ring + (s % R) * MX_WG_CHUNK, src + (long long)s * MX_WG_CHUNK, MX_WG_CHUNK,
                 bars + (s % R));
  };
  if (!pre) MX_PDL_WAIT();
  if (tid == 0)
    for (int s = 0; s < min(R, ns); ++s) issue(s);
  if (pre) MX_PDL_WAIT();
  // Activations of this block's K range in the core-matrix layout (as the weights): byte i of
  // local k-block j, token m (8-row group m >> 3, row m & 7), k half c at
  // j NT 32 + (m >> 3) 256 + c 128 + (m & 7) 16 + i. Tokens past M read row M - 1 (their outputs
  // are not stored); the scale words likewise (ascl[s NT + m] = k-blocks 4 s .. 4 s + 3).
  {
    const int kbl = ns * MX_WG_KBS, chunks = NT * kbl * 2;
    for (int i = tid; i < chunks; i += 128) {
      const int m = i / (kbl * 2), c = i - m * (kbl * 2), j = c >> 1, half = c & 1;
      const long long row = min(m0 + m, M - 1);
      const uint4 v = *reinterpret_cast<const uint4*>(aq + row * K + (sb * MX_WG_KBS + j) * 32 + half * 16);
      *reinterpret_cast<uint4*>(act + j * NT * 32 + (m >> 3) * 256 + half * 128 + (m & 7) * 16) = v;
    }
    for (int i = tid; i < NT * ns; i += 128) {
      const int s = i / NT, m = i - s * NT;
      const long long row = min(m0 + m, M - 1);
      ascl[i] = *reinterpret_cast<const mx_u32*>(as + row * KB + (sb + s) * MX_WG_KBS);
    }
  }
  // The generic-proxy stores above must be visible to wgmma (async proxy).
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  MX_PDL_LAUNCH();

  const mx_u32 lbo = swap_desc ? 256u : 128u, sbo = swap_desc ? 128u : 256u;
  float acc[NH];
#pragma unroll
  for (int c = 0; c < NH; ++c) acc[c] = 0.0f;
  for (int s = 0; s < ns; ++s) {
    mx_u8* stage = ring + (s % R) * MX_WG_CHUNK;
    mx_mbar_wait(bars + (s % R), (mx_u32)((s / R) & 1));
    float d[MX_WG_KBS][NH];
    mx_wg_fence();
#pragma unroll
    for (int kb = 0; kb < MX_WG_KBS; ++kb)
      mx_wgmma_e4m3(d[kb], mx_wg_desc(stage + kb * MX_WG_KB_BYTES, lbo, sbo),
                    mx_wg_desc(act + (s * MX_WG_KBS + kb) * NT * 32, lbo, sbo));
    mx_wg_commit();
    mx_wg_wait0();
#pragma unroll
    for (int kb = 0; kb < MX_WG_KBS; ++kb)
#pragma unroll
      for (int c = 0; c < NH; ++c) mx_wg_pin(d[kb][c]);
    // Scales: weight rows 16 warp + g (fA) and + 8 (fB); tokens 8 j + 2 t (+1) (fa[j][0 / 1]).
    const mx_u32* sw = reinterpret_cast<const mx_u32*>(stage + MX_WG_KBS * MX_WG_KB_BYTES);
    float fA[4], fB[4], fa[NT / 8][2][4];
    mx_e8m0x4(sw[16 * warp + g], fA);
    mx_e8m0x4(sw[16 * warp + g + 8], fB);
#pragma unroll
    for (int j = 0; j < NT / 8; ++j) {
      mx_e8m0x4(ascl[s * NT + 8 * j + 2 * t], fa[j][0]);
      mx_e8m0x4(ascl[s * NT + 8 * j + 2 * t + 1], fa[j][1]);
    }
#pragma unroll
    for (int kb = 0; kb < MX_WG_KBS; ++kb)
#pragma unroll
      for (int j = 0; j < NT / 8; ++j) {
        acc[4 * j + 0] += d[kb][4 * j + 0] * fA[kb] * fa[j][0][kb];
        acc[4 * j + 1] += d[kb][4 * j + 1] * fA[kb] * fa[j][1][kb];
        acc[4 * j + 2] += d[kb][4 * j + 2] * fB[kb] * fa[j][0][kb];
        acc[4 * j + 3] += d[kb][4 * j + 3] * fB[kb] * fa[j][1][kb];
      }
    // Every warp's wgmmas on this slot are complete: refill it.
    __syncthreads();
    if (tid == 0 && s + R < ns) issue(s + R);
  }

  // Accumulator c of thread (warp, g, t): column n0 + 16 warp + g (+ 8 for c & 2), token
  // m0 + 8 (c >> 2) + 2 t + (c & 1).
  const int n0 = 64 * tile;
  auto store = [&](int c, float v) {
    const int n = n0 + 16 * warp + g + ((c & 2) ? 8 : 0);
    const int m = m0 + 8 * (c >> 2) + 2 * t + (c & 1);
    if (n < N && m < M) y[(long long)m * N + n] = TO::from_f32(v);
  };
  if (S == 1) {
#pragma unroll
    for (int c = 0; c < NH; ++c) store(c, acc[c]);
  } else {
    float* red = reinterpret_cast<float*>(smem + L.red);
#pragma unroll
    for (int c = 0; c < NH; ++c) red[c * 128 + tid] = acc[c];
    mx_cluster_sync();
    if (split == 0) {
#pragma unroll
      for (int c = 0; c < NH; ++c) {
        float v = acc[c];
        for (int r = 1; r < S; ++r) v += mx_dsmem_load(red + c * 128 + tid, (mx_u32)r);
        store(c, v);
      }
    }
    mx_cluster_sync();
  }
}

// Kernel names: mx_matmul_wgmma_n<8|16>_<out>_s<S>_r<R>.
#define MX_DEFINE_WG1(NAME, TO, NT, S, R, ATTR)                                                 \
  extern "C" __global__ void __launch_bounds__(128) ATTR                                        \
      NAME(const mx_u8* aq, const mx_u8* as, const mx_u8* wg, TO::storage* y, int M, int N,     \
           int K, int pre, int swap_desc) {                                                     \
    mx_matmul_wgmma<TO, NT, S, R>(aq, as, wg, y, M, N, K, pre, swap_desc);                      \
  }
#define MX_DEFINE_WG_S(NAME, TO, NT, R)                                                         \
  MX_DEFINE_WG1(NAME##_s1_r##R, TO, NT, 1, R, )                                                 \
  MX_DEFINE_WG1(NAME##_s2_r##R, TO, NT, 2, R, __cluster_dims__(2, 1, 1))                        \
  MX_DEFINE_WG1(NAME##_s4_r##R, TO, NT, 4, R, __cluster_dims__(4, 1, 1))                        \
  MX_DEFINE_WG1(NAME##_s8_r##R, TO, NT, 8, R, __cluster_dims__(8, 1, 1))
#define MX_DEFINE_WG_R(NAME, TO, NT)                                                            \
  MX_DEFINE_WG_S(NAME, TO, NT, 2) MX_DEFINE_WG_S(NAME, TO, NT, 4) MX_DEFINE_WG_S(NAME, TO, NT, 8)
MX_DEFINE_WG_R(mx_matmul_wgmma_n8_bf16, MxBf16, 8)
MX_DEFINE_WG_R(mx_matmul_wgmma_n16_bf16, MxBf16, 16)
MX_DEFINE_WG_S(mx_matmul_wgmma_n8_f32, MxF32, 8, 4)
MX_DEFINE_WG_S(mx_matmul_wgmma_n16_f32, MxF32, 16, 4)
#endif  // MX_NV_WGMMA
