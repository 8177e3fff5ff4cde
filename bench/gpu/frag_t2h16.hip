// Bench only (issue 6 follow-up 44; appended to the GEMM module's text by ab_het.py, AB_BENCH=16):
// `_t2h` on 16-row tiles. At 6144² and 9-16 rows the runtime runs `_fs` w4 s1 (384 one-tile blocks,
// three an SM), 12.9-13.3 us against `_t2h`'s 11.6-11.9 at 1-8 rows. Here the mixed grid of
// mx_matmul_frag_m8_bf16_w4_s1_t2h with MT = 2: the first np blocks `_t2` pairs, the rest one tile
// each with two K ranges a warp, every warp on 16 activation rows (the grid's x is ceil(M / 16)).
// Per tile the arithmetic of the m16 kernel: pair tiles its bits at W = 4 (so `_fs` w4's), single
// tiles at W = 8.
extern "C" __global__ void __launch_bounds__(128, 1) MX_FRAG(m16_bf16_w4_s1_t2h)(MX_FRAG_ARGS(MxBf16)) {
  const int np = (N + 15) / 16 - (int)gridDim.y;
  if ((int)blockIdx.y < np) {
    mx_matmul_frag_t2<4, 2, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre);
  } else {
    mx_matmul_frag_t1h<4, 2>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre, np);
  }
}
// `_t2hf`: the same pair blocks; a single tile is `_fs` w4 s1 (one K range a warp, m16's bits at
// W = 4, as the runtime's kernel at 6144²), on the tile np + blockIdx.y (weights and outputs shifted
// by np tiles), so the singles hold `_fs`'s registers instead of t1h's two 16-row sets.
extern "C" __global__ void __launch_bounds__(128, 1) MX_FRAG(m16_bf16_w4_s1_t2hf)(MX_FRAG_ARGS(MxBf16)) {
  const int np = (N + 15) / 16 - (int)gridDim.y;
  if ((int)blockIdx.y < np) {
    mx_matmul_frag_t2<4, 2, 1>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre);
  } else {
    const auto o = MX_FRAG_OUT(MxBf16);
    mx_matmul_frag_m16_fs<4, 1>(aq, as, wf + (long long)np * (K >> 5) * 32, wsf + (long long)np * (K >> 7) * 16,
                                MxShiftOut<decltype(o)>{o, 16 * np}, M, K, pre);
  }
}
