#!/usr/bin/env bash
# Unmodified nccl-tests on a GPU host, through the NCCL shim and through the real NCCL:
#
#   tests/shim/nccl_tests_gpu.sh BUILD_DIR NCCL_TESTS_SRC OUTDIR
#
# BUILD_DIR: a CUDA build of Loom with the shim (scripts/gpu_host.sh makes one). NCCL_TESTS_SRC:
# a checkout of github.com/NVIDIA/nccl-tests (not part of this repository). Builds nccl-tests
# into OUTDIR/nccl-tests against the nccl.h the shim was built against (NVCC_GENCODE for sm_90
# unless set), then runs all_reduce_perf, all_gather_perf, reduce_scatter_perf, sendrecv_perf and
# alltoall_perf, results checked (-c 1), in one process: -g 2, -g 4 (with 4 GPUs), and -t 2 -g 1
# (a thread per GPU), each under a timeout (NCCL_TESTS_TIMEOUT, 300 s), once with the shim first
# on LD_LIBRARY_PATH and once with the real NCCL's directory there (REAL_NCCL_DIR, default: the
# nvidia-nccl wheel of python3's site-packages, else the system's libnccl.so.2). Prints a table of
# test, mode, library, #wrong (nccl-tests' "Out of bounds values"), average bus bandwidth and
# PASS / FAIL / HANG; full outputs in OUTDIR/<library>-<test>-<mode>.log. NVLink multicast stays
# off (NCCL_NVLS_ENABLE=0). NCCL_TESTS_ARGS replaces the size sweep (-b 8 -e 256M -f 4);
# NCCL_TESTS_LIST the tests, NCCL_TESTS_MODES the modes ("-g 2,-t 2 -g 1": comma-separated),
# NCCL_TESTS_LIBS "shim nccl" or one of them; NCCL_TESTS_BIN a directory of nccl-tests already
# built (then nothing is built: e.g. built against another nccl.h, 2.28's, to run a program of
# that release on the shim). Exit status 1 when a run through the shim failed or hung.
set -uo pipefail
if [[ $# -ne 3 ]]; then
  echo "usage: $0 BUILD_DIR NCCL_TESTS_SRC OUTDIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd) || exit 2
src=$(cd "$2" && pwd) || exit 2
mkdir -p "$3" && out=$(cd "$3" && pwd) || exit 2
export NCCL_NVLS_ENABLE=0
shim_dir=$build/shim/nccl
[[ -f $shim_dir/libloom-nccl.so ]] || { echo "no shim in $shim_dir: build it first" >&2; exit 2; }

# NCCL_HOME for nccl-tests: the shim's nccl.h, and a libnccl.so to link with (the shim; at run
# time LD_LIBRARY_PATH picks which libnccl.so.2 is loaded).
header=$(sed -n 's/^LOOM_NCCL_SHIM_HEADER_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
[[ -n $header && -f $header/nccl.h ]] || header=$build/_deps/nccl/include
[[ -f $header/nccl.h ]] || header=/usr/local/cuda/include
bin=${NCCL_TESTS_BIN:-$out/nccl-tests}
if [[ -z ${NCCL_TESTS_BIN:-} ]]; then
  home=$out/nccl-home
  mkdir -p "$home/lib"
  ln -sfn "$header" "$home/include"
  ln -sf "$shim_dir/libloom-nccl.so" "$home/lib/libnccl.so"
  echo "nccl-tests against $(grep -m1 -o 'NCCL_VERSION_CODE [0-9]*' "$header/nccl.h") ($header)"
  if ! make -C "$src/src" -j "$(nproc)" BUILDDIR="$bin" NCCL_HOME="$home" MPI=0 \
      NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}" >"$out/build.log" 2>&1; then
    tail -30 "$out/build.log"
    echo "nccl-tests did not build (log: $out/build.log)" >&2
    exit 2
  fi
fi

real_dir=${REAL_NCCL_DIR:-}
if [[ -z $real_dir ]]; then
  site=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" 2>/dev/null)
  if [[ -f $site/nvidia/nccl/lib/libnccl.so.2 ]]; then
    real_dir=$site/nvidia/nccl/lib
  else
    real=$(ldconfig -p | awk '/libnccl\.so\.2 / { print $NF; exit }')
    [[ -n $real ]] && real_dir=$(dirname "$real")
  fi
fi

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
modes=("-g 2" "-t 2 -g 1")
((gpus >= 4)) && modes=("-g 2" "-g 4" "-t 2 -g 1")
[[ -n ${NCCL_TESTS_MODES:-} ]] && IFS=, read -r -a modes <<<"$NCCL_TESTS_MODES"
read -r -a libraries <<<"${NCCL_TESTS_LIBS:-shim nccl}"
if [[ -z $real_dir && " ${libraries[*]} " == *" nccl "* ]]; then
  echo "no real NCCL found (REAL_NCCL_DIR): shim only"
  libraries=(shim)
fi
sweep=${NCCL_TESTS_ARGS:--b 8 -e 256M -f 4}
rows=()
failed=0
for test in ${NCCL_TESTS_LIST:-all_reduce all_gather reduce_scatter sendrecv alltoall}; do
  for mode in "${modes[@]}"; do
    for lib in "${libraries[@]}"; do
      dir=$shim_dir
      [[ $lib == nccl ]] && dir=$real_dir
      log=$out/$lib-$test-${mode// /}.log
      LD_LIBRARY_PATH=$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
        timeout -k 10 "${NCCL_TESTS_TIMEOUT:-300}" "$bin/${test}_perf" \
        $sweep -c 1 -w 5 -n 20 $mode >"$log" 2>&1
      rc=$?
      wrong=$(sed -n 's/.*Out of bounds values : \([0-9]*\).*/\1/p' "$log" | tail -1)
      busbw=$(sed -n 's/.*Avg bus bandwidth *: *\([0-9.]*\).*/\1/p' "$log" | tail -1)
      if ((rc == 124 || rc == 137)); then
        result=HANG
      elif ((rc != 0)) || [[ -z $wrong || $wrong != 0 ]]; then
        result=FAIL
      else
        result=PASS
      fi
      [[ $lib == shim && $result != PASS ]] && failed=1
      rows+=("$(printf '%-16s %-10s %-5s %7s %10s  %s' "$test" "$mode" "$lib" "${wrong:--}" \
        "${busbw:--}" "$result")")
      echo "${rows[-1]}"
      if [[ $result != PASS ]]; then
        grep -E "Error|error|WARN|failed|Segmentation" "$log" | head -5
      fi
    done
  done
done
echo
printf '%-16s %-10s %-5s %7s %10s  %s\n' test mode lib "#wrong" "busbw GB/s" result
printf '%s\n' "${rows[@]}"
echo "logs: $out"
exit $failed
