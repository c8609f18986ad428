#!/usr/bin/env python3
"""Markdown table of bench/rudp_vs_tcp.sh's CSV: algbw (GB/s, out-of-place, best over reps) of
tcp and rudp per condition, op and size, and the rudp/tcp ratio. Usage: rudp_table.py FILE.csv"""
import csv
import sys
from collections import defaultdict

best = defaultdict(float)
wrong = defaultdict(int)
for row in csv.DictReader(open(sys.argv[1])):
    key = (row["condition"], row["benchop"], int(row["bytes"]), row["transport"])
    best[key] = max(best[key], float(row["oop_algbw"]))
    wrong[key] += int(row["oop_wrong"] or 0)
print("| loss | op | size | tcp GB/s | rudp GB/s | rudp/tcp | wrong |")
print("|---|---|---|---|---|---|---|")
conds = sorted({k[:3] for k in best}, key=lambda k: (k[0] == "reorder", float(k[0]) if k[0] != "reorder" else 0, k[1], k[2]))
for cond, op, size in conds:
    t, r = best.get((cond, op, size, "tcp"), 0), best.get((cond, op, size, "rudp"), 0)
    w = wrong[(cond, op, size, "tcp")] + wrong[(cond, op, size, "rudp")]
    ratio = f"{r / t:.2f}" if t > 0 else "-"
    label = "reorder (rudp fault layer; tcp: none)" if cond == "reorder" else f"{cond} %"
    print(f"| {label} | {op} | {size >> 20} MiB | {t:.3f} | {r:.3f} | {ratio} | {w} |")
