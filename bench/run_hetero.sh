#!/usr/bin/env bash
# Heterogeneous communicators on a GPU host: correctness of every collective with a CUDA rank
# beside CPU and emulated-device ranks, then loom-hetero-bench (1 GPU rank + 3 and 7 CPU ranks,
# and CI's shape, 1 emulated-device rank + 3 CPU ranks), 8 B to 256 MiB. Then, under CUDA MPS,
# two CUDA ranks sharing the GPU beside two CPU ranks (GGCC): every collective with the composed
# allreduce (the CUDA cluster's own kernels inside it), and the bench composed against flat for
# each of OPS.
# The tests include StreamOrder (a call on the G rank returns while the test holds its stream;
# user work before and after it on the stream), and the benches a blocking run (LOOM_DEVICE_BLOCKING).
#
#   bench/run_hetero.sh BUILD OUTDIR [MAXBYTES]
#   PARTS: which parts run (default "tests bench mps"; a device session may split them over calls);
#          "torch" adds the mixed-device torch job against staging through gloo
#          (bench/hetero_torch_bench.py, 1 GPU rank + 3 and 7 CPU ranks), with the Python package
#          of BUILD (configured with -DLOOM_BUILD_PYTHON=ON, targets _loom and _loom_torch)
#   OPS: the collectives the bench parts run, each its own table (default "allreduce"; e.g.
#        "allreduce broadcast reduce allgather reducescatter"); files other than allreduce's end
#        in _OP
set -uo pipefail
build=$1 out=$2 max=${3:-256M}
PARTS=${PARTS:-tests bench mps}
OPS=${OPS:-allreduce}
part() { [[ " $PARTS " == *" $1 "* ]]; }
mkdir -p "$out"
export LOOM_DEVICE_PLUGIN=$PWD/$build/plugins/device/emu/libloom-device-emu.so
export LOOM_TIMEOUT=${LOOM_TIMEOUT:-120}
export NCCL_NVLS_ENABLE=0
run=("$build/tools/loomrun" --timeout "${RUN_TIMEOUT:-900}" -n)
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
if part tests; then
  tests GCEC
  tests GCCC
  tests CEGC
  tests GGCE "0;1;2;3"
fi
bench() {
  local placement=$1 tag=${2:-} op suffix
  for op in $OPS; do
    suffix=$tag
    [[ $op == allreduce ]] || suffix+=_$op
    echo "=== loom-hetero-bench --placement $placement --op $op $tag"
    "${run[@]}" "${#placement}" -- "$build/tools/loom-hetero-bench" --placement "$placement" \
      --op "$op" -b 8 -e "$max" -f 4 -n 20 -w 5 2>&1 | grep -v '^\[[1-9]' | sed 's/^\[0\] //' |
      tee "$out/bench_$placement$suffix.txt" || status=1
  done
}
if part bench; then
  bench GCCC
  bench GCCCCCCC
  bench ECCC
  # The same calls blocking the host until done (the behaviour before stream order), side by side.
  LOOM_DEVICE_BLOCKING=1 bench GCCC _blocking
  LOOM_DEVICE_BLOCKING=1 bench ECCC _blocking
fi
if part torch; then
  # The package as pip would install it, from this build's modules (no second build).
  mkdir -p "$out/pkg/loom" && cp -r python/loom/. "$out/pkg/loom/" &&
    cp "$build"/python/_loom*.so "$out/pkg/loom/" || status=1
  for n in 4 8; do
    echo "=== hetero_torch_bench.py -np $n --gpus 1 $OPS"
    PYTHONPATH=$out/pkg${PYTHONPATH:+:$PYTHONPATH} timeout "${TORCH_TIMEOUT:-600}" \
      "${PYTHON:-python3}" bench/hetero_torch_bench.py -np $n --gpus 1 -b 8 -e "$max" -f 4 \
      -n 20 -w 5 $OPS 2>&1 | tee "$out/torch_G$((n - 1))C.txt" || status=1
  done
fi
part mps || exit $status
export CUDA_MPS_PIPE_DIRECTORY=$out/mps/pipe CUDA_MPS_LOG_DIRECTORY=$out/mps/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if nvidia-cuda-mps-control -d; then
  trap 'echo quit | nvidia-cuda-mps-control; sleep 1' EXIT
  LOOM_DEBUG=INFO LOOM_TEST_PLACEMENT=GGCC "${run[@]}" 4 -- "$build/tests/emu_collectives_test" \
    --gtest_filter=*Reductions 2>&1 | grep -m2 "heterogeneous allreduce"
  tests GGCC
  tests GGCE
  # Flat against composed, op by op, side by side.
  all_ops=$OPS
  for OPS in $all_ops; do
    LOOM_HETERO_ALGO=flat bench GGCC _flat
    LOOM_HETERO_ALGO=composed bench GGCC _composed
  done
  OPS=$all_ops
else
  echo "no CUDA MPS here: GGCC skipped"
fi
exit $status
