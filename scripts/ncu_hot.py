#!/usr/bin/env python3
"""Summarises an Nsight Compute source-page CSV (development tool):

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 scripts/ncu_hot.py sass.csv [N]

prints the warp-stall samples by reason over the whole kernel, then the N
(default 30) SASS instructions with the most samples and each one's two
largest reasons.
"""
import csv
import sys


def num(v: str) -> float:
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f)]
    head = next(i for i, r in enumerate(rows) if "Source" in r and "Address" in r)
    cols, body = rows[head], rows[head + 1:]
    src = cols.index("Source")
    total = next(i for i, c in enumerate(cols) if c.startswith("Warp Stall Sampling (All"))
    reasons = [i for i, c in enumerate(cols) if c.startswith("stall_") or c.startswith("smsp__pcsamp_warps_issue_stalled")]
    sums = {cols[i]: sum(num(r[i]) for r in body if len(r) > i) for i in reasons}
    all_samples = sum(num(r[total]) for r in body if len(r) > total)
    print(f"# {len(body)} instructions, {all_samples:.0f} samples")
    for k, v in sorted(sums.items(), key=lambda kv: -kv[1])[:12]:
        if v:
            print(f"  {k:40s} {v:10.0f} {100 * v / max(all_samples, 1):5.1f}%")
    print()
    hot = sorted((r for r in body if len(r) > total), key=lambda r: -num(r[total]))[:n]
    for r in hot:
        top = sorted(((num(r[i]), cols[i]) for i in reasons), reverse=True)[:2]
        why = ", ".join(f"{c.replace('stall_', '')} {v:.0f}" for v, c in top if v)
        print(f"{num(r[total]):8.0f}  {r[src][:70]:70s} {why}")


if __name__ == "__main__":
    main()
