// Bench only (issue 6 follow-up 47; appended to the GEMM module's text by ab_g1.py, AB_G1K=1): `_g1`
// (one group of 4 k-blocks a warp on two neighbouring tiles, every weight byte requested before
// the PDL wait) at large K by splitting K over a cluster of S blocks of W warps (W S = K / 128),
// reduced through distributed shared memory as `_t2`'s cluster splits are. Why: at 1536 x 6144 the
// runtime's `_t2` w8 s2 has 96 blocks on 132 SMs and takes 4.8 us at M = 1, where a read-only
// kernel under PDL takes 4.0 (follow-up 45); here 48 pairs x 8 blocks of 6 warps (97 registers:
// 3 blocks an SM) fill every SM in one wave. Per tile the m8 kernel's arithmetic at W S warps.
#define MX_DEFINE_FRAG_G1K(W, S)                                                                 \
  extern "C" __global__ void __launch_bounds__(32 * W) __cluster_dims__(S, 1, 1)                \
      MX_FRAG(m8_bf16_w##W##_s##S##_g1k)(MX_FRAG_ARGS(MxBf16)) {                                 \
    mx_matmul_frag_g1<MxBf16, W, 1, 2, false, false, S>(aq, as, wf, wsf, MX_FRAG_OUT(MxBf16), M, N, K, pre); \
  }
MX_DEFINE_FRAG_G1K(6, 8)  // K = 6144 (W S = 48)
MX_DEFINE_FRAG_G1K(4, 8)  // K = 4096 (W S = 32)
MX_DEFINE_FRAG_G1K(8, 4)  // K = 4096
