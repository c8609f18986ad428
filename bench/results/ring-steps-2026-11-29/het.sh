#!/usr/bin/env bash
# Host side: one GPU + CPU ranks, loom-hetero-bench of A (ae075f2) and N (new, twice: the null).
set -u
R=/tmp/r; mkdir -p $R; T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0))s] $*" | tee -a $R/progress; }
mkdir -p /tmp/hb && tar xJf .gpu/hb2.tar.xz -C /tmp/hb
el "unpacked: $(ls /tmp/hb)"
echo "placement,build,round,bytes,us,staged_us" >$R/hetero.csv
for ((r = 1; r <= ${HROUNDS:-3}; ++r)); do
  for placement in ${PLACEMENTS:-GCCCCCCC GCCC}; do
    for build in A N N2; do
      b=${build:0:1}; dir=$PWD/.gpu/bis/$([[ $b == A ]] && echo ae075f2 || echo 631042a)
      timeout 300 $dir/tools/loomrun -n ${#placement} --no-prefix -- /tmp/hb/$b/loom-hetero-bench \
        --placement $placement -b 1K -e 64M -f 16 -n 10 -w 3 2>>$R/hetero.err |
        awk -v p=$placement -v b=$build -v r=$r '$1 ~ /^[0-9]+$/ {print p "," b "," r "," $1 "," $2 "," $4}' >>$R/hetero.csv
    done
  done
  el "hetero round $r: $(wc -l < $R/hetero.csv) lines"
done
touch $R/done
