#!/usr/bin/env python3
"""Draws bus bandwidth against size, one PNG per op, from the CSV files bench/run_cpu.sh writes
(a `source` column: loom, mpi, gloo, memcpy: the bounds) or loom-bench --csv on GPUs (Loom and NCCL columns).

Usage: python3 bench/plot.py [-o DIR] [--time] RESULTS.csv ...
Writes DIR/<csv name>-<op>.png (DIR defaults to the CSV's folder) and prints each path. --time
adds a panel of the time per call beside the bandwidth's (small messages are latency: a log-log
bandwidth plot hides what they cost), and draws the bandwidth on a linear scale.
Needs matplotlib (python3 -m pip install matplotlib, or scripts/install_deps.sh plot).
"""

import csv
import os
import sys

from tables import number  # bench/tables.py: a CSV cell as a float, None if empty

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(f"plot.py: needs matplotlib: {sys.executable} -m pip install matplotlib")

STYLE = {"loom": "o-", "nccl": "s--", "mpi": "s--", "gloo": "^--", "bound": "k:", "memcpy": "k:"}
LABEL = {"bound": "write bound (each rank writing its output; in busbw terms)",
         "memcpy": "memcpy per process (a reference, not a bound; in busbw terms)"}


def series(path):
    """{op: {source: [(bytes, busbw)]}} plus the write bound of bench/peers/memcpy_bound (op
    "write"; files from before it have only "memcpy" rows, which are used then), scaled per op by
    busbw's factor: a bound on algbw, drawn beside busbw."""
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("op")]
    out, bounds, factors, ranks, times = {}, {}, {}, set(), {}
    for r in rows:
        source = r.get("source") or "loom"
        size, busbw = int(r["bytes"]), number(r["oop_busbw"])
        if busbw is None:
            continue
        if source == "memcpy":
            bounds.setdefault(r["op"], []).append((size, busbw))
            continue
        ranks.add(r["nranks"])
        if r.get("dtype") not in (None, "float"):
            continue
        algbw = number(r["oop_algbw"])
        if source == "loom" and algbw:
            factors[r["op"]] = busbw / algbw
        out.setdefault(r["op"], {}).setdefault(source, []).append((size, busbw))
        times.setdefault(r["op"], {}).setdefault(source, []).append((size, number(r["oop_us"])))
        nccl = number(r.get("oop_nccl_busbw"))
        if nccl is not None:
            out[r["op"]].setdefault("nccl", []).append((size, nccl))
            times[r["op"]].setdefault("nccl", []).append((size, number(r.get("oop_nccl_us"))))
    key = "bound" if "write" in bounds else "memcpy"
    bound = bounds.get("write") or bounds.get("memcpy")
    for op in out:
        if bound:
            out[op][key] = [(size, rate * factors.get(op, 1)) for size, rate in bound]
    return out, times, "/".join(sorted(ranks))


def draw(ax, sources, log_y):
    for source, points in sources.items():
        points = sorted(p for p in points if p[1] is not None)
        ax.plot([p[0] for p in points], [p[1] for p in points], STYLE.get(source, "x-"),
                label=LABEL.get(source, source))
    ax.set_xscale("log", base=2)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()


def main(argv):
    args = argv[1:]
    outdir, with_time = None, False
    while args[:1] in (["-o"], ["--time"]):
        if args[0] == "-o":
            outdir, args = args[1], args[2:]
        else:
            with_time, args = True, args[1:]
    if not args:
        sys.stderr.write(__doc__)
        return 2
    for path in args:
        ops, times, ranks = series(path)
        name = os.path.splitext(os.path.basename(path))[0]
        where = outdir or os.path.dirname(os.path.abspath(path))
        for op, sources in ops.items():
            if with_time:
                fig, (tax, ax) = plt.subplots(1, 2, figsize=(12, 4.5))
                draw(tax, times[op], True)
                tax.set_ylabel("time per call (µs)")
                tax.set_title(f"{op}, {ranks} ranks: time per call")
            else:
                fig, ax = plt.subplots(figsize=(8, 5))
            if with_time:  # on a linear scale the reference would dwarf the rest
                sources = {k: v for k, v in sources.items() if k != "memcpy"}
            draw(ax, sources, not with_time)
            ax.set_ylabel("bus bandwidth (GB/s)")
            ax.set_title(f"{op}, {ranks} ranks ({name})")
            png = os.path.join(where, f"{name}-{op}.png")
            fig.savefig(png, dpi=90 if with_time else 100, bbox_inches="tight")
            plt.close(fig)
            print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
