"""Issue 6 follow-up 35: a host model of frag_sk.hip's stream-K partition, run on the development
machine before the kernel goes to a device (and a reference for a runtime port). For every grid it
checks that each (tile pair, group) item of one row tile is summed exactly once into its pair:
  FIX 1: block runs of q or q + 1 items, warps on contiguous parts cut at the pair boundary, split
         pairs finished by the last block to count itself, reading the contributors' slots
         (slot 0 where a block's run begins in the pair, else 1) in block order;
  FIX 4: each block's contributed part first, one slot per (block, warp), finished by the block
         holding the pair's last item, each contributor's slot read by exactly one finisher.
Usage: python3 sk_partition_model.py   (prints the number of grids checked)"""
import random


def runs(T, B):
    """run_begin(b), block_of(i) of frag_sk.hip (q or q + 1 items a run, the first r longer)."""
    q, r = T // B, T % B
    begin = lambda b: b * q + min(b, r)
    block_of = lambda i: i // (q + 1) if i < r * (q + 1) else r + (i - r * (q + 1)) // q
    return begin, block_of


def fix1(pairs, G, B, W):
    T = pairs * G
    begin, block_of = runs(T, B)
    slots, cnt, out = {}, [0] * pairs, {}
    order = list(range(B))
    random.shuffle(order)  # blocks finish in any order
    for blk in order:
        b0, b1 = begin(blk), begin(blk + 1)
        assert b1 - b0 <= G, "B >= pairs keeps a run within two pairs"
        p0, bnd = b0 // G, (b0 // G + 1) * G
        per = -(-(b1 - b0) // W)
        seg = [set(), set()]
        for w in range(W):
            gb = min(b1, b0 + w * per); ge = min(b1, gb + per)
            for i in range(gb, ge):
                seg[i >= bnd].add(i)
        for s in range(2):
            sb, se, p = (b0, min(b1, bnd), p0) if s == 0 else (bnd, b1, p0 + 1)
            if sb >= se:
                continue
            if sb == p * G and se == (p + 1) * G:
                assert p not in out; out[p] = seg[s]; continue
            assert s == (0 if begin(blk) >= p * G else 1)
            slots[blk, s] = seg[s]
            bf, bl = block_of(p * G), block_of(p * G + G - 1)
            cnt[p] += 1
            if cnt[p] == bl - bf + 1:
                assert p not in out
                out[p] = set().union(*(slots[b, 0 if begin(b) >= p * G else 1] for b in range(bf, bl + 1)))
                cnt[p] = 0
    return out


def fix4(pairs, G, B, W):
    T = pairs * G
    begin, block_of = runs(T, B)
    contrib, fin, out = {}, {}, {}
    for blk in range(B):
        b0, b1 = begin(blk), begin(blk + 1)
        p0, bnd = b0 // G, (b0 // G + 1) * G
        afin = b1 >= bnd
        cb, fe = (bnd, bnd) if afin else (b0, b0)
        pc, pf = -(-(b1 - cb) // W), -(-(fe - b0) // W)
        cset, fset = set(), set()
        for w in range(W):
            x0 = min(b1, cb + w * pc); y0 = min(fe, b0 + w * pf)
            cset |= set(range(x0, min(b1, x0 + pc))); fset |= set(range(y0, min(fe, y0 + pf)))
        if b1 > cb:
            assert len({i // G for i in cset}) == 1
            contrib[blk] = cset
        if afin:
            fin[blk] = (p0, fset)
    readers = {}
    for blk, (p, fset) in fin.items():
        bf = block_of(p * G)
        assert p not in out
        out[p] = set(fset).union(*(contrib[b] for b in range(bf, blk)))
        for b in range(bf, blk):
            readers[b] = readers.get(b, 0) + 1
    assert all(readers.get(b) == 1 for b in contrib), "each contributed slot has one finisher"
    return out


def main():
    n = 0
    for N in (16, 48, 100, 1536, 4096, 6144, 6160, 8448):
        for K in (128, 768, 4096, 6144):
            G, pairs = K // 128, -(-N // 32)
            for B in sorted({pairs, pairs + 1, 132, 264, 396, pairs * G, (pairs * G + pairs) // 2}):
                if not pairs <= B <= pairs * G:
                    continue
                for W in (2, 4, 8):
                    for model in (fix1, fix4):
                        out = model(pairs, G, B, W)
                        assert sorted(out) == list(range(pairs)), (model.__name__, N, K, B, W)
                        for p, items in out.items():
                            assert items == set(range(p * G, p * G + G)), (model.__name__, N, K, B, W, p)
                        n += 1
    print(f"ok: {n} grids")


if __name__ == "__main__":
    main()
