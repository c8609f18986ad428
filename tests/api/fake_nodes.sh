#!/bin/sh
# Runs one rank of a job as if it were on the node named by the RANK-th word of $1 (LOOM_NODE_ID),
# so that one host exercises the multi-node paths: fake_nodes.sh "A B A" prog args...
# puts ranks 0 and 2 on node A and rank 1 on node B.
set -eu
nodes=$1
shift
i=0
for node in $nodes; do
  if [ "$i" = "${RANK:?RANK is not set: run under loomrun}" ]; then
    LOOM_NODE_ID=$node
    export LOOM_NODE_ID
  fi
  i=$((i + 1))
done
if [ -z "${LOOM_NODE_ID:-}" ]; then
  echo "fake_nodes.sh: no node for rank $RANK in '$nodes'" >&2
  exit 2
fi
exec "$@"
