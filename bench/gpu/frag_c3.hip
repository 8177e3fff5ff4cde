// Issue 6 follow-up 37, bench only (appended to the GEMM module's text by ab_het.py with
// AB_BENCH=c3): three 16-column tiles on a cluster of two blocks, 1.5 tiles a block, so both
// blocks of an SM stream to the end. Why: follow-up 35's stream-K grid (every block the same
// share, 1.45 tile pairs an SM at 6144^2) streamed at 87 % of HBM before its fix-up, and the
// fix-up's L2 round trips at the end of every block took the gain back; `_t2h` (follow-up 36)
// balances tiles per SM (<= 3) but its one-tile blocks finish at half time. Here the cluster
// (blocks rank 0, 1) owns tiles A = 3c, B = 3c + 1, C = 3c + 2: rank r does tile 3c + r whole and
// half of C's K; the split tile's fix-up goes through distributed shared memory, off the end:
// rank 1 does its C items first and pushes its C partials into rank 0 with st.async (mbarrier
// completion) as soon as they are done, so rank 0 at its end only waits on a barrier long
// completed.
//   - A warp runs two streams in `_t2`'s two register sets (as `_t2h`'s one-tile blocks): stream
//     s of warp w does C range r 2W + s W + w (C's K / 128 groups in 4W ceil ranges, the m8
//     kernel's at W = 8, S = 2) and then own range s W + w (the tile's groups in 2W ceil
//     ranges, the m8 kernel's at W = 8).
//   - Own tiles: the 2W range sums in range order (the m8 kernel's bits at W = 8, S = 1); C: each
//     rank's 2W range sums in order, then rank 0's + rank 1's (its bits at W = 8, S = 2).
// Grid (2 ceil(M / 8), ceil(tiles / 3)), 32 W threads a block, clusters (2, 1, 1). Past the last
// tile a stream reads the last tile's weights; those outputs are not stored (column >= N).
// Names: mx_matmul_frag_m8_bf16_w<W>_s1_c3.
// FIX (template parameter): 1 the cluster form above; 0 a probe without clusters or fix-up (rank 0
// stores its half of C only: wrong C columns, for the time); 2 no clusters, a global workspace:
// rank 0 (the lower block, dispatched first) stores its C sums per warp into slots filled with a
// sentinel, rank 1 loads them two items before its end (not consumed until its end), re-reads
// any still the sentinel, adds them in range order and puts the sentinel back.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)

// Stores 16 bytes at `local`'s address in block `rank` and completes them on its barrier `bar`.
MX_DEV void mx_st_async_v4(float* local, mx_u64* bar, mx_u32 rank, float a, float b, float c, float d) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   mx_dsmem_addr(local, rank)),
               "f"(a), "f"(b), "f"(c), "f"(d), "r"(mx_dsmem_addr(bar, rank))
               : "memory");
}

#define MX_C3_SENTINEL 0xffffffffu  // a NaN that f32 arithmetic never returns (canonical 0x7fffffff)
template <int W, int FIX, class Out>
MX_DEV void mx_matmul_frag_c3(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                              const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                              const Out& out, int M, int N, int K, int pre, float* __restrict__ ws) {
  constexpr int MT = 1, E = MT * 4 * 32, V = 2 * W;  // V streams a block
  __shared__ __align__(16) float part[V * E];    // own tile, then rank 0's C
  __shared__ __align__(16) float rpart[V * E];   // rank 1's C partials (rank 0 only), lane-major
  __shared__ mx_u64 bar;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int rank = blockIdx.x & 1, m0 = 8 * MT * (blockIdx.x >> 1);
  const int KB = K >> 5, G = K >> 7, tiles = (N + 15) / 16;
  const int tileC = 3 * blockIdx.y + 2, tileO = 3 * blockIdx.y + rank;
  static_assert(FIX != 2 || E == 32 * W, "FIX 2: one element of a slot a thread");
  if (FIX == 1) {
    if (rank == 0 && threadIdx.x == 0) {
      mx_mbar_init_expect(&bar, V * E * 4);
      mx_fence_mbar_init();
    }
    mx_cluster_arrive_relaxed();  // waited for before rank 1's first remote store
  }
  // FIX 2: this cluster-pair's V slots of E floats.
  float* slots = ws + (long long)((blockIdx.x >> 1) * gridDim.y + blockIdx.y) * V * E;
  float x[V];  // FIX 2, rank 1: rank 0's C sums, element threadIdx.x of each slot
  const int perO = (G + V - 1) / V, perC = (G + 2 * V - 1) / (2 * V);
  int gC[2], nC[2], gO[2], nO[2], n[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const int v = s * W + warp;
    gC[s] = min(G, (rank * V + v) * perC);
    nC[s] = min(G, gC[s] + perC) - gC[s];
    gO[s] = min(G, v * perO);
    nO[s] = min(G, gO[s] + perO) - gO[s];
    n[s] = nC[s] + nO[s];
  }
  const uint4* wp[2];
  const mx_u32* sw[2];
  const mx_u8* ap[2][MT];
  const mx_u32 *sp0[2][MT], *sp1[2][MT];
  // Stream s's pointers at group gs of tile `tile` (past the last tile: the last).
  auto at = [&](int s, int tile, int gs) {
    tile = min(tile, tiles - 1);
    wp[s] = wf + (long long)tile * KB * 32 + lane + 128 * gs;
    sw[s] = wsf + (long long)tile * G * 16 + 16 * gs + g;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      ap[s][mt] = aq + (long long)min(m0 + 8 * mt + g, M - 1) * K + 8 * t + 128 * gs;
      sp0[s][mt] = reinterpret_cast<const mx_u32*>(as + (long long)min(m0 + 8 * mt + 2 * t, M - 1) * KB) + gs;
      sp1[s][mt] = reinterpret_cast<const mx_u32*>(as + (long long)min(m0 + 8 * mt + 2 * t + 1, M - 1) * KB) + gs;
    }
  };
#pragma unroll
  for (int s = 0; s < 2; ++s) at(s, tileC, gC[s]);
  struct Batch {
    uint4 w[2][4];
    mx_u32 sA[2], sB[2];
    uint2 a[2][MT][4];
    mx_u32 s0[2][MT], s1[2][MT];
  };
  int li = 0, mi = 0;  // the next item to load, to multiply
  auto load_w = [&](Batch& bt) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      if (li >= n[s]) continue;
      if (li == nC[s]) at(s, tileO, gO[s]);  // C done: on to the own range
#pragma unroll
      for (int j = 0; j < 4; ++j) bt.w[s][j] = mx_ldg_once16(wp[s] + 32 * j);
      bt.sA[s] = sw[s][0];
      bt.sB[s] = sw[s][8];
      wp[s] += 128;
      sw[s] += 16;
    }
  };
  auto load_a = [&](Batch& bt) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      if (li >= n[s]) continue;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int j = 0; j < 4; ++j) bt.a[s][mt][j] = *reinterpret_cast<const uint2*>(ap[s][mt] + 32 * j);
        bt.s0[s][mt] = *sp0[s][mt];
        bt.s1[s][mt] = *sp1[s][mt];
        ap[s][mt] += 128;
        sp0[s][mt] += 1;
        sp1[s][mt] += 1;
      }
    }
    ++li;
  };
  float acc[2][MT][4], cacc[2][MT][4];
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[s][mt][c] = 0.0f;
  bool waited = false;
  // Stream s's C sums are done: kept (rank 0) or pushed into rank 0 (rank 1); the own tile's start.
  auto c_done = [&](int s) {
    const int v = s * W + warp;
    if (FIX == 2 && rank == 0) {
#pragma unroll
      for (int c = 0; c < 4; ++c) __stcg(slots + v * E + c * 32 + lane, acc[s][0][c]);
    }
    if (FIX == 1 && rank == 1) {
      if (!waited) {
        mx_cluster_wait();  // the entry arrival: rank 0 has started and set up its barrier
        waited = true;
      }
      mx_st_async_v4(&rpart[(v * 32 + lane) * 4], &bar, 0, acc[s][0][0], acc[s][0][1], acc[s][0][2], acc[s][0][3]);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        cacc[s][mt][c] = acc[s][mt][c];
        acc[s][mt][c] = 0.0f;
      }
  };
  const int nn = max(n[0], n[1]);
  auto fetch = [&] {
#pragma unroll
    for (int j = 0; j < V; ++j) x[j] = __ldcv(slots + j * E + threadIdx.x);
  };
  auto mma = [&](const Batch& bt) {
    if (FIX == 2 && rank == 1 && mi == max(0, nn - 2)) fetch();
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      if (mi >= n[s]) continue;
      if (mi == nC[s]) c_done(s);
      mx_frag_mma<MT, true>(acc[s], bt.w[s], bt.a[s], bt.sA[s], bt.sB[s], bt.s0[s], bt.s1[s]);
    }
    ++mi;
  };
  if (FIX == 2 && rank == 1 && nn == 0) fetch();
  Batch b0, b1;
  mx_frag_prologue<MT, 1, 2>(pre, wf, wsf, K, 0, nn, [&] { load_w(b0); });
  if (nn > 0) load_a(b0);
  for (int i = 0; i < nn; i += 2) {
    if (i + 1 < nn) {
      load_w(b1);
      load_a(b1);
    }
    mma(b0);
    if (i + 1 == nn) break;
    if (i + 2 < nn) {
      load_w(b0);
      load_a(b0);
    }
    mma(b1);
  }
  // Streams with no own items (past G) never switched.
#pragma unroll
  for (int s = 0; s < 2; ++s)
    if (nO[s] == 0) c_done(s);
  if (FIX == 1 && rank == 1 && !waited) mx_cluster_wait();
  auto col = [&](int tile, int e) { return 16 * tile + ((e & 31) >> 2) + (((e >> 5) & 3) >= 2 ? 8 : 0); };
  auto row = [&](int e) { return m0 + 8 * ((e >> 7) % MT) + 2 * (e & 3) + (e >> 5 & 1); };
  // Own tile: its 2W ranges in order.
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int c = 0; c < 4; ++c) part[(s * W + warp) * E + c * 32 + lane] = acc[s][0][c];
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += 32 * W) {
    float v = part[e];
#pragma unroll
    for (int j = 1; j < V; ++j) v += part[j * E + e];
    if (row(e) < M) out.put(row(e), col(tileO, e), v);
  }
  const int fin = FIX == 2 ? 1 : 0;  // the rank that stores C
  if (rank != fin) return;
  __syncthreads();  // part read: now this rank's C sums
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int c = 0; c < 4; ++c) part[(s * W + warp) * E + c * 32 + lane] = cacc[s][0][c];
  __syncthreads();
  if (FIX == 2) {
    const int e = threadIdx.x;
    float r = 0.0f;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float* a = slots + j * E + e;
      while (__float_as_uint(x[j]) == MX_C3_SENTINEL) x[j] = __ldcv(a);
      r = j == 0 ? x[0] : r + x[j];
      __stcg(a, __uint_as_float(MX_C3_SENTINEL));
    }
    float v = part[e];
#pragma unroll
    for (int j = 1; j < V; ++j) v += part[j * E + e];
    if (row(e) < M) out.put(row(e), col(tileC, e), r + v);
    return;
  }
  if (FIX == 0) {
    for (int e = threadIdx.x; e < E; e += 32 * W) {
      float v = part[e];
#pragma unroll
      for (int j = 1; j < V; ++j) v += part[j * E + e];
      if (row(e) < M) out.put(row(e), col(tileC, e), v);
    }
    return;
  }
  mx_cluster_wait();
  mx_mbar_wait(&bar, 0);
  for (int e = threadIdx.x; e < E; e += 32 * W) {
    float v = part[e], r = rpart[(e & 31) * 4 + (e >> 5)];
#pragma unroll
    for (int j = 1; j < V; ++j) {
      v += part[j * E + e];
      r += rpart[(j * 32 + (e & 31)) * 4 + (e >> 5)];
    }
    if (row(e) < M) out.put(row(e), col(tileC, e), v + r);
  }
}

#define MX_C3(W, FIX, SFX, ATTR)                                                                 \
  extern "C" __global__ void __launch_bounds__(32 * W, 2) ATTR                                   \
      mx_matmul_frag_m8_bf16_w##W##_s1_c3##SFX(MX_FRAG_ARGS(MxBf16), float* ws) {                \
    mx_matmul_frag_c3<W, FIX>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre, ws);           \
  }
MX_C3(4, 1, , __cluster_dims__(2, 1, 1))
MX_C3(4, 0, p, )
MX_C3(4, 2, g, )
#endif
