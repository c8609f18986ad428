#!/usr/bin/env bash
# A rank of a heterogeneous communicator killed in the middle of an allreduce: every survivor, of
# either kind, must return an error (emu_fault_test's kill mode) well within the timeout, never
# hang. The ranks are started here, not by loomrun (which would stop the survivors itself).
#
# Usage: hetero_fault.sh EMU_FAULT_TEST PLUGIN PLACEMENT VICTIM   e.g. ... ECCE 0
# FAULT_NODES="A A B B" puts rank i on the fake node named by the i-th word (LOOM_NODE_ID), as
# api/fake_nodes.sh does under loomrun.
set -uo pipefail
(($# == 4)) || { sed -n '2,6p' "$0"; exit 2; }
test=$1 plugin=$2 placement=$3 victim=$4
n=${#placement}
port=$((20000 + RANDOM % 12000)) # under the ephemeral ports (32768-) other tests connect from
export LOOM_WORLD_SIZE=$n LOOM_COMM_ID=127.0.0.1:$port LOOM_TIMEOUT=${LOOM_TIMEOUT:-30}
export LOOM_TEST_PLACEMENT=$placement LOOM_JOB_SECRET
LOOM_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
pids=()
read -ra nodes <<<"${FAULT_NODES:-}"
for ((r = 0; r < n; ++r)); do
  LOOM_NODE_ID=${nodes[$r]:-} LOOM_RANK=$r timeout $((LOOM_TIMEOUT * 3)) "$test" "$plugin" kill "$victim" &
  pids+=($!)
done
failed=0
for ((r = 0; r < n; ++r)); do
  wait "${pids[$r]}"
  rc=$?
  if ((r == victim)); then
    ((rc == 137)) || { echo "FAIL: victim rank $r exited $rc, not SIGKILL"; failed=1; }
  elif ((rc != 0)); then
    echo "FAIL: survivor rank $r (${placement:$r:1}) exited $rc"
    failed=1
  fi
done
((failed == 0)) && echo "all $((n - 1)) survivors of $placement (rank $victim killed) got an error"
exit $failed
