#!/usr/bin/env python3
"""Prints markdown tables comparing Loom with its peers from the CSV files bench/run_cpu.sh
writes (loom-bench's --csv format with a leading `source` column: loom, mpi, gloo, memcpy).

Usage: python3 bench/tables.py [--peak GBPS] [RESULTS.csv ...]
       (default: every bench/results/*.csv)

Per op, one row per size:
  size | loom us | (min-max) | mpi us | gloo us | loom/mpi | loom busbw GB/s | mpi busbw
    | write bound GB/s | loom algbw / write bound
(a peer absent from the file gets no columns). A file may hold several runs of the same sizes
(make run repeats its measurement): each figure is then the median of the runs, and the
(min-max) column gives the spread of Loom's times; a size whose slowest run took more than
1.5x its fastest is marked "!", since the machine was busy while it ran.
loom/mpi is the time ratio (below 1: Loom is faster). Loom's out-of-place numbers are used,
since the peers measure out-of-place only. The write bound is what each of NRANKS processes
writes per second while all write at once (bench/peers/memcpy_bound.c, op "write"), at the same
size (or the nearest size measured): every rank of an allreduce or allgather of S bytes must
write its S bytes of output, so Loom's algbw (S / time) cannot exceed it: the last column is at
most 1. (busbw is no such quantity: it scales algbw by the ring's factor, 2(n-1)/n for allreduce.
Nor is memcpy's rate, op "memcpy": a collective that streams its output past the caches, or whose
ranks read the same lines through a shared cache, can beat a private memcpy; it is printed as a
reference.)

GPU files (loom-bench --csv on CUDA, as bench/run_gpu.sh writes them: no `source` column, NCCL's
columns beside Loom's) get one table each:
  size | loom us | nccl us | loom/nccl | loom busbw GB/s | nccl busbw | loom busbw / peak
    | nccl busbw / peak
where peak is the NVLink bandwidth per GPU and direction (--peak GBPS, default 450: H100/H200).
"""

import csv
import glob
import math
import os
import sys

OP_ORDER = ["allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall",
            "gather", "scatter", "sendrecv"]


def number(text):
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def human_bytes(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    # Sizes rounded down to a multiple of nranks elements: the exact count says more.
    return f"{n:,} B"


def fmt(v):
    if v is None:
        return "-"
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) < 1:
        return f"{v:.3g}"
    return f"{v:.2f}"


def load(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("source") and r.get("op")]
    for r in rows:
        r["bytes"] = int(r["bytes"])
        r["nranks"] = int(r["nranks"])
    return rows


def pick(rows, source, op):
    """Rows of one source and op by size, a list per size (one per run); float preferred when
    several types were run."""
    chosen = {}
    for r in rows:
        if r["source"] != source or r["op"] != op:
            continue
        old = chosen.get(r["bytes"])
        if old is None or (r["dtype"] == "float" and old[0]["dtype"] != "float"):
            chosen[r["bytes"]] = [r]
        elif r["dtype"] == old[0]["dtype"]:
            old.append(r)
    return chosen


def median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def summary(runs):
    """(median us, algbw GB/s, busbw GB/s, min us, max us) of one size's runs, out of place."""
    if not runs:
        return (None,) * 5
    us = [number(r["oop_us"]) for r in runs]
    us = [u for u in us if u]
    if not us:
        return (None,) * 5
    mid = median(us)
    nbytes = runs[0]["bytes"]
    factor = (number(runs[0]["oop_busbw"]) or 0) / (number(runs[0]["oop_algbw"]) or 1)
    algbw = nbytes / mid / 1e3
    return mid, algbw, algbw * factor, min(us), max(us)


def is_gpu(path):
    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
    return "oop_nccl_us" in header and "source" not in header


def render_gpu(path, out, peak):
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("op")]
    name = os.path.splitext(os.path.basename(path))[0]
    if not rows:
        out.write(f"No results in {path}\n\n")
        return
    first = rows[0]
    graph = " graph," if first.get("graph") == "1" else ""
    out.write(f"### {name}: {first['op']} ({first['dtype']}, {first['redop']},{graph} "
              f"{first['nranks']} ranks)\n\n")
    out.write(f"| size | loom us | nccl us | loom/nccl | loom busbw GB/s | nccl busbw "
              f"| loom busbw / {peak:g} | nccl busbw / {peak:g} |\n")
    out.write("|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    wrong = 0
    for r in rows:
        l_us, n_us = number(r["oop_us"]), number(r["oop_nccl_us"])
        l_bus, n_bus = number(r["oop_busbw"]), number(r["oop_nccl_busbw"])
        ratio = l_us / n_us if l_us and n_us else None
        l_frac = l_bus / peak if l_bus is not None else None
        n_frac = n_bus / peak if n_bus is not None else None
        wrong += sum(int(number(r[c]) or 0) for c in ("oop_wrong", "ip_wrong"))
        out.write(f"| {human_bytes(int(r['bytes']))} | {fmt(l_us)} | {fmt(n_us)} | {fmt(ratio)} "
                  f"| {fmt(l_bus)} | {fmt(n_bus)} | {fmt(l_frac)} | {fmt(n_frac)} |\n")
    algos = sorted({r["algo"] for r in rows})
    notes = ["Loom algorithms: " + ", ".join(algos)]
    if wrong:
        notes.append(f"**{wrong} wrong elements in Loom's check**")
    out.write("\n" + "; ".join(notes) + ".\n\n")


def render(path, out):
    rows = load(path)
    if not rows:
        out.write(f"No results in {path}\n\n")
        return
    name = os.path.splitext(os.path.basename(path))[0]
    ranks = sorted({r["nranks"] for r in rows if r["source"] != "memcpy"} or
                   {r["nranks"] for r in rows})
    out.write(f"## {name}\n\n")
    copies = pick(rows, "memcpy", "memcpy")
    writes = pick(rows, "memcpy", "write")
    bound = {b: median(number(r["oop_busbw"]) for r in runs) for b, runs in writes.items()}
    if copies:
        top = max(copies)
        procs = copies[top][0]["nranks"]
        copy = median(number(r["oop_busbw"]) for r in copies[top])
        out.write(f"{procs} processes at once, each on {human_bytes(top)}: "
                  f"{fmt(bound.get(top))} GB/s written per process (the write bound), "
                  f"{fmt(copy)} GB/s copied per process (memcpy).\n\n")
    ops = sorted({r["op"] for r in rows if r["source"] != "memcpy"},
                 key=lambda o: OP_ORDER.index(o) if o in OP_ORDER else len(OP_ORDER))
    for op in ops:
        render_op(rows, op, ranks, bound, out)


def render_op(rows, op, ranks, bounds, out):
    loom, mpi, gloo = (pick(rows, s, op) for s in ("loom", "mpi", "gloo"))
    sizes = sorted(set(loom) | set(mpi) | set(gloo))
    sample = next(iter(loom.values() or mpi.values() or gloo.values()))[0]
    runs = max((len(v) for v in loom.values()), default=1)
    out.write(f"### {op} ({sample['dtype']}, {sample['redop']}, "
              f"{'/'.join(map(str, ranks))} ranks"
              f"{f'; median of {runs} runs' if runs > 1 else ''})\n\n")
    noisy = []

    def spread(b, l, m, g, bound):
        if l[0] is None:
            return "-"
        if l[4] > 1.5 * l[3]:
            noisy.append(b)
        return f"{fmt(l[3])}-{fmt(l[4])}{' !' if l[4] > 1.5 * l[3] else ''}"

    # Peers that did not run (make run measures Loom and the bound only) get no column.
    cols = [("size", lambda b, l, m, g, bound: human_bytes(b)),
            ("loom us", lambda b, l, m, g, bound: fmt(l[0]))]
    if runs > 1:
        cols.append(("(min-max)", spread))
    if mpi:
        cols.append(("mpi us", lambda b, l, m, g, bound: fmt(m[0])))
    if gloo:
        cols.append(("gloo us", lambda b, l, m, g, bound: fmt(g[0])))
    if mpi:
        cols.append(("loom/mpi", lambda b, l, m, g, bound:
                     fmt(l[0] / m[0] if l[0] and m[0] else None)))
    cols.append(("loom busbw GB/s", lambda b, l, m, g, bound: fmt(l[2])))
    if mpi:
        cols.append(("mpi busbw", lambda b, l, m, g, bound: fmt(m[2])))
    if bounds:
        cols.append(("write bound GB/s", lambda b, l, m, g, bound: fmt(bound)))
        cols.append(("loom algbw / write bound", lambda b, l, m, g, bound:
                     fmt(l[1] / bound if l[1] is not None and bound else None)))
    out.write("| " + " | ".join(c[0] for c in cols) + " |\n")
    out.write("|" + "---:|" * len(cols) + "\n")
    wrong = 0
    for nbytes in sizes:
        lr = loom.get(nbytes, [])
        bound = bounds[nearest_key(bounds, nbytes)] if bounds else None
        for r in lr:
            wrong += sum(int(number(r[c]) or 0) for c in ("oop_wrong", "ip_wrong"))
        cells = [c[1](nbytes, summary(lr), summary(mpi.get(nbytes, [])),
                      summary(gloo.get(nbytes, [])), bound) for c in cols]
        out.write("| " + " | ".join(cells) + " |\n")
    algos = sorted({r["algo"] for runs in loom.values() for r in runs})
    notes = []
    if algos:
        notes.append("Loom algorithms: " + ", ".join(algos))
    if noisy:
        notes.append(f"! = the slowest of the {runs} runs took more than 1.5x the fastest: the "
                     "machine was busy; rerun on a quiet machine before quoting these sizes")
    if wrong:
        notes.append(f"**{wrong} wrong elements in Loom's check**")
    out.write("\n" + ("; ".join(notes) + ".\n\n" if notes else ""))


def nearest_key(table, nbytes):
    if nbytes in table:
        return nbytes
    return min(table, key=lambda b: abs(math.log(max(b, 1)) - math.log(max(nbytes, 1))))


def main(argv):
    paths = argv[1:]
    peak = 450.0
    if "--peak" in paths:
        at = paths.index("--peak")
        try:
            peak = float(paths[at + 1])
        except (IndexError, ValueError):
            sys.stderr.write("tables.py: --peak needs a bandwidth in GB/s\n")
            return 2
        del paths[at:at + 2]
    if not paths:
        here = os.path.dirname(os.path.abspath(__file__))
        paths = sorted(glob.glob(os.path.join(here, "results", "*.csv")))
    if not paths:
        sys.stderr.write("tables.py: no CSV files given or found in bench/results/\n")
        return 2
    for path in paths:
        if is_gpu(path):
            render_gpu(path, sys.stdout, peak)
        else:
            render(path, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
