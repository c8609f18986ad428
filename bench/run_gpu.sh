#!/usr/bin/env bash
# Loom vs NCCL on the GPUs of this host: loom-bench --vs nccl for allreduce, allgather and
# reducescatter in float and bfloat16, 8 B to 1 GiB, on N local ranks (one GPU each), plus
# allreduce in CUDA-graph mode; one CSV per run in OUTDIR, markdown tables in OUTDIR/gpu-tables.md.
#
# Usage: bench/run_gpu.sh OUTDIR ["N1 N2 ..."]     (rank counts, default "2 4")
#
# Expects build/tools/loomrun and build/tools/loom-bench built with CUDA, and NCCL's
# libnccl.so.2 where dlopen finds it (else it looks in the pip package nvidia-nccl-cu*).
# NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0.
# Environment overrides: LOOMRUN, LOOM_BENCH, BUILD_DIR, PYTHON, OPS, DTYPES, MAXBYTES (1G),
# ITERS (20), WARMUP (5), RUN_TIMEOUT (seconds per run, 300), LOOM_BENCH_NCCL (NCCL's path),
# CHECK_MAXBYTES (16M; 0 skips the checked runs: the timed sweeps run with -c 0, since checking
# a GiB on the host takes far longer than timing it, and separate short runs check results),
# WINDOW (1: every run with --window 1 too, named *-window: Loom on registered symmetric
# windows against NCCL on its own; OPS may then name alltoall too).
# Exits 1 if any run failed; the other runs still go on.
set -uo pipefail

usage() {
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

[[ $# -ge 1 && $# -le 2 ]] || usage
OUTDIR=$1
NLIST=${2:-2 4}
for n in $NLIST; do
  [[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 ]] || usage
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
LOOMRUN=${LOOMRUN:-$BUILD_DIR/tools/loomrun}
LOOM_BENCH=${LOOM_BENCH:-$BUILD_DIR/tools/loom-bench}
PYTHON=${PYTHON:-python3}
OPS=${OPS:-allreduce allgather reducescatter}
DTYPES=${DTYPES:-float bfloat16}
MAXBYTES=${MAXBYTES:-1G}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
CHECK_MAXBYTES=${CHECK_MAXBYTES:-16M}

export NCCL_NVLS_ENABLE=0

note() { echo "run_gpu: $*" >&2; }

for f in "$LOOMRUN" "$LOOM_BENCH"; do
  if [[ ! -x "$f" ]]; then
    note "$f not found (build Loom with CUDA, or set LOOMRUN / LOOM_BENCH)"
    exit 1
  fi
done
mkdir -p "$OUTDIR" || exit 1

# NCCL from pip (torch's dependency) is not on the loader's path; point loom-bench at it.
if [[ -z "${LOOM_BENCH_NCCL:-}" ]] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then
  found=$("$PYTHON" -c 'import glob, os, nvidia
paths = [p for d in nvidia.__path__
         for p in glob.glob(os.path.join(d, "**", "libnccl.so*"), recursive=True)]
print(sorted(paths)[0] if paths else "")' 2>/dev/null)
  if [[ -n "$found" ]]; then
    export LOOM_BENCH_NCCL=$found
    note "NCCL: $found"
  fi
fi

failed=0
SIZES=(-b 8 -e "$MAXBYTES" -f 2 -n "$ITERS" -w "$WARMUP")

# Runs one loom-bench job; its table goes to OUTDIR/NAME.log (and stdout), its CSV to NAME.csv.
bench() {
  local name=$1 nranks=$2
  shift 2
  note "$name: loom-bench $*"
  "$LOOMRUN" -n "$nranks" --timeout "$RUN_TIMEOUT" --no-prefix -- \
    "$LOOM_BENCH" "$@" --csv "$OUTDIR/$name.csv" 2>&1 | tee "$OUTDIR/$name.log"
  local status=${PIPESTATUS[0]}
  if [[ $status -ne 0 ]]; then
    note "$name failed (exit $status)"
    failed=1
  fi
}

start=$SECONDS
for n in $NLIST; do
  for op in $OPS; do
    for dtype in $DTYPES; do
      bench "gpu-$op-$dtype-$n" "$n" "$op" "${SIZES[@]}" -d "$dtype" -c 0 --vs nccl
      if [[ "${WINDOW:-0}" == 1 ]]; then
        bench "gpu-$op-$dtype-$n-window" "$n" "$op" "${SIZES[@]}" -d "$dtype" -c 0 --vs nccl \
          --window 1
      fi
    done
  done
  if [[ "${WINDOW:-0}" == 1 ]]; then
    bench "gpu-allreduce-float-$n-graph-window" "$n" allreduce "${SIZES[@]}" -d float -c 0 \
      --vs nccl --graph 1 --window 1
  fi
  bench "gpu-allreduce-float-$n-graph" "$n" allreduce "${SIZES[@]}" -d float -c 0 --vs nccl \
    --graph 1
  if [[ "$CHECK_MAXBYTES" != 0 ]]; then
    for op in $OPS; do
      for dtype in $DTYPES; do
        bench "check-$op-$dtype-$n" "$n" "$op" -b 8 -e "$CHECK_MAXBYTES" -f 8 -n 2 -w 1 \
          -d "$dtype" -c 1
        if [[ "${WINDOW:-0}" == 1 ]]; then
          bench "check-$op-$dtype-$n-window" "$n" "$op" -b 8 -e "$CHECK_MAXBYTES" -f 8 -n 2 \
            -w 1 -d "$dtype" -c 1 --window 1
        fi
      done
    done
  fi
done
note "all runs took $((SECONDS - start)) s"

if "$PYTHON" "$ROOT/bench/tables.py" "$OUTDIR"/gpu-*.csv >"$OUTDIR/gpu-tables.md"; then
  note "tables in $OUTDIR/gpu-tables.md"
else
  note "tables.py failed"
  failed=1
fi
exit "$failed"
