#!/bin/bash
# Interleaved A/B/... of CPU collectives on fake nodes (tcp between them):
#   SIDES="A=/tmp/bA B=/tmp/bB ..." NRANKS NODES; SPLIT set: LOOM_CLUSTER_SPLIT + composed.
OUT=$1; ROUNDS=${ROUNDS:-3}; OPS=${OPS:-allreduce}
N=${NRANKS:-4} SPLIT=${SPLIT:-} NODES=${NODES:-A A B B}
here=$(cd "$(dirname "$0")/../../.." && pwd)  # the repository root
mkdir -p $OUT
for r in $(seq 1 $ROUNDS); do
 for op in $OPS; do
  for side in $SIDES; do
    name=${side%%=*} bd=${side#*=} wait=auto
    [[ $bd == *:* ]] && wait=${bd#*:} bd=${bd%%:*}
    if [[ -n $SPLIT ]]; then extra=(env LOOM_BESIDE_WAIT=$wait LOOM_CLUSTER_SPLIT=$SPLIT LOOM_HETERO_ALGO=composed); else extra=(env LOOM_BESIDE_WAIT=$wait); fi
    "${extra[@]}" $bd/tools/loomrun -n $N -- $here/tests/api/fake_nodes.sh "$NODES" $bd/tools/loom-bench $op --device cpu -b ${MINB:-1M} -e ${MAXB:-64M} -f 4 -n ${ITERS:-5} -w 1 -c 0 --csv 2>/dev/null | grep -v "^#" | sed "s/^/$r,$op,$name,/" >> $OUT/ab.csv
  done
 done
done
