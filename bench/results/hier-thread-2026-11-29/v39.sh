#!/usr/bin/env bash
# Issue 39, after the arena-based hierarchical reduce: A = ae075f2 vs C = this tree, the cells
# the first A/B flagged (reduce, reduce-scatter, allgather at 2x2/2x4 tcp; allgather 2x4 rudp)
# and 2x4 allreduce, 3 rounds.
set -u
R=/tmp/r; mkdir -p $R/l; T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0))s] $*" | tee -a $R/progress; }
export PATH=$PWD/.gpu/iproute:$PATH
el "start $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf /tmp/srcA && mkdir -p /tmp/srcA && tar xJf .gpu/srcA.tar.xz -C /tmp/srcA
bld() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=OFF -DLOOM_BUILD_TESTS=OFF -DCMAKE_UNITY_BUILD=$4 >$R/l/cmake-$3.log 2>&1 && cmake --build $2 -j 8 -t loomrun loom-bench >$R/l/build-$3.log 2>&1; }
bld /tmp/srcA /tmp/bA A OFF & pa=$!; bld . /tmp/bC C ON; rcc=$?; wait $pa; el "builds A rc=$? C rc=$rcc"
A=/tmp/bA C=/tmp/bC
cc -O2 -o /tmp/tcp_bw bench/peers/tcp_bw.c -lpthread 2>$R/l/cc.log
source tests/multinode/netns_lib.sh
bw() {
  tests/multinode/nodes.sh -q -f -k 2 -t 120 -o $R/$1 -- "/tmp/tcp_bw client $(loomt_addr 1) 29400 4 16M 256M 3 bidir" "/tmp/tcp_bw server 29400 4" >/dev/null 2>&1
  el "tcp_bw $1: $(grep -E '^[0-9]+,' $R/$1/node0.out | tr '\n' ' ')"
}
ab() {  # SHAPES TRANSPORTS OPS
  SHAPES="$1" TRANSPORTS="$2" OPS="$3" MINBYTES=1K MAXBYTES=256M ROUNDS=3 ITERS=3 WARMUP=1 \
    bench/ab_builds.sh $A $C $R/ab >>$R/l/ab.log 2>&1
  el "ab $1 $2 $3 rc=$?: $(wc -l < $R/ab/ab.csv) lines"
}
bw bw1
ab 2x4 tcp "allreduce reduce reducescatter allgather"
bw bw2
ab 2x2 tcp "reduce reducescatter allgather"
ab 2x4 rudp "allgather"
touch $R/done
