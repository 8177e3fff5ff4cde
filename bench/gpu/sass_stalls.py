"""The SASS instructions with the most warp stall samples in an ncu source page exported as CSV
(`ncu --import R --page source --csv --print-source sass`), with each one's leading stall
reasons, and the samples summed by reason over the kernel. Usage: python3 sass_stalls.py CSV [TOP]"""
import collections, csv, sys


def num(v):
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    lines = open(sys.argv[1], newline="").read().splitlines()
    # ncu writes a "Kernel Name" line before the header.
    start = next(i for i, l in enumerate(lines) if l.startswith('"Address"'))
    rows = list(csv.DictReader(lines[start:]))
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    if not rows:
        sys.exit("empty CSV")
    cols = list(rows[0].keys())
    total_col = next((c for c in cols if c.strip() == "Warp Stall Sampling (All Samples)"), None) or \
        next((c for c in cols if "Sampling" in c and "All" in c), None)
    reason_cols = [c for c in cols if c.startswith("stall_") or ("Stall" in c and c != total_col and "Sampling" not in c)]
    src_col = next((c for c in cols if c.strip() == "Source"), cols[1] if len(cols) > 1 else cols[0])
    addr_col = next((c for c in cols if c.strip() == "Address"), cols[0])
    if not total_col:
        sys.exit("no stall-sampling column")
    by_reason = collections.Counter()
    for r in rows:
        for c in reason_cols:
            by_reason[c] += num(r.get(c))
    total = sum(num(r.get(total_col)) for r in rows)
    print(f"\n{len(rows)} instructions, {total:.0f} samples; by reason:")
    for c, v in by_reason.most_common(12):
        if v:
            print(f"  {c:50s} {v:8.0f} ({100 * v / max(total, 1):.1f} %)")
    print(f"\ntop {top} instructions by samples:")
    for r in sorted(rows, key=lambda r: -num(r.get(total_col)))[:top]:
        reasons = sorted(((num(r.get(c)), c) for c in reason_cols), reverse=True)[:3]
        why = ", ".join(f"{c} {v:.0f}" for v, c in reasons if v)
        print(f"  {r.get(addr_col, '')!s:>8} {num(r.get(total_col)):7.0f}  {str(r.get(src_col, ''))[:70]:70s} {why}")


if __name__ == "__main__":
    main()
