#!/usr/bin/env bash
# Two ranks on one host in different PID namespaces (containers that share network and IPC but
# not PIDs). Rank 1 joins the allreduce late, so rank 0's liveness check runs while it waits; its
# pid means nothing in rank 0's namespace. Regression: rank 0 reported "rank 1 exited".
# Usage: pid_namespace_test.sh path/to/fault_rank
# Exit 77 (skipped) where namespaces cannot be created.
set -uo pipefail
fault_rank=$1
unshare --pid --fork true 2>/dev/null || { echo "cannot create a PID namespace here: skipped"; exit 77; }
port=$((20000 + RANDOM % 12000)) # under the ephemeral ports (32768-) other tests connect from
export LOOM_COMM_ID=127.0.0.1:$port LOOM_WORLD_SIZE=2 LOOM_TIMEOUT=20
export LOOM_JOB_SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
LOOM_RANK=0 timeout 60 "$fault_rank" late 500 >"$out/0" &
rank0=$!
# Burn a few hundred pids inside the new namespace so rank 1's pid is one that rank 0's
# namespace does not have (and not 1, which every namespace has); rank 1 then joins late.
LOOM_RANK=1 timeout 60 unshare --pid --fork sh -c \
  'i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done; "$0" late 500' "$fault_rank" >"$out/1" &
rank1=$!
wait $rank0 $rank1
cat "$out/0" "$out/1"
# Each rank reports its result as a line "result rank=R code=C ..."; code 0 is success.
grep -q "^result rank=0 code=0 " "$out/0" && grep -q "^result rank=1 code=0 " "$out/1"
