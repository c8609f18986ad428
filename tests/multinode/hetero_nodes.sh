#!/usr/bin/env bash
# A heterogeneous communicator whose clusters span network-namespace nodes (netns_lib.sh): every
# collective of emu_collectives_test, bit-exact, with emulated-device and CPU ranks on both nodes
# (placement ECCEC: node 0 holds ranks 0,2,4 = E C C, node 1 ranks 1,3 = C E), over TCP between
# the nodes and shared memory inside each.
#
# Usage: tests/multinode/hetero_nodes.sh LOOMRUN EMU_COLLECTIVES_TEST PLUGIN
# Exit: 0 passed, 1 failed, 77 namespaces cannot be created here.
set -uo pipefail
(($# == 3)) || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
abspath() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
LOOMRUN=$(abspath "$1") TEST=$(abspath "$2") PLUGIN=$(abspath "$3")
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/netns_lib.sh"
if ! why=$(loomt_can_run); then
  echo "SKIP: $why"
  exit 77
fi
export LOOM_JOB_SECRET LOOM_TIMEOUT=${LOOM_TIMEOUT:-120}
LOOM_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
# LOOM_NODE_ID selects the test's multi-node sizes; the namespaces make the nodes.
env="LOOM_TEST_PLACEMENT=ECCEC LOOM_DEVICE_PLUGIN=$PLUGIN LOOM_NODE_ID=n\$LOOMT_NODE"
cmds=()
lists=("0,2,4" "1,3")
for i in 0 1; do
  cmds+=("env $env $LOOMRUN --nnodes 2 --node-rank $i --master \$LOOMT_MASTER:29470 \
    --ranks ${lists[$i]} --timeout 600 -- $TEST")
done
dir=$(mktemp -d "${TMPDIR:-/tmp}/loomt-hetero.XXXXXX")
trap 'rm -rf "$dir"' EXIT
if "$HERE/nodes.sh" -f -q -t 700 -o "$dir" -- "${cmds[@]}" 2>"$dir/harness.log"; then
  grep -h "PASSED" "$dir"/node*.out | sort | uniq -c
  echo "passed: placement ECCEC over 2 namespace nodes"
  exit 0
fi
echo "FAIL: placement ECCEC over 2 namespace nodes"
grep -hE 'Failure|FAILED|error|Error|timeout' "$dir"/node*.out "$dir"/node*.err \
  "$dir/harness.log" 2>/dev/null | head -30 | sed 's/^/  /'
exit 1
