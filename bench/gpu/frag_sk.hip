// Issue 6 follow-up 35 (bench only, appended to the GEMM module's text by ab_sk.py): a stream-K
// form of `_t2` (mx_matmul_frag.hip). Why: follow-up 34 found 6144^2 held at 74 % of HBM by the
// grid, 192 tile-pair blocks on 132 SMs (60 SMs with two, 72 with one), while the same loop on
// exactly two blocks an SM streams 92 % of the read-only rate. Here the work of one 8 MT-row tile,
// T = pairs x G (tile pair, group of 4 k-blocks) items, is cut into B = gridDim.x equal contiguous
// runs (block b: items floor(b T / B) .. floor((b + 1) T / B) - 1; the host keeps B >= pairs, so a
// run touches at most two pairs), whatever the pair count.
//   - Each warp takes a contiguous part of its block's run and crosses at most one pair boundary:
//     its accumulators of the first pair are set aside at the boundary (acc0), the loop itself is
//     `_t2`'s (two tiles a warp, one activation load feeding both, double-buffered).
//   - A block adds its warps' partials in warp order. A pair wholly inside one run is stored at
//     once. A split pair's partials go to the workspace (`ws`: [m-tiles][B][2 slots][E] floats,
//     slot 0 = the run's first pair, 1 = its second); the block then counts itself on the pair's
//     counter (`cnt`: [m-tiles][pairs] u32, zero before the first launch), and the last of the
//     pair's contributors adds all their partials in block order and stores the outputs, and
//     zeroes the counter for the next launch. No block waits on another (no spin, no residency
//     assumption); the sums' order depends only on B, so results are deterministic.
// The workspace and counters are touched only after the PDL wait, so back-to-back launches (PDL
// included) never share them in flight.
// Names: mx_matmul_frag_m<8 MT>_bf16_w<W>_sk<MINB>_f<FIX>; grid (B, ceil(M / (8 MT))), 32 W lanes.
// FIX 1: the fix-up above; bench-only probes of its cost: 2 none (split pairs' outputs not
// stored: wrong results), 3 relaxed counts (no release / acquire: not guaranteed correct).
// FIX 4 (run in session 32, call 1: outputs with NaN on split grids, changing between launches —
// a bug not found — and 12.68 us at 6144^2 against the runtime's 12.31; dropped for follow-up 36's
// mixed grid, mx_matmul_frag.hip `_t2h`): no counters. Each pair is finalized by the block
// holding its last item, which works on that part last, while every block works first on the
// part it contributes to another block's pair and stores it per warp at once; the finalizer
// reads those slots ([m-tiles][B][W][E], filled with MX_SK_SENTINEL before the first launch)
// until none holds the sentinel, in (block, warp) order after its own warps' sums, and puts the
// sentinel back. It waits only for lower-numbered blocks, which the hardware dispatches first
// (all B <= 2 x SMs blocks are resident). Host model of both partitions: sk_partition_model.py.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)

// FIX 4's empty workspace slot: a NaN payload no arithmetic gives (NVIDIA's FADD / FFMA / MMA
// return the canonical 0x7fffffff for NaN).
#define MX_SK_SENTINEL 0x7fbad00du

template <int W, int MT, int FIX, int CL, class Out>
MX_DEV void mx_matmul_frag_sk(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                              const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                              const Out& out, int M, int N, int K, int pre, float* __restrict__ ws,
                              unsigned* __restrict__ cnt, int P) {
  constexpr int NT = 2, E = NT * MT * 4 * 32;  // accumulator elements of a warp
  constexpr int EPT = E / (32 * W);             // of them a lane adds in the block's sums
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int KB = K >> 5, G = K >> 7, tiles = (N + 15) / 16, pairs = (tiles + 1) / 2;
  const int mtile = blockIdx.y, m0 = 8 * MT * mtile;
  // The blocks sharing a run of pairs: the whole grid (CL = 0), or a cluster of CL blocks on P
  // pairs (pairs pbase .. pbase + P - 1; the host keeps P <= CL). B of them, this one blk.
  const int B = CL ? CL : gridDim.x, blk = CL ? blockIdx.x % CL : blockIdx.x;
  const int pbase = CL ? blockIdx.x / CL * P : 0, np = CL ? min(P, pairs - pbase) : pairs;
  // Runs of q or q + 1 items (the first r runs one more), in 32-bit arithmetic: a 64-bit
  // division is a long software routine, and these come before the first weight load.
  const int T = np * G, q = T / B, r = T - q * B;
  auto run_begin = [&](int b) { return b * q + min(b, r); };
  // The block whose run holds item i.
  auto block_of = [&](int i) { return i < r * (q + 1) ? i / (q + 1) : r + (i - r * (q + 1)) / q; };
  const int b0 = run_begin(blk), b1 = b0 + q + (blk < r ? 1 : 0);
  const int p0 = b0 / G, bnd = (p0 + 1) * G;  // items >= bnd belong to the run's second pair
  // A warp's items: n1 from x0 on, then n2 from y0 on; between them the accumulators are cut
  // (`cut`). FIX != 4: the warp's contiguous part [gb, ge) of the run, cut at the pair boundary.
  // FIX 4: the run's part it contributes to another block's pair first (its second pair's head
  // where the run holds its first pair's end, else the whole run), then the part of the pair it
  // finalizes (afin: the first pair, whose last item the run holds), each split over the warps.
  const bool afin = b1 >= bnd;
  int x0, n1, y0, n2;
  if (FIX == 4) {
    const int cb = afin ? bnd : b0, fe = afin ? bnd : b0;
    const int pc = (b1 - cb + W - 1) / W, pf = (fe - b0 + W - 1) / W;
    x0 = min(b1, cb + warp * pc);
    n1 = min(b1, x0 + pc) - x0;
    y0 = min(fe, b0 + warp * pf);
    n2 = min(fe, y0 + pf) - y0;
  } else {
    const int per = (b1 - b0 + W - 1) / W;
    const int gb = min(b1, b0 + warp * per), ge = min(b1, gb + per);
    x0 = gb;
    n1 = max(0, min(ge, bnd) - gb);
    y0 = max(gb, bnd);
    n2 = ge - gb - n1;
  }
  const int gb = 0, ge = n1 + n2;  // the loop's index range

  // Load cursors (`_t2`'s MxFragWeights and activation pointers), placed on item (p, grp).
  const uint4 *wp0, *wp1;
  const mx_u32 *sw0, *sw1;
  const mx_u8* ap[MT];
  const mx_u32 *sp0[MT], *sp1[MT];
  auto seek = [&](int p, int grp) {
    // The second tile past the last tile: the first's weights again (outputs not stored).
    const long long t0 = 2 * (pbase + p), t1 = t0 + 1 < tiles ? t0 + 1 : t0;
    wp0 = wf + t0 * KB * 32 + lane + 128 * grp;
    wp1 = wf + t1 * KB * 32 + lane + 128 * grp;
    sw0 = wsf + t0 * G * 16 + 16 * grp + g;
    sw1 = wsf + t1 * G * 16 + 16 * grp + g;
    // Rows past M read row M - 1: they only reach outputs past M, which are not stored.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      ap[mt] = aq + (long long)min(m0 + 8 * mt + g, M - 1) * K + 8 * t + 128 * grp;
      sp0[mt] = reinterpret_cast<const mx_u32*>(as + (long long)min(m0 + 8 * mt + 2 * t, M - 1) * KB) + grp;
      sp1[mt] = reinterpret_cast<const mx_u32*>(as + (long long)min(m0 + 8 * mt + 2 * t + 1, M - 1) * KB) + grp;
    }
  };
  if (n1 > 0) {
    seek(x0 / G, x0 % G);
  } else {
    seek(y0 / G, y0 % G);
  }
  struct Batch {
    uint4 w[NT][4];
    mx_u32 sA[NT], sB[NT];
    uint2 a[MT][4];
    mx_u32 s0[MT], s1[MT];
  };
  int li = 0;  // the next item to load (load_w then load_a of the same item)
  auto load_w = [&](Batch& bt) {
    if (li == n1 && n1 > 0) seek(y0 / G, y0 % G);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      bt.w[0][j] = mx_ldg_once16(wp0 + 32 * j);
      bt.w[1][j] = mx_ldg_once16(wp1 + 32 * j);
    }
    bt.sA[0] = sw0[0];
    bt.sB[0] = sw0[8];
    bt.sA[1] = sw1[0];
    bt.sB[1] = sw1[8];
    wp0 += 128;
    wp1 += 128;
    sw0 += 16;
    sw1 += 16;
  };
  auto load_a = [&](Batch& bt) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int j = 0; j < 4; ++j) bt.a[mt][j] = *reinterpret_cast<const uint2*>(ap[mt] + 32 * j);
      bt.s0[mt] = *sp0[mt];
      bt.s1[mt] = *sp1[mt];
      ap[mt] += 128;
      sp0[mt] += 1;
      sp1[mt] += 1;
    }
    ++li;
  };
  float acc0[NT][MT][4], acc[NT][MT][4];  // the first pair's sums (once set aside), the current
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc0[nt][mt][c] = acc[nt][mt][c] = 0.0f;
  auto set_aside = [&] {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          acc0[nt][mt][c] = acc[nt][mt][c];
          acc[nt][mt][c] = 0.0f;
        }
  };
  // FIX 4: a contributing block's warps each store their sums of the contributed part to their
  // workspace slot at once (no barrier, no count); the slot holds the sentinel until then.
  const bool pub = FIX == 4 && b1 > (afin ? bnd : b0);
  bool cut_done = false;
  auto cut = [&] {
    cut_done = true;
    if (FIX != 4) return set_aside();
    if (!pub) return;
    float* slot_w = ws + (long long)((mtile * B + blk) * W + warp) * E;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          __stcg(slot_w + ((nt * MT + mt) * 4 + c) * 32 + lane, acc[nt][mt][c]);
          acc[nt][mt][c] = 0.0f;
        }
  };
  int mi = 0;  // the next item to multiply
  auto mma = [&](const Batch& bt) {
    if (mi == n1 && !cut_done) cut();
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      mx_frag_mma<MT, true>(acc[nt], bt.w[nt], bt.a, bt.sA[nt], bt.sB[nt], bt.s0, bt.s1);
    ++mi;
  };
  Batch bA, bB;
  mx_frag_prologue<MT, 1, NT>(pre, wf, wsf, K, gb, ge, [&] { load_w(bA); });
  if (gb < ge) load_a(bA);
  for (int i = gb; i < ge; i += 2) {
    if (i + 1 < ge) {
      load_w(bB);
      load_a(bB);
    }
    mma(bA);
    if (i + 1 == ge) break;
    if (i + 2 < ge) {
      load_w(bA);
      load_a(bA);
    }
    mma(bB);
  }
  if (!cut_done) cut();  // the warp's items all lie in its first range (or it has none)

  auto store = [&](int p, int e, float v) {
    // e = ((nt MT + mt) 4 + c) 32 + lane: d0/d1 column 32 p + 16 nt + g, rows 2t / 2t + 1 of
    // row tile mt; d2/d3 column + 8.
    const int mt = (e >> 7) % MT, c = (e >> 5) & 3, ln = e & 31;
    const int n = 32 * (pbase + p) + 16 * (e / (128 * MT)) + (ln >> 2) + (c >= 2 ? 8 : 0);
    const int m = m0 + 8 * mt + 2 * (ln & 3) + (c & 1);
    if (m < M) out.put(m, n, v);
  };
  __shared__ float part[W][2][E];
  // This warp's accumulators a into part[warp][s]; the block's sum of part[.][s][e] in warp order
  // (a warp with no item of that pair adds exact zeros).
  auto to_part = [&](int s, const float (*a)[MT][4]) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int c = 0; c < 4; ++c) part[warp][s][((nt * MT + mt) * 4 + c) * 32 + lane] = a[nt][mt][c];
  };
  auto warp_sum = [&](int s, int e) {
    float v = part[0][s][e];
#pragma unroll
    for (int w = 1; w < W; ++w) v += part[w][s][e];
    return v;
  };
  // The run's part in its pair p0 + s: items [first, second).
  auto seg = [&](int s) { return s == 0 ? make_int2(b0, min(b1, bnd)) : make_int2(bnd, b1); };
  if (FIX == 4) {
    if (!afin) return;  // a contributor only: its warps have stored their sums
    // The finalized pair p0: this block's warps' sums in warp order, then each earlier
    // contributor's warps' sums in (block, warp) order, read as soon as they are not the
    // sentinel (each element is stored once, so no ordering beyond its own arrival is needed),
    // then the slots are given the sentinel back for the next launch.
    to_part(0, acc);
    __syncthreads();
    const int bf = block_of(p0 * G);
    float v[EPT];
#pragma unroll
    for (int k = 0; k < EPT; ++k) v[k] = warp_sum(0, tid + 32 * W * k);
    for (int b = bf; b < blk; ++b) {
      float* sb = ws + (long long)(mtile * B + b) * W * E;
      float x[W][EPT];
#pragma unroll
      for (int w = 0; w < W; ++w)
#pragma unroll
        for (int k = 0; k < EPT; ++k) x[w][k] = __ldcv(sb + w * E + tid + 32 * W * k);
#pragma unroll
      for (int w = 0; w < W; ++w)
#pragma unroll
        for (int k = 0; k < EPT; ++k) {
          float* a = sb + w * E + tid + 32 * W * k;
          while (__float_as_uint(x[w][k]) == MX_SK_SENTINEL) x[w][k] = __ldcv(a);
          v[k] += x[w][k];
          __stcg(a, __uint_as_float(MX_SK_SENTINEL));
        }
    }
#pragma unroll
    for (int k = 0; k < EPT; ++k) store(p0, tid + 32 * W * k, v[k]);
    return;
  }
  // The block's partial of each of its (at most two) pairs.
  __shared__ int last[2];
  static_assert(W >= 2, "the two pair counts are taken by warps 0 and 1");
  to_part(0, acc0);
  to_part(1, acc);
  __syncthreads();
  if (CL) {
    // The cluster's pairs: each block's sums of its (at most two) pairs in its shared memory,
    // then the block holding a pair's last item adds the pair's contributors in rank order
    // through distributed shared memory and stores it. No global memory, no counters.
    __shared__ float red[2][E];
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int k = 0; k < EPT; ++k) red[s][tid + 32 * W * k] = warp_sum(s, tid + 32 * W * k);
    mx_cluster_sync();  // every block's red[] written and visible cluster-wide
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int sb = seg(s).x, se = seg(s).y, p = p0 + s;
      if (sb >= se || se != (p + 1) * G) continue;  // not this pair's last block
      const int bf = block_of(p * G);
#pragma unroll
      for (int k = 0; k < EPT; ++k) {
        const int e = tid + 32 * W * k;
        // Block b's sums of pair p: slot 0 when its run begins in p (all but the first).
        float v = mx_dsmem_load(&red[run_begin(bf) >= p * G ? 0 : 1][e], (mx_u32)bf);
        for (int b = bf + 1; b < blk; ++b) v += mx_dsmem_load(&red[0][e], (mx_u32)b);
        if (bf < blk) v += red[s][e];
        store(p, e, v);
      }
    }
    mx_cluster_sync();  // the other blocks' shared memory stays alive until read
    return;
  }
  // Block b's partial of pair p: slot 0 when its run begins in p, else 1 (only the pair's first
  // contributor can begin before it).
  auto slot = [&](int b, int p) { return ws + ((mtile * B + b) * 2 + (run_begin(b) >= p * G ? 0 : 1)) * E; };
  // The run's pairs p0 + s: present (sb < se), whole (stored at once) or split.
  int split[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const int sb = seg(s).x, se = seg(s).y, p = p0 + s;
    split[s] = sb < se && !(sb == p * G && se == (p + 1) * G);
    if (sb >= se) continue;  // uniform over the block
    float* mine = slot(blk, p);
#pragma unroll
    for (int k = 0; k < EPT; ++k) {
      const int e = tid + 32 * W * k;
      const float v = warp_sum(s, e);
      if (split[s]) {
        __stcg(mine + e, v);
      } else {
        store(p, e, v);
      }
    }
  }
  if (FIX == 2 || !(split[0] | split[1])) return;
  // Publish the split partials and count them, both pairs at once (lane 0 of warps 0 and 1): the
  // barrier orders the block's stores before each count's release (cumulative), whose acquire
  // half lets the pair's last contributor read every other partial (each released before its
  // block counted). Why at once: a count's release waits for the block's stores to reach L2, about
  // a microsecond under the weight stream (follow-up 35), and one after the other doubled that.
  __syncthreads();
  if (lane == 0 && warp < 2 && split[warp]) {
    unsigned* c = cnt + mtile * pairs + p0 + warp;
    const int p = p0 + warp, bf = block_of(p * G), bl = block_of(p * G + G - 1);
    unsigned old;
    if (FIX == 3)  // bench only: no ordering (measures what the release / acquire cost)
      asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(c) : "memory");
    else
      asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(c) : "memory");
    last[warp] = old == (unsigned)(bl - bf);
    if (last[warp]) *c = 0;  // for the next launch (which reads it only after its PDL wait)
  }
  __syncthreads();
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    if (!split[s] || !last[s]) continue;
    const int p = p0 + s, bf = block_of(p * G), bl = block_of(p * G + G - 1);
    float v[EPT];
    const float* first = slot(bf, p);
#pragma unroll
    for (int k = 0; k < EPT; ++k) v[k] = __ldcg(first + tid + 32 * W * k);
    for (int b = bf + 1; b <= bl; ++b) {
      const float* o = ws + (mtile * B + b) * 2 * E;  // slot 0: its run begins in p
#pragma unroll
      for (int k = 0; k < EPT; ++k) v[k] += __ldcg(o + tid + 32 * W * k);
    }
#pragma unroll
    for (int k = 0; k < EPT; ++k) store(p, tid + 32 * W * k, v[k]);
  }
}

#define MX_SK(ROWS, MT, W, MINB, FIX)                                                            \
  extern "C" __global__ void __launch_bounds__(32 * W, MINB)                                     \
      mx_matmul_frag_m##ROWS##_bf16_w##W##_sk##MINB##_f##FIX(MX_FRAG_ARGS(MxBf16), float* ws,    \
                                                             unsigned* cnt, int P) {             \
    mx_matmul_frag_sk<W, MT, FIX, 0>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre, ws, cnt, P); \
  }
// The cluster form: mx_matmul_frag_m8_bf16_w<W>_sk<MINB>_c<CL>, clusters of CL blocks on P pairs.
#define MX_SKC(W, MINB, CL)                                                                      \
  extern "C" __global__ void __launch_bounds__(32 * W, MINB) __cluster_dims__(CL, 1, 1)         \
      mx_matmul_frag_m8_bf16_w##W##_sk##MINB##_c##CL(MX_FRAG_ARGS(MxBf16), float* ws,            \
                                                     unsigned* cnt, int P) {                     \
    mx_matmul_frag_sk<W, 1, 1, CL>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre, ws, cnt, P); \
  }
MX_SK(8, 1, 4, 2, 1)
MX_SK(8, 1, 4, 2, 2)
MX_SK(8, 1, 4, 2, 3)
MX_SK(8, 1, 4, 2, 4)
MX_SK(8, 1, 8, 1, 1)
MX_SKC(4, 2, 2)
MX_SKC(4, 2, 3)
MX_SKC(4, 2, 4)
MX_SKC(4, 2, 5)
MX_SKC(4, 2, 8)
#endif
