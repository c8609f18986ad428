#!/usr/bin/env bash
# Host side: interleave builds .gpu/bis/<sha> on 2x4 namespace nodes (tcp), round after round,
# builds in a rotated order each round. Env: BUILDS, OPS, ROUNDS, MINB, MAXB, SHAPE (2x4), EXTRA.
set -u
R=/tmp/r; mkdir -p $R; T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0))s] $*" | tee -a $R/progress; }
export PATH=$PWD/.gpu/iproute:$PATH
el "start $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
read -ra B <<<"${BUILDS:?}"
SHAPE=${SHAPE:-2x4}; K=${SHAPE%x*}; N=${SHAPE#*x}
PORT=29700
job() {  # BUILD OP ROUND
  local b=$PWD/.gpu/bis/$1 tmp=$R/j; PORT=$((PORT + 1)); rm -rf $tmp
  tests/multinode/nodes.sh -q -f -k $K -t 300 -o $tmp -- \
    "env LOOM_TRANSPORT=${TRANSPORT:-tcp} ${EXTRA:-} LOOM_JOB_SECRET=0123456789abcdef0123456789abcdef LOOM_SOCKET_IFNAME=loomt0 $b/tools/loomrun --nnodes $K \
     --node-rank \$LOOMT_NODE --master \$LOOMT_MASTER:$PORT -n $N --no-prefix --timeout 300 -- $b/tools/loom-bench $2 -b ${MINB:-256K} -e ${MAXB:-4M} -f 2 -n ${ITERS:-20} -w 5 -c 0 --device cpu --csv" >/dev/null 2>&1
  grep -E '^[a-z]+,[0-9]+,' $tmp/node0.out | awk -F, -v b=$1 -v r=$3 -v s=$SHAPE '{print s "," $2 "," $3 "," b "," r "," $9}' >>$R/bis.csv
  el "$1 $2 r$3: $(grep -E '^[a-z]+,[0-9]+,' $tmp/node0.out | awk -F, '{printf "%dK %.0f; ", $3/1024, $9}')"
}
for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
  for op in ${OPS:-reducescatter allgather}; do
    n=${#B[@]}
    for ((i = 0; i < n; ++i)); do job ${B[$(((i + r) % n))]} $op $r; done
  done
done
touch $R/done
