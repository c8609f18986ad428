#!/usr/bin/env bash
# What the default mismatch check (LOOM_CHECK=1) costs: loom-bench with the check on and off,
# interleaved run by run in one job (same machine, same moment), REPS times each, and per size the
# median and the minimum time (out-of-place) of each and their ratios. Usage:
#   bench/check_cost.sh [BUILD] [REPS] [MAXBYTES] [RANKS...]   (defaults: build 5 64M 2 4)
#   OPS="allreduce broadcast" (default) picks the collectives; extra loom-bench flags in BENCH_ARGS;
#   SEPARATE_NODES=1 puts every rank on a fake node of its own (TCP between all ranks).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${1:-build}
REPS=${2:-5}
MAXBYTES=${3:-64M}
shift $(($# < 3 ? $# : 3))
RANKS=("$@")
((${#RANKS[@]})) || RANKS=(2 4)
OPS=${OPS:-allreduce broadcast}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for n in "${RANKS[@]}"; do
  wrap=()
  if [[ -n ${SEPARATE_NODES:-} ]]; then
    wrap=(tests/api/fake_nodes.sh "$(seq -s ' ' -f 'n%g' 0 $((n - 1)))")
  fi
  for op in $OPS; do
    for rep in $(seq "$REPS"); do
      for check in 1 0; do
        LOOM_CHECK=$check "$BUILD/tools/loomrun" -n "$n" --timeout 600 -- "${wrap[@]}" "$BUILD/tools/loom-bench" \
          "$op" -b 8 -e "$MAXBYTES" -f 8 -c 0 ${BENCH_ARGS:-} --csv "$out/$op-$n-$check-$rep.csv" \
          >/dev/null
      done
    done
  done
done
python3 - "$out" <<'EOF'
import csv, glob, os, statistics, sys
from collections import defaultdict
times = defaultdict(list)  # (op, nranks, bytes, check) -> out-of-place times (us)
for path in glob.glob(os.path.join(sys.argv[1], "*.csv")):
    check = os.path.basename(path).split("-")[2]
    for row in csv.DictReader(line for line in open(path) if not line.startswith("#")):
        times[(row["op"], int(row["nranks"]), int(row["bytes"]), check)].append(float(row["oop_us"]))
# Medians, and minima: on a loaded machine the fastest run is the one least disturbed.
print("| collective | ranks | bytes | off: median (us) | on: median (us) | on/off | off: min | on: min | on/off (min) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for (op, n, size, check) in sorted(k for k in times if k[3] == "0"):
    off, on = times[(op, n, size, "0")], times[(op, n, size, "1")]
    moff, mon = statistics.median(off), statistics.median(on)
    print(f"| {op} | {n} | {size} | {moff:.2f} | {mon:.2f} | {mon / moff:.3f} | "
          f"{min(off):.2f} | {min(on):.2f} | {min(on) / min(off):.3f} |")
EOF
