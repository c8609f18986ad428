#!/usr/bin/env bash
# rudp vs Loom's TCP transport on one host without network namespaces (the GPU hosts, containers):
# two ranks as two fake nodes (tests/api/fake_nodes.sh) over loopback, so both transports carry
# every byte between them. sendrecv and allreduce, small (8 B-64 KiB, 200 calls), 1-16 MiB (30)
# and 256 MiB (3), tcp and rudp interleaved REPS times; with BASE, another build's rudp too.
# Loopback's MTU is 65536: each rudp datagram is a whole 64 KiB, so this measures per-call and
# per-byte costs, not the GSO trains of a 1500-byte link (bench/rudp_vs_tcp.sh does those).
# Usage: bench/rudp_loopback.sh BUILD_DIR [OUT.txt]; environment: REPS (3), BASE (a build dir),
#   BIG (the large size, 256M).
# Output lines: "REP CONFIG OP | size:us_per_call ...".
set -uo pipefail
BUILD=$(cd "$1" && pwd)
OUT=${2:-/dev/stdout}
REPS=${REPS:-3}
BASE=${BASE:+$(cd "$BASE" && pwd)}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LOOM_JOB_SECRET
LOOM_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
run() {  # label build transport op sizes...
  local label=$1 build=$2 transport=$3 op=$4
  shift 4
  local line
  line=$(LOOM_TRANSPORT=$transport timeout 300 "$build/tools/loomrun" -n 2 --timeout 250 -- \
    "$HERE/../tests/api/fake_nodes.sh" "A B" "$build/tools/loom-bench" "$op" "$@" -w 2 -c 1 2>&1 |
    grep -E '^\[0\] +[0-9]' | awk '{printf "%s:%s ", $2, $7}')
  echo "$label $op | $line"
}
configs=("tcp $BUILD tcp" "rudp $BUILD rudp")
[[ -n "$BASE" ]] && configs+=("base $BASE rudp")
{
  for ((rep = 1; rep <= REPS; ++rep)); do
    for op in sendrecv allreduce; do
      for cfg in "${configs[@]}"; do
        read -r label build transport <<<"$cfg"
        run "$rep $label" "$build" "$transport" "$op" -b 8 -e 64K -f 8 -n 200
        run "$rep $label" "$build" "$transport" "$op" -b 1M -e 16M -f 16 -n 30
        run "$rep $label" "$build" "$transport" "$op" -b ${BIG:-256M} -e ${BIG:-256M} -n 3
      done
    done
  done
} >"$OUT"
