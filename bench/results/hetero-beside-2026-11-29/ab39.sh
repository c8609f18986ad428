#!/usr/bin/env bash
# Detached: builds A (c12a6f2: .gpu/wa), B (overlap, poll waits beside: .gpu/wb), C (this tree:
# overlap, spin waits beside), CPU-only; then composed and hierarchical A/B/C on fake nodes.
set -u
r=/tmp/r; rm -rf $r; mkdir -p $r
exec >$r/driver.log 2>&1
cd "$(dirname "$0")/.."
t0=$(date +%s)
b() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=OFF -DCMAKE_UNITY_BUILD=ON >$r/cmake_$3.log 2>&1 && cmake --build $2 -j 6 --target loom-bench loomrun >$r/build_$3.log 2>&1 || echo "BUILD $3 FAIL"; }
b .gpu/wa /tmp/bA A & b .gpu/wb /tmp/bB B & b . /tmp/bC C & wait
echo "builds $(( $(date +%s) - t0 )) s"; nproc
export SIDES="A=/tmp/bA B=/tmp/bB C=/tmp/bC" ROUNDS=${ROUNDS:-5} ITERS=10 MINB=4M MAXB=256M
SPLIT=2,2 NRANKS=4 NODES="A A B B" .gpu/abhet.sh $r/c4
echo "c4 $(( $(date +%s) - t0 )) s"
SPLIT=4,4 NRANKS=8 NODES="A A A A B B B B" .gpu/abhet.sh $r/c8
echo "c8 $(( $(date +%s) - t0 )) s"
MINB=16M OPS="allreduce allgather" NRANKS=8 NODES="A A A A B B B B" .gpu/abhet.sh $r/h8
echo "h8 $(( $(date +%s) - t0 )) s"
touch $r/done
