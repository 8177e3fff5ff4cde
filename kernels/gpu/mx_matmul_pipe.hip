// com.mxfuse MxMatMul, decode GEMM v3 (NVIDIA sm_90): e4m3 weights b [N, K] + b_scale [N, K/32],
// pre-quantized e4m3 activations a [M, K] + a_scale [M, K/32], K % 128 == 0, M <= 16 rows per
// block row.
//
// Why a third tensor-core kernel (the first, mx_matmul.hip, stays the fallback and serves in-GEMM
// quantization; the second, mx_matmul_splitk.hip, stays opt-in): both earlier kernels load weights
// straight into registers, so a warp has at most two groups of 4 k-blocks in flight and waits on
// DRAM between them, and every warp of a block re-reads the activations of its own K range.
// Here:
// * weights and activations stream through shared memory with cp.async (16-byte, fully coalesced:
//   8 consecutive lanes copy one 128-byte line of a row), STAGES groups of 4 k-blocks deep (the
//   most that fit in 46 KB: 8 / 8 / 4 at W = 1 / 2 / 4), so up to (STAGES - 1) x 2 KB of weights
//   per warp are in flight without costing registers;
// * the W warps of a block own W different 16-column tiles over the same K range, so one copy of
//   the activations (8 or 16 rows x 128 bytes a group) in shared memory serves all of them and no
//   cross-warp reduction is needed;
// * the fragments are read from shared memory in the layout of the first kernel (lane t holds
//   bytes 8t .. 8t + 7 of a k-block of rows g and g + 8) through an XOR swizzle of the 16-byte
//   chunks of each row (chunk q of row r sits at q ^ 2 (r & 3)), which makes both the cp.async
//   stores and the 8-byte fragment loads bank-conflict free;
// * e4m3 -> f16 conversion is explicit (cvt.rn.f16x2.e4m3x2, exact) and each k-block is two f16
//   m16n8k16 mmas (what ptxas makes of an e4m3 mma.sync on sm_90), so with 16 activation rows
//   each weight is converted once, not once per 8 rows; the fresh fp32 result of a k-block is
//   scaled by 2^(sw) * 2^(sa) and added to the accumulators, as in the first kernel;
// * K is split over the S blocks of a thread-block cluster (S = 1, 2, 4, 8; __cluster_dims__), and
//   block rank 0 adds the others' partial sums through distributed shared memory in rank order:
//   deterministic, no workspace, one launch.
// Grid: (ceil(N / (16 W)) * S, ceil(M / (8 MT))), block 32 W threads.

#if defined(MX_NV_FP8_MMA) && defined(MX_NV_CLUSTER)

// Static shared memory a block may use (the 48 KB limit, less a margin).
#define MX_PIPE_SMEM 47104

MX_DEV void mx_cp_async16(void* smem, const void* gmem, int src_bytes) {
  const mx_u32 s = (mx_u32)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes)
               : "memory");
}
MX_DEV void mx_cp_async4(void* smem, const void* gmem, int src_bytes) {
  const mx_u32 s = (mx_u32)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes)
               : "memory");
}
MX_DEV void mx_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
MX_DEV void mx_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Two e4m3 (low byte -> low half) to two f16, exact.
MX_DEV mx_u32 mx_e4m3x2_to_f16x2(mx_u32 v16) {
  mx_u32 r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"((unsigned short)v16));
  return r;
}

// The upper two e4m3 of v (byte 2 -> low half) to two f16, exact. HW: the cvt reads the
// register's high half (PTX mov.b32 {lo, hi}) instead of a shifted copy, which the `_fs` / `_fsa`
// loops (mx_matmul_frag.hip) use to drop a SHF per convert.
template <bool HW>
MX_DEV mx_u32 mx_e4m3x2_hi_to_f16x2(mx_u32 v) {
  if (!HW) return mx_e4m3x2_to_f16x2(v >> 16);
  mx_u32 r;
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, hi;\n}" : "=r"(r) : "r"(v));
  return r;
}

// D (16x8 fp32) = A (16x16 f16, row) * B (16x8 f16, col) + C.
MX_DEV void mx_mma_f16(float d[4], mx_u32 a0, mx_u32 a1, mx_u32 a2, mx_u32 a3, mx_u32 b0,
                       mx_u32 b1, const float c[4]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}

// Nonzero iff a byte of w is 0x00 or 0xff (the E8M0 codes 2^-127 and NaN).
MX_DEV mx_u32 mx_has_byte_00_or_ff(mx_u32 w) {
  const mx_u32 nw = ~w;
  return ((w - 0x01010101u) & nw & 0x80808080u) | ((nw - 0x01010101u) & w & 0x80808080u);
}

// The 4 scale bytes of a word as floats (byte u -> f[u]): the exponent field is the byte itself,
// which is mx_e8m0_to_f32 except for the codes 0 and 255 (the caller checks for those).
MX_DEV void mx_e8m0x4_fast(mx_u32 w, float f[4]) {
  f[0] = mx_bits_f32((w << 23) & 0x7f800000u);
  f[1] = mx_bits_f32((w << 15) & 0x7f800000u);
  f[2] = mx_bits_f32((w << 7) & 0x7f800000u);
  f[3] = mx_bits_f32((w >> 1) & 0x7f800000u);
}

// Byte offset of bytes 8t .. 8t + 7 of k-block u (0..3) of row r in a swizzled 128-byte row.
MX_DEV int mx_pipe_frag_off(int r, int u, int t) {
  return r * 128 + (((2 * u + (t >> 1)) ^ ((r & 3) << 1)) << 4) + ((t & 1) << 3);
}

// Lane t's weights of k-block u as the f16 A fragments of its two k16 mmas: a[0..3] are mma 0's
// a0-a3, a[4..7] mma 1's, from wa / wb = bytes 8t .. 8t + 7 of the k-block of weight rows g /
// g + 8 (k-slots of lane t: bytes 0-1 / 2-3 of .x for mma 0, of .y for mma 1).
template <bool HW = false>
MX_DEV void mx_w_frag(uint2 wa, uint2 wb, mx_u32 a[8]) {
  a[0] = mx_e4m3x2_to_f16x2(wa.x);
  a[1] = mx_e4m3x2_to_f16x2(wb.x);
  a[2] = mx_e4m3x2_hi_to_f16x2<HW>(wa.x);
  a[3] = mx_e4m3x2_hi_to_f16x2<HW>(wb.x);
  a[4] = mx_e4m3x2_to_f16x2(wa.y);
  a[5] = mx_e4m3x2_to_f16x2(wb.y);
  a[6] = mx_e4m3x2_hi_to_f16x2<HW>(wa.y);
  a[7] = mx_e4m3x2_hi_to_f16x2<HW>(wb.y);
}
// A lane's weights of one group, converted ahead (mx_w_frag of each k-block).
struct MxWFrag {
  mx_u32 h[4][8];
};

// Keeps v in a register where this is called: the empty asm "changes" v, so the compiler can
// neither sink its computation past a later point (the PDL wait) nor recompute it there.
MX_DEV void mx_pin(float& v) { asm volatile("" : "+f"(v)); }
MX_DEV void mx_pin(mx_u32& v) { asm volatile("" : "+r"(v)); }
template <class T>
MX_DEV void mx_pin(const T*& p) { asm volatile("" : "+l"(p)); }

// The E8M0 scale bytes of a lane's two weight rows of one group (swA / swB, k-block u = byte u)
// by the fast decode, and whether any is a code 0 or 255 (then mx_mma_group4_ws decodes exactly).
struct MxWScale {
  float fA[4], fB[4];
  mx_u32 bad;
  MX_DEV MxWScale() {}
  MX_DEV MxWScale(mx_u32 swA, mx_u32 swB) : bad(mx_has_byte_00_or_ff(swA) | mx_has_byte_00_or_ff(swB)) {
    mx_e8m0x4_fast(swA, fA);
    mx_e8m0x4_fast(swB, fB);
  }
};

// mx_mma_group4_wf with the weights' scales decoded ahead (ws = MxWScale(swA, swB)).
template <int MT, class WFrag>
MX_DEV void mx_mma_group4_ws(float acc[MT][4], const WFrag& wfrag, const uint4 bh[MT][4],
                             const MxWScale& ws, mx_u32 swA, mx_u32 swB, const mx_u32 s0[MT],
                             const mx_u32 s1[MT]) {
  float fA[4], fB[4], f0[MT][4], f1[MT][4];
  mx_u32 bad = ws.bad;
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    fA[u] = ws.fA[u];
    fB[u] = ws.fB[u];
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    bad |= mx_has_byte_00_or_ff(s0[mt]) | mx_has_byte_00_or_ff(s1[mt]);
    mx_e8m0x4_fast(s0[mt], f0[mt]);
    mx_e8m0x4_fast(s1[mt], f1[mt]);
  }
  if (bad) {  // a code 0 (2^-127) or 255 (NaN) in this group: the exact decode
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      fA[u] = mx_e8m0_to_f32((swA >> (8 * u)) & 0xffu);
      fB[u] = mx_e8m0_to_f32((swB >> (8 * u)) & 0xffu);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        f0[mt][u] = mx_e8m0_to_f32((s0[mt] >> (8 * u)) & 0xffu);
        f1[mt][u] = mx_e8m0_to_f32((s1[mt] >> (8 * u)) & 0xffu);
      }
    }
  }
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    mx_u32 a[8];
    wfrag(u, a);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      float d[4];
      mx_mma_f16(d, a[0], a[1], a[2], a[3], bh[mt][u].x, bh[mt][u].y, zero);
      mx_mma_f16(d, a[4], a[5], a[6], a[7], bh[mt][u].z, bh[mt][u].w, d);
      acc[mt][0] += d[0] * fA[u] * f0[mt][u];
      acc[mt][1] += d[1] * fA[u] * f1[mt][u];
      acc[mt][2] += d[2] * fB[u] * f0[mt][u];
      acc[mt][3] += d[3] * fB[u] * f1[mt][u];
    }
  }
}

// One group of 4 k-blocks of a warp's 16 weight rows into acc (the D fragments of MT 16x8 tiles):
// wfrag(u, a) gives k-block u's weight fragments (mx_w_frag: converted there, at the top of u's
// mmas, or read from an MxWFrag converted ahead); bh[mt][u] = the activation row 8 mt + g's bytes
// 8t .. 8t + 7 of k-block u as f16 (.x .y: mma 0's b0 b1; .z .w: mma 1's); swA / swB = the 4 E8M0
// scale bytes (k-block u = byte u) of weight rows g / g + 8, s0[mt] / s1[mt] those of activation
// rows 8 mt + 2t / 2t + 1. Within a k-block the 32 k positions are permuted identically for
// weights and activations (lane t's 8 bytes feed k-slots 2t, 2t+1, 2t+8, 2t+9 of the two k16
// mmas), which leaves the dot product unchanged. Each k-block's fresh fp32 result is scaled by
// 2^sw * 2^sa and added to acc.
template <int MT, class WFrag>
MX_DEV void mx_mma_group4_wf(float acc[MT][4], const WFrag& wfrag, const uint4 bh[MT][4], mx_u32 swA,
                             mx_u32 swB, const mx_u32 s0[MT], const mx_u32 s1[MT]) {
  mx_mma_group4_ws<MT>(acc, wfrag, bh, MxWScale(swA, swB), swA, swB, s0, s1);
}

// mx_mma_group4_wf on the e4m3 weights wa[u] / wb[u] (rows g / g + 8 of k-block u), converted at
// the top of each k-block's mmas.
template <int MT, bool HW = false>
MX_DEV void mx_mma_group4_h(float acc[MT][4], const uint2 wa[4], const uint2 wb[4],
                            const uint4 bh[MT][4], mx_u32 swA, mx_u32 swB, const mx_u32 s0[MT],
                            const mx_u32 s1[MT]) {
  mx_mma_group4_wf<MT>(acc, [&](int u, mx_u32 a[8]) { mx_w_frag<HW>(wa[u], wb[u], a); }, bh, swA, swB, s0, s1);
}

// Eight e4m3 (lane t's 8 bytes of a k-block) as the f16 fragments of mx_mma_group4_h.
template <bool HW = false>
MX_DEV uint4 mx_e4m3x8_to_frag(uint2 b) {
  return make_uint4(mx_e4m3x2_to_f16x2(b.x), mx_e4m3x2_hi_to_f16x2<HW>(b.x), mx_e4m3x2_to_f16x2(b.y),
                    mx_e4m3x2_hi_to_f16x2<HW>(b.y));
}

// The activation fragments of a group (b[mt][u] = lane t's 8 bytes of k-block u) as f16.
template <int MT, bool HW = false>
MX_DEV void mx_b_frag(const uint2 b[MT][4], uint4 bh[MT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int u = 0; u < 4; ++u) bh[mt][u] = mx_e4m3x8_to_frag<HW>(b[mt][u]);
}

// mx_mma_group4_h with e4m3 activation fragments.
template <int MT, bool HW = false>
MX_DEV void mx_mma_group4(float acc[MT][4], const uint2 wa[4], const uint2 wb[4],
                          const uint2 b[MT][4], mx_u32 swA, mx_u32 swB, const mx_u32 s0[MT],
                          const mx_u32 s1[MT]) {
  uint4 bh[MT][4];
  mx_b_frag<MT, HW>(b, bh);
  mx_mma_group4_h<MT, HW>(acc, wa, wb, bh, swA, swB, s0, s1);
}

template <int W, int MT>
struct MxPipeStage {
  static constexpr int WT = 16 * 128;          // one warp's 16 weight rows x 128 bytes
  static constexpr int AT = 8 * MT * 128;      // the activation rows x 128 bytes
  static constexpr int W_OFF = 0;
  static constexpr int A_OFF = W * WT;
  static constexpr int SW_OFF = A_OFF + AT;    // W x 16 weight scale words
  static constexpr int SA_OFF = SW_OFF + W * 16 * 4;  // 8 MT activation scale words
  static constexpr int BYTES = SA_OFF + 8 * MT * 4;
  static constexpr int PART = W * MT * 4 * 32 * 4;  // cluster partial sums (S > 1)
  // The most stages (up to 8) that fit next to the partial sums.
  static constexpr int MAX_STAGES =
      (MX_PIPE_SMEM - PART) / BYTES < 8 ? (MX_PIPE_SMEM - PART) / BYTES : 8;
};

template <class TO, int W, int MT, int S, int STAGES>
MX_DEV void mx_matmul_pipe(const mx_u8* __restrict__ aq, const mx_u8* __restrict__ as,
                           const mx_u8* __restrict__ w, const mx_u8* __restrict__ ws,
                           typename TO::storage* __restrict__ y, int M, int N, int K,
                           const MxEpi& ep) {
  typedef MxPipeStage<W, MT> L;
  static_assert(STAGES >= 2 && STAGES * L::BYTES + L::PART <= MX_PIPE_SMEM, "stages");
  __shared__ __align__(128) mx_u8 smem[STAGES * L::BYTES];
  __shared__ float part[S > 1 ? W * MT * 4 * 32 : 1];  // L::PART bytes

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int split = blockIdx.x % S;
  const int n0 = (blockIdx.x / S) * (16 * W) + 16 * warp;  // this warp's 16 columns
  const int m0 = blockIdx.y * (8 * MT);
  const int KB = K >> 5;
  const int groups = K >> 7;
  const int per_split = (groups + S - 1) / S;
  const int gb = min(groups, split * per_split);
  const int ng = min(groups, gb + per_split) - gb;

  // Copy of group gb + i into a stage slot: each warp its own 16 weight rows (lane l, chunk j:
  // row 4 j + l / 8, 16-byte chunk l % 8) and weight scale words; the block's threads the
  // activation rows and their scale words. Rows past N or M are not copied: whatever their
  // shared memory holds only reaches outputs past N or M (an mma's column m depends on column m
  // of its B operand and row n on row n of A alone), which are not stored. (Zero-filling them
  // with cp.async source size 0 made M < 8 slower than M = 8 on the H200.) Sources and
  // destinations are per-thread constants plus the group's column offset, set up once here.
  constexpr int ACH = (64 * MT + 32 * W - 1) / (32 * W);  // activation chunks per thread (max)
  const int swz = ((lane >> 3) & 3) << 1;                   // rows 4 j + l / 8: same r & 3
  const int wdst = warp * L::WT + (lane >> 3) * 128 + (((lane & 7) ^ swz) << 4);
  const mx_u8* wsrc[4];
  int wlen[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int n = n0 + 4 * j + (lane >> 3);
    wlen[j] = n < N ? 16 : 0;
    wsrc[j] = w + (long long)min(n, N - 1) * K + 128LL * gb + 16 * (lane & 7);
  }
  const mx_u8* asrc[ACH];
  int alen[ACH], adst[ACH];
#pragma unroll
  for (int j = 0; j < ACH; ++j) {
    const int c = min(tid + 32 * W * j, 64 * MT - 1), r = c >> 3, q = c & 7, m = m0 + r;
    adst[j] = L::A_OFF + r * 128 + ((q ^ ((r & 3) << 1)) << 4);
    alen[j] = m < M ? 16 : 0;
    asrc[j] = aq + (long long)min(m, M - 1) * K + 128LL * gb + 16 * q;
  }
  // Activation chunks: the first (64 MT) % (32 W) threads (or all) copy ACH, the rest ACH - 1.
  const int ach_mine = (64 * MT) / (32 * W) + (tid < (64 * MT) % (32 * W) ? 1 : 0);
  const int sarow = tid - (32 * W - 8 * MT);  // the activation scale row this thread copies
  const int swlen = n0 + (lane & 15) < N ? 4 : 0, salen = m0 + sarow < M ? 4 : 0;
  const mx_u8* swsrc = ws + (long long)min(n0 + (lane & 15), N - 1) * KB + 4 * gb;
  const mx_u8* sasrc = as + (long long)min(m0 + max(sarow, 0), M - 1) * KB + 4 * gb;
  auto issue = [&](int i, int slot) {
    mx_u8* st = smem + slot * L::BYTES;
    const int kofs = 128 * i;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (wlen[j]) mx_cp_async16(st + wdst + 512 * j, wsrc[j] + kofs, 16);
    if (lane < 16 && swlen)
      mx_cp_async4(st + L::SW_OFF + (warp * 16 + lane) * 4, swsrc + 4 * i, 4);
#pragma unroll
    for (int j = 0; j < ACH; ++j)
      if (j < ach_mine && alen[j]) mx_cp_async16(st + adst[j], asrc[j] + kofs, 16);
    if (sarow >= 0 && salen) mx_cp_async4(st + L::SA_OFF + sarow * 4, sasrc + 4 * i, 4);
  };

  float acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[mt][c] = 0.0f;

#pragma unroll
  for (int i = 0; i < STAGES - 1; ++i) {
    if (i < ng) issue(i, i);
    mx_cp_async_commit();
  }
  int slot = 0;  // i % STAGES
  for (int i = 0; i < ng; ++i) {
    mx_cp_async_wait<STAGES - 2>();  // this thread's copies of group i landed
    __syncthreads();                 // everyone's; and everyone is done with group i - 1's slot
    const int prev = slot == 0 ? STAGES - 1 : slot - 1;
    if (i + STAGES - 1 < ng) issue(i + STAGES - 1, prev);
    mx_cp_async_commit();
    const mx_u8* st = smem + slot * L::BYTES;
    slot = slot == STAGES - 1 ? 0 : slot + 1;
    const mx_u8* wt = st + L::W_OFF + warp * L::WT;
    const mx_u8* at = st + L::A_OFF;
    const mx_u32* sw = reinterpret_cast<const mx_u32*>(st + L::SW_OFF) + warp * 16;
    const mx_u32* sa = reinterpret_cast<const mx_u32*>(st + L::SA_OFF);
    uint2 wa[4], wb[4], b[MT][4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      wa[u] = *reinterpret_cast<const uint2*>(wt + mx_pipe_frag_off(g, u, t));
      wb[u] = *reinterpret_cast<const uint2*>(wt + mx_pipe_frag_off(g + 8, u, t));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        b[mt][u] = *reinterpret_cast<const uint2*>(at + mx_pipe_frag_off(8 * mt + g, u, t));
    }
    mx_u32 s0[MT], s1[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      s0[mt] = sa[8 * mt + 2 * t];
      s1[mt] = sa[8 * mt + 2 * t + 1];
    }
    mx_mma_group4<MT>(acc, wa, wb, b, sw[g], sw[g + 8], s0, s1);
  }
  mx_cp_async_wait<0>();

  // d0/d1: column n0 + g, rows 2t / 2t + 1 of the 8-row tile; d2/d3: column n0 + g + 8.
  if (S > 1) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) part[((warp * MT + mt) * 4 + c) * 32 + lane] = acc[mt][c];
    mx_cluster_sync();  // every block's part[] written and visible cluster-wide
    if (split == 0) {
      // The cluster's blocks are the S consecutive blockIdx.x of one column group: rank r did
      // split r; partial sums are added in rank order.
      for (int r = 1; r < S; ++r)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int c = 0; c < 4; ++c)
            acc[mt][c] += mx_dsmem_load(part + ((warp * MT + mt) * 4 + c) * 32 + lane, (mx_u32)r);
    }
  }
  if (S == 1 || split == 0) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int n = n0 + g + (c >= 2 ? 8 : 0);
        const int m = m0 + mt * 8 + 2 * t + (c & 1);
        if (n < N && m < M)
          y[(long long)m * N + n] = TO::from_f32(mx_epilogue<TO>(ep, m, n, acc[mt][c]));
      }
  }
  if (S > 1) mx_cluster_sync();  // the other blocks' shared memory stays alive until read
}

// Kernel names: mx_matmul_pipe_m<8|16>_<out>_w<W>_s<S>, with the most stages that fit (up to 8:
// 8 at W = 1, 8 / 7 at W = 2, 4 at W = 4; 4 stages measured the same or slower, and the L2 256-byte
// prefetch hint on the weight copies no faster, BENCHMARKS.md). Block 32 W threads.
#define MX_DEFINE_PIPE1(NAME, TO, W, MT, S, ATTR)                                              \
  extern "C" __global__ void __launch_bounds__(32 * W) ATTR                                    \
      NAME(const mx_u8* aq, const mx_u8* as, const mx_u8* w, const mx_u8* ws, TO::storage* y,   \
           int M, int N, int K, MxEpi ep) {                                                    \
    MX_PDL_ENTRY();                                                                            \
    mx_matmul_pipe<TO, W, MT, S, MxPipeStage<W, MT>::MAX_STAGES>(aq, as, w, ws, y, M, N, K, ep); \
  }
#define MX_DEFINE_PIPE_S(NAME, TO, W, MT)                                                      \
  MX_DEFINE_PIPE1(NAME##_s1, TO, W, MT, 1, )                                                   \
  MX_DEFINE_PIPE1(NAME##_s2, TO, W, MT, 2, __cluster_dims__(2, 1, 1))                          \
  MX_DEFINE_PIPE1(NAME##_s4, TO, W, MT, 4, __cluster_dims__(4, 1, 1))                          \
  MX_DEFINE_PIPE1(NAME##_s8, TO, W, MT, 8, __cluster_dims__(8, 1, 1))
#define MX_DEFINE_PIPE_W(NAME, TO, MT)                                                         \
  MX_DEFINE_PIPE_S(NAME##_w1, TO, 1, MT)                                                       \
  MX_DEFINE_PIPE_S(NAME##_w2, TO, 2, MT)                                                       \
  MX_DEFINE_PIPE_S(NAME##_w4, TO, 4, MT)
#define MX_DEFINE_PIPE_OUTS(PREFIX, MT)                                                        \
  MX_DEFINE_PIPE_W(PREFIX##_bf16, MxBf16, MT)                                                  \
  MX_DEFINE_PIPE_W(PREFIX##_f16, MxF16, MT)                                                    \
  MX_DEFINE_PIPE_W(PREFIX##_f32, MxF32, MT)

// The grouped module (mx_matmul_frag_grouped.hip) takes only this file's device functions.
#ifndef MX_FRAG_GROUPED
MX_DEFINE_PIPE_OUTS(mx_matmul_pipe_m8, 1)
MX_DEFINE_PIPE_OUTS(mx_matmul_pipe_m16, 2)
#endif
#endif  // MX_NV_FP8_MMA && MX_NV_CLUSTER
