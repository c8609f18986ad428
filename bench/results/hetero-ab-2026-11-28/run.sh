#!/usr/bin/env bash
# Heterogeneous CI shape (emulated-device + CPU ranks), A = ae075f2 (before the executor redesign)
# vs B = this tree, interleaved A, B, B again (the null) per round; loom-hetero-bench's "loom"
# column (us per call, slowest rank). Usage: run.sh A_BUILD B_BUILD OUTDIR [ROUNDS]
set -u
A=$1 B=$2 OUT=$3 ROUNDS=${4:-5}
mkdir -p "$OUT"
echo "placement,build,round,bytes,us" >"$OUT/ab.csv"
for placement in EC ECEC; do
  n=${#placement}
  for ((r = 1; r <= ROUNDS; ++r)); do
    for build in A B B2; do
      dir=$([[ $build == A ]] && echo "$A" || echo "$B")
      LOOM_DEVICE_PLUGIN=$dir/plugins/device/emu/libloom-device-emu.so timeout 300 \
        "$dir/tools/loomrun" -n "$n" --no-prefix -- "$dir/tools/loom-hetero-bench" \
        --placement "$placement" -b 1K -e 4M -f 16 -n 20 -w 5 2>/dev/null |
        awk -v p="$placement" -v b="$build" -v r="$r" '$1 ~ /^[0-9]+$/ {print p "," b "," r "," $1 "," $2}' >>"$OUT/ab.csv"
    done
  done
done
