"""Lane-level CPU emulation of the split-K decode GEMM (kernels/gpu/mx_matmul_splitk.hip) against
an f64 reference, for checking its index and fragment logic without a GPU: which 16-byte chunk
each lane loads, the 8-byte swap between lanes t and t ^ 2, the m16n8k32 fragment layout of the
PTX ISA (A rows g / g + 8, k 4t..4t+3 and 16+4t..; B column g; D rows g / g + 8, columns 2t, 2t+1),
the activations read at the same permuted offsets, out-of-range k-blocks / rows as zeros with
scale 1, warps taking groups of 4 k-blocks round robin, and the cluster's split-K partial sums.
Values are plain floats (the e4m3 / e8m0 decoding is the same code as the first GEMM's), so a
correct emulation matches to rounding (~1e-15). Pre-quantized activations; a few seconds.

    python3 bench/gpu/splitk_emulation.py
"""
import numpy as np

rng = np.random.default_rng(0)


def offset(t):
    """mx_splitk_offset: byte offset within a k-block of lane t's 8 bytes after the swap."""
    return 16 * (t & 1) + 8 * (t >> 1)


def mma(A, B):
    """m16n8k32 on per-lane fragments: A[lane] = (a0, a1, a2, a3), B[lane] = (b0, b1), 4 values
    each; returns D[lane] = (d0, d1, d2, d3)."""
    Am, Bm = np.zeros((16, 32)), np.zeros((32, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        Am[g, 4 * t:4 * t + 4], Am[g + 8, 4 * t:4 * t + 4] = A[lane][0], A[lane][1]
        Am[g, 16 + 4 * t:20 + 4 * t], Am[g + 8, 16 + 4 * t:20 + 4 * t] = A[lane][2], A[lane][3]
        Bm[4 * t:4 * t + 4, g], Bm[16 + 4 * t:20 + 4 * t, g] = B[lane][0], B[lane][1]
    D = Am @ Bm
    return [np.array([D[l >> 2, 2 * (l & 3)], D[l >> 2, 2 * (l & 3) + 1],
                      D[(l >> 2) + 8, 2 * (l & 3)], D[(l >> 2) + 8, 2 * (l & 3) + 1]]) for l in range(32)]


def emulate(N, K, M, S, W, MT):
    """Max relative error of the emulated kernel against the f64 product; every output written."""
    KB = K // 32
    Wv, Ws = rng.standard_normal((N, K)), 2.0 ** rng.integers(-3, 3, (N, KB))
    Av, As = rng.standard_normal((M, K)), 2.0 ** rng.integers(-3, 3, (M, KB))
    ref = (Av * np.repeat(As, 32, 1)) @ (Wv * np.repeat(Ws, 32, 1)).T
    y = np.full((M, N), np.nan)
    groups = (KB + 3) // 4
    per = (groups + S - 1) // S

    def chunk(row, grp, p, t):  # mx_splitk_load_weights: 16 bytes, zero past the end
        kb = 4 * grp + 2 * p + (t >> 1)
        if row >= N or kb >= KB:
            return np.zeros(16)
        off = 128 * grp + 64 * p + 16 * t
        return Wv[row, off:off + 16]

    def wscale(row, kb):
        return Ws[row, kb] if row < N and kb < KB else 1.0

    def ascale(row, kb):
        return As[row, kb] if row < M and kb < KB else 1.0

    for tile in range((N + 15) // 16):
        for mtile in range((M + 8 * MT - 1) // (8 * MT)):
            n0, m0 = 16 * tile, 8 * MT * mtile
            total = np.zeros((MT, 32, 4))
            for split in range(S):  # rank order, as block 0 of the cluster adds them
                g_end = min(groups, (split + 1) * per)
                for warp in range(W):  # warp order, as the shared-memory reduction
                    acc = np.zeros((MT, 32, 4))
                    for grp in range(split * per + warp, g_end, W):
                        for p in range(2):
                            swapped = {}  # mx_splitk_exchange for rows g and g + 8
                            for lane in range(32):
                                g, t = lane >> 2, lane & 3
                                for r in (0, 8):
                                    own, partner = chunk(n0 + g + r, grp, p, t), chunk(n0 + g + r, grp, p, t ^ 2)
                                    swapped[lane, r] = (own[0:8], partner[0:8]) if t < 2 else (partner[8:16], own[8:16])
                            for h in range(2):
                                u, kb = 2 * p + h, 4 * grp + 2 * p + h
                                for mt in range(MT):
                                    A, B = [], []
                                    for lane in range(32):
                                        g, t = lane >> 2, lane & 3
                                        row, off = m0 + 8 * mt + g, 128 * grp + 32 * u + offset(lane & 3)
                                        act = Av[row, off:off + 8] if row < M and kb < KB else np.zeros(8)
                                        wa, wb = swapped[lane, 0][h], swapped[lane, 8][h]
                                        A.append((wa[0:4], wb[0:4], wa[4:8], wb[4:8]))
                                        B.append((act[0:4], act[4:8]))
                                    d = mma(A, B)
                                    for lane in range(32):
                                        g, t = lane >> 2, lane & 3
                                        fA, fB = wscale(n0 + g, kb), wscale(n0 + g + 8, kb)
                                        f0, f1 = ascale(m0 + 8 * mt + 2 * t, kb), ascale(m0 + 8 * mt + 2 * t + 1, kb)
                                        acc[mt, lane] += d[lane] * np.array([fA * f0, fA * f1, fB * f0, fB * f1])
                    total += acc
            for mt in range(MT):
                for lane in range(32):
                    for c in range(4):
                        n = n0 + (lane >> 2) + (8 if c >= 2 else 0)
                        m = m0 + 8 * mt + 2 * (lane & 3) + (c & 1)
                        if n < N and m < M:
                            y[m, n] = total[mt, lane, c]
    assert not np.isnan(y).any(), "an output was not written"
    return float(np.abs(y - ref).max() / np.abs(ref).max())


if __name__ == "__main__":
    worst = 0.0
    # (N, K, M, splits, warps, m-tiles per block): ragged N / M / K, 1-4 splits, idle warps
    for case in [(32, 256, 3, 1, 2, 1), (40, 96, 9, 2, 1, 2), (16, 1056, 8, 4, 3, 1), (48, 224, 16, 2, 2, 2),
                 (24, 160, 5, 1, 1, 1), (16, 64, 2, 2, 4, 1)]:
        err = emulate(*case)
        worst = max(worst, err)
        print(f"N, K, M, S, W, MT = {case}: max rel err {err:.1e}")
    print("PASS" if worst < 1e-12 else "FAIL")
    raise SystemExit(0 if worst < 1e-12 else 1)
