#!/usr/bin/env bash
# What LOOM_TRACE costs a job: loom-bench with the trace off (A) and on (B), and off again (A2,
# the null pair), interleaved round after round (the order turns each round) in one session.
#
#   bench/trace_ab.sh [BUILD] [OUTDIR]     RANKS (8), ROUNDS (10), ITERS (100), SIZES ("1K 1M"),
#                                          DEVICE (cpu: the target is CPU ranks, also on a GPU host)
# Prints per size the median over rounds of B/A and of A2/A (the noise); raw CSVs in OUTDIR.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-$(mktemp -d /tmp/trace-ab-XXXXXX)}
ranks=${RANKS:-8} rounds=${ROUNDS:-10} iters=${ITERS:-100}
mkdir -p "$out"
trace_dir=$(mktemp -d /tmp/trace-ab-files-XXXXXX)
trap 'rm -rf "$trace_dir"' EXIT

run() {  # variant round
  local env=()
  [[ $1 == B ]] && env=(LOOM_TRACE="$trace_dir")
  rm -rf "${trace_dir:?}"/*
  for size in ${SIZES:-1K 1M}; do
    env "${env[@]}" "$build/tools/loomrun" -n "$ranks" --timeout 300 -- "$build/tools/loom-bench" \
      allreduce --device "${DEVICE:-cpu}" -b "$size" -e "$size" -n "$iters" -w 10 --csv "$out/$1-$2-$size.csv" >/dev/null
  done
}

for ((r = 1; r <= rounds; ++r)); do
  if ((r % 2)); then order="A B A2"; else order="A2 B A"; fi
  for v in $order; do run "$v" "$r"; done
done

python3 - "$out" "$rounds" ${SIZES:-1K 1M} <<'PY'
import csv, os, statistics, sys
out, rounds, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def us(variant, r, size):
    with open(os.path.join(out, f"{variant}-{r}-{size}.csv")) as f:
        row = list(csv.DictReader(f))[0]
    return float(row["oop_us"])
print(f"{'size':>6} {'trace on / off (B/A)':>24} {'null (A2/A)':>14}   per-round B/A")
for size in sizes:
    b = [us("B", r, size) / us("A", r, size) for r in range(1, rounds + 1)]
    n = [us("A2", r, size) / us("A", r, size) for r in range(1, rounds + 1)]
    print(f"{size:>6} {statistics.median(b):>24.3f} {statistics.median(n):>14.3f}   "
          + " ".join(f"{x:.2f}" for x in b))
PY
