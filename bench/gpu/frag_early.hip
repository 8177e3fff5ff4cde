// Issue 6 follow-up 28 (bench only, appended to the GEMM module's text by ab_early.py): the
// early-refill loop (mx_matmul_frag.hip mx_matmul_frag_early) as `_t2e` / `_t2f` (8 rows, two tiles, the
// `_t2` launch bounds) and `_fse` / `_fsf` (16 rows, one tile, `_fs`'s 168-register cap) and
// `_fseu` / `_fsfu` (uncapped), at the (W, S) the runtime takes on the decode shapes.
#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)
#define MX_E_T2_1(W, S, ATTR, SFX, EAS)                                                          \
  extern "C" __global__ void __launch_bounds__(32 * W, 1)                                        \
      ATTR mx_matmul_frag_m8_bf16_w##W##_s##S##SFX(const mx_u8* aq, const mx_u8* as,             \
                                                    const uint4* wf, const mx_u32* wsf,          \
                                                    MxBf16::storage* y, int M, int N, int K,     \
                                                    int pre, MxEpi ep) {                         \
    mx_matmul_frag_early<W, 1, S, 2, EAS>(aq, as, wf, wsf, y, M, N, K, pre, ep);                 \
  }
#define MX_E_FS_1(W, S, ATTR, SFX, MINB, EAS)                                                    \
  extern "C" __global__ void __launch_bounds__(32 * W, MINB)                                     \
      ATTR mx_matmul_frag_m16_bf16_w##W##_s##S##SFX(                                             \
          const mx_u8* aq, const mx_u8* as, const uint4* wf, const mx_u32* wsf,                  \
          MxBf16::storage* y, int M, int N, int K, int pre, MxEpi ep) {                          \
    mx_matmul_frag_early<W, 2, S, 1, EAS>(aq, as, wf, wsf, y, M, N, K, pre, ep);                 \
  }
// e: scale words and activations refilled first; f: only the weights early (k-block by k-block),
// the scale words and activations after the group's last mma (as `_t2` / `_fs`).
#define MX_E_ALL(SFX, EAS)                                        \
  MX_E_T2_1(2, 1, , _t2##SFX, EAS)                                \
  MX_E_T2_1(4, 1, , _t2##SFX, EAS)                                \
  MX_E_T2_1(8, 1, , _t2##SFX, EAS)                                \
  MX_E_T2_1(4, 2, __cluster_dims__(2, 1, 1), _t2##SFX, EAS)       \
  MX_E_T2_1(8, 2, __cluster_dims__(2, 1, 1), _t2##SFX, EAS)       \
  MX_E_T2_1(8, 4, __cluster_dims__(4, 1, 1), _t2##SFX, EAS)       \
  MX_E_FS_1(2, 1, , _fs##SFX, 6, EAS)                             \
  MX_E_FS_1(4, 1, , _fs##SFX, 3, EAS)                             \
  MX_E_FS_1(8, 1, , _fs##SFX, 1, EAS)                             \
  MX_E_FS_1(4, 2, __cluster_dims__(2, 1, 1), _fs##SFX, 3, EAS)    \
  MX_E_FS_1(2, 1, , _fs##SFX##u, 1, EAS)                          \
  MX_E_FS_1(4, 1, , _fs##SFX##u, 1, EAS)                          \
  MX_E_FS_1(8, 1, , _fs##SFX##u, 1, EAS)
MX_E_ALL(e, true)
MX_E_ALL(f, false)
#endif
