#!/usr/bin/env bash
# Issue 39 item 3 on a 16-core host: A = ce46c7a (node phases and column ring one after another),
# B = HEAD (overlapped), 2x4 namespace nodes over tcp, 16-256 MiB, with the null B2; and the
# both-ways TCP bound (tcp_bw, 4 streams). CPU only. Poll: rm -rf /tmp/r; DRIVER=s59 WAIT=540 .gpu/poll52.sh
set -u
R=/tmp/r; L=$R/l; mkdir -p $L; T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0))s] $*" | tee -a $R/progress.txt; }
el "start $(nproc) cores"
export PATH=$PWD/.gpu/iproute:$PATH
if ip netns add loomprobe 2>$L/netns.err; then ip netns del loomprobe; el "netns ok"; else el "no netns: $(head -2 $L/netns.err)"; el done; exit 1; fi
cp .gpu/gcc13.patch /tmp/gcc13.patch; rm -rf /tmp/srcA; mkdir -p /tmp/srcA && tar xzf .gpu/srcA.tgz -C /tmp/srcA && (cd /tmp/srcA && patch -p1 -s < '/tmp/gcc13.patch')
bld() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=OFF -DLOOM_BUILD_TESTS=OFF >$L/cmake-$3.log 2>&1 && cmake --build $2 -j 8 -t loomrun loom-bench >$L/build-$3.log 2>&1; }
bld /tmp/srcA /tmp/srcA/build-cpu A & pa=$!; bld . build-cpu B; rcb=$?; wait $pa; rca=$?
el "builds A rc=$rca B rc=$rcb"; ((rca == 0 && rcb == 0)) || { tail -3 $L/build-*.log $L/cmake-*.log >>$R/progress.txt; el done; exit 1; }
cc -O2 -o /tmp/tcp_bw bench/peers/tcp_bw.c -lpthread 2>$L/cc.log && {
  source tests/multinode/netns_lib.sh
  tests/multinode/nodes.sh -q -f -k 2 -t 120 -o $L/bw -- "/tmp/tcp_bw client $(loomt_addr 1) 29400 4 16M 256M 3 bidir" "/tmp/tcp_bw server 29400 4" >/dev/null 2>&1
  el "tcp_bw bidir rc=$?: $(grep -E '^[0-9]+,' $L/bw/node0.out | tr '\n' ' ')"
}
SHAPES=2x4 TRANSPORTS=tcp OPS="allreduce allgather" MINBYTES=16M MAXBYTES=256M ROUNDS=${ROUNDS:-3} ITERS=3 WARMUP=1 timeout ${ABT:-140} bench/ab_builds.sh /tmp/srcA/build-cpu build-cpu $L/ab >$L/ab.txt 2>&1
el "ab rc=$?"; cat $L/ab/ab.md >>$R/progress.txt 2>/dev/null; cat $L/ab/ab.csv >>$R/progress.txt
el done
