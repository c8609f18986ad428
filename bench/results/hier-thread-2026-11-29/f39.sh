#!/usr/bin/env bash
# Issue 39's final A/B on the one-GPU host: A = ae075f2 (before the redesign; .gpu/srcA.tar.xz,
# built here file by file: its unity build does not compile), C = this tree (the column on a
# thread where a core is spare: LOOM_BESIDE_WAIT=auto, the default). CUDA hetero benches of both
# carried in .gpu/hb.tar.xz (built on the VM, sm_90, Release).
#  1. 2x4 tcp, every collective 1K-256M (bench/ab_builds.sh), and the TCP bound (tcp_bw)
#  2. one GPU + CPU ranks: loom-hetero-bench GCCC and GCCCCCCC, A, C, C2 per round
#  3. 2x2 tcp; 1x2 1x4 1x8; 2x4 rudp allreduce/allgather
set -u
R=/tmp/r; mkdir -p $R/l; T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0))s] $*" | tee -a $R/progress; }
export PATH=$PWD/.gpu/iproute:$PATH NCCL_NVLS_ENABLE=0
el "start $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); $(nvidia-smi -L 2>&1 | head -1)"
rm -rf /tmp/srcA && mkdir -p /tmp/srcA /tmp/hb && tar xJf .gpu/srcA.tar.xz -C /tmp/srcA && tar xJf .gpu/hb.tar.xz -C /tmp/hb
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
  SHAPES="$1" TRANSPORTS="$2" OPS="$3" MINBYTES=1K MAXBYTES=256M ROUNDS=${ROUNDS:-2} ITERS=3 WARMUP=1 \
    bench/ab_builds.sh $A $C $R/ab >>$R/l/ab.log 2>&1
  el "ab $1 $2 rc=$?: $(wc -l < $R/ab/ab.csv) lines"
}
bw bw1
ab 2x4 tcp "allreduce allgather reducescatter broadcast reduce alltoall"
bw bw2
echo "placement,build,round,bytes,us,staged_us" >$R/hetero.csv
for ((r = 1; r <= ${HROUNDS:-2}; ++r)); do
  for placement in GCCC GCCCCCCC; do
    for build in A C C2; do
      b=${build:0:1}; dir=$([[ $b == A ]] && echo $A || echo $C)
      timeout 300 $dir/tools/loomrun -n ${#placement} --no-prefix -- /tmp/hb/$b/loom-hetero-bench \
        --placement $placement -b 1K -e 64M -f 16 -n 10 -w 3 2>>$R/l/hetero.err |
        awk -v p=$placement -v b=$build -v r=$r '$1 ~ /^[0-9]+$/ {print p "," b "," r "," $1 "," $2 "," $4}' >>$R/hetero.csv
    done
  done
  el "hetero round $r: $(wc -l < $R/hetero.csv) lines"
done
ab 2x2 tcp "allreduce allgather reducescatter broadcast reduce alltoall"
ab "1x2 1x4 1x8" tcp "allreduce allgather reducescatter broadcast reduce alltoall"
ab 2x4 rudp "allreduce allgather"
el "load $(cut -d' ' -f1-3 /proc/loadavg)"
touch $R/done
