#!/usr/bin/env bash
# Open MPI's "rsh" for namespace nodes: `netns_rsh.sh [rsh options] loomt-node<I> command...`
# runs the command in node I of the namespace harness (tests/multinode/netns_lib.sh), whose
# namespace prefix comes from LOOMT_PREFIX (the harness exports it to the nodes). mpirun uses
# it through --mca plm_rsh_agent, so that its daemons (orted) start inside the other nodes.
set -uo pipefail
while [[ $# -gt 0 && "$1" == -* ]]; do
  case "$1" in
    -l | -p | -o | -i) shift 2 ;;  # options ssh would take with a value; nothing to do here
    *) shift ;;
  esac
done
host=${1:?usage: netns_rsh.sh loomt-node<I> command...}
shift
if ! [[ "$host" =~ ^loomt-node([0-9]+)$ ]]; then
  echo "netns_rsh: '$host' is not a namespace node (loomt-node<I>)" >&2
  exit 255
fi
node=${BASH_REMATCH[1]}
: "${LOOMT_PREFIX:?netns_rsh: LOOMT_PREFIX is not set (run under tests/multinode/nodes.sh)}"
# ssh hands the remote shell one command line; so does this.
exec ip netns exec "$LOOMT_PREFIX-$node" unshare --uts \
  bash -c 'hostname "$1"; shift; eval "$*"' netns-rsh "$host" "$@"
