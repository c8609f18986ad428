#!/usr/bin/env bash
# One call on a GPU host: build and install the Python package with CUDA (pip install .), run the
# torch backend's CUDA tests, and benchmark "loom" vs "nccl" through torch.distributed.
#
#   scripts/gpu_torch.sh OUTDIR [tests [PYTEST -k EXPR]] [bench NRANKS MAXBYTES]
#
# Logs go under OUTDIR. NVLink multicast stays off for NCCL and everything else. LOOM_PREBUILT: a
# directory holding the built package (a previous call's OUTDIR/site, or the python-site of
# `PYTHON_PACKAGE=1 scripts/gpu_host.sh`), used instead of `pip install .`.
set -uo pipefail
out=$1
shift
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
t0=$(date +%s)
if [[ -n ${LOOM_PREBUILT:-} ]]; then
  export PYTHONPATH=$LOOM_PREBUILT${PYTHONPATH:+:$PYTHONPATH}  # a package a previous call built
elif ! "$py" -m pip install --no-build-isolation --no-deps -v . >"$out/pip.log" 2>&1; then
  grep -E "error|Error" "$out/pip.log" | head -40
  exit 1
fi
echo "pip install .: $(($(date +%s) - t0)) s"
# The installed package, for a later call to reuse (PYTHONPATH) instead of building again.
site=$("$py" -c "import loom, os; print(os.path.dirname(os.path.dirname(loom.__file__)))")
mkdir -p "$out/site" && cp -r "$site/loom" "$out/site/" 2>/dev/null
"$py" -c "import torch, loom; print('torch', torch.__version__, 'loom CUDA', loom.torch_cuda,
'GPUs', torch.cuda.device_count())"
status=0
while [[ $# -gt 0 ]]; do
  case $1 in
    tests)
      shift
      filter=cuda
      if [[ $# -gt 0 && $1 != bench ]]; then filter=$1; shift; fi
      timeout "${TEST_TIMEOUT:-360}" "$py" -m pytest -q -rs ${PYTEST_ARGS:-} tests/python/test_torch_backend.py \
        -k "$filter" 2>&1 | tee "$out/pytest.log" | tail -30 || status=1
      ;;
    bench)
      shift
      ranks=${1:-4} max=${2:-512M}
      shift 2
      DEVICE=cuda PYTHON="$py" ITERS=${ITERS:-20} WARMUP=${WARMUP:-5} \
        timeout "${BENCH_TIMEOUT:-300}" bench/run_torch.sh "$ranks" "$max" "$out" 2>&1 |
        tee "$out/bench.md" || status=1
      ;;
    *)
      echo "unknown step $1" >&2
      exit 2
      ;;
  esac
done
exit $status
