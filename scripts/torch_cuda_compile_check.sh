#!/usr/bin/env bash
# Compiles the torch backend's CUDA half (python/src/torch with LOOM_TORCH_CUDA=1) against the torch
# of $PYTHON (default .venv/bin/python) and the CUDA toolkit's headers, without building Loom's CUDA
# kernels: a compile check for hosts without a GPU, where `pip install .` leaves that half out
# (LOOM_HAVE_CUDA is off there). Objects go to $OUT (default build/torch-cuda-check); with LINK=1
# it also links the module against torch's libraries and the static libloom.a of a LOOM_CUDA=OFF
# build in $LOOM_BUILD (default build), and loads it (RTLD_NOW, after importing torch) to catch
# unresolved symbols of the CUDA half.
# Usage: scripts/torch_cuda_compile_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
out=${OUT:-build/torch-cuda-check}
cuda=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$out"
mapfile -t info < <("$py" -c "
import sysconfig, torch, torch.utils.cpp_extension as e
print(' '.join(e.include_paths())); print(' '.join(e.library_paths()))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(int(torch.version.cuda is not None))
print(sysconfig.get_paths()['include'])")
[[ ${info[3]} == 1 ]] || { echo "torch of $py has no CUDA: nothing to check" >&2; exit 77; }
[[ -f $cuda/include/cuda_runtime_api.h ]] || { echo "no CUDA headers in $cuda" >&2; exit 77; }
includes=(-Iinclude -I"${info[4]}")
for d in ${info[0]}; do includes+=(-isystem "$d"); done
includes+=(-isystem "$cuda/include")
flags=(-std=c++20 -O1 -fPIC -fvisibility=hidden -Wall -DLOOM_TORCH_CUDA=1
       -D_GLIBCXX_USE_CXX11_ABI="${info[2]}" -DTORCH_EXTENSION_NAME=_loom_torch)
objects=()
for src in python/src/torch/*.cpp; do
  obj="$out/$(basename "${src%.cpp}").o"
  objects+=("$obj")
  # Up to date: newer than its source and every header beside it (a rerun with LINK=1 is quick).
  if [[ -f $obj && -z $(find python/src/torch include -newer "$obj" -name '*.[ch]*' | head -1) ]]; then
    continue
  fi
  echo "compiling $src (LOOM_TORCH_CUDA=1)"
  ${CXX:-g++} "${flags[@]}" "${includes[@]}" -c "$src" -o "$obj"
done
if [[ ${LINK:-0} == 1 ]]; then
  libdirs=()
  for d in ${info[1]}; do libdirs+=(-L"$d"); done
  lib=${LOOM_BUILD:-build}/libloom.a
  [[ -f $lib ]] || { echo "no $lib: build Loom first (-DLOOM_CUDA=OFF is enough)" >&2; exit 1; }
  ${CXX:-g++} -shared -o "$out/_loom_torch_check.so" "${objects[@]}" "$lib" "${libdirs[@]}" \
    -lc10 -lc10_cuda -ltorch -ltorch_cpu -ltorch_python -Wl,-rpath,"${info[1]// /:}" \
    -lpthread -ldl -lrt
  "$py" -c "import torch, ctypes, os; ctypes.CDLL(os.path.abspath('$out/_loom_torch_check.so'), \
os.RTLD_NOW | os.RTLD_GLOBAL)"
  echo "linked and loaded $out/_loom_torch_check.so"
fi
echo "the torch backend's CUDA half compiles"
