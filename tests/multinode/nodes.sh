#!/usr/bin/env bash
# Runs one bash command per "node", each node a network + UTS namespace (see netns_lib.sh).
#
# Usage: tests/multinode/nodes.sh [-k K] [-t SEC] [-o DIR] [-q] [-f] -- CMD [CMD1 ... CMD(K-1)]
#   -k K     number of nodes (default: the number of commands, or 2 for a single command)
#   -t SEC   global timeout: after SEC seconds every node's processes are killed (default 300)
#   -o DIR   keep each node's node<I>.out/.err/.rc in DIR (default: a temporary folder, removed)
#   -q       do not print the nodes' output at the end
#   -f       fail fast: when one node's command fails, kill the other nodes' at once
# One CMD runs on every node; K commands run one per node. Each command sees LOOMT_NODE,
# LOOMT_NODES, LOOMT_ADDR, LOOMT_MASTER (node 0's address), LOOMT_ADDRS and LOOMT_IFNAME.
# LOOMT_MTU (default 1500) sets the links' MTU. Example, a 2-node loomrun job:
#   LOOM_JOB_SECRET=$(openssl rand -hex 16) tests/multinode/nodes.sh -k 2 -- \
#     'build/tools/loomrun --nnodes 2 --node-rank $LOOMT_NODE --master $LOOMT_MASTER:29400 \
#        -n 2 -- build/tools/loom-bench allreduce'
# Exit: 0 when every node's command exited 0; 124 on timeout; 77 when namespaces cannot be
# created here (not root, no ip/unshare, no CAP_SYS_ADMIN); 2 on usage errors; else the first
# non-zero exit code in node order. The namespaces are deleted however it ends.
set -uo pipefail

usage() {
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

source "$(dirname "${BASH_SOURCE[0]}")/netns_lib.sh"

nodes=0
limit=300
outdir=""
quiet=0
failfast=""
while getopts "k:t:o:qfh" opt; do
  case "$opt" in
    k) nodes=$OPTARG ;;
    t) limit=$OPTARG ;;
    o) outdir=$OPTARG ;;
    q) quiet=1 ;;
    f) failfast=failfast ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
(($# >= 1)) || usage
[[ "$limit" =~ ^[0-9]+$ && "$limit" -ge 1 ]] || usage
[[ "$nodes" =~ ^[0-9]+$ ]] || usage
if ((nodes == 0)); then
  nodes=$#
  ((nodes == 1)) && nodes=2
fi
if (($# != 1 && $# != nodes)); then
  echo "nodes.sh: $# commands for $nodes nodes (give one for all, or one per node)" >&2
  exit 2
fi

if ! why=$(loomt_can_run); then
  echo "SKIP: $why" >&2
  exit 77
fi
loomt_setup "$nodes" "$outdir" || exit 1
loomt_log "$nodes nodes: namespaces $LOOMT_PREFIX-0..$((nodes - 1)), bridge $LOOMT_PREFIX-br"

commands=("$@")
for ((i = 0; i < nodes; ++i)); do
  if (($# == 1)); then
    loomt_spawn "$i" "${commands[0]}"
  else
    loomt_spawn "$i" "${commands[$i]}"
  fi
done
loomt_wait "$limit" $failfast
rc=$?
((quiet)) || loomt_print_outputs
for ((i = 0; i < nodes; ++i)); do loomt_log "node $i exited ${LOOMT_RC[$i]:-?}"; done
exit "$rc"
