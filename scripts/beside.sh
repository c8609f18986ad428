#!/usr/bin/env bash
# Runs BACKGROUND (one shell command line) beside FOREGROUND..., the background's output kept in a
# file and printed once both are done; fails if either failed. `make test` runs its sanitizer slot
# beside the Python tests: those leave a core of a 2-core machine mostly idle (interpreters
# starting, ranks waiting for each other), and the slot's build fills it.
#
#   scripts/beside.sh BACKGROUND FOREGROUND [ARGS...]
set -uo pipefail
[[ $# -ge 2 ]] || { echo "usage: scripts/beside.sh BACKGROUND FOREGROUND [ARGS...]" >&2; exit 2; }
background=$1
shift
log=$(mktemp /tmp/loom-beside-XXXXXX.log)
bash -c "$background" >"$log" 2>&1 &
pid=$!
# An interrupted run takes the background job with it.
trap 'kill "$pid" 2>/dev/null; rm -f "$log"' EXIT
"$@"
foreground=$?
wait "$pid"
status=$?
echo "== beside: output of: $background (exit $status)"
cat "$log"
if ((foreground != 0)); then exit "$foreground"; fi
exit "$status"
