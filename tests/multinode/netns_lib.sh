# Network namespaces as nodes: a bash library (source it; it defines loomt_* functions).
#
# loomt_setup K creates K "nodes" loomt-<pid>-0 .. loomt-<pid>-(K-1), each a network namespace
# whose processes also get their own UTS namespace and hostname (loomt-node<i>), so that Loom's
# host identity (hostname + boot id + network namespace) differs between them. Every node has
# lo and one veth, loomt0, with address 10.77.0.<i+1>/24; the other ends sit on a bridge in one
# more namespace, loomt-<pid>-br. Nothing is created in the caller's namespace, so traffic stays
# among the namespaces created here.
#
# loomt_spawn I CMD runs the bash command CMD on node I in the background (own process group)
# with LOOMT_NODE=I, LOOMT_NODES=K, LOOMT_ADDR (its address), LOOMT_MASTER (node 0's address),
# LOOMT_ADDRS (all, in node order) and LOOMT_IFNAME=loomt0 in its environment, stdout and stderr
# to $LOOMT_DIR/node<I>.out / .err. loomt_wait SEC waits for all spawned commands, at most SEC
# seconds; then it kills every process left in the namespaces and returns 124. Exit codes go to
# LOOMT_RC[I] and $LOOMT_DIR/node<I>.rc.
#
# loomt_cleanup kills everything in the namespaces and deletes them; loomt_setup installs it as
# the EXIT/INT/TERM trap, so the namespaces go away however the script ends (SIGKILL excepted:
# then `ip netns list | grep loomt-<pid>` shows what to delete by hand).
#
# loomt_can_run prints why namespaces cannot be made here and returns 1 (callers exit 77).

LOOMT_SUBNET=${LOOMT_SUBNET:-10.77.0}
LOOMT_MTU=${LOOMT_MTU:-1500}
LOOMT_PREFIX="loomt-$$"
LOOMT_NODES=0
LOOMT_DIR=""
LOOMT_OWN_DIR=0
declare -a LOOMT_PIDS=()
declare -a LOOMT_RC=()

loomt_log() { echo "netns: $*" >&2; }

loomt_can_run() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "network namespaces need root (running as uid $(id -u))"
    return 1
  fi
  local tool
  for tool in ip unshare setsid; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "'$tool' is not installed"
      return 1
    fi
  done
  local probe="$LOOMT_PREFIX-probe"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "cannot create a network namespace (no CAP_SYS_ADMIN, or a restricted container)"
    return 1
  fi
  local ok=1
  ip netns exec "$probe" unshare --uts true 2>/dev/null || ok=0
  ip netns del "$probe" 2>/dev/null
  if ((!ok)); then
    echo "cannot create a UTS namespace inside a network namespace"
    return 1
  fi
  return 0
}

loomt_ns() { echo "$LOOMT_PREFIX-$1"; }
loomt_addr() { echo "$LOOMT_SUBNET.$(($1 + 1))"; }

# Kills every process in our namespaces and deletes them. Safe to call more than once.
loomt_cleanup() {
  local pid ns
  for pid in "${LOOMT_PIDS[@]}"; do
    [[ -n "$pid" ]] && kill -KILL -- "-$pid" 2>/dev/null
  done
  for pid in "${LOOMT_PIDS[@]}"; do
    [[ -n "$pid" ]] && { wait "$pid"; } 2>/dev/null
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$LOOMT_PREFIX-"); do
    # Bounded: a process that survives SIGKILL (uninterruptible sleep) does not block us;
    # deleting the namespace's name still works, the kernel frees it when the process ends.
    local round
    for round in 1 2 3 4 5; do
      local pids
      pids=$(ip netns pids "$ns" 2>/dev/null)
      [[ -z "$pids" ]] && break
      kill -KILL $pids 2>/dev/null
      sleep 0.1
    done
    ip netns del "$ns" 2>/dev/null || loomt_log "could not delete namespace $ns"
  done
  if ((LOOMT_OWN_DIR)) && [[ -n "$LOOMT_DIR" && -d "$LOOMT_DIR" && -z "${LOOMT_KEEP:-}" ]]; then
    rm -rf "$LOOMT_DIR"
  fi
  LOOMT_PIDS=()
}

loomt_trap() {
  local sig=$1
  trap - EXIT INT TERM
  loomt_cleanup
  case "$sig" in
    INT) exit 130 ;;
    TERM) exit 143 ;;
  esac
}

# loomt_setup K [OUTDIR]: K nodes on one bridge. Returns non-zero (after cleaning up) on failure.
loomt_setup() {
  local k=$1
  if ! [[ "$k" =~ ^[0-9]+$ ]] || ((k < 1 || k > 200)); then
    loomt_log "node count must be 1..200, got '$k'"
    return 2
  fi
  LOOMT_NODES=$k
  if [[ -n "${2:-}" ]]; then
    LOOMT_DIR=$2
    mkdir -p "$LOOMT_DIR" || return 1
  else
    LOOMT_DIR=$(mktemp -d "${TMPDIR:-/tmp}/loomt-$$.XXXXXX") || return 1
    LOOMT_OWN_DIR=1
  fi
  trap 'loomt_trap EXIT' EXIT
  trap 'loomt_trap INT' INT
  trap 'loomt_trap TERM' TERM

  local br
  br=$(loomt_ns br)
  ip netns add "$br" || { loomt_cleanup; return 1; }
  ip -n "$br" link set lo up &&
    ip -n "$br" link add loomtbr type bridge &&
    ip -n "$br" link set loomtbr mtu "$LOOMT_MTU" up || { loomt_cleanup; return 1; }
  local i ns
  for ((i = 0; i < k; ++i)); do
    ns=$(loomt_ns "$i")
    # Both ends are created straight inside their namespaces: no name ever appears in ours.
    ip netns add "$ns" &&
      ip -n "$ns" link set lo up &&
      ip link add loomt0 netns "$ns" mtu "$LOOMT_MTU" type veth \
        peer name "loomtp$i" netns "$br" mtu "$LOOMT_MTU" &&
      ip -n "$br" link set "loomtp$i" master loomtbr up &&
      ip -n "$ns" addr add "$(loomt_addr "$i")/24" dev loomt0 &&
      ip -n "$ns" link set loomt0 up || {
      loomt_log "setting up node $i failed"
      loomt_cleanup
      return 1
    }
  done
  # Wait (bounded) until every node's link is up, so the first connection does not race it.
  local round up
  for round in $(seq 1 50); do
    up=0
    for ((i = 0; i < k; ++i)); do
      ip -n "$(loomt_ns "$i")" link show loomt0 2>/dev/null | grep -q "state UP" && up=$((up + 1))
    done
    ((up == k)) && break
    sleep 0.1
  done
  ((up == k)) || loomt_log "only $up of $k links came up"
  return 0
}

# loomt_exec I CMD: runs bash command CMD on node I in the foreground, with the node's env.
loomt_exec() {
  local i=$1
  shift
  local addrs="" j
  for ((j = 0; j < LOOMT_NODES; ++j)); do addrs+="$(loomt_addr "$j") "; done
  ip netns exec "$(loomt_ns "$i")" unshare --uts env \
    LOOMT_NODE="$i" LOOMT_NODES="$LOOMT_NODES" LOOMT_ADDR="$(loomt_addr "$i")" \
    LOOMT_MASTER="$(loomt_addr 0)" LOOMT_ADDRS="${addrs% }" LOOMT_IFNAME=loomt0 \
    LOOMT_PREFIX="$LOOMT_PREFIX" LOOMT_SUBNET="$LOOMT_SUBNET" \
    bash -c 'hostname "loomt-node$LOOMT_NODE" && eval "$1"' loomt-node "$*"
}

# loomt_spawn I CMD: loomt_exec in the background, output to $LOOMT_DIR/node<I>.{out,err}.
loomt_spawn() {
  local i=$1
  shift
  setsid bash -c "$(declare -f loomt_exec loomt_ns loomt_addr); LOOMT_NODES=$LOOMT_NODES \
    LOOMT_PREFIX=$LOOMT_PREFIX LOOMT_SUBNET=$LOOMT_SUBNET; loomt_exec \"\$@\"" loomt-spawn "$i" "$@" \
    >"$LOOMT_DIR/node$i.out" 2>"$LOOMT_DIR/node$i.err" </dev/null &
  LOOMT_PIDS[$i]=$!
}

# loomt_wait SEC [failfast]: waits for every spawned node command, at most SEC seconds. Returns 0
# when all exited 0, 124 on timeout (everything is killed), else the first non-zero exit code by
# node. With "failfast", the first node to fail ends the others at once (like a timeout, but
# their exit codes are 124 and the failing node's code is returned).
loomt_wait() {
  local limit=$1 failfast=${2:-} start=$SECONDS i pid alive result=0 failed=""
  declare -A done_=()
  while true; do
    alive=0
    for i in "${!LOOMT_PIDS[@]}"; do
      pid=${LOOMT_PIDS[$i]}
      [[ -n "${done_[$i]:-}" ]] && continue
      if kill -0 "$pid" 2>/dev/null; then
        alive=1
      else
        wait "$pid"
        LOOMT_RC[$i]=$?
        echo "${LOOMT_RC[$i]}" >"$LOOMT_DIR/node$i.rc"
        done_[$i]=1
        ((LOOMT_RC[$i] != 0)) && [[ -z "$failed" ]] && failed=$i
      fi
    done
    ((alive)) || break
    local stop_now=0
    if [[ -n "$failfast" && -n "$failed" ]]; then
      loomt_log "node $failed failed (exit ${LOOMT_RC[$failed]}); killing the other nodes"
      stop_now=1
    elif ((SECONDS - start >= limit)); then
      loomt_log "timeout after $limit s; killing every node's processes"
      stop_now=1
    fi
    if ((stop_now)); then
      for i in "${!LOOMT_PIDS[@]}"; do
        [[ -n "${done_[$i]:-}" ]] && continue
        kill -KILL -- "-${LOOMT_PIDS[$i]}" 2>/dev/null
        local ns
        ns=$(loomt_ns "$i")
        kill -KILL $(ip netns pids "$ns" 2>/dev/null) 2>/dev/null
        { wait "${LOOMT_PIDS[$i]}"; } 2>/dev/null
        LOOMT_RC[$i]=124
        echo 124 >"$LOOMT_DIR/node$i.rc"
      done
      LOOMT_PIDS=()
      [[ -n "$failed" ]] && return "${LOOMT_RC[$failed]}"
      return 124
    fi
    sleep 0.1
  done
  for i in "${!LOOMT_RC[@]}"; do
    if ((LOOMT_RC[$i] != 0)); then
      result=${LOOMT_RC[$i]}
      break
    fi
  done
  LOOMT_PIDS=()
  return "$result"
}

# Prints each node's captured output with a "[node I] " prefix (stderr lines marked "!").
loomt_print_outputs() {
  local i
  for ((i = 0; i < LOOMT_NODES; ++i)); do
    [[ -f "$LOOMT_DIR/node$i.out" ]] && sed "s/^/[node$i] /" "$LOOMT_DIR/node$i.out"
    [[ -f "$LOOMT_DIR/node$i.err" ]] && sed "s/^/[node$i!] /" "$LOOMT_DIR/node$i.err"
  done
  return 0
}
