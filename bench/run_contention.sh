#!/usr/bin/env bash
# CPU collectives on a busy machine: Loom, Open MPI (and Gloo where torch imports) side by side
# while N busy-loop processes (pinned nowhere) run beside the job, for each N in STATES.
#
# Usage: bench/run_contention.sh NRANKS [MAXBYTES]        (MAXBYTES default 64M)
#
# Per repetition, per state, per size: one run of each source, interleaved, so all see the same
# machine. Each size runs for about TARGET_BYTES of data (ITERS_MIN to ITERS_MAX calls): a few
# dozen calls would fit inside one time slice and measure luck, not contention. Results (one CSV,
# columns state,rep,source + loom-bench's) go to RESULTS_DIR; bench/contention_table.py prints
# the median of the repetitions, per state, with the target (Loom <= Open MPI) marked.
# Environment: STATES ("0 1 2"), REPS (3), OPS (allreduce), MINBYTES (1K), FACTOR (8),
# TARGET_BYTES (256M), ITERS_MIN (10), ITERS_MAX (2000), GLOO_ITERS (100), BUSY_SESSION (same: the busy loops share
# the job's session and so its scheduling group under autogroup; own: each its own, as another
# user's work would), BASE_BUILD (a second Loom build to measure beside, e.g. the last release),
# RUN_LIMIT (seconds per run, 300: a run that collapses under contention leaves its cell empty
# rather than stall the table), BUILD_DIR, MPIRUN, MPI_BENCH, PYTHON, RESULTS_DIR.
set -uo pipefail

[[ $# -ge 1 && $# -le 2 && "$1" =~ ^[0-9]+$ ]] || {
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
NRANKS=$1
MAXBYTES=${2:-64M}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
STATES=${STATES:-0 1 2}
REPS=${REPS:-3}
OPS=${OPS:-allreduce}
MINBYTES=${MINBYTES:-1K}
FACTOR=${FACTOR:-8}
TARGET_BYTES=${TARGET_BYTES:-256M}
ITERS_MIN=${ITERS_MIN:-10}
ITERS_MAX=${ITERS_MAX:-2000}
GLOO_ITERS=${GLOO_ITERS:-100}
BUSY_SESSION=${BUSY_SESSION:-same}
RUN_LIMIT=${RUN_LIMIT:-300}
BASE_BUILD=${BASE_BUILD:-}
MPIRUN=${MPIRUN:-mpirun}
PYTHON=${PYTHON:-python3}
RESULTS_DIR=${RESULTS_DIR:-$ROOT/bench/results}
HOST=$(hostname -s 2>/dev/null || hostname)
OUT="$RESULTS_DIR/contention-$HOST-$NRANKS.csv"

note() { echo "run_contention: $*" >&2; }
bytes() {  # 64M -> 67108864
  local v=${1%[KMG]} unit=${1: -1}
  case $unit in K) echo $((v << 10)) ;; M) echo $((v << 20)) ;; G) echo $((v << 30)) ;; *) echo "$1" ;; esac
}

MPI_BENCH=${MPI_BENCH:-$BUILD_DIR/bench/mpi_bench}
if [[ ! -x $MPI_BENCH ]] && command -v mpicc >/dev/null; then
  mkdir -p "$(dirname "$MPI_BENCH")"
  mpicc -O2 -std=c11 -Wall -o "$MPI_BENCH" "$ROOT/bench/peers/mpi_bench.c" || note "no mpi_bench"
fi
have_mpi=0
[[ -x $MPI_BENCH ]] && command -v "$MPIRUN" >/dev/null && have_mpi=1
((have_mpi)) || note "no Open MPI (mpicc/mpirun): Loom alone"
have_gloo=0
"$PYTHON" -c 'import torch.distributed' 2>/dev/null && have_gloo=1

busy=()
start_busy() {
  for ((i = 0; i < $1; i++)); do
    if [[ $BUSY_SESSION == own ]]; then
      setsid bash -c 'while :; do :; done' &
    else
      bash -c 'while :; do :; done' &
    fi
    busy+=($!)
  done
}
stop_busy() {
  ((${#busy[@]})) && kill "${busy[@]}" 2>/dev/null
  wait "${busy[@]}" 2>/dev/null
  busy=()
}
trap stop_busy EXIT

rows() {  # source, command...: appends loom-bench CSV data rows tagged with state, rep, source
  local source=$1
  shift
  timeout -k 5 "$RUN_LIMIT" "$@" 2>/dev/null | grep -E '^[a-z]+,[0-9]+,' | sed "s/^/$state,$rep,$source,/" >>"$OUT.tmp"
}

mkdir -p "$RESULTS_DIR"
echo "state,rep,source,op,nranks,bytes,count,dtype,redop,root,algo,oop_us,oop_algbw,oop_busbw,oop_wrong,ip_us,ip_algbw,ip_busbw,ip_wrong" >"$OUT.tmp"
max=$(bytes "$MAXBYTES") target=$(bytes "$TARGET_BYTES")
sizes=()
for ((s = $(bytes "$MINBYTES"); s <= max; s *= FACTOR)); do sizes+=("$s"); done
for ((rep = 1; rep <= REPS; rep++)); do
  for state in $STATES; do
    note "rep $rep, $state busy processes, $NRANKS ranks"
    start_busy "$state"
    sleep 0.2
    for op in $OPS; do
      for s in "${sizes[@]}"; do
        n=$((target / s))
        ((n < ITERS_MIN)) && n=$ITERS_MIN
        ((n > ITERS_MAX)) && n=$ITERS_MAX
        w=$((n / 10 + 1))
        args=("$op" -b "$s" -e "$s" -n "$n" -w "$w" -d float)
        rows loom "$BUILD_DIR/tools/loomrun" -n "$NRANKS" --no-prefix -- \
          "$BUILD_DIR/tools/loom-bench" "${args[@]}" --device cpu --csv -c 0
        if [[ -n $BASE_BUILD ]]; then
          rows base "$BASE_BUILD/tools/loomrun" -n "$NRANKS" --no-prefix -- \
            "$BASE_BUILD/tools/loom-bench" "${args[@]}" --device cpu --csv -c 0
        fi
        if ((have_mpi)); then
          rows mpi "$MPIRUN" --allow-run-as-root --oversubscribe -np "$NRANKS" "$MPI_BENCH" \
            "${args[@]}" --csv
        fi
      done
      # Gloo once over all sizes (each launch imports torch): GLOO_ITERS calls per size.
      if ((have_gloo)); then
        rows gloo "$PYTHON" "$ROOT/bench/peers/gloo_bench.py" -np "$NRANKS" --minbytes \
          "${sizes[0]}" --maxbytes "$max" --factor "$FACTOR" --iters "$GLOO_ITERS" \
          --warmup $((GLOO_ITERS / 10 + 1)) "$op"
      fi
    done
    stop_busy
  done
done
mv "$OUT.tmp" "$OUT"
note "results in $OUT"
"$PYTHON" "$ROOT/bench/contention_table.py" "$OUT"
