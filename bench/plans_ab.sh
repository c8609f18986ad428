#!/usr/bin/env bash
# The ring allreduce plan (loom.plan.examples, fused and unfused) against Loom's built-in ring on
# CPU ranks of this host, interleaved: each repeat runs the four one after another, every size,
# in an order that rotates from repeat to repeat, so that a busy machine's drift falls on all
# alike. The fourth is the built-in ring again: the null A/B, whose ratio to the first ring shows
# how far two runs of the same code differ here (a plan/ring ratio inside that spread is noise).
# Prints per size the median time of each (out of place) and the ratios with their spread.
#
# Usage: bench/plans_ab.sh NRANKS [REPEATS] [MAXBYTES]    (defaults 3 and 64M)
# Expects build/tools/loomrun and build/tools/loom-bench; writes the plans with python3 (the DSL
# is pure Python). Environment: BUILD_DIR, ITERS (loom-bench -n, default 10), OUT (a directory
# for the CSVs; default a temporary one).
set -euo pipefail
[[ $# -ge 1 ]] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
NRANKS=$1
REPEATS=${2:-3}
MAXBYTES=${3:-64M}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
ITERS=${ITERS:-10}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT/fused" "$OUT/unfused"
python3 - "$ROOT" "$OUT" "$NRANKS" <<'PY'
import sys
sys.path.insert(0, sys.argv[1] + "/python/loom")
import plan
n = int(sys.argv[3])
for variant in ("fused", "unfused"):
    plan.write_examples(f"{sys.argv[2]}/{variant}", n, fuse=variant == "fused",
                        names=["ring_allreduce"])
PY
run() {  # NAME PLAN_DIR ALGO
  LOOM_PLAN_DIR=$2 LOOM_ALGO=$3 "$BUILD_DIR/tools/loomrun" -n "$NRANKS" -- \
    "$BUILD_DIR/tools/loom-bench" allreduce -b 1K -e "$MAXBYTES" -f 4 -n "$ITERS" -w 3 -c 0 \
    --csv "$OUT/$1.$rep.csv" > /dev/null
}
one() {  # NAME
  case $1 in
    ring | null) run "$1" "" allreduce:ring ;;
    fused | unfused) run "$1" "$OUT/$1" "allreduce:plan:ring_allreduce_$NRANKS" ;;
  esac
}
order=(ring fused null unfused)
for rep in $(seq 1 "$REPEATS"); do
  for i in 0 1 2 3; do one "${order[$(((i + rep - 1) % 4))]}"; done
done
python3 - "$OUT" "$REPEATS" <<'PY'
import csv, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def times(name, rep):
    with open(f"{out}/{name}.{rep}.csv") as f:
        rows = list(csv.DictReader(f))
    want = "ring" if name in ("ring", "null") else "plan:"
    assert all(r["algo"].startswith(want) for r in rows), (name, {r["algo"] for r in rows})
    return {int(r["bytes"]): float(r["oop_us"]) for r in rows}
runs = {n: [times(n, r) for r in range(1, reps + 1)]
        for n in ("ring", "null", "fused", "unfused")}
def ratios(a, b, size):  # a/b per repeat: median (min-max)
    x = [runs[a][i][size] / runs[b][i][size] for i in range(reps)]
    return f"{statistics.median(x):.2f} ({min(x):.2f}-{max(x):.2f})"
print("| size | ring us | fused plan us | unfused plan us | fused/ring | null: ring/ring | "
      "unfused/fused |")
print("|---:|---:|---:|---:|---|---|---|")
for size in sorted(runs["ring"][0]):
    med = {n: statistics.median(r[size] for r in runs[n]) for n in runs}
    print(f"| {size} | {med['ring']:.1f} | {med['fused']:.1f} | {med['unfused']:.1f} | "
          f"{ratios('fused', 'ring', size)} | {ratios('null', 'ring', size)} | "
          f"{ratios('unfused', 'fused', size)} |")
PY
