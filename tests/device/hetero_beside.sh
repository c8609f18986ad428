#!/usr/bin/env bash
# Composed collectives of a heterogeneous communicator whose CPU clusters each sit on one (fake)
# node, so each cluster has an arena and the exchange runs on network channels: every collective
# bit-exact (emu_collectives_test), and each leader's exchange chunks moved beside its cluster's
# arena phases (the INFO line of every such call says how many), not one phase after another.
#
# Usage: hetero_beside.sh LOOMRUN EMU_COLLECTIVES_TEST NODES PLACEMENT LEADERS
#   NODES: fake node per rank ("A A B B B"); LEADERS: the ranks that must have exchanged beside.
# The environment brings LOOM_DEVICE_PLUGIN, LOOM_CLUSTER_SPLIT, LOOM_HETERO_ALGO=composed and
# a small LOOM_HETERO_CHUNK_BYTES (the test's sizes then span several chunks).
set -uo pipefail
(($# == 5)) || { sed -n '2,10p' "$0"; exit 2; }
loomrun=$1 test=$2 nodes=$3 placement=$4 leaders=$5
log=$(mktemp)
trap 'rm -f "$log"' EXIT
n=${#placement}
LOOM_TEST_PLACEMENT=$placement LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=COLL \
  "$loomrun" -n "$n" --timeout 900 -- "$(dirname "$0")/../api/fake_nodes.sh" "$nodes" "$test" \
  >"$log" 2>&1
rc=$?
grep -E "^\[[0-9]+\] \[ +(PASSED|FAILED) +\]|Failure|error:" "$log" | head -40
if ((rc != 0)); then
  echo "FAIL: emu_collectives_test exited $rc"
  exit 1
fi
failed=0
for r in $leaders; do
  calls=$(grep -E "^\[$r\] .*: the cluster's phases in [0-9]+ chunks of [0-9]+ B; [1-9][0-9]* of them exchanged beside" "$log" | wc -l)
  if ((calls == 0)); then
    echo "FAIL: rank $r never exchanged a chunk beside its cluster's phases"
    failed=1
  else
    echo "rank $r: $calls calls exchanged chunks beside its cluster's phases"
  fi
done
exit $failed
