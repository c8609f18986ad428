#!/usr/bin/env bash
# What the default mismatch check (LOOM_CHECK=1) costs: loom-check-cost (tools/check_cost_bench.cpp)
# times blocks of calls on two communicators of the same ranks, one with the check and one without,
# alternating round by round in one job, so that placement and machine noise fall on both alike.
# Usage:
#   bench/check_cost.sh [BUILD] [MAXBYTES] [RANKS...]   (defaults: build 64M 2 4)
#   OPS picks the collectives (default: allreduce broadcast reduce allgather reducescatter
#   alltoall); JOBS (3 jobs per case), ROUNDS (15) and ITERS (200 calls per block, fewer above
#   256 KiB); extra loom-check-cost flags in BENCH_ARGS (--null: the check off on both sides, the
#   noise floor); SEPARATE_NODES=1 puts every rank on a fake node of its own (TCP between all
#   ranks); PIN=1 pins local rank i to the first CPU of the i-th physical core.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${1:-build}
MAXBYTES=${2:-64M}
shift $(($# < 2 ? $# : 2))
RANKS=("$@")
((${#RANKS[@]})) || RANKS=(2 4)
OPS=${OPS:-allreduce broadcast reduce allgather reducescatter alltoall}
[[ -x $BUILD/tools/loom-check-cost ]] || cmake --build "$BUILD" --target loom-check-cost loomrun
pin=()
if [[ -n ${PIN:-} ]]; then
  cores=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -u | cut -d, -f1 | tr '\n' ' ')
  # shellcheck disable=SC2016  # expanded by the rank's shell
  pin=(env "CORE_CPUS=$cores" bash -c 'cpus=($CORE_CPUS); exec taskset -c "${cpus[$LOCAL_RANK]}" "$@"' pin)
fi
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for n in "${RANKS[@]}"; do
  wrap=("${pin[@]}")
  if [[ -n ${SEPARATE_NODES:-} ]]; then
    wrap+=(tests/api/fake_nodes.sh "$(seq -s ' ' -f 'n%g' 0 $((n - 1)))")
  fi
  for op in $OPS; do
    # JOBS jobs per case: each has its own arenas, whose placement alone moves sub-microsecond
    # times by several percent; the median over jobs is reported with their spread.
    for _ in $(seq "${JOBS:-3}"); do
      "$BUILD/tools/loomrun" -n "$n" --timeout 600 -- "${wrap[@]}" "$BUILD/tools/loom-check-cost" \
        --op "$op" -b 8 -e "$MAXBYTES" -f 8 -r "${ROUNDS:-15}" -n "${ITERS:-200}" ${BENCH_ARGS:-} |
        sed -n 's/^\[0\] //; /^| [a-z]* | [0-9]/p' >>"$rows"
    done
  done
done
python3 - "$rows" <<'PY'
import statistics, sys
from collections import defaultdict
jobs = defaultdict(list)  # (op, ranks, bytes) -> [(off, on, ratio)] one per job
order = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.strip().strip("|").split("|")]
    key = (f[0], int(f[1]), int(f[2]))
    if key not in jobs:
        order.append(key)
    jobs[key].append((float(f[3]), float(f[4]), float(f[5])))
print("| collective | ranks | bytes | off (us) | on (us) | on/off | on/off per job |")
print("|---|---:|---:|---:|---:|---:|---|")
for key in order:
    runs = jobs[key]
    med = lambda i: statistics.median(r[i] for r in runs)
    per = " ".join(f"{r[2]:.3f}" for r in runs)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {med(0):.3f} | {med(1):.3f} | {med(2):.3f} | {per} |")
PY
