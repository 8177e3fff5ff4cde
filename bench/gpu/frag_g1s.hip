// Issue 6 follow-up 39, bench only (appended to the GEMM module's text by ab_g1.py with
// AB_G1S=1): the runtime's `_g1c` (16 rows, one group a warp on one tile, weights converted before
// the PDL wait) with the block's 16 activation rows copied into shared memory by bulk copies
// (cp.async.bulk, one a row, completing on an mbarrier) after the wait, the mma fragments then
// read from there. Why: at 13-16 rows `_g1c`'s activation loads take 8 bytes of 8 distinct rows
// an instruction (8 L1 wavefronts each, 8 a warp), every warp of every block; 6144 x 768 M = 12
// (rows 12-15 read row 11) is 0.1 us faster than M = 16. A bulk copy reads each row once a block
// without the load pipeline, and the fragment reads from rows padded by 32 bytes are 2 wavefronts
// an instruction. Rows past M are not copied (their outputs are not stored). Needs a 16-byte
// aligned a and K <= 1024. Names: mx_matmul_frag_m16_bf16_w<W>_s1_g1s.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
MX_DEV void mx_bulk_g2s(void* smem, const void* gmem, mx_u32 bytes, mx_u64* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   (mx_u32)__cvta_generic_to_shared(smem)),
               "l"(gmem), "r"(bytes), "r"((mx_u32)__cvta_generic_to_shared(bar))
               : "memory");
}

template <int W, class Out>
MX_DEV void mx_matmul_frag_g1s(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                               const uint4* __restrict__ wf, const mx_u32* __restrict__ wsf,
                               const Out& out, int M, int N, int K, int pre) {
  constexpr int MT = 2, NT = 1;
  __shared__ __align__(16) mx_u8 sa[16 * (1024 + 32)];
  __shared__ __align__(8) mx_u64 bar;
  const int RS = K + 32;
  const MxFragWarp<W, MT, 1, NT> f(aq, as, wf, wsf, M, K);
  const int gb = f.gb, ge = f.ge, g = f.g, t = threadIdx.x & 3;
  const int m0 = MxFragBlock<MT, 1, NT>().m0, rows = min(16, M - m0);
  const MxFragWeights w0(f);
  if (threadIdx.x == 0) {
    mx_mbar_init_expect(&bar, rows * K);
    mx_fence_mbar_init();
  }
  __syncthreads();
  uint4 w[4];
  MxWFrag wc;
  mx_u32 sA = 0, sB = 0;
  float acc[NT][MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[0][mt][c] = 0.0f;
  if (!(pre & 1)) MX_PDL_WAIT();
  if (gb < ge) {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = mx_ldg_once16(w0.wp + 32 * j);
    sA = w0.swp[0];
    sB = w0.swp[8];
  }
  MX_PDL_LAUNCH();
  if (gb < ge) mx_frag_wfrag(w, wc);
  if (pre & 1) MX_PDL_WAIT();
  if ((int)threadIdx.x < rows) mx_bulk_g2s(sa + threadIdx.x * RS, aq + (long long)(m0 + threadIdx.x) * K, K, &bar);
  if (gb < ge) {
    mx_u32 s0[MT], s1[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      s0[mt] = f.sp0[mt][gb];
      s1[mt] = f.sp1[mt][gb];
    }
    mx_mbar_wait(&bar, 0);
    uint2 a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        a[mt][j] = *reinterpret_cast<const uint2*>(sa + (8 * mt + g) * RS + 128 * gb + 32 * j + 8 * t);
    uint4 bh[MT][4];
    mx_b_frag<MT, true>(a, bh);
    mx_mma_group4_wf<MT>(
        acc[0], [&](int u, mx_u32 x[8]) {
#pragma unroll
          for (int i = 0; i < 8; ++i) x[i] = wc.h[u][i];
        },
        bh, sA, sB, s0, s1);
  } else {
    mx_mbar_wait(&bar, 0);  // the copies land before the block's shared memory goes
  }
  mx_frag_reduce_to<MxBf16, W, MT, 1, NT>(acc, out, MxRowsBelow{M});
}
#define MX_G1S(W)                                                                                \
  extern "C" __global__ void __launch_bounds__(32 * W)                                           \
      mx_matmul_frag_m16_bf16_w##W##_s1_g1s(MX_FRAG_ARGS(MxBf16)) {                              \
    mx_matmul_frag_g1s<W>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre);                   \
  }
MX_G1S(3)
MX_G1S(4)
MX_G1S(5)
MX_G1S(6)
MX_G1S(7)
MX_G1S(8)
#endif
