#!/usr/bin/env bash
# The torch backend's threads under ThreadSanitizer: loom._loom and loom._loom_torch built with
# -fsanitize=thread (build-sanitize-tsan-python, -O1), the TSan runtime preloaded into Python (torch
# and CPython are not instrumented: TSan sees Loom's code and every pthread call), and the torch
# backend's CPU tests run on it: collectives, point-to-point, the worker's queue, async work and
# errors. Every report is a failure; reports go to OUTDIR (default a temporary directory).
#
#   scripts/tsan_torch.sh [OUTDIR]     LOOM_VENV (.venv): a Python with torch; TESTS: pytest files
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${LOOM_VENV:-.venv}
python=$venv/bin/python
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "tsan_torch: no torch in $venv (scripts/python_test.sh installs it): skipped"
  exit 0
fi
dir=${TSAN_PYTHON_BUILD:-build-sanitize-tsan-python}
out=${1:-$(mktemp -d /tmp/tsan-torch-XXXXXX)}
mkdir -p "$out"
cmake -S . -B "$dir" $(command -v ninja >/dev/null && echo -G Ninja) -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-g1 -O1" -DCMAKE_C_FLAGS_DEBUG="-g1 -O1" -DLOOM_CUDA=OFF \
  -DLOOM_BUILD_PYTHON=ON -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_TOOLS=OFF -DLOOM_SANITIZE=thread \
  -DPython_EXECUTABLE="$PWD/$python" >"$out/configure.log" 2>&1 || { cat "$out/configure.log"; exit 1; }
cmake --build "$dir" -j "${JOBS:-$(nproc)}" --target _loom _loom_torch
# The package as pip installs it: its Python files beside the modules just built.
site=$dir/site
rm -rf "$site" && mkdir -p "$site/loom"
cp -r python/loom/. "$site/loom/"
cp "$dir"/python/_loom*.so "$site/loom/"
runtime=$(gcc -print-file-name=libtsan.so)
# Ranks are Python processes started by the tests: they inherit the preload and the options. Not
# the torchrun across namespace nodes: the preload reaches `ip netns exec` and the shell too.
set +e
PYTHONPATH=$PWD/$site LD_PRELOAD=$runtime \
  TSAN_OPTIONS="log_path=$out/report halt_on_error=0 second_deadlock_stack=1 handle_segv=0 suppressions=$PWD/tests/python/tsan_torch.supp" \
  "$python" -m pytest -q -p no:cacheprovider -k "not across_namespace_nodes" \
  ${TESTS:-tests/python/test_torch_backend.py tests/python/test_torch_p2p.py} 2>&1 |
  tee "$out/pytest.log"
status=${PIPESTATUS[0]}
set -e
reports=$(find "$out" -name 'report.*' | wc -l)
echo "tsan_torch: pytest exit $status, $reports TSan report file(s) in $out"
if ((reports > 0)); then
  head -60 "$(find "$out" -name 'report.*' | head -1)"
  exit 1
fi
exit "$status"
