#!/usr/bin/env bash
# The ring allreduce plan (loom.plan.examples, fused and unfused) against Loom's built-in ring on
# CPU ranks of this host, interleaved: each repeat runs the three one after another, every size,
# so that a busy machine's drift falls on all three alike. Prints per size the median time of
# each (out of place) and the plan/ring ratios with their spread over repeats.
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
for rep in $(seq 1 "$REPEATS"); do
  run ring "" allreduce:ring
  run fused "$OUT/fused" "allreduce:plan:ring_allreduce_$NRANKS"
  run unfused "$OUT/unfused" "allreduce:plan:ring_allreduce_$NRANKS"
done
python3 - "$OUT" "$REPEATS" <<'PY'
import csv, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def times(name, rep):
    with open(f"{out}/{name}.{rep}.csv") as f:
        rows = list(csv.DictReader(f))
    want = "ring" if name == "ring" else "plan:"
    assert all(r["algo"].startswith(want) for r in rows), (name, {r["algo"] for r in rows})
    return {int(r["bytes"]): float(r["oop_us"]) for r in rows}
runs = {n: [times(n, r) for r in range(1, reps + 1)] for n in ("ring", "fused", "unfused")}
print("| size | ring us | fused plan us | unfused plan us | fused/ring (min-max) | unfused/fused |")
print("|---:|---:|---:|---:|---|---:|")
for size in sorted(runs["ring"][0]):
    med = {n: statistics.median(r[size] for r in runs[n]) for n in runs}
    ratios = [runs["fused"][i][size] / runs["ring"][i][size] for i in range(reps)]
    print(f"| {size} | {med['ring']:.1f} | {med['fused']:.1f} | {med['unfused']:.1f} | "
          f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
          f"{med['unfused'] / med['fused']:.2f} |")
PY
