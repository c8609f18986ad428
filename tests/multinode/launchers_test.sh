#!/usr/bin/env bash
# loomCommInitFromEnv under Open MPI's mpirun across namespace nodes (ctest multinode_mpirun):
# 2 nodes x 2 ranks, ranks and size from OMPI_COMM_WORLD_*, the rendezvous at node 0's address
# (LOOM_COMM_ID) and the job secret passed with -x; loom-bench checks every result (-c 1) from
# 8 B (ring) to 8 MiB (hierarchical). Exits 77 where namespaces or mpirun are unavailable.
#
# Usage: tests/multinode/launchers_test.sh LOOM_BENCH
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH=${1:?usage: launchers_test.sh LOOM_BENCH}
source "$HERE/netns_lib.sh"
if ! why=$(loomt_can_run); then
  echo "SKIP: $why"
  exit 77
fi
if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIP: mpirun (Open MPI) is not installed"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/loomt-mpi.XXXXXX")
trap 'rm -rf "$work"' EXIT
for i in 0 1; do echo "loomt-node$i slots=2" >>"$work/hosts"; done
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
port=$((29000 + RANDOM % 2000))
# Node 0 runs mpirun; its daemon on node 1 starts through bench/netns_rsh.sh (ip netns exec).
cmd="mpirun --allow-run-as-root -np 4 --hostfile $work/hosts --map-by slot \
  --mca plm_rsh_agent $ROOT/bench/netns_rsh.sh \
  --mca oob_tcp_if_include \$LOOMT_SUBNET.0/24 --mca btl_tcp_if_include \$LOOMT_SUBNET.0/24 \
  -x LOOM_COMM_ID=\$LOOMT_ADDR:$port -x LOOM_JOB_SECRET=$secret -x LOOM_TIMEOUT=60 \
  $BENCH allreduce -b 8 -e 8M -f 32 -c 1 -n 3 -w 1"
"$HERE/nodes.sh" -k 2 -t 240 -o "$work/out" -- "$cmd" "true" >"$work/log" 2>&1
rc=$?
cat "$work/log"
if ((rc != 0)); then
  echo "FAIL: mpirun across namespace nodes exited $rc"
  exit 1
fi
grep -q "nranks 4" "$work/log" || { echo "FAIL: not 4 ranks"; exit 1; }
grep -q "Out of bounds values : 0 OK" "$work/log" || { echo "FAIL: wrong results"; exit 1; }
grep -q "hierarchical" "$work/log" || { echo "FAIL: no size ran hierarchical"; exit 1; }
echo "PASS: loomCommInitFromEnv under mpirun across 2 namespace nodes"
