#!/usr/bin/env python3
"""Markdown tables of loom-hetero-bench runs, LOOM_HETERO_ALGO=flat against composed.

  bench/hetero_table.py DIR|FILE

DIR holds one loom-hetero-bench output per run, named PLACEMENT_OP_ALGO_REP.txt (ALGO flat or
composed, REP any tag); FILE the same outputs one after the other, each after a line
"=== PLACEMENT_OP_ALGO_REP" (bench/results/hetero-ops-vm-2.txt). Each cell is the median over the repetitions; the staged, copies and
CPU columns are medians over both algorithms' runs (they do not depend on it)."""
import collections
import pathlib
import statistics
import sys

from tables import human_bytes  # bench/tables.py: "4 MiB", "524,280 B"

OPS = ["allreduce", "broadcast", "reduce", "allgather", "reducescatter"]


def rows(text):
    out = {}
    for line in text.splitlines():
        p = line.split()
        if len(p) == 9 and p[0].isdigit():
            out[int(p[0])] = dict(loom=float(p[1]), staged=float(p[3]), copies=float(p[4]),
                                  cpu=float(p[5]), check=p[8])
    return out


def main(folder):
    path = pathlib.Path(folder)
    if path.is_dir():
        outputs = [(f.stem, f.read_text()) for f in sorted(path.glob("*_*_*_*.txt"))]
    else:
        parts = path.read_text().split("=== ")[1:]
        outputs = [tuple(p.split("\n", 1)) for p in parts]
    runs = collections.defaultdict(list)  # (placement, op, algo) -> [rows]
    for name, text in outputs:
        placement, op, algo, _ = name.strip().split("_")
        runs[(placement, op, algo)].append(rows(text))
    for placement in sorted({k[0] for k in runs}):
        for op in OPS:
            flat, comp = runs.get((placement, op, "flat")), runs.get((placement, op, "composed"))
            if not flat or not comp:
                continue
            print(f"\n{placement} {op} (median of {len(flat)} and {len(comp)} runs):\n")
            print("| bytes | flat µs | composed µs | composed / flat | staged by hand µs | "
                  "copies µs | CPU ranks' own µs | check |")
            print("|---:|---:|---:|---:|---:|---:|---:|---|")
            for b in sorted(flat[0]):
                med = lambda rs, k: statistics.median(r[b][k] for r in rs if b in r)
                f, c = med(flat, "loom"), med(comp, "loom")
                ok = all(r[b]["check"] == "ok" for r in flat + comp if b in r)
                print(f"| {human_bytes(b)} | {f:.0f} | {c:.0f} | {c / f:.2f} | "
                      f"{med(flat + comp, 'staged'):.0f} | {med(flat + comp, 'copies'):.0f} | "
                      f"{med(flat + comp, 'cpu'):.0f} | {'ok' if ok else 'WRONG'} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
