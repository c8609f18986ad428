#!/usr/bin/env python3
"""Prints markdown tables from bench/run_contention.sh's CSV files: per op and number of busy
processes beside the job, the median over repetitions of each source's time per call, and
Loom's time over Open MPI's with the target (Loom <= Open MPI) marked.

Usage: python3 bench/contention_table.py RESULTS.csv [...]
"""

import csv
import statistics
import sys
from collections import defaultdict

from tables import fmt, human_bytes, number

SOURCES = ["loom", "base", "mpi", "gloo"]


def table(path):
    times = defaultdict(list)  # (op, nranks, state, bytes, source) -> [us]
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            us = number(row["oop_us"])
            if us is not None:
                key = (row["op"], int(row["nranks"]), int(row["state"]), int(row["bytes"]),
                       row["source"])
                times[key].append(us)
    groups = sorted({k[:3] for k in times})
    for op, nranks, state in groups:
        present = [s for s in SOURCES if any(k[:3] == (op, nranks, state) and k[4] == s
                                              for k in times)]
        sizes = sorted({k[3] for k in times if k[:3] == (op, nranks, state)})
        print(f"\n#### {op}, {nranks} ranks, {state} busy process{'es' if state != 1 else ''}"
              " beside the job\n")
        head = ["size"] + [f"{s} us" for s in present]
        if "mpi" in present:
            head.append("loom/mpi")
        if "base" in present:
            head.append("loom/base")
        if "gloo" in present:
            head.append("loom/gloo")
        print("| " + " | ".join(head) + " |")
        print("|" + "---:|" * len(head))
        for size in sizes:
            med = {s: statistics.median(times[(op, nranks, state, size, s)])
                   for s in present if times.get((op, nranks, state, size, s))}
            cells = [human_bytes(size)] + [fmt(med.get(s)) for s in present]
            loom = med.get("loom")
            for peer in ("mpi", "base", "gloo"):
                if peer not in present:
                    continue
                if loom is None or med.get(peer) is None:
                    cells.append("-")
                    continue
                ratio = loom / med[peer]
                mark = (" ✓" if ratio <= 1.0 else " ✗") if peer == "mpi" else ""
                cells.append(f"{ratio:.2f}{mark}")
            print("| " + " | ".join(cells) + " |")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    for path in sys.argv[1:]:
        table(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
