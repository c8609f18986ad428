#!/usr/bin/env bash
# Collectives beside compute on a GPU: each variant of loom-bench runs every size alone and then
# again while bf16 GEMMs (cuBLAS) run on another stream of each rank's GPU (--overlap-gemm), and
# this prints one table of the calls' time alone and beside the GEMMs, and the GEMM time each call
# cost. Variants: allgather and alltoall on registered windows through the zero-copy kernel and
# through the copy engines (LOOM_ALGO=...:ce: no kernel, no SM), and through the slot kernels
# (buffers not registered).
#
#   bench/gpu_overlap.sh BUILD_DIR OUTDIR
#
# Environment: RANKS (default: the GPUs there are; on one GPU 2, sharing it), GEMM_N (8192),
# SIZES (loom-bench size flags, default "-b 1M -e 256M -f 4"), ITERS (20), OPS ("allgather
# alltoall"). Ranks sharing a GPU run under CUDA MPS, which this starts and stops (pipes under
# OUTDIR/mps). Raw lines: OUTDIR/<op>_<variant>.txt; the table: OUTDIR/overlap.md.
set -uo pipefail
(($# == 2)) || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
build=$(cd "$1" && pwd) || exit 2
mkdir -p "$2" && out=$(cd "$2" && pwd) || exit 2
# shellcheck source=bench/gpu_ranks.sh
source "$(dirname "$0")/gpu_ranks.sh"
sizes=${SIZES:--b 1M -e 256M -f 4}
status=0
for op in ${OPS:-allgather alltoall}; do
  for variant in kernel ce slots; do
    env_algo=() window=(--window 1)
    [[ $variant == ce ]] && env_algo=(LOOM_ALGO=$op:ce)
    [[ $variant == slots ]] && window=()
    # shellcheck disable=SC2086
    env "${env_algo[@]}" "$build/tools/loomrun" -n "$ranks" --timeout 600 -- \
      "$build/tools/loom-bench" "$op" $sizes -n "${ITERS:-20}" -w 5 -c 1 "${window[@]}" \
      --overlap-gemm "${GEMM_N:-8192}" >"$out/${op}_$variant.txt" 2>&1 || status=1
  done
done
{
  echo "| op | variant | bytes | pass | alone (us) | beside GEMMs (us) | GEMM time lost per call (us) | GEMM TFLOP/s alone | calls outlasted the GEMMs |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for f in "$out"/*_*.txt; do
    name=$(basename "$f" .txt)
    grep -h '# overlap-gemm' "$f" | sed 's/^\[[0-9]*\] //' | awk -F' [|] ' -v op="${name%_*}" \
      -v variant="${name#*_}" '{
        split($2, b, " "); split($3, a, " "); split($4, u, " "); split($5, g, "[ ()]+");
        split($7, l, " "); key = op variant b[1]; pass = ++seen[key] == 1 ? "out of place" : "in place";
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", op, variant, b[1], pass, a[3], u[3], l[6], g[6], (NF >= 8 ? "yes" : "no")
      }'
  done
} >"$out/overlap.md"
cat "$out/overlap.md"
exit $status
