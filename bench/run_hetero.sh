#!/usr/bin/env bash
# Heterogeneous communicators on a GPU host: correctness of every collective with a CUDA rank
# beside CPU and emulated-device ranks, then loom-hetero-bench (1 GPU rank + 3 and 7 CPU ranks,
# and CI's shape, 1 emulated-device rank + 3 CPU ranks), 8 B to 256 MiB.
#
#   bench/run_hetero.sh BUILD OUTDIR [MAXBYTES]
set -uo pipefail
build=$1 out=$2 max=${3:-256M}
mkdir -p "$out"
export LOOM_DEVICE_PLUGIN=$PWD/$build/plugins/device/emu/libloom-device-emu.so LOOM_TIMEOUT=120
export NCCL_NVLS_ENABLE=0
run=("$build/tools/loomrun" --timeout 900 -n)
status=0
tests() {
  local placement=$1 split=${2:-}
  local n=${#placement} start=$SECONDS
  if LOOM_TEST_PLACEMENT=$placement LOOM_CLUSTER_SPLIT=$split "${run[@]}" "$n" -- \
      "$build/tests/emu_collectives_test" >"$out/tests_$placement${split:+_split}.log" 2>&1; then
    echo "tests $placement${split:+ split $split}: passed in $((SECONDS - start)) s"
  else
    echo "tests $placement${split:+ split $split}: FAILED"
    grep -E "Failure|FAILED|error" "$out/tests_$placement${split:+_split}.log" | head -10
    status=1
  fi
}
tests GCEC
tests GCCC
tests CEGC
tests GGCE "0;1;2;3"
bench() {
  local placement=$1
  echo "=== loom-hetero-bench --placement $placement"
  "${run[@]}" "${#placement}" -- "$build/tools/loom-hetero-bench" --placement "$placement" \
    -b 8 -e "$max" -f 4 -n 20 -w 5 2>&1 | grep -v '^\[[1-9]' | sed 's/^\[0\] //' |
    tee "$out/bench_$placement.txt" || status=1
}
bench GCCC
bench GCCCCCCC
bench ECCC
exit $status
