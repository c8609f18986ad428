#!/usr/bin/env bash
# The GPU benchmark set behind docs/benchmarks.md: Loom vs NCCL in one run per size sweep, on the
# GPUs of this host (4 and 2 ranks), fp32 and bf16, eager and CUDA-graph timing.
#   bench/gpu_final.sh BUILD_DIR OUTDIR
set -uo pipefail
build=$1 out=$2
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
run() {  # ranks name args...
  local n=$1 name=$2
  shift 2
  "$build/tools/loomrun" -n "$n" --timeout 300 -- "$build/tools/loom-bench" "$@" -c 0 --vs nccl \
    --csv "$out/$name.csv" >"$out/$name.txt" 2>&1
  echo "== $name"
  grep -E "^\[0\] +[0-9]" "$out/$name.txt" | cut -c5-150
}
for op in allreduce allgather reducescatter; do run 4 "$op-float-4" "$op" -b 8 -e 1G -f 4; done
run 4 allreduce-bfloat16-4 allreduce -b 8 -e 1G -f 4 -d bfloat16
run 4 allreduce-float-4-graph allreduce -b 8 -e 4M -f 4 --graph 1
for op in allreduce allgather; do run 2 "$op-float-2" "$op" -b 8 -e 1G -f 4; done
