#!/usr/bin/env bash
# Runs the GPU tests of an existing build on a GPU host and summarizes them.
#
#   tests/gpu/run.sh BUILD_DIR OUTDIR
#
# BUILD_DIR must already be built (this script never builds). Every test's full output goes to
# OUTDIR/<test>.log, the GPUs and their topology to OUTDIR/gpus.txt; a table of test, result and
# seconds is printed at the end. Exit status: 0 when nothing failed (skipped tests are listed as
# SKIP), 1 when a test failed, 2 on a usage error.
#
# Environment: GPU_TESTS (default: gpu_collectives_n2/_n4, gpu_faults, and the one-process
# gpu_one_process_n2/_n4/_reset/_reset-destroy/_exit-alive, and execution plans on CUDA ranks of
# heterogeneous communicators, emu_plans_gpu_*, and gpu_settings_differ) picks the tests; GPUTEST_CONFIGS=auto,ll,... restricts the configs of gpu_collectives_*; GoogleTest itself
# reads GTEST_FILTER (e.g. GTEST_FILTER='Configs/Sweep.Reductions/*').
# LOOM_TEST_SHARE_GPU=1 lets ranks share GPUs (a one-GPU host runs the 2- and 4-rank tests);
# GPU_MPS=1 starts a CUDA MPS daemon for the run (pipes and logs under OUTDIR/mps) and stops it
# at the end, so that the sharing ranks' kernels run side by side instead of time-sliced.
set -u

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR OUTDIR" >&2
  exit 2
fi
build=$(cd "$1" 2>/dev/null && pwd) || { echo "no build directory: $1" >&2; exit 2; }
mkdir -p "$2" && out=$(cd "$2" && pwd) || { echo "cannot create $2" >&2; exit 2; }
if [[ ! -f "$build/CTestTestfile.cmake" ]]; then
  echo "$build is not a configured build directory" >&2
  exit 2
fi
if [[ ! -x "$build/tests/gpu/gpu_collectives_test" ]]; then
  echo "$build/tests/gpu/gpu_collectives_test is missing: build with CUDA first" >&2
  exit 2
fi

export NCCL_NVLS_ENABLE=0
tests=${GPU_TESTS:-gpu_collectives_n2 gpu_collectives_n4 gpu_faults gpu_one_process_n2
  gpu_one_process_n4 gpu_one_process_reset gpu_one_process_reset-destroy
  gpu_one_process_exit-alive emu_plans_gpu_GCGC emu_plans_gpu_GGCC emu_plans_gpu_GCEC
  emu_plans_gpu_GG emu_plans_gpu_GGG emu_plans_gpu_GGGG emu_plans_gpu_GG_bulk
  emu_plans_gpu_GGG_parts_in_turn gpu_settings_differ}

if [[ ${GPU_MPS:-0} == 1 ]]; then
  export CUDA_MPS_PIPE_DIRECTORY=$out/mps/pipe CUDA_MPS_LOG_DIRECTORY=$out/mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if ! nvidia-cuda-mps-control -d; then
    echo "cannot start the CUDA MPS daemon (nvidia-cuda-mps-control -d)" >&2
    exit 2
  fi
  trap 'echo quit | nvidia-cuda-mps-control; sleep 1' EXIT
  echo "CUDA MPS daemon started (pipes in $CUDA_MPS_PIPE_DIRECTORY)"
fi

{
  date
  echo "LOOM_TEST_SHARE_GPU=${LOOM_TEST_SHARE_GPU:-0} GPU_MPS=${GPU_MPS:-0}"
  nvidia-smi -L 2>&1 || echo "nvidia-smi not available"
  nvidia-smi topo -m 2>&1 || true
} >"$out/gpus.txt"

declare -a rows
failed=0
for t in $tests; do
  echo "=== $t"
  start=$(date +%s%N)
  (cd "$build" && ctest -R "^${t}\$" -V --no-tests=error) >"$out/$t.log" 2>&1
  rc=$?
  seconds=$(awk -v s="$start" -v e="$(date +%s%N)" 'BEGIN { printf "%.1f", (e - s) / 1e9 }')
  if grep -q "No tests were found" "$out/$t.log"; then
    result=MISSING
    failed=1
  elif grep -qE "\*\*\*Skipped|Not Run" "$out/$t.log"; then
    result=SKIP
  elif [[ $rc -eq 0 ]] && grep -q "100% tests passed" "$out/$t.log"; then
    result=PASS
  else
    result=FAIL
    failed=1
  fi
  rows+=("$(printf '%-22s %-8s %8s' "$t" "$result" "$seconds")")
  echo "    $result in $seconds s (log: $out/$t.log)"
  if [[ $result == FAIL ]]; then
    # The failures themselves, for a first look.
    grep -E "Failure|FAIL|FAILED|\[ +FAILED|error|hang|rank [0-9]+:" "$out/$t.log" | head -40
  fi
done

echo
printf '%-22s %-8s %8s\n' test result seconds
for row in "${rows[@]}"; do echo "$row"; done
echo "logs: $out"
exit $failed
