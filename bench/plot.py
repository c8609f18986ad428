#!/usr/bin/env python3
"""Draws bus bandwidth against size, one PNG per op, from the CSV files bench/run_cpu.sh writes
(a `source` column: loom, mpi, gloo, memcpy) or loom-bench --csv on GPUs (Loom and NCCL columns).

Usage: python3 bench/plot.py [-o DIR] RESULTS.csv ...
Writes DIR/<csv name>-<op>.png (DIR defaults to the CSV's folder) and prints each path.
Needs matplotlib (scripts/install_deps.sh plot, or python3 -m pip install matplotlib).
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
    sys.exit("plot.py: needs matplotlib: python3 -m pip install matplotlib "
             "(or scripts/install_deps.sh plot)")

STYLE = {"loom": "o-", "nccl": "s--", "mpi": "s--", "gloo": "^--", "memcpy": "k:"}
LABEL = {"memcpy": "memcpy bound (per process)"}


def series(path):
    """{op: {source: [(bytes, busbw)]}} plus the memcpy bound, which belongs to every op."""
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("op")]
    out, bound, ranks = {}, [], set()
    for r in rows:
        source = r.get("source") or "loom"
        size, busbw = int(r["bytes"]), number(r["oop_busbw"])
        if busbw is None:
            continue
        if source == "memcpy":
            bound.append((size, busbw))
            continue
        ranks.add(r["nranks"])
        if r.get("dtype") not in (None, "float"):
            continue
        out.setdefault(r["op"], {}).setdefault(source, []).append((size, busbw))
        nccl = number(r.get("oop_nccl_busbw"))
        if nccl is not None:
            out[r["op"]].setdefault("nccl", []).append((size, nccl))
    for op in out:
        if bound:
            out[op]["memcpy"] = bound
    return out, "/".join(sorted(ranks))


def main(argv):
    args = argv[1:]
    outdir = None
    if args[:1] == ["-o"]:
        outdir, args = args[1], args[2:]
    if not args:
        sys.stderr.write(__doc__)
        return 2
    for path in args:
        ops, ranks = series(path)
        name = os.path.splitext(os.path.basename(path))[0]
        where = outdir or os.path.dirname(os.path.abspath(path))
        for op, sources in ops.items():
            fig, ax = plt.subplots(figsize=(8, 5))
            for source, points in sources.items():
                points.sort()
                ax.plot([p[0] for p in points], [p[1] for p in points], STYLE.get(source, "x-"),
                        label=LABEL.get(source, source))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel("bus bandwidth (GB/s)")
            ax.set_title(f"{op}, {ranks} ranks ({name})")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
            png = os.path.join(where, f"{name}-{op}.png")
            fig.savefig(png, dpi=100, bbox_inches="tight")
            plt.close(fig)
            print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
