// Issue 6 follow-up 31 (bench only; appended to the GEMM module's text by ab_ws.py): a persistent,
// warp-specialised decode GEMM on the fragment-packed weights of mx_matmul_frag.hip (same layout,
// same operands, same per-group arithmetic mx_frag_mma), for M <= 8.
//
// Why: session 27 found the register double buffer's loop overlaps its loads and its arithmetic
// poorly at 6144^2 M = 1 (loads alone 10.57 us, arithmetic alone 7.63, together 12.30) with 1.45
// warps a scheduler, and session 13's staged form (a producer warp, bulk copies into a shared-memory
// ring, one block a tile) reached 11.74 there but ran 2.9 waves of one block an SM. Here:
// * one block per SM (grid P, about the SM count), each on a contiguous run of whole 16-column
//   tiles: no waves, at most one tile of imbalance;
// * one producer lane streams the block's weights (chunks of Q groups of 4 k-blocks, Q x 2112
//   bytes) into a ring of R slots by cp.async.bulk on `full` barriers, refilling a slot as soon as
//   its consumer has copied it to registers (`empty` barriers); the first R chunks are issued
//   before the PDL wait (constants), and the ring is sized so two blocks fit an SM, so a launch's
//   weights stream in beside the previous launch's last blocks;
// * C consumer warps take the block's chunks round-robin and only do arithmetic; the activations
//   (M rows, padded rows of K + 32 bytes: conflict-free 8-byte reads) and their scale words are
//   staged in shared memory once per block after the PDL wait;
// * per tile, the consumers' accumulators are added in warp order through shared memory (double
//   buffered by tile parity: one named barrier a tile) and stored with the MxMatMul epilogue.
// Block: 32 (C + 1) threads, the last warp the producer. Dynamic shared memory: mx_ws_smem_bytes.

#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)

#define MX_WS_MAXR 96

MX_DEV mx_u32 mx_ws_addr(const void* p) { return (mx_u32)__cvta_generic_to_shared(p); }
MX_DEV void mx_ws_bulk(void* dst, const void* src, mx_u32 bytes, mx_u64* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          mx_ws_addr(dst)),
      "l"(src), "r"(bytes), "r"(mx_ws_addr(bar))
      : "memory");
}
MX_DEV void mx_ws_init(mx_u64* bar, mx_u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mx_ws_addr(bar)), "r"(count) : "memory");
}
MX_DEV void mx_ws_expect(mx_u64* bar, mx_u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mx_ws_addr(bar)), "r"(bytes)
               : "memory");
}
MX_DEV void mx_ws_arrive(mx_u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(mx_ws_addr(bar)) : "memory");
}
MX_DEV void mx_ws_wait(mx_u64* bar, mx_u32 parity) {
  const mx_u32 a = mx_ws_addr(bar);
  mx_u32 done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(a), "r"(parity)
                 : "memory");
  }
}

template <int C, int Q, bool LATE>
MX_DEV void mx_matmul_ws(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                         const mx_u8* __restrict__ wf, const mx_u8* __restrict__ wsf,
                         MxBf16::storage* __restrict__ y, int M, int N, int K, int R, const MxEpi& ep) {
  constexpr int WB = Q * 2048, SLOT = WB + Q * 64;
  extern __shared__ __align__(128) mx_u8 mx_ws_smem[];
  __shared__ __align__(8) mx_u64 full[MX_WS_MAXR], empty[MX_WS_MAXR];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int T = (N + 15) >> 4, KB = K >> 5, G = K >> 7, CPT = (G + Q - 1) / Q;
  const int P = gridDim.x, b = blockIdx.x;
  const int tb = (int)((long long)T * b / P), te = (int)((long long)T * (b + 1) / P);
  const int nchunk = (te - tb) * CPT;
  const int rows = min(M, 8), pitch = K + 32;
  mx_u8* act = mx_ws_smem + R * SLOT;
  mx_u32* asc = reinterpret_cast<mx_u32*>(act + rows * pitch);  // [rows][G]
  float* part = reinterpret_cast<float*>(asc + rows * G);        // [2][C][128]

  auto issue = [&](int c) {
    const int tile = tb + c / CPT, q0 = (c % CPT) * Q, ng = min(Q, G - q0), s = c % R;
    mx_u8* dst = mx_ws_smem + s * SLOT;
    mx_ws_expect(&full[s], (mx_u32)(ng * 2112));
    mx_ws_bulk(dst, wf + ((long long)tile * KB + 4 * q0) * 512, ng * 2048, &full[s]);
    mx_ws_bulk(dst + WB, wsf + ((long long)tile * G + q0) * 64, ng * 64, &full[s]);
  };
  for (int i = tid; i < R; i += 32 * (C + 1)) {
    mx_ws_init(&full[i], 1);
    mx_ws_init(&empty[i], 1);
  }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  const int first = min(R, nchunk);
  const bool producer = warp == C;
  if (producer && lane == 0)
    for (int c = 0; c < first; ++c) issue(c);
  MX_PDL_WAIT();
  MX_PDL_LAUNCH();
  // Activation rows and their scale words (rows past M are never stored: lanes read row M - 1).
  const int v16 = K >> 4;
  for (int i = tid; i < rows * v16; i += 32 * (C + 1)) {
    const int r = i / v16, c = i - r * v16;
    *reinterpret_cast<uint4*>(act + r * pitch + 16 * c) =
        *reinterpret_cast<const uint4*>(aq + (long long)r * K + 16 * c);
  }
  for (int i = tid; i < rows * G; i += 32 * (C + 1)) {
    const int r = i / G, c = i - r * G;
    asc[i] = reinterpret_cast<const mx_u32*>(as + (long long)r * KB)[c];
  }
  __syncthreads();
  if (producer) {
    if (lane == 0)
      for (int c = first; c < nchunk; ++c) {
        mx_ws_wait(&empty[c % R], (mx_u32)((c / R - 1) & 1));
        issue(c);
      }
    return;  // the consumers synchronise among themselves only (named barrier 1)
  }
  const int ra = min(g, rows - 1), r0 = min(2 * t, rows - 1), r1 = min(2 * t + 1, rows - 1);
  const mx_u8* arow = act + ra * pitch + 8 * t;
  const mx_u32 *s0p = asc + r0 * G, *s1p = asc + r1 * G;
  for (int i = 0; i < te - tb; ++i) {
    float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    // Chunk c is consumer c % C's and R is a multiple of C, so a slot's successive chunks belong
    // to one warp, which waits for them in order: a parity wait never looks two phases ahead.
    for (int j = (warp - (i * CPT) % C + C) % C; j < CPT; j += C) {
      const int c = i * CPT + j, s = c % R, q0 = j * Q, ng = min(Q, G - q0);
      const mx_u8* sl = mx_ws_smem + s * SLOT;
      // One group q of the slot: its weight fragments and scale words (from the slot or w_),
      // the activations of its k-blocks, the arithmetic of mx_matmul_frag.
      auto group = [&](int q, const uint4 w_[4], mx_u32 sA_, mx_u32 sB_) {
        uint2 a[1][4];
#pragma unroll
        for (int u = 0; u < 4; ++u) a[0][u] = *reinterpret_cast<const uint2*>(arow + 128 * (q0 + q) + 32 * u);
        const mx_u32 s0[1] = {s0p[q0 + q]}, s1[1] = {s1p[q0 + q]};
        mx_frag_mma<1, true>(acc, w_, a, sA_, sB_, s0, s1);
      };
      auto read = [&](int q, uint4 w_[4], mx_u32& sA_, mx_u32& sB_) {
#pragma unroll
        for (int u = 0; u < 4; ++u) w_[u] = *reinterpret_cast<const uint4*>(sl + q * 2048 + (u * 32 + lane) * 16);
        sA_ = reinterpret_cast<const mx_u32*>(sl + WB)[q * 16 + g];
        sB_ = reinterpret_cast<const mx_u32*>(sl + WB)[q * 16 + g + 8];
      };
      mx_ws_wait(&full[s], (mx_u32)((c / R) & 1));
      if (LATE) {  // arithmetic straight from the slot, released after its last group
#pragma unroll 2
        for (int q = 0; q < ng; ++q) {
          uint4 w1[4];
          mx_u32 sA1, sB1;
          read(q, w1, sA1, sB1);
          group(q, w1, sA1, sB1);
        }
        __syncwarp();
        if (lane == 0) mx_ws_arrive(&empty[s]);
      } else {  // the slot copied to registers and released first
        uint4 w[Q][4];
        mx_u32 sA[Q], sB[Q];
#pragma unroll
        for (int q = 0; q < Q; ++q)
          if (q < ng) read(q, w[q], sA[q], sB[q]);
        __syncwarp();
        if (lane == 0) mx_ws_arrive(&empty[s]);
#pragma unroll
        for (int q = 0; q < Q; ++q)
          if (q < ng) group(q, w[q], sA[q], sB[q]);
      }
    }
    float* pb = part + (i & 1) * C * 128;
#pragma unroll
    for (int c4 = 0; c4 < 4; ++c4) pb[warp * 128 + c4 * 32 + lane] = acc[0][c4];
    asm volatile("bar.sync 1, %0;" ::"r"(32 * C) : "memory");
    const int n0 = 16 * (tb + i);
    for (int e = tid; e < 128; e += 32 * C) {
      float v = pb[e];
#pragma unroll
      for (int w2 = 1; w2 < C; ++w2) v += pb[w2 * 128 + e];
      const int c4 = e >> 5, ln = e & 31;
      const int n = n0 + (ln >> 2) + (c4 >= 2 ? 8 : 0), m = 2 * (ln & 3) + (c4 & 1);
      if (n < N && m < M) y[(long long)m * N + n] = MxBf16::from_f32(mx_epilogue<MxBf16>(ep, m, n, v));
    }
  }
}

#define MX_DEFINE_WS(C, Q, LATE, SFX)                                                                \
  extern "C" __global__ void __launch_bounds__(32 * (C + 1)) mx_matmul_ws_c##C##_q##Q##SFX(          \
      const mx_u8* aq, const mx_u8* as, const mx_u8* wf, const mx_u8* wsf, MxBf16::storage* y, int M, \
      int N, int K, int R, MxEpi ep) {                                                               \
    mx_matmul_ws<C, Q, LATE>(aq, as, wf, wsf, y, M, N, K, R, ep);                                    \
  }
MX_DEFINE_WS(4, 2, false, )
MX_DEFINE_WS(6, 8, false, )
MX_DEFINE_WS(4, 4, false, )
MX_DEFINE_WS(6, 8, true, _l)
MX_DEFINE_WS(3, 8, true, _l)
MX_DEFINE_WS(4, 12, true, _l)
MX_DEFINE_WS(3, 16, true, _l)
MX_DEFINE_WS(4, 6, true, _l)
MX_DEFINE_WS(6, 4, true, _l)
MX_DEFINE_WS(4, 2, true, _l)

#endif
