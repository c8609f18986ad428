#!/usr/bin/env bash
# `make run`: the first thing a newcomer runs. Builds only what it runs (the library, loomrun,
# loom-bench and the memcpy-bound peer), runs allreduce and allgather across RANKS local ranks
# with every result checked, and compares Loom's bus bandwidth with the memcpy bound of this
# machine (RANKS processes copying at once: no shared-memory collective can move bytes faster).
# Says what each step does and how long it took.
#
# Usage: scripts/run.sh [--build-only]   (environment: BUILD, RANKS, JOBS, MAXBYTES, LOOM_CUDA)
#   --build-only: the first three steps (make bench uses them), no benchmark.
# CUDA kernels take minutes per file to compile: a new build directory compiles them only when
# `nvidia-smi -L` lists a GPU that could run them (LOOM_CUDA=GPU; LOOM_CUDA=ON|OFF|AUTO
# overrides). An existing build directory keeps its settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build}
RANKS=${RANKS:-4}
JOBS=${JOBS:-$(nproc)}
MAXBYTES=${MAXBYTES:-64M}
BUILD_ONLY=0
[[ "${1:-}" == --build-only ]] && BUILD_ONLY=1

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
  cmake -S . -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA="$cuda" \
    >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log" >&2; exit 1; }
  grep -E 'Loom: (CUDA support|no GPU)' "$BUILD.configure.log" | sed 's/^-- //'
  done_step
fi

step "building the library, loomrun and loom-bench ($JOBS jobs; tests are built by make test)"
cmake --build "$BUILD" -j "$JOBS" --target loomrun loom-bench
mkdir -p "$BUILD/bench"
if [[ ! -x "$BUILD/bench/memcpy_bound" || bench/peers/memcpy_bound.c -nt "$BUILD/bench/memcpy_bound" ]]; then
  ${CC:-cc} -O2 -std=c11 -Wall -o "$BUILD/bench/memcpy_bound" bench/peers/memcpy_bound.c
fi
done_step
((BUILD_ONLY)) && exit 0

results="$BUILD/run"
mkdir -p "$results"
combined="$results/run-$RANKS.csv"
for op in allreduce allgather; do
  step "$op of 8 B to $MAXBYTES across $RANKS ranks on this host (loomrun), results checked"
  "$BUILD/tools/loomrun" -n "$RANKS" --timeout 600 -- "$BUILD/tools/loom-bench" "$op" \
    -b 8 -e "$MAXBYTES" -f 4 -c 1 --csv "$results/$op.csv"
  done_step
done

step "the memcpy bound: $RANKS processes copying at once, the same sizes"
"$BUILD/bench/memcpy_bound" -p "$RANKS" -b 8 -e "$MAXBYTES" -f 4 --csv >"$results/memcpy.csv"
{
  echo "source,$(head -n 1 "$results/allreduce.csv")"
  for source in allreduce allgather memcpy; do
    tag=loom
    [[ $source == memcpy ]] && tag=memcpy
    grep -E '^[a-z]+,[0-9]+,' "$results/$source.csv" | sed "s/^/$tag,/"
  done
} >"$combined"
done_step

printf '\n== Loom against the memcpy bound (loom busbw / memcpy bound: 1 would be as fast as copying)\n'
python3 bench/tables.py "$combined"
echo "== make run finished in $(since "$total_start") s; results in $combined."
echo "== Next: make bench (Loom against Open MPI and gloo, with plots), make test."
