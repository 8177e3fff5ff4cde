// Issue 6 follow-up 36 (bench only, appended to the GEMM module's text by ab_het.py): `_t2` on a
// mixed grid of tile-pair blocks and one-tile blocks. Why: at 6144^2 `_t2`'s 192 pair blocks put
// two blocks (4 tiles) on 60 SMs and one (2 tiles) on 72, and the doubly loaded SMs set the time
// (follow-up 34; the mean is 2.9 tiles an SM). Stream-K (follow-up 35) balances the work exactly
// but its fix-up of split pairs costs ~2 us of L2 round trips. Here no tile is split between
// blocks: blocks 0 .. np - 1 are `_t2`'s pair blocks (tiles 2y, 2y + 1; the first wave, one an SM
// when np <= SMs), blocks np .. np + ns - 1 each take one tile (2 np + y - np), so with np = SMs
// and ns = tiles - 2 SMs every SM holds at most 3 tiles (a pair and a single) instead of 4.
//   - A one-tile block keeps a pair block's bytes in flight a warp: its W warps split the tile's
//     K / 128 groups into 2W contiguous ranges and warp w runs ranges w and W + w at once in the
//     two register sets `_t2` gives its two tiles (two activation loads an item instead of one).
//     Its sums: per warp range w + range W + w, then the warps in order (deterministic).
//   - A pair block is `_t2` exactly (the same loads, mmas and sums: bits equal to the runtime's).
// Names: mx_matmul_frag_m8_bf16_w<W>_t2h; the runtime's arguments plus `int np`; grid
// (ceil(M / 8), np + ns), 32 W lanes.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)

// mx_frag_reduce_to stores tile NT blockIdx.y onward; a one-tile block's tile is elsewhere.
template <class Out>
struct MxShiftOut {
  const Out& o;
  int dn;
  MX_DEV void put(int m, int n, float v) const { o.put(m, n + dn, v); }
};

template <int W, int MT, bool ONE, class Out>
MX_DEV void mx_matmul_frag_t2h(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                               const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                               const Out& out, int M, int N, int K, int pre, int np) {
  constexpr int NT = 2;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int KB = K >> 5, G = K >> 7, tiles = (N + 15) / 16, y = blockIdx.y;
  const int m0 = 8 * MT * blockIdx.x;
  // Register set s: tile ts[s], groups gs[s] .. gs[s] + ns_[s] - 1.
  int ts[2], gs[2], cnt[2];
  if (ONE) {
    const int per = (G + 2 * W - 1) / (2 * W);
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      ts[s] = np + y;  // 2 np + (y - np)
      gs[s] = min(G, (s * W + warp) * per);
      cnt[s] = min(G, gs[s] + per) - gs[s];
    }
  } else {
    const int per = (G + W - 1) / W;
    ts[0] = 2 * y;
    ts[1] = 2 * y + 1 < tiles ? 2 * y + 1 : 2 * y;  // past the last tile: the first's weights again
    gs[0] = gs[1] = min(G, warp * per);
    cnt[0] = cnt[1] = min(G, gs[0] + per) - gs[0];
  }
  const int n = cnt[0];  // items of the loop; set 1 has cnt[1] <= n of them
  const uint4* wp[2];
  const mx_u32* sw[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    wp[s] = wf + (long long)ts[s] * KB * 32 + lane + 128 * gs[s];
    sw[s] = wsf + (long long)ts[s] * G * 16 + 16 * gs[s] + g;
  }
  // Activation cursors of set 0 (and set 1 of a one-tile block). Rows past M read row M - 1.
  constexpr int NA = ONE ? 2 : 1;
  const mx_u8* ap[NA][MT];
  const mx_u32 *sp0[NA][MT], *sp1[NA][MT];
#pragma unroll
  for (int s = 0; s < NA; ++s)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      ap[s][mt] = aq + (long long)min(m0 + 8 * mt + g, M - 1) * K + 8 * t + 128 * gs[s];
      sp0[s][mt] = reinterpret_cast<const mx_u32*>(as + (long long)min(m0 + 8 * mt + 2 * t, M - 1) * KB) + gs[s];
      sp1[s][mt] = reinterpret_cast<const mx_u32*>(as + (long long)min(m0 + 8 * mt + 2 * t + 1, M - 1) * KB) + gs[s];
    }
  struct Batch {
    uint4 w[NT][4];
    mx_u32 sA[NT], sB[NT];
    uint2 a[NA][MT][4];
    mx_u32 s0[NA][MT], s1[NA][MT];
  };
  int li = 0, mi = 0;  // the next item to load, to multiply
  auto load_w = [&](Batch& bt) {
#pragma unroll
    for (int s = 0; s < NT; ++s) {
      if (ONE && s == 1 && li >= cnt[1]) continue;  // set 1 ran out (uniform over the warp)
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
    for (int s = 0; s < NA; ++s) {
      if (s == 1 && li >= cnt[1]) continue;
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
  float acc[NT][MT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[nt][mt][c] = 0.0f;
  auto mma = [&](const Batch& bt) {
    mx_frag_mma<MT, true>(acc[0], bt.w[0], bt.a[0], bt.sA[0], bt.sB[0], bt.s0[0], bt.s1[0]);
    if (!ONE || mi < cnt[1])
      mx_frag_mma<MT, true>(acc[1], bt.w[1], bt.a[NA - 1], bt.sA[1], bt.sB[1], bt.s0[NA - 1], bt.s1[NA - 1]);
    ++mi;
  };
  Batch b0, b1;
  mx_frag_prologue<MT, 1, NT>(pre, wf, wsf, K, 0, n, [&] { load_w(b0); });
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
  if (ONE) {
    // Ranges w and W + w of the tile: one warp's share of it.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[0][mt][c] += acc[1][mt][c];
    mx_frag_reduce_to<MxBf16, W, MT, 1, 1>(acc, MxShiftOut<Out>{out, 16 * np}, MxRowsBelow{M});
  } else {
    mx_frag_reduce_to<MxBf16, W, MT, 1, NT>(acc, out, MxRowsBelow{M});
  }
}

#define MX_T2H(W)                                                                                \
  extern "C" __global__ void __launch_bounds__(32 * W, 1)                                        \
      mx_matmul_frag_m8_bf16_w##W##_t2h(MX_FRAG_ARGS(MxBf16), int np) {                          \
    if ((int)blockIdx.y < np)                                                                    \
      mx_matmul_frag_t2h<W, 1, false>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre, np);   \
    else                                                                                         \
      mx_matmul_frag_t2h<W, 1, true>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre, np);    \
  }
MX_T2H(4)
#endif
