#!/usr/bin/env bash
# Detached: CPU-only build, then the ring plan A/B (bench/plans_ab.sh) at 4 and 8 ranks.
set -u
r=/tmp/r; rm -rf $r; mkdir -p $r
exec >$r/driver.log 2>&1
cd "$(dirname "$0")/.."
t0=$(date +%s)
[[ -x /tmp/bP/tools/loom-bench ]] || { cmake -S . -B /tmp/bP -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=OFF -DCMAKE_UNITY_BUILD=ON >$r/cmake.log 2>&1 && cmake --build /tmp/bP -j 16 --target loom-bench loomrun >$r/build.log 2>&1 || echo BUILD FAIL; }
echo "build $(( $(date +%s) - t0 )) s"; nproc
BUILD_DIR=/tmp/bP ITERS=10 OUT=$r/p4 bench/plans_ab.sh 4 4 64M > $r/p4.txt 2>&1
echo "p4 $(( $(date +%s) - t0 )) s"
BUILD_DIR=/tmp/bP ITERS=10 OUT=$r/p8 bench/plans_ab.sh 8 4 64M > $r/p8.txt 2>&1
echo "p8 $(( $(date +%s) - t0 )) s"
touch $r/done
