#!/usr/bin/env bash
# What a newcomer types first: --version and -h on every tool, LOOM_DEBUG in NCCL's spellings
# (a version line at VERSION and INFO, a clear error for a bad level), LOOM_DEBUG_SUBSYS and
# LOOM_DEBUG_FILE as NCCL's, LOOM_* values refused at init, srun's variables.
# Usage: tools_cli_test.sh LOOMRUN LOOM_BENCH LOOM_INFO   (about a second)
set -uo pipefail
LOOMRUN=$1
BENCH=$2
INFO=$3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE LOOM_RANK LOOM_WORLD_SIZE LOOM_COMM_ID \
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_PROCID SLURM_NTASKS \
  MASTER_ADDR MASTER_PORT LOOM_DEBUG LOOM_DEBUG_SUBSYS LOOM_DEBUG_FILE

for tool in "$LOOMRUN" "$BENCH" "$INFO"; do
  name=$(basename "$tool")
  "$tool" --version >"$TMP/v" 2>&1 || fail "$name --version exits $?"
  grep -qE "^$name \(Loom\) [0-9]+\.[0-9]+\.[0-9]+$" "$TMP/v" || fail "$name --version: $(cat "$TMP/v")"
  "$tool" -h >/dev/null 2>&1 || fail "$name -h exits $?"
done
"$INFO" --bogus >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "loom-info --bogus does not exit 2"

# LOOM_DEBUG in any case; the version line at INFO and VERSION, not at the default WARN.
SMALL=(allreduce -b 8 -e 8 -n 1 -w 0)
for level in info INFO Info version; do
  LOOM_DEBUG=$level "$BENCH" "${SMALL[@]}" >/dev/null 2>"$TMP/err" || fail "LOOM_DEBUG=$level exits $?"
  grep -qE "LOOM (VERSION|INFO)? ?Loom version [0-9]+\.[0-9]+\.[0-9]+" "$TMP/err" ||
    fail "LOOM_DEBUG=$level: no version line: $(head -c 600 "$TMP/err")"
done
LOOM_DEBUG=version "$BENCH" "${SMALL[@]}" >/dev/null 2>"$TMP/err"
grep -q "LOOM INFO" "$TMP/err" && fail "LOOM_DEBUG=version prints INFO lines"
"$BENCH" "${SMALL[@]}" >/dev/null 2>"$TMP/err"
grep -q "Loom version" "$TMP/err" && fail "the default level prints the version line"
# A level Loom does not know fails init with a message that names the valid ones.
LOOM_DEBUG=VERBOSE "$BENCH" "${SMALL[@]}" >/dev/null 2>"$TMP/err"
[[ $? -ne 0 ]] || fail "LOOM_DEBUG=VERBOSE accepted"
grep -q "LOOM_DEBUG='VERBOSE' is not a level: use NONE, VERSION, WARN, INFO, ABORT or TRACE" \
  "$TMP/err" || fail "LOOM_DEBUG=VERBOSE: $(cat "$TMP/err")"

# LOOM_DEBUG=TRACE with COLL prints each schedule the executor runs, lane by lane, with its hash.
LOOM_DEBUG=TRACE LOOM_DEBUG_SUBSYS=COLL LOOM_ALGO=allreduce:ring "$LOOMRUN" -n 2 -- "$BENCH" \
  allreduce -b 64K -e 64K -n 1 -w 0 >/dev/null 2>"$TMP/err" || fail "LOOM_DEBUG=TRACE exits $?"
grep -qE "schedule: [0-9]+ ops, [0-9]+ lanes, .*hash [0-9a-f]+" "$TMP/err" ||
  fail "LOOM_DEBUG=TRACE: no schedule: $(head -c 600 "$TMP/err")"
grep -q "lane send to 1" "$TMP/err" || fail "LOOM_DEBUG=TRACE: the schedule has no lanes"

# LOOM_DEBUG=INFO logs init, not every call (NCCL's INFO logs COLL only when asked for): the
# per-call lines ("allreduce #N count ... -> algorithm") come with LOOM_DEBUG_SUBSYS naming COLL,
# in any case. An unknown subsystem fails init naming the valid ones.
CALLS=(allreduce -b 8 -e 8 -n 300 -w 0 -c 0)
LOOM_DEBUG=INFO "$BENCH" "${CALLS[@]}" >/dev/null 2>"$TMP/err" || fail "LOOM_DEBUG=INFO exits $?"
per_call=$(grep -c "LOOM INFO allreduce #" "$TMP/err")
[[ $per_call -eq 0 ]] || fail "LOOM_DEBUG=INFO logged $per_call per-call lines"
grep -q "LOOM INFO communicator .*ready" "$TMP/err" || fail "LOOM_DEBUG=INFO: no init line: $(head -c 600 "$TMP/err")"
LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=coll "$BENCH" "${CALLS[@]}" >/dev/null 2>"$TMP/err" ||
  fail "LOOM_DEBUG_SUBSYS=coll exits $?"
per_call=$(grep -c "LOOM INFO allreduce #" "$TMP/err")
[[ $per_call -ge 300 ]] || fail "LOOM_DEBUG_SUBSYS=coll logged $per_call per-call lines for 300+ calls"
grep -q "LOOM INFO communicator .*ready" "$TMP/err" && fail "LOOM_DEBUG_SUBSYS=coll logged init lines"
LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=INIT,COLLS "$BENCH" "${SMALL[@]}" >/dev/null 2>"$TMP/err"
[[ $? -ne 0 ]] || fail "LOOM_DEBUG_SUBSYS=INIT,COLLS accepted"
grep -q "'COLLS' is not a subsystem: use a comma list of INIT, COLL, NET, BOOTSTRAP, SHM, TUNE or ALL" \
  "$TMP/err" || fail "LOOM_DEBUG_SUBSYS=INIT,COLLS: $(cat "$TMP/err")"
# LOOM_DEBUG_FILE, as NCCL_DEBUG_FILE: %h the host, %p the pid; nothing on stderr then.
LOOM_DEBUG=INFO LOOM_DEBUG_FILE="$TMP/loom.%h.%p.log" "$BENCH" "${SMALL[@]}" >/dev/null 2>"$TMP/err" ||
  fail "LOOM_DEBUG_FILE exits $?"
grep -q "LOOM INFO" "$TMP/err" && fail "LOOM_DEBUG_FILE: INFO lines on stderr too"
logs=("$TMP"/loom."$(hostname)".*.log)
[[ ${#logs[@]} -eq 1 && -s "${logs[0]}" ]] || fail "LOOM_DEBUG_FILE wrote no $TMP/loom.$(hostname).PID.log"
pid=${logs[0]##*.$(hostname).}
pid=${pid%.log}
grep -q "^$(hostname):$pid:[0-9]* \[0\] LOOM INFO communicator" "${logs[0]}" ||
  fail "LOOM_DEBUG_FILE: not this process's lines: $(head -c 600 "${logs[0]}")"
LOOM_DEBUG=INFO LOOM_DEBUG_FILE="$TMP/no/such/dir/log" "$BENCH" "${SMALL[@]}" >/dev/null 2>"$TMP/err" ||
  fail "LOOM_DEBUG_FILE in a missing folder exits $?"
grep -q "LOOM_DEBUG_FILE='$TMP/no/such/dir/log': cannot open" "$TMP/err" ||
  fail "LOOM_DEBUG_FILE in a missing folder: $(head -c 600 "$TMP/err")"

# LOOM_* values out of range or malformed fail communicator init with the variable, the value
# and the range (once silently clamped: LOOM_SHM_CHUNK_BYTES=12 ran with 4096), even where this
# communicator would not use them (LOOM_SOCKET_STREAMS on one host).
for setting in LOOM_SHM_CHUNK_BYTES=12 LOOM_SOCKET_STREAMS=0 LOOM_DEVICE_BLOCKING=yes \
  LOOM_HETERO_ALGO=Flat LOOM_TIMEOUT=inf; do
  env "$setting" "$INFO" --algos >/dev/null 2>"$TMP/err"
  [[ $? -ne 0 ]] || fail "$setting accepted"
  grep -q "${setting%%=*}.*${setting#*=}" "$TMP/err" || fail "$setting: $(cat "$TMP/err")"
done

# srun's variables: rank and size from SLURM_PROCID/SLURM_NTASKS, the rendezvous on the step's
# first node (here the local host) with a port from the job and step ids.
host=$(hostname)
SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_LOCALID=0 SLURM_JOB_ID=$$ SLURM_STEP_ID=0 \
  SLURM_STEP_NODELIST="$host" "$INFO" --algos >"$TMP/out" 2>&1 ||
  fail "loom-info under srun variables: $(cat "$TMP/out")"
grep -q "1 rank(s)" "$TMP/out" || fail "srun: $(cat "$TMP/out")"
# Slurm's compressed node lists: "localhos[t-u],other" starts with localhost.
SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_JOB_ID=$$ SLURM_STEP_ID=1 \
  SLURM_STEP_NODELIST="localhos[t-u],other" "$INFO" --algos >"$TMP/out" 2>&1 ||
  fail "loom-info under a bracketed node list: $(cat "$TMP/out")"

# A port for a rendezvous root: below the kernel's ephemeral range (the connections of tests
# running beside this one take ports from it: one derived from the pid once collided with one,
# "cannot listen on 127.0.0.1:41798: Address already in use") and used by no socket now.
free_port() {
  local low p
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  for _ in $(seq 100); do
    p=$((10000 + RANDOM % (low - 10000)))
    ss -Hant "sport = :$p" | grep -q . || break
  done
  echo "$p"
}

# Without LOOM_JOB_SECRET (torchrun sets none) the unauthenticated rendezvous is reported once per
# job, by rank 0, saying how to set the secret under torchrun.
port=$(free_port)
for r in 0 1 2; do
  LOOM_RANK=$r LOOM_WORLD_SIZE=3 LOOM_COMM_ID=127.0.0.1:$port LOOM_TIMEOUT=60 \
    "$INFO" --algos >/dev/null 2>"$TMP/unauth.$r" &
done
wait
warnings=$(cat "$TMP"/unauth.* | grep -c "rendezvous is unauthenticated")
[[ $warnings -eq 1 ]] || fail "unauthenticated warning printed $warnings times: $(cat "$TMP"/unauth.*)"
grep -q "LOOM_JOB_SECRET=\$(openssl rand -hex 16) torchrun" "$TMP"/unauth.0 ||
  fail "the warning does not say how to set the secret under torchrun"

# A rank whose peers never come says once (after a quarter of a short timeout) which ranks have
# not arrived, and again only when that changes; every rank's timeout error names them. Rank 1
# starts after rank 0's first report, so the picture changes once. (Started with rank 0, rank 1
# either gave up connecting before the root listened or was still in the handshake when the root
# gave up, on a loaded machine; and rank 0, whose process hosts the root, exits on reading its
# verdict, so the root tells rank 1 first.)
port=$(free_port)
LOOM_RANK=0 LOOM_WORLD_SIZE=3 LOOM_COMM_ID=127.0.0.1:$port LOOM_TIMEOUT=6 \
  "$INFO" --algos >/dev/null 2>"$TMP/missing.0" &
for _ in $(seq 200); do
  grep -q "waiting for ranks 1, 2" "$TMP/missing.0" && break
  sleep 0.05
done
LOOM_RANK=1 LOOM_WORLD_SIZE=3 LOOM_COMM_ID=127.0.0.1:$port LOOM_TIMEOUT=6 \
  "$INFO" --algos >/dev/null 2>"$TMP/missing.1" &
wait
first=$(grep -c "1 of 3 ranks arrived; waiting for ranks 1, 2 (timeout in" "$TMP/missing.0")
changed=$(grep -c "(changed), 2 of 3 ranks arrived; waiting for ranks 2 (timeout in" "$TMP/missing.0")
[[ $first -eq 1 && $changed -eq 1 ]] ||
  fail "$first first and $changed changed progress reports (want 1 and 1): $(cat "$TMP/missing.0")"
for r in 0 1; do
  grep -q "loomCommInitFromEnv failed: timed out .*missing ranks: 2)" "$TMP/missing.$r" ||
    fail "rank $r's timeout does not name rank 2: $(cat "$TMP/missing.$r")"
done

((failures == 0)) && echo "tools_cli_test: all cases passed"
exit $((failures > 0))
