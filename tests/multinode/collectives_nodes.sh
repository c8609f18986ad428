#!/usr/bin/env bash
# collectives_test across network-namespace nodes (netns_lib.sh), one loomrun per node: every
# collective x data type x op x size, bit-exact against the reference, for each placement and
# each algorithm forced in turn; then the fault case: one node's ranks are killed in the middle
# of a collective and the ranks of the other node must each return an error within LOOM_TIMEOUT.
#
# Usage: tests/multinode/collectives_nodes.sh LOOMRUN COLLECTIVES_TEST [FAULT_RANK]
# Environment:
#   PLACEMENTS  space-separated, one --ranks list per node split by '|' (default: all four of
#               "0,1|2,3" contiguous, "0,2|1" interleaved, "0-2|3,4" uneven 3+2, "0,3|1,4|2")
#   ALGOS       default "auto ring pairwise hierarchical". "auto" runs collectives_test's
#               multinode configs (the selector's choice, every collective forced onto
#               ring/pairwise, 1-3 connections, tiny staging). A name runs every collective whose
#               LOOM_ALGO accepts it on several nodes (probed once on fake nodes); a name the
#               build rejects for every collective is skipped with a line saying so.
#   FAULT_OPS   collectives of the fault case (default "allreduce allgather broadcast")
#   SILENT_PEER 1 (default): also stop node 1's ranks (SIGSTOP, connections left open) during an
#               allreduce; the others must end on LOOM_TIMEOUT (5 s there)
#   LOOM_TIMEOUT (default 60; the fault case uses 20), RUN_TIMEOUT (per run, default 900 s)
# Exit: 0 all passed, 1 a run failed, 77 namespaces cannot be created here.
set -uo pipefail

(($# >= 2 && $# <= 3)) || { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
abspath() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
LOOMRUN=$(abspath "$1")
COLLECTIVES=$(abspath "$2")
FAULT_RANK=${3:+$(abspath "$3")}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NODES_SH="$HERE/nodes.sh"
FAKE_NODES="$HERE/../api/fake_nodes.sh"
PLACEMENTS=${PLACEMENTS:-"0,1|2,3 0,2|1 0-2|3,4 0,3|1,4|2"}
ALGOS=${ALGOS:-auto ring pairwise hierarchical}
FAULT_OPS=${FAULT_OPS:-allreduce allgather broadcast}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
KEYS="allreduce broadcast reduce allgather reducescatter alltoall alltoallv gather scatter barrier"
export LOOM_TIMEOUT=${LOOM_TIMEOUT:-60}
export LOOM_JOB_SECRET
LOOM_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')

source "$HERE/netns_lib.sh"
if ! why=$(loomt_can_run); then
  echo "SKIP: $why"
  exit 77
fi

# Sets $forced to the LOOM_ALGO value forcing $1 on every collective that accepts it across
# nodes, probed with fake nodes on this host (LOOM_NODE_ID; init is where LOOM_ALGO is checked).
# Empty: none does; the first refusal goes to $probe_error.
forced=""
probe_error=""
probe_forced() {
  local algo=$1 key out
  forced=""
  probe_error=""
  for key in $KEYS; do
    if out=$(LOOM_ALGO="$key:$algo" LOOM_TIMEOUT=20 "$LOOMRUN" -n 3 --timeout 30 -- \
      "$FAKE_NODES" "A B A" "$COLLECTIVES" --gtest_filter=-* 2>&1); then
      forced+="${forced:+,}$key:$algo"
    elif [[ -z "$probe_error" ]]; then
      probe_error=$(grep -m1 -o 'init failed: .*' <<<"$out" || tail -1 <<<"$out")
    fi
  done
}

failures=0
runs=0
skipped=0
read -r -a placements <<<"$PLACEMENTS"
for algo in $ALGOS; do
  if [[ "$algo" == auto ]]; then
    algo_env="COLLECTIVES_TEST_CONFIGS=multinode"
  else
    probe_forced "$algo"
    if [[ -z "$forced" ]]; then
      echo "SKIP algorithm $algo: this build rejects it at init for every collective ($probe_error)"
      skipped=$((skipped + 1))
      continue
    fi
    algo_env="COLLECTIVES_TEST_CONFIGS=multinode COLLECTIVES_TEST_ALGO=$forced"
  fi
  for placement in "${placements[@]}"; do
    IFS='|' read -r -a lists <<<"$placement"
    k=${#lists[@]}
    cmds=()
    for ((i = 0; i < k; ++i)); do
      cmds+=("env $algo_env $LOOMRUN --nnodes $k --node-rank $i --master \$LOOMT_MASTER:29450 \
        --ranks ${lists[$i]} --timeout $((RUN_TIMEOUT - 30)) -- $COLLECTIVES")
    done
    runs=$((runs + 1))
    echo "== placement $placement, algorithm $algo ($algo_env)"
    dir=$(mktemp -d "${TMPDIR:-/tmp}/loomt-coll.XXXXXX")
    start=$SECONDS
    if "$NODES_SH" -f -q -t "$RUN_TIMEOUT" -o "$dir" -- "${cmds[@]}" 2>"$dir/harness.log"; then
      echo "   passed in $((SECONDS - start)) s"
    else
      echo "FAIL: placement $placement, algorithm $algo"
      grep -hE 'Failure|FAILED|error|Error|timeout' "$dir"/node*.out "$dir"/node*.err \
        "$dir/harness.log" 2>/dev/null | head -20 | sed 's/^/  /'
      failures=$((failures + 1))
    fi
    rm -rf "$dir"
  done
done

# Fault: node 1 holds ranks 1 and 3; rank 1 SIGKILLs itself inside its 51st collective and node
# 1's script then kills rank 3. Not under loomrun, which would stop the survivors itself: Loom's
# own error path is tested. fault_rank's "kill" mode prints, per survivor, the code of the failed
# call and the time from its last successful call to that failure.
if [[ -n "$FAULT_RANK" ]]; then
  fault_timeout=20
  for op in $FAULT_OPS; do
    runs=$((runs + 1))
    echo "== fault: node 1's ranks killed during $op"
    dir=$(mktemp -d "${TMPDIR:-/tmp}/loomt-fault.XXXXXX")
    rank_env="LOOM_WORLD_SIZE=4 LOOM_COMM_ID=\$LOOMT_MASTER:29451 LOOM_TIMEOUT=$fault_timeout"
    run="$FAULT_RANK kill $op 4194304 1"
    LOOM_TIMEOUT=$fault_timeout "$NODES_SH" -q -t $((fault_timeout * 4)) -o "$dir" -- \
      "for r in 0 2; do LOOM_RANK=\$r $rank_env $run & done; wait" \
      "for r in 1 3; do LOOM_RANK=\$r $rank_env $run & done; wait -n; kill -9 \$(jobs -p); \
       wait; true" 2>"$dir/harness.log"
    rc=$?
    # Each survivor: a failed call (code != 0) after good ones (a broadcast chain lets ranks lag a
    # few calls behind the victim), within the timeout.
    good=0
    while read -r line; do
      [[ "$line" =~ code=([0-9]+)\ elapsed_ms=([0-9]+)\ iters=([0-9]+) ]] || continue
      code=${BASH_REMATCH[1]} ms=${BASH_REMATCH[2]} iters=${BASH_REMATCH[3]}
      ((code != 0 && iters >= 10 && ms < fault_timeout * 1000)) && good=$((good + 1))
      echo "   survivor: ${line:0:200}"
    done < <(grep -hE '^result rank=[02] ' "$dir/node0.out" 2>/dev/null)
    if ((good != 2 || rc == 124)); then
      echo "FAIL: fault during $op: $good of 2 survivors failed within ${fault_timeout} s (exit $rc)"
      sed 's/^/  /' "$dir"/node*.out "$dir"/node*.err "$dir/harness.log" 2>/dev/null | tail -20
      failures=$((failures + 1))
    fi
    rm -rf "$dir"
  done
fi

# Silent peer: node 1's ranks are stopped (SIGSTOP) mid-allreduce, so their connections stay
# open but nothing more arrives; node 0's ranks must each end on the timeout (LOOM_TIMEOUT), not
# hang and not succeed. Node 1's ranks are killed once the survivors had time to time out.
if [[ -n "$FAULT_RANK" && "${SILENT_PEER:-1}" == 1 ]]; then
  silent_timeout=5
  runs=$((runs + 1))
  echo "== silent peer: node 1's ranks stopped during allreduce"
  dir=$(mktemp -d "${TMPDIR:-/tmp}/loomt-silent.XXXXXX")
  rank_env="LOOM_WORLD_SIZE=4 LOOM_COMM_ID=\$LOOMT_MASTER:29452 LOOM_TIMEOUT=$silent_timeout"
  run="$FAULT_RANK loop 100000000"
  "$NODES_SH" -q -t $((silent_timeout * 8)) -o "$dir" -- \
    "for r in 0 2; do LOOM_RANK=\$r $rank_env $run & done; wait" \
    "for r in 1 3; do LOOM_RANK=\$r $rank_env $run & done; sleep 2; kill -STOP \$(jobs -p); \
     sleep $((silent_timeout * 3)); kill -9 \$(jobs -p); wait; true" 2>"$dir/harness.log"
  rc=$?
  # The first survivor to time out aborts the communicator, so the other may instead report
  # loomRemoteError (6) naming that timeout; both must end, at least one with loomTimeout.
  ended=$(grep -cE '^result rank=[02] code=(6|8) elapsed_ms=[0-9]+ iters=[1-9][0-9]* msg=.*timed out' \
    "$dir/node0.out" 2>/dev/null)
  timeouts=$(grep -cE '^result rank=[02] code=8 ' "$dir/node0.out" 2>/dev/null)
  grep -hE '^result rank=[02] ' "$dir/node0.out" 2>/dev/null | cut -c1-200 | sed 's/^/   survivor: /'
  if [[ "$ended" != 2 || "$timeouts" -lt 1 || $rc -eq 124 ]]; then
    echo "FAIL: silent peer: $ended of 2 survivors ended on the timeout, $timeouts with loomTimeout (exit $rc)"
    sed 's/^/  /' "$dir"/node*.out "$dir"/node*.err "$dir/harness.log" 2>/dev/null | tail -20
    failures=$((failures + 1))
  fi
  rm -rf "$dir"
fi

echo "$((runs - failures)) of $runs runs passed; $skipped algorithm(s) skipped"
((failures == 0))
