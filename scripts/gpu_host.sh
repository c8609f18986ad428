#!/usr/bin/env bash
# One call on a GPU host: build Loom with CUDA, run the GPU tests, and (optionally) benchmarks.
#
#   scripts/gpu_host.sh OUTDIR [tests] [bench ARGS...]
#
# Everything it writes goes under OUTDIR (logs.tgz holds the full logs); a summary is printed.
# NVLink multicast stays off for NCCL and everything else (never needed, and risky on shared GPUs).
set -uo pipefail
out=$1
shift
mkdir -p "$out/logs"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
build=${BUILD:-build-gpu}
jobs=$(nproc)

{ nvidia-smi -L; nvidia-smi topo -m; nvcc --version | tail -1; } >"$out/logs/host.txt" 2>&1

# GoogleTest: the host may have only its sources (/usr/src/googletest).
gtest_args=()
if ! ls /usr/lib/x86_64-linux-gnu/libgtest.a /usr/lib/x86_64-linux-gnu/libgtest.so \
    /usr/local/lib/libgtest.a >/dev/null 2>&1; then
  if [[ -d /usr/src/googletest ]]; then
    cmake -S /usr/src/googletest -B /tmp/gtest-build -G Ninja -DCMAKE_INSTALL_PREFIX=/tmp/gtest \
      -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build /tmp/gtest-build -j "$jobs" >/dev/null &&
      cmake --install /tmp/gtest-build >/dev/null && gtest_args=(-DCMAKE_PREFIX_PATH=/tmp/gtest)
  fi
fi

t0=$(date +%s)
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=ON \
    "${gtest_args[@]}" >"$out/logs/cmake.log" 2>&1; then
  tail -30 "$out/logs/cmake.log"
  tar czf "$out/logs.tgz" -C "$out" logs
  exit 1
fi
if ! cmake --build "$build" -j "$jobs" >"$out/logs/build.log" 2>&1; then
  grep -E "error|FAILED" "$out/logs/build.log" | head -30
  tar czf "$out/logs.tgz" -C "$out" logs
  exit 1
fi
echo "build: $(($(date +%s) - t0)) s"

status=0
while [[ $# -gt 0 ]]; do
  case $1 in
    tests)
      shift
      timeout "${TEST_TIMEOUT:-300}" tests/gpu/run.sh "$build" "$out/logs/tests" | tail -12 || status=1
      ;;
    bench)
      shift
      args=()
      while [[ $# -gt 0 && $1 != tests && $1 != bench ]]; do args+=("$1"); shift; done
      echo "=== loom-bench ${args[*]}"
      timeout "${BENCH_TIMEOUT:-240}" "$build/tools/loomrun" -n "${RANKS:-4}" --timeout 600 -- \
        "$build/tools/loom-bench" "${args[@]}" 2>&1 | tee -a "$out/logs/bench.txt" | tail -40 ||
        status=1
      ;;
    *)
      echo "unknown step $1" >&2
      shift
      ;;
  esac
done
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
exit $status
