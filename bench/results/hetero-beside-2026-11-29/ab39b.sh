#!/usr/bin/env bash
# Detached: A (c12a6f2: .gpu/wa) vs F (this tree, LOOM_BESIDE_WAIT=auto), CPU-only, fake nodes.
set -u
r=/tmp/r; rm -rf $r; mkdir -p $r
exec >$r/driver.log 2>&1
cd "$(dirname "$0")/.."
t0=$(date +%s)
b() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=OFF -DCMAKE_UNITY_BUILD=ON >$r/cmake_$3.log 2>&1 && cmake --build $2 -j 8 --target loom-bench loomrun >$r/build_$3.log 2>&1 || echo "BUILD $3 FAIL"; }
b .gpu/wa /tmp/bA A & b . /tmp/bF F & wait
echo "builds $(( $(date +%s) - t0 )) s"
export SIDES="A=/tmp/bA F=/tmp/bF A2=/tmp/bA" ROUNDS=4 ITERS=10 MINB=16M MAXB=256M
OPS="allreduce allgather" NRANKS=8 NODES="A A A A B B B B" .gpu/abhet.sh $r/h8
echo "h8 $(( $(date +%s) - t0 )) s"
SPLIT=4,4 NRANKS=8 NODES="A A A A B B B B" .gpu/abhet.sh $r/c8
echo "c8 $(( $(date +%s) - t0 )) s"
MINB=4M SPLIT=2,2 NRANKS=4 NODES="A A B B" .gpu/abhet.sh $r/c4
echo "c4 $(( $(date +%s) - t0 )) s"
touch $r/done
