#!/usr/bin/env bash
set -u
r=/tmp/r; rm -rf $r; mkdir -p $r
exec >$r/driver.log 2>&1
cd "$(dirname "$0")/.."
t0=$(date +%s)
b() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=OFF -DCMAKE_UNITY_BUILD=ON >$r/cmake_$3.log 2>&1 && cmake --build $2 -j 8 --target loom-bench loomrun >$r/build_$3.log 2>&1 || echo "BUILD $3 FAIL"; }
[[ -x /tmp/bA/tools/loom-bench ]] || b .gpu/wa /tmp/bA A & [[ -x /tmp/bF/tools/loom-bench ]] || b . /tmp/bF F & wait
echo "builds $(( $(date +%s) - t0 )) s"
export SIDES="A=/tmp/bA Fa=/tmp/bF:auto Fs=/tmp/bF:spin Fb=/tmp/bF:block" ROUNDS=5 ITERS=10 MINB=64M MAXB=256M
OPS="allreduce" NRANKS=8 NODES="A A A A B B B B" .gpu/abhet.sh $r/h8w
echo "h8w $(( $(date +%s) - t0 )) s"
touch $r/done
