#!/usr/bin/env bash
# One call on a GPU host: build Loom with CUDA, run the GPU tests, and (optionally) benchmarks.
#
#   scripts/gpu_host.sh OUTDIR [tests] [bench ARGS...]
#
# Everything it writes goes under OUTDIR (logs.tgz holds the full logs); a summary is printed.
# PYTHON_PACKAGE=1 also builds the Python package's modules in the same build (python3, or
# PYTHON, must have nanobind, and torch for the torch backend) and puts the package in
# BUILD/python-site, for `LOOM_PREBUILT=BUILD/python-site scripts/gpu_torch.sh ...`: the CUDA
# kernels are then compiled once, not again by `pip install .` (about 5 minutes of the host).
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

python_args=()
if [[ ${PYTHON_PACKAGE:-0} == 1 ]]; then
  python_args=(-DLOOM_BUILD_PYTHON=ON "-DPython_EXECUTABLE=$(command -v "${PYTHON:-python3}")")
fi

# The NCCL shim's nccl.h: 2.32's where the host has none as recent (needs PyPI or LOOM_NCCL_WHEEL).
scripts/nccl_header.sh "$build/_deps/nccl" >>"$out/logs/cmake.log" 2>&1

t0=$(date +%s)
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=ON \
    "${gtest_args[@]}" "${python_args[@]}" >"$out/logs/cmake.log" 2>&1; then
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
if [[ ${PYTHON_PACKAGE:-0} == 1 ]]; then
  # The package as pip would install it: its Python files and the modules just built.
  if rm -rf "$build/python-site" && mkdir -p "$build/python-site/loom" &&
    cp -r python/loom/. "$build/python-site/loom/" &&
    cp "$build"/python/_loom*.so "$build/python-site/loom/"; then
    echo "python package: $build/python-site (LOOM_PREBUILT)"
  else
    echo "python package: could not assemble $build/python-site" >&2
  fi
  grep -q "torch backend serves CUDA tensors" "$out/logs/cmake.log" ||
    echo "python package: the torch backend does not serve CUDA tensors (logs/cmake.log)"
fi

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
