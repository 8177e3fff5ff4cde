// Issue 6 follow-up 36, bench only (appended to the GEMM module's text by ab_het.py with
// AB_BENCH=tn): one block an SM on T neighbouring 16-column tiles, its W warps running 2W streams
// (a warp's two register sets, as `_t2h`'s singles), each stream a contiguous K range of one tile,
// the streams spread evenly over the tiles. Why: on `_t2h`'s mixed grid the SM's time is its pair
// block's chain of K / 512 double-buffered iterations a warp while the single beside it finishes
// at half time; here every warp of the SM streams until the end and the chain is about
// K / (128 x 2W / T) iterations (6144^2, T = 3, W = 8: 10, against 12). Measured slower (13.50
// against 11.69 us at 6144^2, session 32 call 8; BENCHMARKS.md follow-up 36).
//   - Stream v = s W + warp (s: register set) works on tile j = the j with
//     floor(j 2W / nt) <= v < floor((j + 1) 2W / nt) (nt = the block's tiles); the c_j streams
//     of tile j split its K / 128 groups as the m8 kernel's c_j warps do (ceil ranges).
//   - Each tile's outputs: its streams' sums added in stream order through shared memory
//     (deterministic; the m8 kernel's bits at W = c_j).
// Grid (ceil(M / 8), ceil(tiles / T)); the kernel takes T = ceil(tiles / gridDim.y). Names:
// mx_matmul_frag_m8_bf16_w<W>_s1_tn.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)

template <int W, int MT, class Out>
MX_DEV void mx_matmul_frag_tn(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                              const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                              const Out& out, int M, int N, int K, int pre) {
  constexpr int V = 2 * W, E = MT * 4 * 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int KB = K >> 5, G = K >> 7, tiles = (N + 15) / 16;
  const int T = (tiles + gridDim.y - 1) / gridDim.y, tile0 = blockIdx.y * T;
  const int nt = min(T, tiles - tile0), m0 = 8 * MT * blockIdx.x;
  auto off = [&](int j) { return j * V / nt; };
  int gs[2], cnt[2], tj[2];
  const uint4* wp[2];
  const mx_u32* sw[2];
  const mx_u8* ap[2][MT];
  const mx_u32 *sp0[2][MT], *sp1[2][MT];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const int v = s * W + warp, j = ((v + 1) * nt - 1) / V, c = off(j + 1) - off(j);
    const int per = (G + c - 1) / c;
    tj[s] = tile0 + j;
    gs[s] = min(G, (v - off(j)) * per);
    cnt[s] = min(G, gs[s] + per) - gs[s];
    wp[s] = wf + (long long)tj[s] * KB * 32 + lane + 128 * gs[s];
    sw[s] = wsf + (long long)tj[s] * G * 16 + 16 * gs[s] + g;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      ap[s][mt] = aq + (long long)min(m0 + 8 * mt + g, M - 1) * K + 8 * t + 128 * gs[s];
      sp0[s][mt] = reinterpret_cast<const mx_u32*>(as + (long long)min(m0 + 8 * mt + 2 * t, M - 1) * KB) + gs[s];
      sp1[s][mt] = reinterpret_cast<const mx_u32*>(as + (long long)min(m0 + 8 * mt + 2 * t + 1, M - 1) * KB) + gs[s];
    }
  }
  const int n = max(cnt[0], cnt[1]);
  struct Batch {
    uint4 w[2][4];
    mx_u32 sA[2], sB[2];
    uint2 a[2][MT][4];
    mx_u32 s0[2][MT], s1[2][MT];
  };
  int li = 0, mi = 0;
  auto load_w = [&](Batch& bt) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      if (li >= cnt[s]) continue;
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
      if (li >= cnt[s]) continue;
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
  float acc[2][MT][4];
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[s][mt][c] = 0.0f;
  auto mma = [&](const Batch& bt) {
#pragma unroll
    for (int s = 0; s < 2; ++s)
      if (mi < cnt[s]) mx_frag_mma<MT, true>(acc[s], bt.w[s], bt.a[s], bt.sA[s], bt.sB[s], bt.s0[s], bt.s1[s]);
    ++mi;
  };
  Batch b0, b1;
  mx_frag_prologue<MT, 1, 2>(pre, wf, wsf, K, 0, n, [&] { load_w(b0); });
  if (n > 0) load_a(b0);
  for (int i = 0; i < n; i += 2) {
    if (i + 1 < n) {
      load_w(b1);
      load_a(b1);
    }
    mma(b0);
    if (i + 1 == n) break;
    if (i + 2 < n) {
      load_w(b0);
      load_a(b0);
    }
    mma(b1);
  }
  __shared__ float part[V * E];
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) part[(s * W + warp) * E + (mt * 4 + c) * 32 + lane] = acc[s][mt][c];
  __syncthreads();
  for (int x = threadIdx.x; x < nt * E; x += 32 * W) {
    const int j = x / E, e = x - j * E, v1 = off(j + 1);
    float sum = part[off(j) * E + e];
    for (int v = off(j) + 1; v < v1; ++v) sum += part[v * E + e];
    const int mt = (e >> 7) % MT, c = (e >> 5) & 3, ln = e & 31;
    const int col = 16 * (tile0 + j) + (ln >> 2) + (c >= 2 ? 8 : 0);
    const int m = m0 + 8 * mt + 2 * (ln & 3) + (c & 1);
    if (m < M) out.put(m, col, sum);
  }
}

#define MX_TN(W, ATTR)                                                                           \
  extern "C" __global__ void ATTR mx_matmul_frag_m8_bf16_w##W##_s1_tn(MX_FRAG_ARGS(MxBf16)) {    \
    mx_matmul_frag_tn<W, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre);                 \
  }
MX_TN(6, __launch_bounds__(192, 1))
MX_TN(8, __launch_bounds__(256, 1))
// (W = 10: __launch_bounds__(320, 1) got 168 registers and spills from ptxas, and under
// __maxnreg__(200) the driver refused the launch, "too many resources requested"; dropped.)
#endif
