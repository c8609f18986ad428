#!/usr/bin/env bash
# NCCL programs use execution plans unchanged: nccl_api_test (written only against nccl.h) through
# the shim on Loom's CPU communicators, with the example plans in LOOM_PLAN_DIR (every rank count;
# no LOOM_ALGO, which would force a plan onto its split communicators of other sizes too): every
# check passes, and Loom's line per call (LOOM_DEBUG_SUBSYS=COLL) shows that every allreduce,
# allgather, reduce-scatter and alltoall ran a plan, on every rank.
#   plans_test.sh LOOMRUN NCCL_API_TEST PLAN_DIR RANKS [NCCL_API_TEST ARGS...]
# The shim's host path by default (LOOM_NCCL_DEVICE=cpu); LOOM_NCCL_DEVICE=cuda runs the plans on
# CUDA communicators, as the plan-interpreting kernel (tests/shim/gpu.sh).
set -u
loomrun=$1 test=$2 plans=$3 n=$4
shift 4
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
if ! LOOM_NCCL_DEVICE=${LOOM_NCCL_DEVICE:-cpu} LOOM_NCCL_FALLBACK=off LOOM_TIMEOUT=60 LOOM_PLAN_DIR="$plans" \
  LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=COLL LOOM_DEBUG_FILE="$logs/loom.%p.log" \
  "$loomrun" -n "$n" --timeout 120 -- "$test" "$@"; then
  echo "FAIL: nccl_api_test with LOOM_PLAN_DIR=$plans"
  exit 1
fi
calls='LOOM INFO (allreduce|allgather|reducescatter|alltoall) #[0-9]+ count'
failed=0
for op in allreduce allgather reducescatter alltoall; do
  for ((r = 0; r < n; ++r)); do
    if ! cat "$logs"/*.log | grep -Eq "\[$r\] LOOM INFO $op #[0-9]+ count .* -> plan:"; then
      echo "FAIL: no $op on rank $r ran a plan"
      failed=1
    fi
  done
done
others=$(cat "$logs"/*.log | grep -E "$calls" | grep -v -- '-> plan:' | head -5)
if [[ -n $others ]]; then
  echo "FAIL: calls that did not run a plan:"
  echo "$others"
  failed=1
fi
ran=$(cat "$logs"/*.log | grep -Ec -- '-> plan:')
[[ $failed == 0 ]] && echo "PASS: $ran calls of $n ranks ran plans"
exit $failed
