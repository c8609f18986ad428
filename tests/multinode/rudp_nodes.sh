#!/usr/bin/env bash
# The rudp transport across network-namespace nodes (netns_lib.sh) with packet loss injected by
# the kernel: every node drops N % of what it receives on its link (nftables on the input hook,
# `numgen random mod 100 < N drop`), so both directions lose and, as on a wire, the sender does not
# know (dropped on the output hook instead, the sender's own send call fails: see
# bench/rudp_vs_tcp.sh). Checks, bit-exact (loom-bench -c 1 compares every result
# with the reference):
#   1. collectives_test's multinode set (every collective, data types, odd sizes) on 3 nodes at
#      LOSS_SUITE % loss;
#   2. allreduce, allgather, reducescatter, alltoall and broadcast up to MAX_BYTES on 2 nodes (ranks
#      0,2 | 1) at each rate of LOSSES, then with the transport's test-only fault layer
#      (LOOM_RUDP_FAULTS: reordering by delay, duplication, drops), with the progress thread
#      receiving alone (LOOM_RUDP_CALLER_RECEIVES=0) and without GSO (LOOM_RUDP_GSO=0) at 5 % loss;
#   3. a peer whose every packet is dropped: the survivors fail with loomRemoteError naming it,
#      within the retransmission bound, not at LOOM_TIMEOUT;
#   4. a stranger that sends forged and replayed-looking datagrams to every rudp port: they are
#      refused (counted), the job still completes bit-exact; the same counters show the progress
#      threads following their callers' CPUs (LOOM_RUDP_FOLLOW_CALLER).
# Usage: tests/multinode/rudp_nodes.sh LOOMRUN LOOM_BENCH COLLECTIVES_TEST FAULT_RANK
# Environment: LOSSES (default "0 1 5 10"), LOSS_SUITE (default 1), MAX_BYTES (default 64M),
#   RUN_TIMEOUT (per run, default 300 s), SUITE_FILTER (collectives_test's gtest filter, default *).
# Exit: 0 all passed, 1 a check failed, 77 namespaces or nft are not available here.
set -uo pipefail

(($# == 4)) || { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
abspath() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
LOOMRUN=$(abspath "$1")
BENCH=$(abspath "$2")
COLLECTIVES=$(abspath "$3")
FAULT_RANK=$(abspath "$4")
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOSSES=${LOSSES:-0 1 5 10}
LOSS_SUITE=${LOSS_SUITE:-1}
MAX_BYTES=${MAX_BYTES:-64M}
SUITE_FILTER=${SUITE_FILTER:-*}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
export LOOM_TRANSPORT=rudp LOOM_TIMEOUT=${LOOM_TIMEOUT:-120}
export LOOM_JOB_SECRET
LOOM_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')

source "$HERE/netns_lib.sh"
if ! why=$(loomt_can_run); then
  echo "SKIP: $why"
  exit 77
fi
if ! command -v nft >/dev/null 2>&1; then
  echo "SKIP: nft is not installed (scripts/install_deps.sh installs nftables)"
  exit 77
fi

# A node command prefix that makes the node drop $1 % of the UDP datagrams it receives on its
# link (rudp's, not the bootstrap's TCP: this tests the transport, not TCP's 200 ms minimum RTO);
# $2 replaces the match (e.g. '' for every packet), $3=output drops what it sends instead.
loss_prefix() {
  local n=$1 match=${2-meta l4proto udp} hook=${3:-input}
  if ((n == 0)); then
    echo "true"
    return
  fi
  # numgen's range is 0..99: "< 100" is refused, so everything is a plain drop.
  local random="numgen random mod 100 '<' $n"
  ((n >= 100)) && random=""
  local dir=iifname
  [[ $hook == output ]] && dir=oifname
  echo "nft add table inet loomt && nft add chain inet loomt c '{ type filter hook $hook \
priority 0; }' && nft add rule inet loomt c $dir loomt0 $match $random drop"
}

failures=0
# run NAME NODES_ARGS... -- CMDS: one nodes.sh run; prints its time; shows errors on failure.
run() {
  local name=$1
  shift
  local dir start
  dir=$(mktemp -d "${TMPDIR:-/tmp}/loomt-rudp.XXXXXX")
  start=$SECONDS
  if "$HERE/nodes.sh" -f -q -t "$RUN_TIMEOUT" -o "$dir" -- "$@" 2>"$dir/harness.log"; then
    echo "   $name: passed in $((SECONDS - start)) s"
  else
    echo "FAIL: $name (after $((SECONDS - start)) s)"
    grep -hE 'Failure|FAILED|rror|mismatch|wrong|timeout' "$dir"/node*.out "$dir"/node*.err \
      "$dir/harness.log" 2>/dev/null | head -20 | sed 's/^/  /'
    failures=$((failures + 1))
  fi
  rm -rf "$dir"
}

# Ranks 0,2 on node 0 and rank 1 on node 1: both shared memory and rudp inside one collective.
bench_cmds() {
  local prefix=$1 ops=$2 extra=${3:-}
  local ranks=("0,2" "1")
  local i cmds=()
  for i in 0 1; do
    cmds+=("$prefix && for op in $ops; do $extra $LOOMRUN --nnodes 2 --node-rank $i \
      --master \$LOOMT_MASTER:29460 --ranks ${ranks[$i]} --timeout $((RUN_TIMEOUT - 20)) -- \
      $BENCH \$op -b 4099 -e $MAX_BYTES -f 16 -n 1 -w 0 -c 1 || exit 1; done")
  done
  printf '%s\n' "${cmds[@]}"
}

OPS="allreduce allgather reducescatter alltoall broadcast"
total_start=$SECONDS

echo "== collectives_test multinode set, 3 nodes, ${LOSS_SUITE}% loss"
prefix=$(loss_prefix "$LOSS_SUITE")
cmds=()
lists=("0,3" "1" "2")
for i in 0 1 2; do
  cmds+=("$prefix && COLLECTIVES_TEST_CONFIGS=multinode $LOOMRUN --nnodes 3 --node-rank $i \
    --master \$LOOMT_MASTER:29461 --ranks ${lists[$i]} --timeout $((RUN_TIMEOUT - 20)) -- \
    $COLLECTIVES --gtest_filter='$SUITE_FILTER'")
done
run "collectives_test, 3 nodes, ${LOSS_SUITE}% loss" "${cmds[@]}"

for loss in $LOSSES; do
  echo "== $OPS up to $MAX_BYTES, 2 nodes, ${loss}% loss"
  mapfile -t cmds < <(bench_cmds "$(loss_prefix "$loss")" "$OPS")
  run "2 nodes, ${loss}% loss" "${cmds[@]}"
done

echo "== reordering, duplication and 1% drops from the fault layer, 2 nodes"
mapfile -t cmds < <(bench_cmds true "allreduce alltoall" \
  "LOOM_RUDP_FAULTS=delay=0.2,dup=0.1,drop=0.01")
run "2 nodes, reorder+dup+drop" "${cmds[@]}"

# The progress thread receiving alone (callers never read the sockets), under loss.
echo "== progress thread receives (LOOM_RUDP_CALLER_RECEIVES=0), 5% loss, 2 nodes"
mapfile -t cmds < <(bench_cmds "$(loss_prefix 5)" "allreduce alltoall" "LOOM_RUDP_CALLER_RECEIVES=0")
run "2 nodes, thread receives, 5% loss" "${cmds[@]}"

# The fallback without UDP segmentation offload (datagram by datagram, sendmmsg) under loss.
echo "== datagram by datagram (LOOM_RUDP_GSO=0), 5% loss, 2 nodes"
mapfile -t cmds < <(bench_cmds "$(loss_prefix 5)" "allreduce alltoall" "LOOM_RUDP_GSO=0")
run "2 nodes, no GSO, 5% loss" "${cmds[@]}"

# 3. Node 1 drops everything it sends 3 s into a loop of allreduces (an nft rule added while the
# job runs); rank 0 must fail with the peer named unreachable, well before LOOM_TIMEOUT (60 s).
fault_env="LOOM_WORLD_SIZE=2 LOOM_COMM_ID=\$LOOMT_MASTER:29462 LOOM_TIMEOUT=60 \
LOOM_RUDP_RETRIES=6 LOOM_RUDP_RTO_MAX_MS=200"
check_fault() {
  local name=$1 pattern=$2 limit=$3 dir=$4 elapsed=$5
  if grep -qE "$pattern" "$dir/node0.out" && ((elapsed < limit)); then
    echo "   $name: passed in $elapsed s: $(grep -m1 -oE 'result rank=0.*' "$dir/node0.out" | cut -c1-200)"
  else
    echo "FAIL: $name (after $elapsed s)"
    sed 's/^/  /' "$dir"/node*.out | tail -20
    failures=$((failures + 1))
  fi
}
echo "== a peer whose every packet is dropped"
dir=$(mktemp -d "${TMPDIR:-/tmp}/loomt-rudp.XXXXXX")
start=$SECONDS
"$HERE/nodes.sh" -q -t 120 -o "$dir" -- \
  "LOOM_RANK=0 $fault_env $FAULT_RANK loop 100000000 2>&1; true" \
  "( sleep 3; $(loss_prefix 100 '' output) ) & LOOM_RANK=1 $fault_env $FAULT_RANK loop 100000000 2>&1; \
    true" 2>"$dir/harness.log"
check_fault "silent peer" "result rank=0 .*rank 1 on .*unreachable" 50 "$dir" $((SECONDS - start))
rm -rf "$dir"

echo "== a peer killed mid-transfer"
dir=$(mktemp -d "${TMPDIR:-/tmp}/loomt-rudp.XXXXXX")
start=$SECONDS
"$HERE/nodes.sh" -q -t 120 -o "$dir" -- \
  "LOOM_RANK=0 $fault_env $FAULT_RANK kill allreduce 4194304 1 2>&1; true" \
  "LOOM_RANK=1 $fault_env $FAULT_RANK kill allreduce 4194304 1 2>&1; true" 2>"$dir/harness.log"
check_fault "killed peer" "result rank=0 code=[1-9]" 50 "$dir" $((SECONDS - start))
rm -rf "$dir"

# 4. While node 0's ranks run allreduces, a stranger on node 0 sprays its rudp ports with junk
# and with datagrams that look like rudp (magic and version right, MAC wrong). The job must end
# bit-exact and the counters (LOOM_DEBUG=INFO at destroy) must show refused datagrams.
echo "== a stranger sending forged datagrams"
# Sprays as soon as the job's UDP ports appear, every 50 ms, until they are gone (at most 10 s).
stranger='seen=0; for round in $(seq 200); do
  ports=$(ss -Hunl "src $LOOMT_ADDR" | awk "{print \$4}" | sed "s/.*://")
  [ -z "$ports" ] && { [ $seen = 1 ] && break; sleep 0.05; continue; }
  seen=1
  for port in $ports; do
    head -c $((RANDOM % 400 + 1)) /dev/urandom >/dev/udp/$LOOMT_ADDR/$port
    { printf "LMRU\001\001\000\000"; head -c 200 /dev/urandom; } >/dev/udp/$LOOMT_ADDR/$port
  done
  sleep 0.05
done 2>/dev/null'
mapfile -t cmds < <(bench_cmds true "allreduce" \
  "LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=NET LOOM_RUDP_FOLLOW_CALLER=1")
cmds[0]="( $stranger ) & ${cmds[0]}; rc=\$?; wait; exit \$rc"
dir=$(mktemp -d "${TMPDIR:-/tmp}/loomt-rudp.XXXXXX")
start=$SECONDS
if "$HERE/nodes.sh" -f -q -t "$RUN_TIMEOUT" -o "$dir" -- "${cmds[@]}" 2>"$dir/harness.log" &&
  grep -qE "refused datagrams [1-9]" "$dir"/node0.out "$dir"/node0.err; then
  echo "   stranger: passed in $((SECONDS - start)) s: \
$(grep -hoE 'refused datagrams [0-9]+' "$dir"/node0.* | sort -t' ' -k3 -n | tail -1)"
else
  echo "FAIL: stranger (after $((SECONDS - start)) s)"
  grep -hE 'rror|refused|FAIL' "$dir"/node*.out "$dir"/node*.err | head -10 | sed 's/^/  /'
  failures=$((failures + 1))
fi
# The same counters: each progress thread pinned itself to its caller's CPU (LOOM_RUDP_FOLLOW_CALLER=1
# here; its default, auto, depends on the host's cores) where the job may run on more than one CPU.
if (($(nproc) > 1)); then
  if grep -qE "progress thread moved [1-9][0-9]* times to its caller" "$dir"/node0.out \
    "$dir"/node0.err; then
    echo "   progress thread follows its caller: passed"
  else
    echo "FAIL: progress thread follows its caller: $(grep -hoE 'progress thread [^,]*' \
      "$dir"/node0.* | head -1)"
    failures=$((failures + 1))
  fi
fi
rm -rf "$dir"

echo "rudp namespace tests: $failures failed, $((SECONDS - total_start)) s in all"
((failures == 0))
