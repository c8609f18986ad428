#!/usr/bin/env bash
# Runs Loom, MPI, gloo (when torch is importable) and the memcpy bound side by side on this
# host with NRANKS local ranks, saves every result in one CSV and prints markdown tables.
#
# Usage: bench/run_cpu.sh NRANKS [MAXBYTES]      (MAXBYTES default 256M)
#
# Builds nothing of Loom: expects build/tools/loomrun and build/tools/loom-bench. The peers
# (mpi_bench, memcpy_bound) are compiled into build/bench/ when missing or stale.
# Environment overrides: LOOMRUN, LOOM_BENCH, MPI_BENCH, MEMCPY_BOUND, MPIRUN, MPICC, CC,
# PYTHON, BUILD_DIR, OPS, ITERS, WARMUP, CHECK (loom-bench -c), RESULTS_DIR.
# Any piece that is missing or fails is reported and skipped; the rest still runs. The exit
# status is 1 if a piece failed, 0 otherwise (a missing optional piece is not a failure).
set -uo pipefail

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

[[ $# -ge 1 && $# -le 2 ]] || usage
[[ "$1" =~ ^[0-9]+$ && "$1" -ge 1 ]] || usage
NRANKS=$1
MAXBYTES=${2:-256M}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
LOOMRUN=${LOOMRUN:-$BUILD_DIR/tools/loomrun}
LOOM_BENCH=${LOOM_BENCH:-$BUILD_DIR/tools/loom-bench}
MPIRUN=${MPIRUN:-mpirun}
MPICC=${MPICC:-mpicc}
CC=${CC:-cc}
PYTHON=${PYTHON:-python3}
OPS=${OPS:-allreduce allgather reducescatter broadcast alltoall}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
CHECK=${CHECK:-1}
MINBYTES=8
FACTOR=4
RESULTS_DIR=${RESULTS_DIR:-$ROOT/bench/results}
HOST=$(hostname -s 2>/dev/null || hostname)
OUT="$RESULTS_DIR/cpu-$HOST-$NRANKS.csv"
TMP="$OUT.tmp"
HEADER="source,op,nranks,bytes,count,dtype,redop,root,algo,oop_us,oop_algbw,oop_busbw,oop_wrong"
HEADER+=",ip_us,ip_algbw,ip_busbw,ip_wrong"

failed=0
note() { echo "run_cpu: $*" >&2; }

# Compiles a peer from bench/peers/ unless the caller named a binary or it is up to date.
# Prints the binary's path; prints nothing when it cannot be built, and fails if it tried.
build_peer() {
  local override=$1 name=$2 compiler=$3
  shift 3
  if [[ -n "$override" ]]; then
    echo "$override"
    return
  fi
  local src="$ROOT/bench/peers/$name.c" bin="$BUILD_DIR/bench/$name"
  if [[ ! -x "$bin" || "$src" -nt "$bin" ]]; then
    if ! command -v "$compiler" >/dev/null 2>&1; then
      note "$compiler not found: skipping $name"
      return
    fi
    mkdir -p "$BUILD_DIR/bench"
    if ! "$compiler" -O2 -std=c11 -Wall -o "$bin" "$src" "$@" >&2; then
      note "building $name failed"
      return 1
    fi
  fi
  echo "$bin"
}

# Runs a command whose stdout is loom-bench CSV and appends its data rows, tagged with the
# source, to the results. Comment lines and the header are dropped.
collect() {
  local source=$1
  shift
  local log
  log=$(mktemp)
  note "$source: $*"
  if "$@" >"$log"; then
    grep -E '^[a-z]+,[0-9]+,' "$log" | sed "s/^/$source,/" >>"$TMP"
  else
    note "$source failed (exit $?): $*"
    # Keep whatever rows it printed before failing: they were measured correctly.
    grep -E '^[a-z]+,[0-9]+,' "$log" | sed "s/^/$source,/" >>"$TMP"
    failed=1
  fi
  rm -f "$log"
}

mkdir -p "$RESULTS_DIR"
echo "$HEADER" >"$TMP"

MPI_BENCH=$(build_peer "${MPI_BENCH:-}" mpi_bench "$MPICC") || failed=1
MEMCPY_BOUND=$(build_peer "${MEMCPY_BOUND:-}" memcpy_bound "$CC") || failed=1

have_loom=1
for f in "$LOOMRUN" "$LOOM_BENCH"; do
  if [[ ! -x "$f" ]]; then
    note "$f not found: skipping Loom (build it, or set LOOMRUN / LOOM_BENCH)"
    have_loom=0
  fi
done
have_mpi=0
if [[ -n "$MPI_BENCH" && -x "$MPI_BENCH" ]] && command -v "$MPIRUN" >/dev/null 2>&1; then
  have_mpi=1
else
  note "mpi_bench or $MPIRUN unavailable: skipping MPI"
fi
have_gloo=0
if "$PYTHON" -c 'import torch, torch.distributed' >/dev/null 2>&1; then
  have_gloo=1
else
  note "torch not importable by $PYTHON: skipping gloo"
fi

SIZES=(-b "$MINBYTES" -e "$MAXBYTES" -f "$FACTOR" -n "$ITERS" -w "$WARMUP")
for op in $OPS; do
  if ((have_loom)); then
    collect loom "$LOOMRUN" -n "$NRANKS" --no-prefix -- \
      "$LOOM_BENCH" "$op" "${SIZES[@]}" -d float -c "$CHECK" --device cpu --csv
  fi
  if ((have_mpi)); then
    collect mpi "$MPIRUN" --allow-run-as-root --oversubscribe -np "$NRANKS" \
      "$MPI_BENCH" "$op" "${SIZES[@]}" -d float --csv
  fi
done
if ((have_gloo)); then
  # shellcheck disable=SC2086  # OPS is a word list on purpose
  collect gloo "$PYTHON" "$ROOT/bench/peers/gloo_bench.py" -np "$NRANKS" --minbytes "$MINBYTES" \
    --maxbytes "$MAXBYTES" --factor "$FACTOR" --iters "$ITERS" --warmup "$WARMUP" $OPS
fi
if [[ -n "$MEMCPY_BOUND" && -x "$MEMCPY_BOUND" ]]; then
  collect memcpy "$MEMCPY_BOUND" -p "$NRANKS" -b "$MINBYTES" -e "$MAXBYTES" -f "$FACTOR" --csv
else
  note "memcpy_bound unavailable: no bound column"
fi

mv "$TMP" "$OUT"
note "results in $OUT"
if ! "$PYTHON" "$ROOT/bench/tables.py" "$OUT"; then
  note "tables.py failed"
  failed=1
fi
# One PNG per op beside the CSV: busbw against size for Loom, its peers and the memcpy bound.
if "$PYTHON" -c "import matplotlib" 2>/dev/null; then
  "$PYTHON" "$ROOT/bench/plot.py" "$OUT" >&2 || { note "plot.py failed"; failed=1; }
else
  note "no matplotlib for $PYTHON: no plots (scripts/install_deps.sh plot)"
fi
exit "$failed"
