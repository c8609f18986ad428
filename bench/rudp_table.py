#!/usr/bin/env python3
"""Markdown table of bench/rudp_vs_tcp.sh's CSV: algbw (GB/s, out-of-place, best over reps) of
tcp and rudp per condition, op and size, and the rudp/tcp ratio; with the base build's rudp
(BASE=...) its column and ratio too. Usage: rudp_table.py FILE.csv"""
import csv
import sys
from collections import defaultdict

best = defaultdict(float)
wrong = defaultdict(int)
for row in csv.DictReader(open(sys.argv[1])):
    key = (row["condition"], row["benchop"], int(row["bytes"]), row["transport"])
    best[key] = max(best[key], float(row["oop_algbw"]))
    wrong[key] += int(row["oop_wrong"] or 0)
base = any(k[3] == "rudp-base" for k in best)
extra = " base rudp GB/s | base/tcp |" if base else ""
print("| loss | op | size | tcp GB/s | rudp GB/s | rudp/tcp |" + extra + " wrong |")
print("|---|---|---|---|---|---|" + ("---|---|" if base else "") + "---|")
def order(k):
    loss = k[0].startswith("reorder")
    return (loss, k[0] if loss else "", 0 if loss else float(k[0]), k[1], k[2])


conds = sorted({k[:3] for k in best}, key=order)
for cond, op, size in conds:
    t, r = best.get((cond, op, size, "tcp"), 0), best.get((cond, op, size, "rudp"), 0)
    w = sum(wrong[(cond, op, size, x)] for x in ("tcp", "rudp", "rudp-base"))
    ratio = f"{r / t:.2f}" if t > 0 else "-"
    label = {"reorder": "reorder (a fifth held 0-2 ms, both)",
             "reorder-faults": "reorder (rudp fault layer; tcp: none)"}.get(cond, f"{cond} %")
    cells = ""
    if base:
        b = best.get((cond, op, size, "rudp-base"), 0)
        cells = f" {b:.3f} | {b / t:.2f} |" if t > 0 else f" {b:.3f} | - |"
    print(f"| {label} | {op} | {size >> 20} MiB | {t:.3f} | {r:.3f} | {ratio} |{cells} {w} |")
