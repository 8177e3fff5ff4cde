// Issue 6 follow-up 25 (bench-only): the decode GEMM's activation fragments by 16-byte loads and
// one exchange between neighbouring lanes, instead of four 8-byte loads a row and group.
// Why: in `_fs` / `_t2` lane (g, t) loads bytes 8t .. 8t + 7 of each k-block j of activation row g
// (LDG.64): one instruction touches 8 rows, i.e. 8 L1 wavefronts for 256 bytes, ~64 wavefronts a
// group of a warp at 16 rows against ~16 for its weights, and the M = 1 -> 16 step of 6144 x 768
// (+0.36 us) matches that count. Here lane t of a quad loads two 16-byte chunks of its row's
// 128-byte group (kb 2k + (t & 1), half t >> 1, k = 0, 1: 8 rows x 64 bytes an instruction, half
// the wavefronts a byte) and hands the half its neighbour t ^ 1 needs over with one 32-bit
// shuffle a word: even lanes keep .xy of kb 0 / 2 and get .xy of kb 1 / 3, odd lanes keep .zw of
// kb 1 / 3 and get .zw of kb 0 / 2 — exactly the uint2 fragments `_fs` loads, so the mma inputs
// and the bits are `_fs`'s / `_t2`'s at the same (W, S). The exchange runs when a batch is
// consumed (the loads stay a double buffer ahead). Appended to the GEMM module's text by
// bench/gpu/ab_fsx.py; the runtime never compiles it.

// Lane t's chunk pointer into its row's group (from MxFragWarp's ap = row + 8 t).
MX_DEV const mx_u8* mx_fsx_ptr(const mx_u8* ap, int t) {
  return ap - 8 * t + 32 * (t & 1) + 16 * (t >> 1);
}

MX_DEV void mx_fsx_load(uint4 x[2], const mx_u8* p) {
  x[0] = *reinterpret_cast<const uint4*>(p);
  x[1] = *reinterpret_cast<const uint4*>(p + 64);
}

// x = the two chunks mx_fsx_load read; a[j] = bytes 8t .. 8t + 7 of k-block j (as `_fs` loads).
MX_DEV void mx_fsx_exchange(uint2 a[4], const uint4 x[2], bool odd) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const mx_u32 s0 = odd ? x[k].x : x[k].z, s1 = odd ? x[k].y : x[k].w;
    const mx_u32 r0 = MX_SHFL_XOR(s0, 1), r1 = MX_SHFL_XOR(s1, 1);
    a[2 * k] = odd ? make_uint2(r0, r1) : make_uint2(x[k].x, x[k].y);
    a[2 * k + 1] = odd ? make_uint2(x[k].z, x[k].w) : make_uint2(r0, r1);
  }
}

// `_fs` (16 rows) with the exchange.
template <int W, int S>
MX_DEV void mx_matmul_frag_m16_fsx(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                                   const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                                   MxBf16::storage* __restrict__ y, int M, int N, int K, int pre,
                                   const MxEpi& ep) {
  constexpr int MT = 2;
  const MxFragWarp<W, MT, S> f(aq, as, wf, wsf, M, K);
  const int gb = f.gb, ge = f.ge, t = threadIdx.x & 3;
  const bool odd = t & 1;
  MxFragWeights wts(f);
  const mx_u8* ap[MT];
  const mx_u32 *sp0[MT], *sp1[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    ap[mt] = mx_fsx_ptr(f.ap[mt], t) + 128 * gb;
    sp0[mt] = f.sp0[mt] + gb;
    sp1[mt] = f.sp1[mt] + gb;
  }
  struct Batch {
    uint4 w[4];
    mx_u32 sA, sB;
    uint4 x[MT][2];
    mx_u32 s0[MT], s1[MT];
  };
  auto load_w = [&](Batch& bt) { wts.next(bt.w, bt.sA, bt.sB); };
  auto load_a = [&](Batch& bt) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      mx_fsx_load(bt.x[mt], ap[mt]);
      bt.s0[mt] = *sp0[mt];
      bt.s1[mt] = *sp1[mt];
      ap[mt] += 128;
      sp0[mt] += 1;
      sp1[mt] += 1;
    }
  };
  float acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[mt][c] = 0.0f;
  auto mma = [&](const Batch& bt) {
    uint2 a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) mx_fsx_exchange(a[mt], bt.x[mt], odd);
    mx_frag_mma<MT, true>(acc, bt.w, a, bt.sA, bt.sB, bt.s0, bt.s1);
  };
  Batch b0, b1;
  mx_frag_prologue<MT, S>(pre, wf, wsf, K, gb, ge, [&] { load_w(b0); });
  if (gb < ge) load_a(b0);
  for (int i = gb; i < ge; i += 2) {
    if (i + 1 < ge) {
      load_w(b1);
      load_a(b1);
    }
    mma(b0);
    if (i + 1 == ge) break;
    if (i + 2 < ge) {
      load_w(b0);
      load_a(b0);
    }
    mma(b1);
  }
  mx_frag_reduce_store<MxBf16, W, MT, S>(&acc, y, M, N, ep);
}

// `_t2` (8 rows, two tiles) with the exchange.
template <int W, int S>
MX_DEV void mx_matmul_frag_t2x(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                               const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                               MxBf16::storage* __restrict__ y, int M, int N, int K, int pre,
                               const MxEpi& ep) {
  constexpr int NT = 2, MT = 1;
  const MxFragWarp<W, MT, S, NT> f(aq, as, wf, wsf, M, K);
  const int gb = f.gb, ge = f.ge, t = threadIdx.x & 3;
  const bool odd = t & 1;
  MxFragWeights wts0(f), wts1(f);
  if (MxFragBlock<MT, S, NT>().tile + 1 < (N + 15) / 16) {
    wts1.wp += (long long)(K >> 5) * 32;
    wts1.swp += (long long)(K >> 7) * 16;
  }
  const mx_u8* ap = mx_fsx_ptr(f.ap[0], t) + 128 * gb;
  const mx_u32 *sp0 = f.sp0[0] + gb, *sp1 = f.sp1[0] + gb;
  struct Batch {
    uint4 w[NT][4];
    mx_u32 sA[NT], sB[NT];
    uint4 x[2];
    mx_u32 s0[MT], s1[MT];
  };
  auto load_w = [&](Batch& bt) {
    wts0.next(bt.w[0], bt.sA[0], bt.sB[0]);
    wts1.next(bt.w[1], bt.sA[1], bt.sB[1]);
  };
  auto load_a = [&](Batch& bt) {
    mx_fsx_load(bt.x, ap);
    bt.s0[0] = *sp0;
    bt.s1[0] = *sp1;
    ap += 128;
    sp0 += 1;
    sp1 += 1;
  };
  float acc[NT][MT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[nt][0][c] = 0.0f;
  auto mma = [&](const Batch& bt) {
    uint2 a[MT][4];
    mx_fsx_exchange(a[0], bt.x, odd);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      mx_frag_mma<MT, true>(acc[nt], bt.w[nt], a, bt.sA[nt], bt.sB[nt], bt.s0, bt.s1);
  };
  Batch b0, b1;
  mx_frag_prologue<MT, S, NT>(pre, wf, wsf, K, gb, ge, [&] { load_w(b0); });
  if (gb < ge) load_a(b0);
  for (int i = gb; i < ge; i += 2) {
    if (i + 1 < ge) {
      load_w(b1);
      load_a(b1);
    }
    mma(b0);
    if (i + 1 == ge) break;
    if (i + 2 < ge) {
      load_w(b0);
      load_a(b0);
    }
    mma(b1);
  }
  mx_frag_reduce_store<MxBf16, W, MT, S, NT>(acc, y, M, N, ep);
}

#define MX_FSX1(W, S, ATTR)                                                                      \
  extern "C" __global__ void __launch_bounds__(32 * W, (W < 8 ? 12 / W : 1))                    \
      ATTR mx_matmul_frag_m16_bf16_w##W##_s##S##_fsx(                                            \
          const mx_u8* aq, const mx_u8* as, const uint4* wf, const mx_u32* wsf,                  \
          MxBf16::storage* y, int M, int N, int K, int pre, MxEpi ep) {                          \
    mx_matmul_frag_m16_fsx<W, S>(aq, as, wf, wsf, y, M, N, K, pre, ep);                          \
  }
// Uncapped (`_fsxu`): the exchange's temporaries may want more than `_fs`'s 168.
#define MX_FSXU1(W, S, ATTR)                                                                     \
  extern "C" __global__ void __launch_bounds__(32 * W, 1)                                        \
      ATTR mx_matmul_frag_m16_bf16_w##W##_s##S##_fsxu(                                           \
          const mx_u8* aq, const mx_u8* as, const uint4* wf, const mx_u32* wsf,                  \
          MxBf16::storage* y, int M, int N, int K, int pre, MxEpi ep) {                          \
    mx_matmul_frag_m16_fsx<W, S>(aq, as, wf, wsf, y, M, N, K, pre, ep);                          \
  }
#define MX_T2X1(W, S, ATTR)                                                                      \
  extern "C" __global__ void __launch_bounds__(32 * W, 1)                                        \
      ATTR mx_matmul_frag_m8_bf16_w##W##_s##S##_t2x(const mx_u8* aq, const mx_u8* as,            \
                                                     const uint4* wf, const mx_u32* wsf,         \
                                                     MxBf16::storage* y, int M, int N, int K,    \
                                                     int pre, MxEpi ep) {                        \
    mx_matmul_frag_t2x<W, S>(aq, as, wf, wsf, y, M, N, K, pre, ep);                              \
  }
MX_FSX1(2, 1, )
MX_FSX1(4, 1, )
MX_FSX1(8, 1, )
MX_FSX1(4, 2, __cluster_dims__(2, 1, 1))
MX_FSX1(8, 2, __cluster_dims__(2, 1, 1))
MX_FSXU1(2, 1, )
MX_FSXU1(4, 1, )
MX_FSXU1(8, 1, )
MX_T2X1(2, 1, )
MX_T2X1(4, 1, )
MX_T2X1(8, 1, )
MX_T2X1(8, 2, __cluster_dims__(2, 1, 1))
MX_T2X1(4, 2, __cluster_dims__(2, 1, 1))
