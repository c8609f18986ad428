#!/usr/bin/env bash
# `make run`: the first thing a newcomer runs. Builds what it runs and what the README's next
# commands need (the library, the tools, the emulated-device plug-in: CMake's loom-quickstart
# target, everything `cmake --install` installs), runs allreduce and allgather across RANKS local
# ranks with every result checked, and compares Loom with the write bound of this machine (RANKS
# processes writing S bytes each at once: no allreduce or allgather of S bytes can take less time,
# since every rank must write its S bytes of output). Repeats the measurement REPEATS times,
# interleaved, and prints the median with the spread, since one run on a busy machine says little.
# Says what each step does and how long it took.
#
# Usage: scripts/run.sh [--build-only | --targets]
#   (environment: BUILD, RANKS, JOBS, MAXBYTES, REPEATS, LOOM_CUDA)
#   --build-only: the first three steps (make bench uses them), no benchmark.
#   --targets: print the CMake targets it builds, and nothing else.
# CUDA kernels take minutes per file to compile: a new build directory compiles them only when
# `nvidia-smi -L` lists a GPU that could run them (LOOM_CUDA=GPU; LOOM_CUDA=ON|OFF|AUTO
# overrides). An existing build directory keeps its settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build}
RANKS=${RANKS:-4}
JOBS=${JOBS:-$(nproc)}
MAXBYTES=${MAXBYTES:-64M}
REPEATS=${REPEATS:-3}
TARGETS=(loom-quickstart)
BUILD_ONLY=0
[[ "${1:-}" == --build-only ]] && BUILD_ONLY=1
if [[ "${1:-}" == --targets ]]; then
  echo "${TARGETS[*]}"
  exit 0
fi
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: REPEATS=$REPEATS is not a count" >&2; exit 2; }

total_start=$(date +%s.%N)
step_start=0
step() {
  step_start=$(date +%s.%N)
  printf '\n== make run: %s\n' "$*"
}
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
done_step() { echo "== done in $(since "$step_start") s"; }
have() { command -v "$1" >/dev/null 2>&1; }

step "installing missing build dependencies (scripts/install_deps.sh)"
scripts/install_deps.sh
done_step

if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  # GPU: CUDA kernels only where nvidia-smi -L lists a GPU to run them (CMakeLists.txt).
  cuda=${LOOM_CUDA:-GPU}
  generator=()
  have ninja && generator=(-G Ninja)
  step "configuring $BUILD (LOOM_CUDA=$cuda)"
  # Unity as make build configures it, so that make test after make run compiles nothing again.
  cmake -S . -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA="$cuda" \
    -DCMAKE_UNITY_BUILD="${UNITY:-ON}" >"$BUILD.configure.log" 2>&1 ||
    { cat "$BUILD.configure.log" >&2; exit 1; }
  grep -E 'Loom: (CUDA support|no GPU)' "$BUILD.configure.log" | sed 's/^-- //'
  done_step
fi

step "building the library, the tools and the emulated-device plug-in ($JOBS jobs; tests are built by make test)"
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"
mkdir -p "$BUILD/bench"
if [[ ! -x "$BUILD/bench/memcpy_bound" || bench/peers/memcpy_bound.c -nt "$BUILD/bench/memcpy_bound" ]]; then
  ${CC:-cc} -O2 -std=c11 -Wall -o "$BUILD/bench/memcpy_bound" bench/peers/memcpy_bound.c
fi
done_step
((BUILD_ONLY)) && exit 0

results="$BUILD/run"
mkdir -p "$results"
rm -f "$results"/*.csv
combined="$results/run-$RANKS.csv"
# Interleaved: each run measures every piece once, so a burst of load elsewhere on the machine
# spoils one run of each rather than all runs of one.
for ((run = 1; run <= REPEATS; ++run)); do
  for op in allreduce allgather; do
    # The first run checks every result; the others only time.
    check=0 checked=""
    ((run == 1)) && check=1 checked=", results checked"
    step "run $run of $REPEATS: $op of 8 B to $MAXBYTES across $RANKS ranks on this host (loomrun)$checked"
    "$BUILD/tools/loomrun" -n "$RANKS" --timeout 600 -- "$BUILD/tools/loom-bench" "$op" \
      -b 8 -e "$MAXBYTES" -f 4 -c "$check" --csv "$results/$op.$run.csv"
    done_step
  done
  step "run $run of $REPEATS: the bounds: $RANKS processes writing (and copying) at once, the same sizes"
  "$BUILD/bench/memcpy_bound" -p "$RANKS" -b 8 -e "$MAXBYTES" -f 4 --csv >"$results/memcpy.$run.csv"
  done_step
done
{
  echo "source,$(head -n 1 "$results/allreduce.1.csv")"
  for source in allreduce allgather memcpy; do
    tag=loom
    [[ $source == memcpy ]] && tag=memcpy
    for ((run = 1; run <= REPEATS; ++run)); do
      grep -E '^[a-z]+,[0-9]+,' "$results/$source.$run.csv" | sed "s/^/$tag,/"
    done
  done
} >"$combined"

printf '\n== Loom against the write bound, median of %d runs (spread: min-max of Loom'"'"'s times)\n' "$REPEATS"
echo "== loom algbw / write bound is at most 1: every rank must write its S bytes of output, and no"
echo "== process writes them faster than $RANKS processes doing nothing else (1: Loom as fast as that)"
python3 bench/tables.py "$combined"
echo "== make run finished in $(since "$total_start") s; results in $combined."
echo "== Next: make bench (Loom against Open MPI and gloo, with plots), make test."
