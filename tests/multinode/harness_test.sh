#!/usr/bin/env bash
# Checks the namespace harness itself (ctest multinode_harness): three nodes come up with
# different hostnames and network namespaces, a TCP connection crosses the bridge, a failing
# node's exit code comes back, the global timeout kills a hanging node, and nothing is left
# behind in any case, SIGTERM to the harness included. Exits 77 where namespaces are impossible.
#
# Usage: tests/multinode/harness_test.sh
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NODES="$HERE/nodes.sh"
source "$HERE/netns_lib.sh"
if ! why=$(loomt_can_run); then
  echo "SKIP: $why"
  exit 77
fi
PYTHON=$(command -v python3 || true)

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
work=$(mktemp -d "${TMPDIR:-/tmp}/loomt-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Every namespace nodes.sh made (named in its first log line) must be gone once it has exited.
expect_no_leftovers() {
  local log=$1 prefix
  prefix=$(grep -o 'namespaces loomt-[0-9]*' "$log" | head -1 | awk '{print $2}')
  if [[ -z "$prefix" ]]; then
    fail "no namespace prefix in $log"
    return
  fi
  if ip netns list | awk '{print $1}' | grep -q "^$prefix-"; then
    fail "namespaces left behind: $(ip netns list | grep "^$prefix-" | tr '\n' ' ')"
  fi
}

# 1. Identity: hostnames and network namespaces differ, addresses are as documented.
"$NODES" -k 3 -t 60 -o "$work/id" -- \
  'echo "$(hostname) $(readlink /proc/self/ns/net) $LOOMT_ADDR $LOOMT_MASTER"' \
  >"$work/id.log" 2>&1
rc=$?
[[ $rc -eq 0 ]] || fail "identity run exited $rc: $(cat "$work/id.log")"
hosts=$(cat "$work/id"/node*.out | awk '{print $1}' | sort -u | wc -l)
netns=$(cat "$work/id"/node*.out | awk '{print $2}' | sort -u | wc -l)
[[ $hosts -eq 3 ]] || fail "expected 3 distinct hostnames, got: $(cat "$work/id"/node*.out)"
[[ $netns -eq 3 ]] || fail "expected 3 distinct network namespaces"
for i in 0 1 2; do
  grep -qE "^loomt-node$i net:\\[[0-9]+\\] 10\\.77\\.0\\.$((i + 1)) 10\\.77\\.0\\.1\$" "$work/id/node$i.out" 2>/dev/null ||
    fail "node $i identity: $(cat "$work/id/node$i.out" 2>/dev/null)"
done
[[ "$(hostname)" != loomt-node* ]] || fail "the harness renamed the caller's host"
expect_no_leftovers "$work/id.log"

# 2. TCP between nodes: node 1 listens, node 0 connects over the bridge and sends a line.
if [[ -n "$PYTHON" ]]; then
  server="import socket; s=socket.create_server(('0.0.0.0', 29399)); s.settimeout(20); \
c,_=s.accept(); print(c.makefile().readline().strip())"
  client='for i in $(seq 1 100); do
      (exec 3<>/dev/tcp/10.77.0.2/29399 && echo "hello from $(hostname)" >&3) 2>/dev/null && exit 0
      sleep 0.1
    done; exit 1'
  "$NODES" -k 2 -t 60 -o "$work/tcp" -- "$client" "$PYTHON -c \"$server\"" >"$work/tcp.log" 2>&1
  rc=$?
  [[ $rc -eq 0 ]] || fail "TCP run exited $rc: $(cat "$work/tcp.log")"
  grep -qx "hello from loomt-node0" "$work/tcp/node1.out" ||
    fail "node 1 did not receive node 0's line: $(cat "$work/tcp.log")"
  expect_no_leftovers "$work/tcp.log"
else
  echo "note: python3 not found; skipping the TCP check"
fi

# 3. The caller's namespace cannot reach the nodes: their subnet is only on links we created.
if ip route get 10.77.0.1 2>/dev/null | grep -q "dev loomt"; then
  fail "a loomt link is visible in the caller's namespace"
fi

# 4. A failing node's exit code comes back; the others' output is kept.
"$NODES" -k 2 -t 60 -o "$work/rc" -- 'echo ok' 'echo bad >&2; exit 7' >"$work/rc.log" 2>&1
rc=$?
[[ $rc -eq 7 ]] || fail "expected exit 7 from the failing node, got $rc"
[[ "$(cat "$work/rc/node0.rc" 2>/dev/null)" == 0 ]] || fail "node 0's exit code not recorded"
grep -q "^\[node1!\] bad" "$work/rc.log" || fail "node 1's stderr not shown: $(cat "$work/rc.log")"
expect_no_leftovers "$work/rc.log"

# 5. The global timeout kills a hanging node, its children included.
start=$SECONDS
"$NODES" -k 2 -t 2 -o "$work/hang" -- 'sleep 1000 & echo $!; sleep 1000' 'true' \
  >"$work/hang.log" 2>&1
rc=$?
[[ $rc -eq 124 ]] || fail "expected 124 on timeout, got $rc"
((SECONDS - start < 30)) || fail "timeout took $((SECONDS - start)) s"
expect_no_leftovers "$work/hang.log"
child=$(head -1 "$work/hang/node0.out" 2>/dev/null)
if [[ "$child" =~ ^[0-9]+$ ]]; then
  # Only the pid namespace is shared with the nodes, so the pid is ours to check. A killed child
  # stays a zombie until whoever adopted it reaps it (here, a slow init): dead counts as gone.
  state=running
  for _ in $(seq 50); do
    state=$(ps -o stat= -p "$child" 2>/dev/null)
    [[ -z "$state" || "$state" == Z* ]] && break
    sleep 0.1
  done
  [[ -z "$state" || "$state" == Z* ]] || fail "a node's child survived (state $state)"
else
  fail "node 0 printed no child pid: $(cat "$work/hang.log")"
fi

# 6. SIGTERM to the harness itself: everything goes away.
"$NODES" -k 2 -t 120 -o "$work/term" -- 'echo up; exec sleep 1000' >"$work/term.log" 2>&1 &
harness=$!
for _ in $(seq 1 100); do
  [[ -s "$work/term/node0.out" && -s "$work/term/node1.out" ]] && break
  sleep 0.1
done
kill -TERM "$harness"
wait "$harness"
rc=$?
[[ $rc -eq 143 ]] || fail "expected 143 after SIGTERM, got $rc"
expect_no_leftovers "$work/term.log"

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all harness checks passed"
