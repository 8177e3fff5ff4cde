// Issue 6 follow-up 38, bench only (appended to the GEMM module's text by ab_g1.py with
// AB_G1C=1): `_g1` with the weights converted to their f16 mma fragments before the PDL wait
// (mx_matmul_frag.hip mx_matmul_frag_g1, PC = true) on two tiles a warp, the forms the runtime
// does not take: 8 rows (against its `_g1`) and 16 rows (against its one-tile `_g1c`). Measured in
// session 33 (BENCHMARKS.md follow-up 38): at 8 rows faster where the tile pairs reach two an SM
// (6144 x 768 M = 8 2.39 against 2.53 us) and slower on fewer tiles (4096 x 1024 M = 8 2.65
// against 2.43); at 16 rows (166 registers) 2.97 against the one-tile form's 3.12 at M = 12 but
// 3.48 against 3.22 at M = 16. (Session 33's first calls ran this file's earlier text: its own
// copy of the converts and the mmas, the same arithmetic; the runtime's template replaced it.)
// Names: mx_matmul_frag_m<8 MT>_bf16_w<W>_s1_g1c2.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
#define MX_G1C2(ROWS, MT, W)                                                                     \
  extern "C" __global__ void __launch_bounds__(32 * W)                                           \
      mx_matmul_frag_m##ROWS##_bf16_w##W##_s1_g1c2(MX_FRAG_ARGS(MxBf16)) {                       \
    mx_matmul_frag_g1<MxBf16, W, MT, 2, true>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre); \
  }
#define MX_G1C2_W(W)                                                                             \
  MX_G1C2(8, 1, W)                                                                               \
  MX_G1C2(16, 2, W)
MX_G1C2_W(3)
MX_G1C2_W(4)
MX_G1C2_W(5)
MX_G1C2_W(6)
MX_G1C2_W(7)
MX_G1C2_W(8)
#endif
