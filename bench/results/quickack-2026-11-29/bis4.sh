#!/usr/bin/env bash
# Host side: CONFIGS "shape:op:ENV=V,ENV2=V ..." × BUILDS × ROUNDS, builds rotated per round.
set -u
R=/tmp/r; mkdir -p $R; T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0))s] $*" | tee -a $R/progress; }
export PATH=$PWD/.gpu/iproute:$PATH
el "start $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
read -ra B <<<"${BUILDS:?}"
PORT=29700
job() {  # BUILD CONFIG ROUND
  local b=$PWD/.gpu/bis/$1 tmp=$R/j shape op envs K N out; PORT=$((PORT + 1)); rm -rf $tmp; mkdir -p $tmp
  IFS=: read -r shape op envs <<<"$2"; K=${shape%x*}; N=${shape#*x}; envs=${envs//,/ }
  local bench="$b/tools/loom-bench $op -b ${MINB:-256K} -e ${MAXB:-4M} -f ${FACTOR:-2} -n ${ITERS:-20} -w ${WARM:-5} -c 0 --device cpu --csv"
  mkdir -p $R/net; python3 -c 'import sys; r=[l.split() for l in open("/proc/net/softnet_stat")]; print(sum(int(x[1],16) for x in r), sum(int(x[2],16) for x in r))' > $R/sn0
  if ((K == 1)); then
    env $envs timeout 300 $b/tools/loomrun -n $N --no-prefix --timeout 300 -- $bench >$tmp/node0.out 2>&1
  else
    tests/multinode/nodes.sh -q -f -k $K -t 300 -o $tmp -- \
      "env LOOM_TRANSPORT=tcp $envs LOOM_JOB_SECRET=0123456789abcdef0123456789abcdef LOOM_SOCKET_IFNAME=loomt0 $b/tools/loomrun --nnodes $K \
       --node-rank \$LOOMT_NODE --master \$LOOMT_MASTER:$PORT -n $N --no-prefix --timeout 300 -- $bench; cat /proc/net/snmp /proc/net/netstat > $tmp/net\$LOOMT_NODE.txt; ip -s link show dev loomt0 >> $tmp/link\$LOOMT_NODE.txt" >/dev/null 2>&1
  fi
  cfg=$(echo $2 | tr :=, ___); python3 -c 'import sys; r=[l.split() for l in open("/proc/net/softnet_stat")]; print(sum(int(x[1],16) for x in r), sum(int(x[2],16) for x in r))' > $R/net/$1-$cfg-r$3-sn1.txt; cp $R/sn0 $R/net/$1-$cfg-r$3-sn0.txt
  mkdir -p $R/net; cp $tmp/net0.txt $R/net/$1-$cfg-r$3-n0.txt 2>/dev/null; cp $tmp/net1.txt $R/net/$1-$cfg-r$3-n1.txt 2>/dev/null; cp $tmp/link0.txt $R/net/$1-$cfg-r$3-l0.txt 2>/dev/null
  mkdir -p $R/it; cat $tmp/node*.err $tmp/node*.out 2>/dev/null | grep ITERS > $R/it/$1-$(echo $2 | tr :=, ___)-r$3.txt
  grep -E '^[a-z]+,[0-9]+,' $tmp/node0.out | awk -F, -v b=$1 -v r=$3 -v c="$2" '{print c "," b "," r "," $3 "," $9}' >>$R/bis.csv
  el "$1 $2 r$3: $(grep -E '^[a-z]+,[0-9]+,' $tmp/node0.out | awk -F, '{printf "%dK %.0f; ", $3/1024, $9}')"
}
for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
  for c in ${CONFIGS:?}; do
    n=${#B[@]}
    for ((i = 0; i < n; ++i)); do job ${B[$(((i + r) % n))]} "$c" $r; done
  done
done
[[ ${NODONE:-0} == 1 ]] || touch $R/done
