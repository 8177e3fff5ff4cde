"""Exhaustive CPU proof for the branch-free pinned exp (kernels/gpu/mx_common.h mx_exp_pinned):
for every f32 x in [-87, 88] (the range where the polynomial result is used; the rest is selected),
n = rint(fl(x * log2 e)) equals fl(fl(x * log2 e) + 1.5 * 2^23) - 1.5 * 2^23, and the integer read
from the low mantissa bits of the sum equals n. Everything after n is the same operation sequence
as kernels::reference::math::exp_f32, so the GPU exp stays bit-identical to it. numpy's float32
arithmetic is IEEE round-to-nearest-even, like the __fmul_rn / __fadd_rn intrinsics.
~2.2e9 values, a few minutes on one core. Last run 2026-11-30: 2237530114 checked, 0 mismatches."""
import numpy as np

LOG2E = np.float32(1.44269504088896341)
MAGIC = np.float32(12582912.0)  # 1.5 * 2^23


def mismatches(bits):
    x = bits.view(np.float32)
    p = x * LOG2E
    t = p + MAGIC
    n = t - MAGIC
    j = (t.view(np.int32) - 0x4B400000).astype(np.float32)
    return int(np.count_nonzero((np.rint(p) != n) | (n != j))), bits.size


def main():
    hi = int(np.array([88.0], np.float32).view(np.uint32)[0])   # +0 .. 88
    lo = int(np.array([-87.0], np.float32).view(np.uint32)[0])  # -0 .. -87
    step, bad, total = 1 << 26, 0, 0
    for first, last in ((0, hi), (0x80000000, lo)):
        for a in range(first, last + 1, step):
            b, n = mismatches(np.arange(a, min(a + step, last + 1), dtype=np.uint64).astype(np.uint32))
            bad, total = bad + b, total + n
    print(f"checked {total} values in [-87, 88], mismatches {bad}")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
