#!/usr/bin/env bash
# Issue 39 diagnostics on the 16-core host: where a 2x4 hierarchical call's time goes.
set -u
R=/tmp/r; mkdir -p $R/l; T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0))s] $*" | tee -a $R/progress; }
export PATH=$PWD/.gpu/iproute:$PATH
el "start $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
if ip netns add loomprobe 2>$R/l/netns.err; then ip netns del loomprobe; el "netns ok"; else el "no netns: $(head -2 $R/l/netns.err)"; touch $R/done; exit 1; fi
B=/tmp/bB
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=OFF -DLOOM_BUILD_TESTS=OFF \
  -DCMAKE_UNITY_BUILD=ON >$R/l/cmake.log 2>&1 && cmake --build $B -j 16 -t loomrun loom-bench >$R/l/build.log 2>&1
el "build rc=$?"
cc -O2 -o /tmp/tcp_bw bench/peers/tcp_bw.c -lpthread 2>$R/l/cc.log
source tests/multinode/netns_lib.sh
for s in 4; do
  tests/multinode/nodes.sh -q -f -k 2 -t 120 -o $R/bw$s -- "/tmp/tcp_bw client $(loomt_addr 1) 29400 $s 16M 256M 3 bidir" "/tmp/tcp_bw server 29400 $s" >/dev/null 2>&1
  el "tcp_bw $s streams: $(grep -E '^[0-9]+,' $R/bw$s/node0.out | tr '\n' ' ')"
done
PORT=29600
# NAME K N ENV ARGS: one loom-bench job on K namespace nodes of N ranks (K=1: one host), timed.
job() {
  local name=$1 k=$2 n=$3 env=$4; shift 4
  local bench="$B/tools/loom-bench $* -c 0 --device cpu --csv"
  PORT=$((PORT + 1))
  if ((k == 1)); then
    { time env $env $B/tools/loomrun -n $n --no-prefix --timeout 300 -- $bench >$R/$name.out 2>$R/$name.err; } 2>$R/$name.time
  else
    tests/multinode/nodes.sh -q -f -k $k -t 300 -o $R/$name -- \
      "time env $env LOOM_JOB_SECRET=0123456789abcdef0123456789abcdef LOOM_SOCKET_IFNAME=loomt0 $B/tools/loomrun --nnodes $k \
       --node-rank \$LOOMT_NODE --master \$LOOMT_MASTER:$PORT -n $n --no-prefix --timeout 300 -- $bench" >/dev/null 2>&1
    cp $R/$name/node0.out $R/$name.out; grep -E '^(real|user|sys)' $R/$name/node*.err > $R/$name.time
  fi
  el "$name: $(grep -E '^[a-z]+,[0-9]+,' $R/$name.out | awk -F, '{printf "%s %s %s us; ", $2, $3, $9}')"
}
# Two single-node jobs at once: what the host's memory gives node phases when both "nodes" work.
pair() {  # NAME ENV ARGS
  local name=$1 env=$2; shift 2
  local bench="$B/tools/loom-bench $* -c 0 --device cpu --csv"
  env $env $B/tools/loomrun -n 4 --no-prefix --timeout 300 -- $bench >$R/$name.a 2>/dev/null &
  env $env $B/tools/loomrun -n 4 --no-prefix --timeout 300 -- $bench >$R/$name.b 2>/dev/null; wait
  el "$name: $(cat $R/$name.a $R/$name.b | grep -E '^[a-z]+,[0-9]+,' | awk -F, '{printf "%s %s us; ", $3, $9}')"
}
for round in 1 2 3; do
  job n1x4_ar_$round 1 4 "" allreduce -b 16M -e 256M -f 4 -n 5 -w 1
  pair p1x4_ar_$round "" allreduce -b 16M -e 256M -f 4 -n 5 -w 1
  pair p1x4_ag_$round "" allgather -b 16M -e 256M -f 4 -n 5 -w 1
  job h_ar_block_$round 2 4 "LOOM_BESIDE_WAIT=block" allreduce -b 16M -e 256M -f 4 -n 5 -w 1
  job h_ar_spin_$round 2 4 "LOOM_BESIDE_WAIT=spin" allreduce -b 16M -e 256M -f 4 -n 5 -w 1
  job h_ar_block2m_$round 2 4 "LOOM_BESIDE_WAIT=block LOOM_SHM_CHUNK_BYTES=2097152" allreduce -b 16M -e 256M -f 4 -n 5 -w 1
  job h_ag_block_$round 2 4 "LOOM_BESIDE_WAIT=block" allgather -b 16M -e 256M -f 4 -n 5 -w 1
  job h_ag_spin_$round 2 4 "LOOM_BESIDE_WAIT=spin" allgather -b 16M -e 256M -f 4 -n 5 -w 1
done
el "load $(cut -d' ' -f1-3 /proc/loadavg)"
touch $R/done
